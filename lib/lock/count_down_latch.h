// The count-down latch's calls (relock::CountDownLatch,
// relock/count_down_latch.h; Redisson's RCountDownLatch): a latch named N
// is a string key N holding the count (no key: count 0, open). CountDown()
// decrements it; at zero the key goes and "0" is published on
// "redisson_countdownlatch__channel__{N}" (Redisson's name, braces around
// the whole name even when N contains "{"), whose every message wakes every
// waiter of every client. A wait runs on the shared acquire machine
// (AwaitGrant(), lib/lock/algorithm.h).
//
// Each call checks its name and numbers first (InvalidArgument, see
// relock/count_down_latch.h; on a cluster, a name containing "}" too, whose
// channel would be in another slot), and runs on the backend's one node.

#ifndef RELOCK_LIB_LOCK_COUNT_DOWN_LATCH_H_
#define RELOCK_LIB_LOCK_COUNT_DOWN_LATCH_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/common/deadline.h"
#include "lib/lock/lock_env.h"

namespace relock {
namespace lock {

// Where a latch's changes are published (see the top of this file).
std::string LatchChannel(absl::string_view name);

// Sets the count to `count` (>= 1) if the latch has none; whether it did.
absl::StatusOr<bool> TrySetCount(LockEnv& env, const std::string& name,
                                 int64_t count);
// Counts down by one; the count after (0 when it was 0 already).
absl::StatusOr<int64_t> CountDown(LockEnv& env, const std::string& name);
absl::StatusOr<int64_t> GetCount(LockEnv& env, const std::string& name);
// Waits (notified) until the count is 0, or `deadline`.
absl::Status AwaitZero(LockEnv& env, const std::string& name,
                       Deadline deadline);
// The same without blocking: `done` runs once, on the event loop thread (or
// on the calling thread when the call fails at once); `keep` (the client)
// is held until then.
void AwaitZeroAsync(LockEnv& env, std::shared_ptr<void> keep,
                    const std::string& name, Deadline deadline,
                    std::function<void(absl::Status)> done);

}  // namespace lock
}  // namespace relock

#endif  // RELOCK_LIB_LOCK_COUNT_DOWN_LATCH_H_
