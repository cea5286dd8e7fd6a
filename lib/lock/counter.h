// What the counter synchronizers (lib/lock/semaphore.h: the semaphore and
// the count-down latch, Redisson's RSemaphore and RCountDownLatch) share: a
// string key holding a count, a channel on which every change is published
// and every message wakes every waiter, the model under which their waits
// run on the shared acquire machine, and the reading of their scripts'
// answers. Internal to lib/lock.

#ifndef RELOCK_LIB_LOCK_COUNTER_H_
#define RELOCK_LIB_LOCK_COUNTER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "lib/backend/backend.h"
#include "lib/lock/lock_env.h"
#include "lib/lock/lock_model.h"
#include "lib/lock/lock_scripts.h"
#include "lib/lock/owner.h"
#include "lib/redis/reply.h"

namespace relock {
namespace lock {
namespace counter_internal {

// One counter type: how it is named in messages, the error code its scripts
// return for a key of another kind, its channel, its bounds and its wait's
// step.
struct CounterType {
  absl::string_view noun;        // "semaphore"
  absl::string_view wrong_code;  // "NOTASEMAPHORE"
  std::string (*channel)(absl::string_view name);
  internal::ScriptId wait_script;  // nil when granted, else the key's PTTL
  // The wait step's arguments of an acquire with `options` (null for a
  // model that overrides Acquire()).
  StepTexts (*wait_args)(const AcquireOptions& options);
  // The largest count (either sign) and number a call takes.
  int64_t max = 0;
  // The DeadlineExceeded text of a wait that ended ungranted.
  absl::string_view wait_ended;
  // Which names a cluster takes, for the InvalidArgument of one it cannot.
  absl::string_view slot_hint;
  // The step that gives back what a granted wait with `options` took (a
  // semaphore's permits), for a grant its replicas did not acknowledge;
  // null when a wait takes nothing.
  Step (*give_back)(LockName name, const AcquireOptions& options,
                    absl::string_view publish) = nullptr;
  // Whether the wait script writes nothing (a latch's await) and may run
  // twice; a semaphore's takes permits (LockModel::acquire_is_idempotent).
  bool wait_is_read_only = false;
  // A companion key its scripts take besides the name and the channel (a
  // permit-expirable semaphore's "{N}:timeout"), which must share the name's
  // cluster slot too; null: none.
  std::string (*companion)(absl::string_view name) = nullptr;
};

// The model of a counter type's waits (see LockModel): its acquire step is
// the type's wait script; every message on its channel wakes every waiter;
// a key without a TTL is re-checked every 30 s only (every change
// publishes). It is no lock: its release steps are never sent (they are
// the read-only inspection, should one be).
class CounterModel : public LockModel {
 public:
  explicit CounterModel(const CounterType& type) : type_(type) {}

  LockKind kind() const override { return LockKind::kReentrant; }
  Step Acquire(LockName name, const OwnerField& owner, Lease lease, bool fresh,
               bool queue, const AcquireOptions& options,
               absl::string_view publish) const override;
  Step Release(LockName name, const OwnerField& owner, Lease lease,
               absl::string_view publish, bool last) const override;
  Step ReleaseAll(LockName name, const OwnerField& owner,
                  absl::string_view publish) const override;
  Step ForceRelease(LockName name, absl::string_view publish) const override;
  // CounterType::give_back, or (nothing to give back) the inspection.
  Step Undo(LockName name, const OwnerField& owner, bool fresh,
            const AcquireOptions& options,
            absl::string_view publish) const override;
  absl::string_view wait_ended() const override { return type_.wait_ended; }
  std::string WaitChannel(LockName name,
                          const OwnerField& owner) const override;
  pubsub::WakePolicy wake_policy() const override {
    return pubsub::WakePolicy::kWakeAll;
  }
  Step Inspect(LockName name, const OwnerField& owner) const override;
  absl::Duration unleased_recheck() const override { return absl::Seconds(30); }
  bool acquire_is_idempotent() const override {
    return type_.wait_is_read_only;
  }

  const CounterType& type() const { return type_; }

 private:
  const CounterType& type_;
};

// The numbers a call takes: [min, type.max] (min at least -type.max),
// without 0 unless `zero_ok`.
struct CountRange {
  int64_t min = 0;
  bool zero_ok = true;
};

// InvalidArgument for a bad name, for a name whose channel would be in
// another cluster slot than the name (on a cluster, where a script's keys
// must share one), or for `n` outside `range` (`what`: "permits", "count").
absl::Status CheckArguments(LockEnv& env, const CounterType& type,
                            absl::string_view op, const std::string& name,
                            absl::string_view what, int64_t n,
                            CountRange range);

// Runs `step` of `type` on the (one) node, bounded by the client's
// command_timeout (Unavailable when it runs out): blocking when `here` (`then`
// runs before it returns), else on the event loop. `then` gets the reply, error
// replies mapped to their status (UNPUBLISHED: the write was made, the publish
// refused), annotated with `op` and the name.
void RunCounterStep(LockEnv& env, const CounterType& type, absl::string_view op,
                    const std::string& name, const Step& step,
                    backend::Resend resend, bool here,
                    std::function<void(absl::StatusOr<redis::Reply>)> then);

// RunCounterStep(), blocking.
absl::StatusOr<redis::Reply> RunCounterStepHere(
    LockEnv& env, const CounterType& type, absl::string_view op,
    const std::string& name, const Step& step, backend::Resend resend);

// The publish command of the counter scripts (the backend's: they always
// publish, for every other client's waiters), and what they do when Redis
// refuses it: "report" (an UNPUBLISHED error) or, on a client without
// pub/sub (ClientOptions::pubsub false, whose own waiters re-check on their
// own, as a lock's release does there), "ignore".
std::string PublishArg(LockEnv& env);
std::string RefusedArg(LockEnv& env);

// An integer reply of `op`, or Internal naming what came.
absl::StatusOr<int64_t> IntegerReply(const redis::Reply& r,
                                     absl::string_view op);

// TrySetPermits() / TrySetCount(): lua/counter_set.lua with `message`.
absl::StatusOr<bool> TrySet(LockEnv& env, const CounterType& type,
                            const std::string& name, int64_t count,
                            absl::string_view message);

// The count at `name` (0 when the key does not exist).
absl::StatusOr<int64_t> ReadCount(LockEnv& env, const CounterType& type,
                                  const std::string& name);

}  // namespace counter_internal
}  // namespace lock
}  // namespace relock

#endif  // RELOCK_LIB_LOCK_COUNTER_H_
