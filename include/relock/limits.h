// relock/limits.h
//
// The bounds relock accepts, shared by every lock type: the longest lock name,
// the range of an explicit lease and the longest connection timeout; and the
// largest count of a semaphore or a count-down latch. An argument outside them
// gets InvalidArgument (relock/lock.h lists every error).

#ifndef RELOCK_LIMITS_H_
#define RELOCK_LIMITS_H_

#include <cstddef>
#include <cstdint>

#include "absl/time/time.h"

namespace relock {

// Longest accepted lock name, in bytes. Names may hold any bytes (NUL, braces,
// spaces, newlines) but must not be empty.
inline constexpr size_t kMaxLockNameSize = size_t{64} * 1024;
// Bounds of an explicit lease.
inline constexpr absl::Duration kMinLease = absl::Milliseconds(1);
inline constexpr absl::Duration kMaxLease = absl::Hours(365 * 24);
// The longest ClientOptions::connect_timeout and command_timeout (a year:
// time points are kept in 64-bit nanoseconds, which end 292 years on).
inline constexpr absl::Duration kMaxTimeout = absl::Hours(365 * 24);
// The largest count of a count-down latch: 2^53 - 1, the largest integer
// Redis's Lua counts exactly (Redisson's latch counts are Java longs).
inline constexpr int64_t kMaxCount = (int64_t{1} << 53) - 1;
// The largest number of permits a semaphore call takes, adds or sets, and
// the largest count a semaphore may hold (either sign): 2^31 - 1, Java's
// Integer.MAX_VALUE, since Redisson's RSemaphore reads and passes permits as
// Java ints (a larger count would break its availablePermits()).
inline constexpr int64_t kMaxPermits = (int64_t{1} << 31) - 1;

}  // namespace relock

#endif  // RELOCK_LIMITS_H_
