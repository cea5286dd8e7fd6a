// Unshared(status): a copy of an absl::Status that shares nothing with it.
//
// Copies of one non-OK Status share a reference-counted message. Debian's
// Abseil is not built with TSan, so TSan cannot see that count's atomics and
// reports the last owner's free as a race with another thread's read. Every
// status that crosses to another thread (a request's answer, a lock event, a
// waiter's result) is handed over unshared.

#ifndef RELOCK_LIB_COMMON_UNSHARED_H_
#define RELOCK_LIB_COMMON_UNSHARED_H_

#include <string>

#include "absl/status/status.h"

namespace relock {

inline absl::Status Unshared(const absl::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(s.code(), std::string(s.message()));
}

}  // namespace relock

#endif  // RELOCK_LIB_COMMON_UNSHARED_H_
