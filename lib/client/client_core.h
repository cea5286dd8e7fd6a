// The shared state behind a relock::Client and its Lock handles: options,
// identity, the connection pool, the scripts, the pub/sub subscriber, the hold
// registry, the timer thread, the watchdog and the event queue. Lock handles
// keep it alive with a shared_ptr, so a handle that outlives its Client finds
// it closed instead of freed.

#ifndef RELOCK_LIB_CLIENT_CLIENT_CORE_H_
#define RELOCK_LIB_CLIENT_CLIENT_CORE_H_

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/client/event_queue.h"
#include "lib/lock/hold_registry.h"
#include "lib/lock/lock_scripts.h"
#include "lib/pubsub/subscriber.h"
#include "lib/redis/pool.h"
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

class ClientCore {
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

  // FailedPrecondition once the client is closed.
  absl::Status CheckOpen() const;

  // One script call / one command on a pooled connection.
  //
  // With `retry_if_dropped`, a call whose connection the server dropped
  // (CLIENT KILL, restart, a stale pooled connection; not a timeout) is sent
  // once more on a fresh connection, and `*retried` says so. Only for
  // scripts where running twice is harmless: the first request either never
  // ran or ran and lost its reply.
  absl::StatusOr<redis::Reply> RunScript(
      ScriptId script, std::initializer_list<absl::string_view> keys,
      std::initializer_list<absl::string_view> args,
      Deadline deadline = Deadline::Never(), bool retry_if_dropped = false,
      bool* retried = nullptr);
  absl::StatusOr<redis::Reply> RunCommand(
      std::initializer_list<absl::string_view> argv);

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

 private:
  ClientCore(ClientOptions options, std::string id,
             redis::ConnectionOptions conn_options);
  void Deliver(const LockEvent& event) const;

  const ClientOptions options_;
  const std::string id_;
  const std::string watchdog_lease_ms_;
  redis::ConnectionPool pool_;
  redis::ScriptSet scripts_;
  std::unique_ptr<pubsub::Subscriber> subscriber_;
  lock::HoldRegistry holds_;
  timer::TimerThread timers_;
  std::unique_ptr<EventQueue> events_;
  std::unique_ptr<watchdog::Watchdog> watchdog_;
  std::atomic<uint64_t> renew_round_trips_{0};
  std::atomic<bool> closed_{false};
};

// Reaches a Client's core, for tests and benchmarks of internals.
struct ClientAccess {
  static ClientCore& Core(Client& client) { return *client.core_; }
};

}  // namespace internal
}  // namespace relock

#endif  // RELOCK_LIB_CLIENT_CLIENT_CORE_H_
