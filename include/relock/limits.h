// relock/limits.h
//
// The bounds relock accepts, shared by every lock type: the longest lock
// name and the range of an explicit lease. An argument outside them gets
// InvalidArgument (relock/lock.h lists every error).

#ifndef RELOCK_LIMITS_H_
#define RELOCK_LIMITS_H_

#include <cstddef>

#include "absl/time/time.h"

namespace relock {

// Longest accepted lock name, in bytes. Names may hold any bytes (NUL, braces,
// spaces, newlines) but must not be empty.
inline constexpr size_t kMaxLockNameSize = size_t{64} * 1024;
// Bounds of an explicit lease.
inline constexpr absl::Duration kMinLease = absl::Milliseconds(1);
inline constexpr absl::Duration kMaxLease = absl::Hours(365 * 24);

}  // namespace relock

#endif  // RELOCK_LIMITS_H_
