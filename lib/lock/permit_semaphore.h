// The permit-expirable semaphore's calls (relock/permit_expirable_semaphore.h)
// over the counter pieces (lib/lock/counter.h): Redisson's
// RPermitExpirableSemaphore, a count at the name N and the sorted set
// "{N}:timeout" of the permits out, by id, scored by their lease end. Its
// waits run on the shared acquire machine (AwaitGrant()); a permit taken is
// registered in the client's hold registry (kind kPermitKind, under a
// number of its own that its id carries), so that the watchdog renews a
// permit without a lease and reports it lost, and Close() gives it back.
// Internal to lib/lock.

#ifndef RELOCK_LIB_LOCK_PERMIT_SEMAPHORE_H_
#define RELOCK_LIB_LOCK_PERMIT_SEMAPHORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "lib/common/deadline.h"
#include "lib/lock/lock_env.h"
#include "relock/lock_info.h"

namespace relock {
namespace lock {

// Redisson's suffixName(N, "timeout"): "{N}:timeout", or "N:timeout" when N
// contains "{".
std::string PermitTimeoutKey(absl::string_view name);

// Takes one permit, waiting until `deadline`; its id (32 hex digits).
// `lease`: InfiniteDuration for the watchdog's lease, renewed while the
// client lives; else in [kMinLease, kMaxLease].
absl::StatusOr<std::string> AcquirePermit(LockEnv& env, const std::string& name,
                                          absl::Duration lease,
                                          Deadline deadline);
void AcquirePermitAsync(LockEnv& env, const std::shared_ptr<void>& keep,
                        const std::string& name, absl::Duration lease,
                        Deadline deadline,
                        std::function<void(absl::StatusOr<std::string>)> done);
// Gives back permit `id`: NotFound when no such permit is out, Aborted when
// its lease had run out (it is given back all the same).
absl::Status ReleasePermit(LockEnv& env, const std::string& name,
                           const std::string& id);
void ReleasePermitAsync(LockEnv& env, std::shared_ptr<void> keep,
                        const std::string& name, const std::string& id,
                        std::function<void(absl::Status)> done);
// Sets permit `id`'s lease to `lease` from now (the watchdog no longer
// renews it); NotFound when no such permit is out.
absl::Status UpdatePermitLease(LockEnv& env, const std::string& name,
                               const std::string& id, absl::Duration lease);
absl::StatusOr<bool> TrySetExpirablePermits(LockEnv& env,
                                            const std::string& name,
                                            int64_t permits);
// The permits available, after giving back the expired ones.
absl::StatusOr<int64_t> AvailableExpirablePermits(LockEnv& env,
                                                  const std::string& name);

// Either semaphore at `name` as lua/semaphore_info.lua reads it in one
// script, read-only, with at most `max_listed` permits listed; `waiters`
// left 0 (lib/lock/inspect.cc counts them for Client::InspectSemaphore).
absl::StatusOr<SemaphoreInfo> ReadSemaphore(LockEnv& env,
                                            const std::string& name,
                                            int64_t max_listed);

}  // namespace lock
}  // namespace relock

#endif  // RELOCK_LIB_LOCK_PERMIT_SEMAPHORE_H_
