// relock::FairLock: a relock::Lock handle whose calls use the fair lock's
// model (lib/lock/fair_lock.h).

#include "relock/fair_lock.h"

#include <utility>

#include "lib/lock/lock_model.h"

namespace relock {

FairLock::FairLock(std::shared_ptr<internal::ClientCore> core, std::string name,
                   const FairLockOptions& options)
    : Lock(std::move(core), std::move(name), options) {
  kind_ = LockKind::kFair;
  queue_wait_ = options.queue_wait;
}

}  // namespace relock
