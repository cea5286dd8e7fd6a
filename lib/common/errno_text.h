// Thread-safe text of an errno value (strerror is not thread-safe).

#ifndef RELOCK_LIB_COMMON_ERRNO_TEXT_H_
#define RELOCK_LIB_COMMON_ERRNO_TEXT_H_

#include <string.h>

#include <string>

namespace relock {

inline std::string ErrnoText(int err) {
  char buf[256];
#if defined(_GNU_SOURCE) && !defined(__APPLE__)
  return strerror_r(err, buf, sizeof(buf));  // GNU: returns the text
#else
  if (strerror_r(err, buf, sizeof(buf)) != 0)
    return "errno " + std::to_string(err);
  return buf;
#endif
}

}  // namespace relock

#endif  // RELOCK_LIB_COMMON_ERRNO_TEXT_H_
