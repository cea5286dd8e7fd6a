#include "lib/redis/errors.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace relock {
namespace redis {

bool IsConnectionClosingError(absl::string_view error) {
  return absl::StartsWith(error, "ERR max number of clients reached") ||
         absl::StartsWith(error, "DENIED") ||
         absl::StartsWith(error, "ERR Protocol error");
}

absl::Status ErrorReplyToStatus(absl::string_view what,
                                absl::string_view error) {
  std::string msg = absl::StrCat(what, ": Redis replied: ", error);
  auto starts = [&](absl::string_view prefix) {
    return absl::StartsWith(error, prefix);
  };
  if (starts("NOAUTH") || starts("WRONGPASS")) {
    return absl::UnauthenticatedError(msg);
  }
  // Inside a script, Redis 7.0 words ACL refusals as "ERR The user executing
  // the script can't ...".
  if (starts("NOPERM") || starts("ERR The user executing the script can't")) {
    return absl::PermissionDeniedError(msg);
  }
  if (starts("WRONGTYPE") || starts("NOTALOCK") || starts("NOTATOKEN") ||
      starts("NOTASEMAPHORE") || starts("NOTALATCH")) {
    return absl::FailedPreconditionError(msg);
  }
  if (starts("OUTOFRANGE")) return absl::OutOfRangeError(msg);
  if (starts("NOTHELD")) return absl::AbortedError(msg);
  if (starts("OOM")) return absl::ResourceExhaustedError(msg);
  if (starts("LOADING") || starts("BUSY") || starts("MASTERDOWN") ||
      starts("TRYAGAIN") || starts("CLUSTERDOWN") || starts("READONLY") ||
      IsConnectionClosingError(error)) {
    return absl::UnavailableError(msg);
  }
  return absl::InternalError(msg);
}

}  // namespace redis
}  // namespace relock
