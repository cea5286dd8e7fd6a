// The steps of an acquire's attempts (lib/lock/attempts.h).

#include "lib/lock/attempts.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/backend/backend.h"
#include "lib/common/deadline.h"
#include "lib/lock/attempt.h"
#include "lib/lock/lease.h"
#include "lib/lock/lock_model.h"

namespace relock {
namespace lock {
namespace algorithm_internal {

using backend::Resend;

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
  Undo(env_, *plan_.model, name_, owner_, plan_.fresh, undo, Timeout(), async);
  return a;
}

backend::ScriptCall Attempts::Call(const backend::Call& views) const {
  backend::ScriptCall call = CallOf(views, Timeout(), Resend::kIfDropped);
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
    absl::StatusOr<absl::Duration> delay =
        RetryAfter(env_.policy(), env_.backend(), ++failures_, a, deadline_);
    if (!delay.ok()) {
      return Next{Next::kFinish, delay.status(), absl::ZeroDuration()};
    }
    return Next{Next::kRetry, absl::OkStatus(), *delay};
  }
  if (deadline_.Expired()) {
    return Next{Next::kFinish, HeldByOther(a, env_.backend().nodes()),
                absl::ZeroDuration()};
  }
  return Next{Next::kWait, absl::OkStatus(), absl::ZeroDuration()};
}

}  // namespace algorithm_internal
}  // namespace lock
}  // namespace relock
