// What Redis error replies mean, as absl::Status codes.

#ifndef RELOCK_LIB_REDIS_ERRORS_H_
#define RELOCK_LIB_REDIS_ERRORS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace relock {
namespace redis {

// Maps an error reply to a Status for operation `what` (e.g. "SCRIPT LOAD").
// NOAUTH/WRONGPASS -> Unauthenticated, NOPERM (and a script's ACL refusal)
// -> PermissionDenied,
// WRONGTYPE and NOTALOCK, NOTATOKEN, NOTASEMAPHORE, NOTALATCH (relock's
// scripts) -> FailedPrecondition, OUTOFRANGE (relock's scripts: a count
// beyond its bounds) -> OutOfRange, NOTHELD (relock's scripts: a re-entry
// that found its hold lost) -> Aborted, OOM (maxmemory with
// noeviction) -> ResourceExhausted,
// LOADING/BUSY/MASTERDOWN/TRYAGAIN and the errors after which the server
// closes the connection (IsConnectionClosingError) -> Unavailable, others ->
// Internal.
absl::Status ErrorReplyToStatus(absl::string_view what,
                                absl::string_view error);

// Whether the server closes the connection after sending `error`.
bool IsConnectionClosingError(absl::string_view error);

}  // namespace redis
}  // namespace relock

#endif  // RELOCK_LIB_REDIS_ERRORS_H_
