// The reentrant lock's operations on Redis (the algorithms behind
// relock::Lock). See include/relock/lock.h for the contract.

#ifndef RELOCK_LIB_LOCK_REENTRANT_LOCK_H_
#define RELOCK_LIB_LOCK_REENTRANT_LOCK_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "lib/client/client_core.h"
#include "lib/common/deadline.h"

namespace relock {
namespace lock {

// InvalidArgument for an empty or over-long name.
absl::Status ValidateName(const std::string& name);

// Acquires `name` for the calling thread, waiting (by notification) until
// `deadline`. `lease`: explicit lease, or nullopt for the watchdog lease.
absl::Status Acquire(internal::ClientCore& core, const std::string& name,
                     absl::optional<absl::Duration> lease, Deadline deadline);
absl::Status Release(internal::ClientCore& core, const std::string& name);
absl::StatusOr<bool> ForceRelease(internal::ClientCore& core,
                                  const std::string& name);
// Until when the calling thread may assume it holds `name` (see
// Lock::SafeUntil()).
absl::StatusOr<SteadyClock::time_point> SafeUntil(internal::ClientCore& core,
                                                  const std::string& name);

absl::StatusOr<bool> IsLocked(internal::ClientCore& core,
                              const std::string& name);
absl::StatusOr<int64_t> HoldCount(internal::ClientCore& core,
                                  const std::string& name);
absl::StatusOr<absl::Duration> RemainingLease(internal::ClientCore& core,
                                              const std::string& name);

}  // namespace lock
}  // namespace relock

#endif  // RELOCK_LIB_LOCK_REENTRANT_LOCK_H_
