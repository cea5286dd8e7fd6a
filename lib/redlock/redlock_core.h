// The state and algorithms behind relock::RedlockClient / RedlockLock (see
// include/relock/redlock.h for the contract): one pool and one pub/sub
// subscriber per master, one ScriptSet for all (a script's SHA1 is the same
// everywhere; NOSCRIPT reloads per connection), and the same hold registry,
// timer thread, watchdog and event queue as the single-node client.

#ifndef RELOCK_LIB_REDLOCK_REDLOCK_CORE_H_
#define RELOCK_LIB_REDLOCK_REDLOCK_CORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "absl/types/span.h"
#include "lib/client/event_queue.h"
#include "lib/common/deadline.h"
#include "lib/io/event_loop.h"
#include "lib/watchdog/hold_registry.h"
#include "lib/lock/lock_scripts.h"
#include "lib/pubsub/subscriber.h"
#include "lib/redis/parallel.h"
#include "lib/redis/pool.h"
#include "lib/redis/script.h"
#include "lib/timer/timer_thread.h"
#include "lib/watchdog/watchdog.h"
#include "relock/redlock.h"

namespace relock {
namespace internal {

class RedlockCore {
 public:
  static absl::StatusOr<std::shared_ptr<RedlockCore>> Create(
      RedlockOptions options);
  ~RedlockCore();

  const std::string& id() const { return id_; }
  int quorum() const { return quorum_; }
  bool closed() const { return closed_.load(std::memory_order_acquire); }

  absl::Status Acquire(const std::string& name,
                       absl::optional<absl::Duration> lease, Deadline deadline);
  absl::Status Release(const std::string& name);
  absl::Status Extend(const std::string& name, absl::Duration lease);
  absl::StatusOr<SteadyClock::time_point> ValidUntil(const std::string& name);
  int64_t LocalHoldCount(const std::string& name);

  void ReportUnlockFailure(absl::string_view name, absl::Status status);
  void Close();

 private:
  struct Master {
    std::string label;  // endpoint, for messages
    std::unique_ptr<redis::ConnectionPool> pool;
    std::shared_ptr<pubsub::Subscriber> subscriber;
  };
  // One master's answer to a script call.
  using Replies = std::vector<absl::StatusOr<redis::Reply>>;

  // The outcome of one acquire attempt.
  struct Attempt {
    enum Kind { kAcquired, kHeldByOther, kFailed } kind = kFailed;
    SteadyClock::time_point start;
    int64_t min_pttl_ms = -1;  // smallest lease left among holders; -1 none
    std::string details;       // each master's answer, for errors
  };

  RedlockCore(RedlockOptions options, std::string id);

  // Runs `script` on every master at once (see lib/redis/parallel.h).
  Replies OnAll(ScriptId script, absl::Span<const absl::string_view> keys,
                absl::Span<const absl::string_view> args, Deadline deadline,
                const redis::OnAnswer& enough = nullptr);
  absl::Duration PerMasterTimeout(absl::Duration lease) const;
  absl::Duration Drift(absl::Duration lease) const;
  Attempt TryOnce(const std::string& name, const std::string& owner,
                  absl::Duration lease, bool reentry);
  absl::StatusOr<std::vector<bool>> RenewBatch(
      const std::vector<watchdog::RenewItem>& items);
  void Deliver(const LockEvent& event) const { deliver_(event); }

  const RedlockOptions options_;
  // The subscribers' event loop; declared first, so destroyed last.
  io::EventLoop loop_;
  // Self-contained (see EventDeliverer): may outlive this core.
  const std::function<void(const LockEvent&)> deliver_;
  const std::string id_;
  const int quorum_;
  std::vector<Master> masters_;
  redis::ScriptSet scripts_;
  std::shared_ptr<const BackoffStrategy> backoff_;
  watchdog::HoldRegistry holds_;
  timer::TimerThread timers_;
  std::unique_ptr<EventQueue> events_;
  std::unique_ptr<watchdog::Watchdog> watchdog_;
  std::atomic<bool> closed_{false};
};

}  // namespace internal
}  // namespace relock

#endif  // RELOCK_LIB_REDLOCK_REDLOCK_CORE_H_
