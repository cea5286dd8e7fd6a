// The shared state behind a relock::Client and its Lock handles: options,
// identity, the event loop, the backend (lib/backend/: the Redis deployment
// as the lock algorithms see it), the hold registry, the timer thread, the
// watchdog and the event queue. It is the lock algorithms' LockEnv. Lock
// handles keep it alive with a shared_ptr, so a handle that outlives its
// Client finds it closed instead of freed.

#ifndef RELOCK_LIB_CLIENT_CLIENT_CORE_H_
#define RELOCK_LIB_CLIENT_CLIENT_CORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/backend/node_backend.h"
#include "lib/client/client_info.h"
#include "lib/client/event_queue.h"
#include "lib/common/observer.h"
#include "lib/io/event_loop.h"
#include "lib/lock/lock_env.h"
#include "lib/lock/lock_scripts.h"
#include "lib/lock/owner.h"
#include "lib/timer/timer_thread.h"
#include "lib/watchdog/hold_registry.h"
#include "lib/watchdog/watchdog.h"
#include "relock/options.h"

namespace relock {
namespace internal {

// InvalidArgument naming the first bad field of `options` (the URL is checked
// separately).
absl::Status ValidateClientOptions(const ClientOptions& options);

// Fork: a child process of a process with clients must not act as their
// owner (it shares their sockets and not their threads). A pthread_atfork
// child handler makes every live core inert in the child: each call fails
// with FailedPrecondition, Close() and the destructor touch neither Redis nor
// threads, and the child never destroys the core (it keeps one reference
// forever), so the child's exit cannot release the parent's locks.
//
// Thread exit: a thread that exits holding locks of this client (other than
// the main thread) has them dropped from the registry: no more renewal, a
// LockEventType::kOwnerThreadExited event per lock, and the lock frees itself
// when its lease runs out.
class ClientCore final : public std::enable_shared_from_this<ClientCore>,
                         public lock::ThreadExitListener,
                         public lock::LockEnv {
 public:
  // A client of one Redis server (relock::Client).
  static absl::StatusOr<std::shared_ptr<ClientCore>> Create(
      ClientOptions options);

  // A client whose backend `make_backend` builds on the core's event loop
  // (Redlock's masters), with `id` (non-empty), the lock `policy`, and
  // `event_prefix` in front of event lines written to the logger. `options`
  // must be valid; its url is not used.
  // The factory gives every connection it makes `observer` (its
  // ConnectionOptions::observer).
  using BackendFactory =
      std::function<absl::StatusOr<std::unique_ptr<backend::Backend>>(
          io::EventLoop* loop, const std::shared_ptr<Observer>& observer)>;
  static absl::StatusOr<std::shared_ptr<ClientCore>> Create(
      ClientOptions options, std::string id, lock::LockPolicy policy,
      const std::string& event_prefix, const BackendFactory& make_backend);
  ~ClientCore();

  const ClientOptions& options() const { return options_; }
  watchdog::HoldRegistry& holds() override { return holds_; }
  watchdog::Watchdog& watchdog() { return *watchdog_; }

  // LockEnv.
  const lock::LockPolicy& policy() const override { return policy_; }
  backend::Backend& backend() override { return *backend_; }
  const Clock& clock() const override { return *timers_.clock(); }
  const std::string& id() const override { return id_; }
  bool closed() const override {
    // (seq_cst: see HoldRegistry::BeginInFlight().)
    return closed_.load(std::memory_order_seq_cst);
  }
  absl::Status CheckOpen() const override;
  absl::Status CheckBlockingCall() const override;
  // Whether the calling thread is this client's event loop thread.
  bool InLoopThread() const { return loop_.InLoopThread(); }
  absl::Duration watchdog_lease() const override {
    return options_.lock_watchdog_timeout;
  }
  absl::Duration confirm_timeout() const override {
    return options_.connect_timeout + options_.command_timeout;
  }
  void OnFreshHold() override;
  Metrics& metrics() override { return observer_->metrics; }
  void ReportLost(const watchdog::LostHold& hold,
                  const absl::Status& why) override;
  void ActivateWatchdog(SteadyClock::time_point acked_at) override {
    watchdog_->Activate(acked_at);
  }

  void OnThreadExit(uint64_t thread_number) override;

  // Renews `items` with the watchdog lease: lock::kRenewKeysPerCall locks per
  // script call, every call pipelined on one connection.
  watchdog::RenewResult RenewBatch(
      const std::vector<watchdog::RenewItem>& items);
  // Pipelined flushes (round trips) made by RenewBatch so far.
  uint64_t renew_round_trips() const {
    return renew_round_trips_.load(std::memory_order_relaxed);
  }
  // See relock::Client::Metrics().
  ClientMetrics Snapshot() const;
  // The counters and the logger (shared with the connections).
  const std::shared_ptr<Observer>& observer() const { return observer_; }
  // Logs through options().logger (or its default).
  void Log(absl::LogSeverity severity, absl::string_view message) const {
    observer_->Log(severity, message);
  }
  // Delivers an event to options().on_lock_event (or stderr) on the calling
  // thread, for the hold of the calling thread as the owner numbered
  // `owner_number` (0: the thread's own number; a write hold's has
  // lock::kWriteHoldBit); PostEvent() queues it for the event thread instead.
  void Report(LockEventType type, absl::string_view lock_name,
              absl::Status status, uint64_t owner_number = 0);
  void PostEvent(LockEvent event);

  // See relock::Client::Close(). Idempotent. On the loop thread (a
  // callback), it marks the core closed and hands the rest (FinishClose) to
  // a thread of its own, which keeps the core alive until it is done: the
  // releases need answers that only the loop thread, once the callback has
  // returned, can deliver.
  void Close();

  // In a fork()ed child: makes this core inert (see above).
  void BecomeInertInForkedChild();

 private:
  ClientCore(ClientOptions options, std::string id, lock::LockPolicy policy,
             const std::string& event_prefix);
  void Deliver(const LockEvent& event) const { deliver_(event); }
  // Close() after closed_ is set: stops renewal and waits, releases what is
  // held, deletes the info record, stops the threads. Waits for answers
  // that the loop thread reads: on that thread only from the destructor of
  // a core nobody closed (its releases then time out).
  void FinishClose();

  const ClientOptions options_;
  // Counters and the logger, shared with the connections.
  const std::shared_ptr<Observer> observer_;
  // options_.on_lock_event, or a writer to the logger; self-contained, so
  // the event thread may keep it after this core is gone.
  const std::function<void(const LockEvent&)> deliver_;
  const std::string id_;
  const lock::LockPolicy policy_;
  // Declared before everything that may hold a reference into it.
  io::EventLoop loop_;
  std::unique_ptr<backend::Backend> backend_;
  watchdog::HoldRegistry holds_;
  timer::TimerThread timers_;
  std::unique_ptr<EventQueue> events_;
  std::unique_ptr<watchdog::Watchdog> watchdog_;
  // The client info record (ClientOptions::publish_client_info); null
  // without one.
  std::unique_ptr<ClientInfoPublisher> info_;
  std::atomic<uint64_t> renew_round_trips_{0};
  std::atomic<bool> closed_{false};
  std::atomic<bool> forked_child_{false};
};

}  // namespace internal
}  // namespace relock

#endif  // RELOCK_LIB_CLIENT_CLIENT_CORE_H_
