// The shared state behind a relock::Client and its Lock handles: options,
// identity, the event loop and its command connections, the scripts, the
// pub/sub subscriber, the hold registry, the timer thread, the watchdog and the
// event queue. Lock handles keep it alive with a shared_ptr, so a handle that
// outlives its Client finds it closed instead of freed.

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
#include "lib/client/event_queue.h"
#include "lib/io/connection.h"
#include "lib/io/event_loop.h"
#include "lib/lock/hold_registry.h"
#include "lib/lock/lock_scripts.h"
#include "lib/lock/owner.h"
#include "lib/pubsub/subscriber.h"
#include "lib/redis/script.h"
#include "lib/timer/timer_thread.h"
#include "lib/watchdog/watchdog.h"
#include "relock/client.h"
#include "relock/options.h"

namespace relock {
namespace internal {

// InvalidArgument naming the first bad field of `options` (the URL is checked
// separately).
absl::Status ValidateClientOptions(const ClientOptions& options);

// Locks per renew script call; the calls of one round are pipelined.
inline constexpr size_t kRenewKeysPerCall = 1000;

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
class ClientCore : public std::enable_shared_from_this<ClientCore>,
                   public lock::ThreadExitListener {
 public:
  static absl::StatusOr<std::shared_ptr<ClientCore>> Create(
      ClientOptions options);
  ~ClientCore();

  const ClientOptions& options() const { return options_; }
  const std::string& id() const { return id_; }
  pubsub::Subscriber& subscriber() { return *subscriber_; }
  lock::HoldRegistry& holds() { return holds_; }
  watchdog::Watchdog& watchdog() { return *watchdog_; }
  bool closed() const { return closed_.load(std::memory_order_acquire); }

  // FailedPrecondition once the client is closed, or in a fork()ed child.
  absl::Status CheckOpen() const;

  // Called by an acquiring thread: tells this core when the thread exits.
  void WatchCurrentThread();
  void OnThreadExit(uint64_t thread_number) override;

  // One script call / one command on the client's shared, pipelined command
  // connection (lib/io/connection.h), within `deadline` (and command_timeout
  // without replies). NOSCRIPT (SCRIPT FLUSH, restart) sends the script's
  // source with EVAL once, which caches it again.
  //
  // With Resend::kIfDropped, a call whose connection the server dropped
  // (CLIENT KILL, restart, an idle `timeout`; not a timeout) is sent again on
  // a fresh connection, up to kMaxSends sends in all while `deadline` has
  // time left, and `*resent` says so. Only for calls where running twice is
  // harmless: a dropped request either never ran or ran and lost its reply.
  // A server that refuses connections (down) fails the call at once with
  // Unavailable.
  enum class Resend { kNever, kIfDropped };
  static constexpr int kMaxSends = 3;
  absl::StatusOr<redis::Reply> RunScript(
      ScriptId script, std::initializer_list<absl::string_view> keys,
      std::initializer_list<absl::string_view> args,
      Deadline deadline = Deadline::Never(), Resend resend = Resend::kNever,
      bool* resent = nullptr);
  // Read-only commands: resent if dropped.
  absl::StatusOr<redis::Reply> RunCommand(
      std::initializer_list<absl::string_view> argv,
      Deadline deadline = Deadline::Never());

  // Calls of one script, sent together (one round trip, plus one more to
  // reload the script after a SCRIPT FLUSH), within `deadline`.
  // Returns one reply per call, in order (error replies included), or the
  // error that failed the whole batch. `*round_trips`, if given, is
  // incremented per flush.
  struct ScriptCall {
    std::vector<absl::string_view> keys;
    std::vector<absl::string_view> args;
  };
  absl::StatusOr<std::vector<redis::Reply>> RunPipelined(
      ScriptId script, const std::vector<ScriptCall>& calls, Deadline deadline,
      std::atomic<uint64_t>* round_trips = nullptr);

  // Renews `items` with the watchdog lease: kRenewKeysPerCall locks per
  // script call, every call pipelined on one connection.
  absl::StatusOr<std::vector<bool>> RenewBatch(
      const std::vector<lock::RenewItem>& items);
  // Pipelined flushes (round trips) made by RenewBatch so far.
  uint64_t renew_round_trips() const {
    return renew_round_trips_.load(std::memory_order_relaxed);
  }
  // Delivers an event to options().on_lock_event (or stderr) on the calling
  // thread; PostEvent() queues it for the event thread instead.
  void Report(LockEventType type, absl::string_view lock_name,
              absl::Status status);
  void PostEvent(LockEvent event);

  // See relock::Client::Close(). Idempotent.
  void Close();

  // In a fork()ed child: makes this core inert (see above).
  void BecomeInertInForkedChild();

 private:
  ClientCore(ClientOptions options, std::string id);
  void Deliver(const LockEvent& event) const { deliver_(event); }
  // The next command connection (round robin).
  io::Connection& Pick();
  // Sends `wire` (`commands` commands) within `deadline`, resending as
  // `resend` says (see RunScript).
  io::Result Send(const std::string& wire, size_t commands, Deadline deadline,
                  Resend resend, bool* resent);

  const ClientOptions options_;
  // options_.on_lock_event, or a writer to stderr; self-contained, so the
  // event thread may keep it after this core is gone.
  const std::function<void(const LockEvent&)> deliver_;
  const std::string id_;
  const std::string watchdog_lease_ms_;
  // Declared before everything that may hold a reference into it.
  io::EventLoop loop_;
  std::vector<std::shared_ptr<io::Connection>> connections_;
  std::atomic<size_t> next_connection_{0};
  redis::ScriptSet scripts_;
  std::shared_ptr<pubsub::Subscriber> subscriber_;
  lock::HoldRegistry holds_;
  timer::TimerThread timers_;
  std::unique_ptr<EventQueue> events_;
  std::unique_ptr<watchdog::Watchdog> watchdog_;
  std::atomic<uint64_t> renew_round_trips_{0};
  std::atomic<bool> closed_{false};
  std::atomic<bool> forked_child_{false};
};

// Reaches a Client's core, for tests and benchmarks of internals.
struct ClientAccess {
  static ClientCore& Core(Client& client) { return *client.core_; }
};

}  // namespace internal
}  // namespace relock

#endif  // RELOCK_LIB_CLIENT_CLIENT_CORE_H_
