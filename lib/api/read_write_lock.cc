// relock::ReadWriteLock: two relock::Lock handles on one name, whose calls
// use the read and write models (lib/lock/rw_lock.h).

#include "relock/read_write_lock.h"

#include <utility>

#include "lib/lock/lock_model.h"

namespace relock {

ReadWriteLock::ReadWriteLock() {
  read_.kind_ = LockKind::kRead;
  write_.kind_ = LockKind::kWrite;
}

ReadWriteLock::ReadWriteLock(std::shared_ptr<internal::ClientCore> core,
                             std::string name, const LockOptions& options)
    : read_(core, name, options),
      write_(std::move(core), std::move(name), options) {
  read_.kind_ = LockKind::kRead;
  write_.kind_ = LockKind::kWrite;
}

}  // namespace relock
