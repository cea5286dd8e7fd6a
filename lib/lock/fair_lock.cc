#include "lib/lock/fair_lock.h"

#include "absl/strings/str_cat.h"
#include "lib/lock/lease.h"
#include "lib/lock/owner.h"

namespace relock {
namespace lock {
namespace {

// A waiter re-checks at least this often even when no message came and the
// waiter ahead of it is not due yet: a waiter that moved up to the head
// while it slept (its hint was the deadline of the waiter ahead) notices a
// holder that crashed (its lease ends without an unlock message) within it.
constexpr absl::Duration kMaxFairSleep = absl::Seconds(30);

// The queue wait's argument (Redisson's threadWaitTime, in ms).
std::string QueueWaitMs(const AcquireOptions& options) {
  return absl::StrCat(absl::ToInt64Milliseconds(options.queue_wait));
}

class Fair final : public LockModel {
 public:
  LockKind kind() const override { return LockKind::kFair; }

  Step Acquire(LockName name, const OwnerField& owner, Lease lease, bool fresh,
               bool queue, const AcquireOptions& options,
               absl::string_view publish) const override {
    return Step{internal::kFairAcquireScript,
                Keys(name),
                {lease.wire(), owner.wire(), QueueWaitMs(options),
                 fresh ? "1" : "0", queue ? "1" : "0", std::string(publish)}};
  }

  Step Release(LockName name, const OwnerField& owner, Lease lease,
               absl::string_view publish, bool /*last*/) const override {
    return Step{internal::kFairReleaseScript,
                Keys(name),
                {std::string(kUnlockMessage), lease.wire(), owner.wire(),
                 std::string(publish)}};
  }

  Step ReleaseAll(LockName name, const OwnerField& owner,
                  absl::string_view publish) const override {
    return Step{
        internal::kFairReleaseAllScript,
        Keys(name),
        {std::string(kUnlockMessage), owner.wire(), std::string(publish)}};
  }

  Step ForceRelease(LockName name, absl::string_view publish) const override {
    return Step{internal::kFairForceReleaseScript,
                Keys(name),
                {std::string(kUnlockMessage), std::string(publish)}};
  }

  absl::optional<Step> Leave(LockName name, const OwnerField& owner,
                             const AcquireOptions& options, bool fresh,
                             absl::string_view publish) const override {
    return Step{
        internal::kFairLeaveScript,
        Keys(name),
        {owner.wire(), QueueWaitMs(options), std::string(kUnlockMessage),
         std::string(publish), fresh ? "1" : "0"}};
  }

  std::string WaitChannel(LockName name,
                          const OwnerField& owner) const override {
    return FairWaitChannel(name, owner);
  }
  pubsub::WakePolicy wake_policy() const override {
    return pubsub::WakePolicy::kWakeOne;
  }
  absl::Duration max_sleep() const override { return kMaxFairSleep; }
  // The attempt's number is the holder's lease or the wait for the waiter
  // ahead, which it cannot tell apart: no "lease left".
  absl::string_view wait_ended() const override {
    return "held by another owner, or free but promised to the waiters "
           "queued earlier (a fair lock serves its queue in order)";
  }

 private:
  // The lock, its queue, its deadlines and its unlock channel.
  static StepTexts Keys(LockName name) {
    return {std::string(name.key()), FairQueueKey(name.key()),
            FairTimeoutKey(name.key()), UnlockChannel(name.key())};
  }
};

}  // namespace

std::string FairQueueKey(absl::string_view lock_name) {
  return PrefixName(kFairQueuePrefix, lock_name);
}

std::string FairTimeoutKey(absl::string_view lock_name) {
  return PrefixName("redisson_lock_timeout", lock_name);
}

std::string FairWaitChannel(LockName name, const OwnerField& owner) {
  return absl::StrCat(UnlockChannel(name.key()), ":", owner.wire());
}

const LockModel& FairModel() {
  static const Fair* const kModel = new Fair();
  return *kModel;
}

}  // namespace lock
}  // namespace relock
