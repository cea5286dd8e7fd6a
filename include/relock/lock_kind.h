// relock/lock_kind.h
//
// The lock types of the lock family, as a lock handle, a hold and the
// library's algorithms know them. Each type is its own data model and
// scripts (lib/lock/lock_model.h); plain and fenced locks share one.
//
//   LockKind     handle                          Redisson
//   -----------  ------------------------------  ----------------------
//   kReentrant   Lock, FencedLock                RLock, RFencedLock
//   kFair        FairLock                        RFairLock
//   kRead        ReadWriteLock::ReadLock()       RReadWriteLock (read)
//   kWrite       ReadWriteLock::WriteLock()      RReadWriteLock (write)

#ifndef RELOCK_LOCK_KIND_H_
#define RELOCK_LOCK_KIND_H_

#include <cstdint>

namespace relock {

enum class LockKind : uint8_t {
  kReentrant = 0,
  kFair = 1,
  kRead = 2,
  kWrite = 3,
};

}  // namespace relock

#endif  // RELOCK_LOCK_KIND_H_
