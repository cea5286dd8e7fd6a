// relock/version.h
//
// The library's version, as the `relock --version` command and the client
// info record (relock/lock_info.h) report it.

#ifndef RELOCK_VERSION_H_
#define RELOCK_VERSION_H_

namespace relock {

// The library's version.
inline constexpr char kVersionString[] = "0.1.0";

}  // namespace relock

#endif  // RELOCK_VERSION_H_
