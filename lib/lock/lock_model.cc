#include "lib/lock/lock_model.h"

#include "lib/lock/fair_lock.h"
#include "lib/lock/lease.h"
#include "lib/lock/owner.h"
#include "lib/lock/rw_lock.h"

namespace relock {
namespace lock {
namespace {

// Redisson's RLock: the hash, and one channel whose unlock message wakes one
// waiter per client.
class Reentrant final : public LockModel {
 public:
  LockKind kind() const override { return LockKind::kReentrant; }

  Step Acquire(LockName name, const OwnerField& owner, Lease lease, bool fresh,
               bool /*queue*/, const AcquireOptions& options,
               absl::string_view /*publish*/) const override {
    // Only the keys the script's fast path reads (each key and argument
    // costs every call; see lua/acquire.lua): a fresh acquire passes the
    // fair lock's queue (a name whose fair lock has waiters is refused: one
    // name is one lock type) and no third argument (the script's "1"); a
    // re-entry passes "0" and no queue (the script finds it by its name,
    // FairQueueKey(), should the caller no longer hold the lock).
    Step step{internal::kAcquireScript, {}, {}};
    step.keys.Borrow(name.key());
    if (fresh) step.keys.AddPrefixName(kFairQueuePrefix, name.key());
    if (options.fenced) step.keys.AddPrefixName(kTokenKeyPrefix, name.key());
    step.args.Add(lease.wire());
    step.args.Borrow(owner.wire());
    if (!fresh) step.args.Borrow("0");
    return step;
  }

  Step Release(LockName name, const OwnerField& owner, Lease lease,
               absl::string_view publish, bool last) const override {
    // The fair lock's queue, whose head waiter a release that frees the lock
    // wakes, only for a last release: each key costs every call, and the
    // script finds the queue by its name should another release free the
    // lock all the same.
    Step step{internal::kReleaseScript, {}, {}};
    step.keys.Borrow(name.key());
    step.keys.AddPrefixName(kUnlockChannelPrefix, name.key());
    if (last) step.keys.AddPrefixName(kFairQueuePrefix, name.key());
    step.args.Borrow(kUnlockMessage);
    step.args.Add(lease.wire());
    step.args.Borrow(owner.wire());
    step.args.Borrow(publish);
    return step;
  }

  Step ReleaseAll(LockName name, const OwnerField& owner,
                  absl::string_view publish) const override {
    return Step{
        internal::kReleaseAllScript,
        Keys(name),
        {std::string(kUnlockMessage), owner.wire(), std::string(publish)}};
  }

  Step ForceRelease(LockName name, absl::string_view publish) const override {
    return Step{internal::kForceReleaseScript,
                Keys(name),
                {std::string(kUnlockMessage), std::string(publish)}};
  }

  std::string WaitChannel(LockName name,
                          const OwnerField& /*owner*/) const override {
    return UnlockChannel(name.key());
  }
  pubsub::WakePolicy wake_policy() const override {
    return pubsub::WakePolicy::kWakeOne;
  }

 private:
  // The lock, its unlock channel and the fair lock's queue (see Acquire).
  static StepTexts Keys(LockName name) {
    return {std::string(name.key()), UnlockChannel(name.key()),
            FairQueueKey(name.key())};
  }
};

}  // namespace

Step LockModel::Inspect(LockName name, const OwnerField& owner) const {
  return Step{
      internal::kInspectScript, {std::string(name.key())}, {owner.wire()}};
}

backend::Call Step::Views() const {
  backend::Call call;
  call.script = script;
  for (size_t i = 0; i < keys.size(); ++i) call.keys.push_back(keys[i]);
  for (size_t i = 0; i < args.size(); ++i) call.args.push_back(args[i]);
  return call;
}

const LockModel& ReentrantModel() {
  static const Reentrant* const kModel = new Reentrant();
  return *kModel;
}

const LockModel& ModelOf(LockKind kind) {
  if (kind == kPermitKind) return PermitModel();
  switch (kind) {
    case LockKind::kFair:
      return FairModel();
    case LockKind::kRead:
      return ReadModel();
    case LockKind::kWrite:
      return WriteModel();
    case LockKind::kReentrant:
      break;
  }
  return ReentrantModel();
}

}  // namespace lock
}  // namespace relock
