// The read-write lock's models (ReadWriteLock's ReadLock() and WriteLock();
// Redisson's RReadWriteLock): one hash N holding the mode, the readers'
// counts and the writer's count, per-read-hold lease keys, and the channel
// "redisson_rwlock:{N}". See lua/rw_lib.lua for the data model and
// include/relock/read_write_lock.h for the contract.

#ifndef RELOCK_LIB_LOCK_RW_LOCK_H_
#define RELOCK_LIB_LOCK_RW_LOCK_H_

#include <string>

#include "absl/strings/string_view.h"
#include "lib/lock/lock_model.h"

namespace relock {
namespace lock {

// PrefixName("redisson_rwlock", name): where a read-write lock's releases
// announce it (Redisson's).
std::string ReadWriteChannel(absl::string_view lock_name);

// The messages on that channel: a read lock's release that frees the lock
// wakes one waiter per client (kUnlockMessage, "0"); a write lock's release
// wakes every waiter ("1", Redisson's READ_UNLOCK_MESSAGE).
inline constexpr absl::string_view kReadUnlockMessage = "1";

}  // namespace lock
}  // namespace relock

#endif  // RELOCK_LIB_LOCK_RW_LOCK_H_
