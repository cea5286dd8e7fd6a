// The steps of an acquire's attempts (lib/lock/attempts.h).

#include "lib/lock/attempts.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "lib/backend/backend.h"
#include "lib/common/deadline.h"
#include "lib/lock/attempt.h"
#include "lib/lock/lease.h"
#include "lib/lock/lock_model.h"
#include "relock/backoff.h"

namespace relock {
namespace lock {
namespace algorithm_internal {

using backend::Resend;

namespace {

// A waiter's pause before its next re-check of a node that is unreachable
// (`error`, the `outage`th failure in a row): 10 ms, doubling to at most 1 s,
// jittered by a fifth; or Unavailable if `until` would pass first.
absl::StatusOr<absl::Duration> RideOut(const absl::Status& error, int outage,
                                       Deadline until) {
  const absl::Duration delay = ApplyJitter(
      std::min(kOutagePause * (int64_t{1} << std::min(outage - 1, 7)),
               kMaxOutagePause),
      0.2);
  if (until.Remaining() <= delay) {
    return absl::UnavailableError(absl::StrCat(error.message(),
                                               " (still, after ", outage,
                                               " re-check(s) while waiting)"));
  }
  return delay;
}

}  // namespace

Step Attempts::Request() const {
  return plan_.model->Acquire(name_, owner_, Lease::Of(plan_.lease),
                              plan_.fresh, queue_, plan_.options,
                              env_.backend().publish_command());
}

Deadline Attempts::Timeout() const {
  return AttemptDeadline(env_, plan_.lease, deadline_, ReplicaTime(sync()));
}

backend::Enough Attempts::FailFast() const {
  backend::Backend& backend = env_.backend();
  return algorithm_internal::FailFast(env_.policy(), backend.nodes(),
                                      backend.quorum(), sync());
}

Attempt Attempts::Judge(const std::vector<backend::Answer>& answers,
                        SteadyClock::time_point start, bool async) const {
  std::vector<bool> undo;
  Attempt a =
      Evaluate(env_, answers, start, plan_.lease, plan_.fresh, sync(), &undo);
  // An acquire that must not run twice (a semaphore's takes permits) is
  // undone only where it is known to have taken something: giving back
  // what an unanswered one may not have taken would make permits.
  if (!plan_.model->acquire_is_idempotent() && !a.unacknowledged) {
    undo.assign(undo.size(), false);
    // Nor may such an attempt that got no answer end the call with an
    // error that tells the caller nothing was taken: DeadlineExceeded ("too
    // few permits throughout the wait") when its deadline cut it off,
    // FailedPrecondition or Cancelled when Close() did. Its script may have
    // reached Redis and run (or run later, on a busy or paused server), so
    // it is Unavailable, whose outcome is unknown, as for an answer lost on
    // a dropped connection. (Other codes, such as a reconnect's refused
    // AUTH, say the request was never sent: they stay.)
    const bool cut_off =
        absl::IsDeadlineExceeded(a.error) ||
        (env_.closed() &&
         (absl::IsCancelled(a.error) || absl::IsFailedPrecondition(a.error)));
    if (a.kind == Attempt::kFailed && a.outcome_unknown && cut_off) {
      a.error = absl::UnavailableError(
          absl::StrCat(a.error.message(),
                       "; the attempt may still have taken what it asked for"));
    }
  }
  Undo(env_, *plan_.model, name_, owner_, plan_.fresh, plan_.options, undo,
       Timeout(), async);
  return a;
}

backend::ScriptCall Attempts::Call(const backend::Call& views) const {
  backend::ScriptCall call =
      CallOf(views, Timeout(),
             plan_.model->acquire_is_idempotent() ? Resend::kIfDropped
                                                  : Resend::kNever);
  call.enough = FailFast();
  call.wait = sync();
  return call;
}

Attempt Attempts::SendHere() const {
  const Step step = Request();
  const backend::Call views = step.Views();
  const SteadyClock::time_point start = env_.clock().Now();
  return Judge(env_.backend().Run(Call(views)), start, /*async=*/false);
}

Attempts::Next Attempts::Decide(const Attempt& a) {
  if (a.kind == Attempt::kAcquired) return Next{};
  if (a.kind == Attempt::kFailed) {
    if (waiting_ && env_.closed() && a.outcome_unknown &&
        !plan_.model->acquire_is_idempotent()) {
      // A re-check cut off by Close() may have taken permits: Judge() made
      // its error Unavailable, which says so (not Cancelled, which would
      // say nothing was taken).
      return Next{Next::kFinish, a.error, absl::ZeroDuration()};
    }
    const size_t n = env_.backend().nodes();
    if (a.not_held > n - env_.backend().quorum()) {
      // A re-entry whose hold is gone on too many nodes to make a quorum
      // again: lost, whatever a retry would say (the client forgets the
      // hold lost: MarkLostHold() in acquire.cc).
      Next lost{Next::kFinish,
                n == 1 ? a.error
                       : absl::AbortedError(absl::StrCat(
                             "NOTHELD on ", a.not_held, " of ", n,
                             " masters: this owner no longer holds the lock "
                             "there (lost); nothing was written: ",
                             a.details)),
                absl::ZeroDuration()};
      lost.hold_lost = true;
      return lost;
    }
    if (waiting_ && env_.closed()) {
      // The re-check of a waiter failed because Close() came meanwhile (the
      // pub/sub wake-up it sends came while the re-check was under way).
      return Next{Next::kFinish,
                  absl::CancelledError("the client was closed while waiting"),
                  absl::ZeroDuration()};
    }
    absl::StatusOr<absl::Duration> delay =
        RetryAfter(env_.policy(), env_.backend(), ++failures_, a, deadline_);
    // (Not past an acquire its replicas did not acknowledge: ReplicaSync
    // promises no retry, and a master cut off from its replicas is no
    // restart to ride out.)
    if (waiting_ && env_.backend().nodes() == 1 && env_.policy().tries <= 1 &&
        absl::IsUnavailable(a.error) && !a.unacknowledged &&
        plan_.model->acquire_is_idempotent()) {
      if (++outage_ == 1) {
        outage_ends_ = Deadline::After(
            env_.confirm_timeout() + env_.backend().failover_wait(),
            &env_.clock());
      }
      delay = RideOut(a.error, outage_, Earliest(deadline_, outage_ends_));
    }
    if (!delay.ok()) {
      return Next{Next::kFinish, delay.status(), absl::ZeroDuration()};
    }
    return Next{Next::kRetry, absl::OkStatus(), *delay};
  }
  outage_ = 0;
  waiting_ = true;
  if (deadline_.Expired()) {
    return Next{Next::kFinish,
                HeldByOther(*plan_.model, a, env_.backend().nodes()),
                absl::ZeroDuration()};
  }
  return Next{Next::kWait, absl::OkStatus(), absl::ZeroDuration()};
}

}  // namespace algorithm_internal
}  // namespace lock
}  // namespace relock
