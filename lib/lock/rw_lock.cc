#include "lib/lock/rw_lock.h"

#include "lib/lock/lease.h"
#include "lib/lock/owner.h"

namespace relock {
namespace lock {
namespace {

// The read lock or the write lock: the same hash and channel; the scripts
// and the message that tells the waiters differ.
class ReadWrite final : public LockModel {
 public:
  explicit ReadWrite(bool write) : write_(write) {}

  LockKind kind() const override {
    return write_ ? LockKind::kWrite : LockKind::kRead;
  }

  Step Acquire(LockName name, const OwnerField& owner, Lease lease, bool fresh,
               bool /*queue*/, const AcquireOptions& /*options*/,
               absl::string_view /*publish*/) const override {
    return Step{
        write_ ? internal::kWriteAcquireScript : internal::kReadAcquireScript,
        {std::string(name.key())},
        {lease.wire(), owner.wire(), fresh ? "1" : "0"}};
  }

  Step Release(LockName name, const OwnerField& owner, Lease lease,
               absl::string_view publish, bool /*last*/) const override {
    return Step{
        write_ ? internal::kWriteReleaseScript : internal::kReadReleaseScript,
        Keys(name),
        {std::string(Message()), lease.wire(), owner.wire(),
         std::string(publish)}};
  }

  Step ReleaseAll(LockName name, const OwnerField& owner,
                  absl::string_view publish) const override {
    return Step{internal::kRwReleaseAllScript,
                Keys(name),
                {std::string(Message()), owner.wire(), std::string(publish)}};
  }

  Step ForceRelease(LockName name, absl::string_view publish) const override {
    return Step{internal::kRwForceReleaseScript,
                Keys(name),
                {write_ ? "write" : "read", std::string(Message()),
                 std::string(publish)}};
  }

  std::string WaitChannel(LockName name,
                          const OwnerField& /*owner*/) const override {
    return ReadWriteChannel(name.key());
  }
  pubsub::WakePolicy wake_policy() const override {
    return pubsub::WakePolicy::kReadWrite;
  }

  Step Inspect(LockName name, const OwnerField& owner) const override {
    return Step{internal::kRwInspectScript,
                {std::string(name.key())},
                {owner.wire(), write_ ? "write" : "read"}};
  }
  internal::ScriptId renew_script() const override {
    // A write hold is one field of the hash, as a reentrant lock's; read
    // holds have lease keys too.
    return write_ ? internal::kRenewScript : internal::kReadRenewScript;
  }

 private:
  // The hash and its channel.
  static StepTexts Keys(LockName name) {
    return {std::string(name.key()), ReadWriteChannel(name.key())};
  }
  absl::string_view Message() const {
    return write_ ? kReadUnlockMessage : kUnlockMessage;
  }

  const bool write_;
};

}  // namespace

std::string ReadWriteChannel(absl::string_view lock_name) {
  return PrefixName("redisson_rwlock", lock_name);
}

const LockModel& ReadModel() {
  static const ReadWrite* const kModel = new ReadWrite(/*write=*/false);
  return *kModel;
}

const LockModel& WriteModel() {
  static const ReadWrite* const kModel = new ReadWrite(/*write=*/true);
  return *kModel;
}

}  // namespace lock
}  // namespace relock
