// An acquire's plan and its attempts (Acquire() and AcquireAsync() of
// lib/lock/algorithm.h, in lib/lock/acquire.cc): what a call takes, and
// each step of an attempt, defined once for the blocking call, which makes
// its attempts on the calling thread, and for the AcquireMachine, which
// makes them on the event loop thread. Internal to lib/lock, as attempt.h
// (the judgement of one attempt's answers, which these steps use).

#ifndef RELOCK_LIB_LOCK_ATTEMPTS_H_
#define RELOCK_LIB_LOCK_ATTEMPTS_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "lib/backend/backend.h"
#include "lib/common/clock.h"
#include "lib/common/deadline.h"
#include "lib/lock/attempt.h"
#include "lib/lock/lock_env.h"
#include "lib/lock/lock_model.h"
#include "lib/lock/owner.h"

namespace relock {
namespace lock {
namespace algorithm_internal {

// What an acquire by one owner takes (acquire.cc's PlanAcquire()): its
// lease (the watchdog's or an explicit one), whether the owner holds no
// hold of its own yet, and the lock type's model.
struct AcquirePlan {
  bool fresh = true;
  bool watchdog = true;
  absl::Duration lease;
  AcquireOptions options;
  const LockModel* model = &ReentrantModel();

  // The replicas an acquire must wait for, as the backend takes them: null
  // for none.
  const backend::WaitReplicas* sync() const {
    return options.replica_sync.replicas > 0 ? &options.replica_sync : nullptr;
  }
};

// A waiter's first pause after it found its one node unreachable, and the
// longest (see Attempts::Decide).
inline constexpr absl::Duration kOutagePause = absl::Milliseconds(10);
inline constexpr absl::Duration kMaxOutagePause = absl::Seconds(1);

// The attempts of one acquire, in either mode: a blocking Acquire() makes
// them on the calling thread until it must wait (AcquireHere), the
// AcquireMachine on the event loop thread. Each step is defined once here:
// the script call, the deadline of its requests, the judgement of the
// answers (undoing what a failed attempt may have taken), and what an
// outcome leads to. Refers to its caller's name, owner and plan.
class Attempts {
 public:
  // What an outcome leads to.
  struct Next {
    enum What { kFinish, kRetry, kWait } what = kFinish;
    absl::Status status;   // kFinish: the outcome (OK: acquired)
    absl::Duration delay;  // kRetry: the pause before the next attempt
    // kFinish: a re-entry found this owner's hold gone (NOTHELD) on too
    // many nodes for a quorum: the hold is lost (MarkLostHold(), acquire.cc).
    bool hold_lost = false;
  };

  // `failures`: attempts that already failed for lack of answers.
  Attempts(LockEnv& env, LockName name, const OwnerField& owner,
           const AcquirePlan& plan, Deadline deadline, int failures = 0)
      : env_(env),
        name_(name),
        owner_(owner),
        plan_(plan),
        deadline_(deadline),
        queue_(!deadline.Expired()),
        failures_(failures) {}
  // Refers to its owner's members: never copied.
  Attempts(const Attempts&) = delete;
  Attempts& operator=(const Attempts&) = delete;

  // The attempt's script call.
  Step Request() const;
  // The deadline of an attempt's requests, and of their undo.
  Deadline Timeout() const;
  const backend::WaitReplicas* sync() const { return plan_.sync(); }
  backend::Enough FailFast() const;

  // What an attempt sent at `start` got, with what it may have taken undone
  // (`async`: that undo is sent without waiting for its answers).
  Attempt Judge(const std::vector<backend::Answer>& answers,
                SteadyClock::time_point start, bool async) const;

  // The attempt's backend call, of its Request()'s `views`.
  backend::ScriptCall Call(const backend::Call& views) const;

  // One attempt, blocking, on the calling thread. Safe to resend on a
  // dropped connection: a fresh acquire that ran twice sets the count to 1
  // twice; a re-entry counted twice is cleared at the outermost release. (A
  // fenced acquire that ran twice took two tokens: they still only grow.)
  Attempt SendHere() const;

  // What attempt `a` leads to (a failed one counts towards the retries).
  // A waiter on one node without retries (an attempt found the lock held)
  // that finds Redis unreachable (Unavailable: a restart or failover under
  // way; the pub/sub connection may be back before the pooled one) rides it
  // out instead of failing at once as a first attempt does: it re-checks
  // after kOutagePause, doubling to kMaxOutagePause, for as long as a
  // pub/sub wait rides out a lost connection (the env's confirm_timeout()
  // plus the backend's failover_wait()) and within its deadline; then
  // Unavailable. A waiter's failed attempt once the client is closed ends
  // the wait with Cancelled, as the wake-up Close() sends does.
  Next Decide(const Attempt& a);

  int failures() const { return failures_; }

 private:
  LockEnv& env_;
  const LockName name_;
  const OwnerField& owner_;
  const AcquirePlan& plan_;
  const Deadline deadline_;
  const bool queue_;  // the caller may wait (see LockModel::Acquire)
  int failures_;
  bool waiting_ = false;  // an attempt found the lock held
  int outage_ = 0;        // failed attempts in a row while waiting
  Deadline outage_ends_ = Deadline::Never();  // set by its first failure
};

}  // namespace algorithm_internal
}  // namespace lock
}  // namespace relock

#endif  // RELOCK_LIB_LOCK_ATTEMPTS_H_
