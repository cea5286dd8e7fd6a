// The counter synchronizers' calls (relock::Semaphore, relock/semaphore.h;
// Redisson's RSemaphore): a semaphore named N is a string key N holding the
// number of available permits; every change that adds permits publishes
// the new count on "redisson_sc:{N}" (PrefixName), whose every message
// wakes every waiter of every client. A wait runs on the shared acquire
// machine (AwaitGrant(), lib/lock/algorithm.h). No owner holds a permit:
// any caller may release any number of them, as with Redisson's.
//
// Each call checks its name and numbers first (InvalidArgument, see
// relock/semaphore.h; on a cluster, a name whose channel would be in another
// slot too), and runs on the backend's one node. An acquire waits for the
// client's ReplicaSync, as a lock's does, and gives its permits back when
// the replicas did not acknowledge them.

#ifndef RELOCK_LIB_LOCK_SEMAPHORE_H_
#define RELOCK_LIB_LOCK_SEMAPHORE_H_

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

// PrefixName("redisson_sc", name): where a semaphore's changes are
// published (Redisson's RedissonSemaphore.getChannelName).
std::string SemaphoreChannel(absl::string_view name);

// Takes `permits` (>= 1), waiting (notified) until `deadline`.
absl::Status AcquirePermits(LockEnv& env, const std::string& name,
                            int64_t permits, Deadline deadline);
// The same without blocking: `done` runs once, on the event loop thread (or
// on the calling thread when the call fails at once); `keep` (the client)
// is held until then.
void AcquirePermitsAsync(LockEnv& env, std::shared_ptr<void> keep,
                         const std::string& name, int64_t permits,
                         Deadline deadline,
                         std::function<void(absl::Status)> done);
// Adds `permits` (Release: >= 1; AddPermits, `add`: not 0, a negative
// number takes permits away) and wakes the waiters. Never resent: a release
// whose answer was lost may or may not have happened (Unavailable).
absl::Status ReleasePermits(LockEnv& env, const std::string& name,
                            int64_t permits, bool add = false);
void ReleasePermitsAsync(LockEnv& env, std::shared_ptr<void> keep,
                         const std::string& name, int64_t permits,
                         std::function<void(absl::Status)> done);
// Sets the permits to `permits` (>= 0) if the key holds none; whether it
// did.
absl::StatusOr<bool> TrySetPermits(LockEnv& env, const std::string& name,
                                   int64_t permits);
absl::StatusOr<int64_t> AvailablePermits(LockEnv& env, const std::string& name);
// Takes every available permit; how many.
absl::StatusOr<int64_t> DrainPermits(LockEnv& env, const std::string& name);

}  // namespace lock
}  // namespace relock

#endif  // RELOCK_LIB_LOCK_SEMAPHORE_H_
