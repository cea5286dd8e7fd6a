// The fair lock's model (relock::FairLock; Redisson's RFairLock): the lock
// hash as for the reentrant lock, plus a queue of waiting owners
// ("redisson_lock_queue:{N}", a list) and their deadlines
// ("redisson_lock_timeout:{N}", a sorted set). See lua/fair_lib.lua for the
// queue's rules and include/relock/fair_lock.h for the contract.

#ifndef RELOCK_LIB_LOCK_FAIR_LOCK_H_
#define RELOCK_LIB_LOCK_FAIR_LOCK_H_

#include <string>

#include "absl/strings/string_view.h"
#include "lib/lock/lock_model.h"
#include "lib/lock/owner.h"

namespace relock {
namespace lock {

// PrefixName(kFairQueuePrefix, name) and
// PrefixName("redisson_lock_timeout", name).
inline constexpr absl::string_view kFairQueuePrefix = "redisson_lock_queue";
std::string FairQueueKey(absl::string_view lock_name);
std::string FairTimeoutKey(absl::string_view lock_name);

// The channel the fair lock's waiter `owner` listens on: "<unlock
// channel>:<owner>" (Redisson's): a release wakes the head of the queue only.
std::string FairWaitChannel(LockName name, const OwnerField& owner);

const LockModel& FairModel();

}  // namespace lock
}  // namespace relock

#endif  // RELOCK_LIB_LOCK_FAIR_LOCK_H_
