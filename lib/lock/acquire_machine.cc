// The AcquireMachine (lib/lock/acquire_machine.h): an acquire's attempts,
// back-offs, spins and notified waits on the event loop thread.

#include "lib/lock/acquire_machine.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "lib/backend/backend.h"
#include "lib/common/deadline.h"
#include "lib/common/random.h"
#include "lib/lock/attempt.h"
#include "lib/lock/attempts.h"
#include "lib/lock/lock_env.h"
#include "lib/lock/lock_model.h"
#include "lib/lock/owner.h"
#include "lib/pubsub/subscriber.h"
#include "relock/backoff.h"
#include "relock/limits.h"

namespace relock {
namespace lock {
namespace algorithm_internal {
namespace {

using backend::Resend;

// A spin wait's backoff when the client sets none (ClientOptions::
// spin_backoff): Redisson's RSpinLock default, 1 ms doubling to 128 ms, with
// a fifth of jitter so that spinning waiters do not re-check in step.
const std::shared_ptr<const BackoffStrategy>& DefaultSpinBackoff() {
  static const std::shared_ptr<const BackoffStrategy>* const kBackoff = [] {
    ExponentialBackoffOptions o;
    o.initial = absl::Milliseconds(1);
    o.factor = 2;
    o.maximum = absl::Milliseconds(128);
    o.jitter = 0.2;
    return new std::shared_ptr<const BackoffStrategy>(*ExponentialBackoff(o));
  }();
  return *kBackoff;
}

}  // namespace

AcquireMachine::AcquireMachine(LockEnv& env, std::shared_ptr<void> keep,
                               std::string name, const OwnerId& by,
                               const AcquirePlan& plan, Deadline deadline,
                               Done done, int failures)
    : keep_(std::move(keep)),
      env_(env),
      name_(std::move(name)),
      owner_(env.id(), by.number),
      plan_(plan),
      deadline_(deadline),
      attempts_(env, LockName(name_), owner_, plan_, deadline, failures),
      done_(std::move(done)),
      timer_(env.backend().NewTimer()) {}

AcquireMachine::~AcquireMachine() {
  if (done_) {
    done_(absl::CancelledError("the client was closed while waiting"), Grant(),
          waited_, owner_);
  }
}

void AcquireMachine::Start() {
  timer_->At(After(absl::ZeroDuration()),
             [self = shared_from_this()] { self->TryNow(); });
}

void AcquireMachine::WaitAfter(Attempt held) {
  timer_->At(After(absl::ZeroDuration()),
             [self = shared_from_this(), held = std::move(held)]() mutable {
               self->OnAttempt(std::move(held));
             });
}

void AcquireMachine::TryNow() {
  if (phase_ == Phase::kDone) return;
  phase_ = Phase::kAttempting;
  const Step step = attempts_.Request();
  const backend::Call views = step.Views();
  const SteadyClock::time_point start = env_.clock().Now();
  env_.backend().RunAsync(
      attempts_.Call(views), [self = shared_from_this(), start](
                                 const std::vector<backend::Answer>& answers) {
        if (self->phase_ == Phase::kDone) return;
        self->OnAttempt(self->attempts_.Judge(answers, start, /*async=*/true));
      });
}

void AcquireMachine::OnAttempt(Attempt a) {
  if (phase_ == Phase::kDone) return;
  const size_t n = env_.backend().nodes();
  // A wake-up this attempt consumed goes on if the attempt failed (only
  // that one: the re-checks of an outage ridden out consumed none).
  if (a.kind == Attempt::kFailed && woken_ && sub_ != nullptr) {
    sub_->PassOn();
  }
  woken_ = false;
  const Attempts::Next next = attempts_.Decide(a);
  if (next.what != Attempts::Next::kFinish && env_.closed()) {
    // Close() came while the attempt was under way (its answer arrived as
    // the loop was stopping): a timer armed now might never fire, nor be
    // dropped, and the waiter would hang. Nothing was taken (the attempt
    // would have finished the machine).
    return Finish(absl::CancelledError("the client was closed while waiting"));
  }
  switch (next.what) {
    case Attempts::Next::kFinish:
      return Finish(next.status, Grant{a.start, a.token, next.hold_lost});
    case Attempts::Next::kRetry:
      phase_ = Phase::kBackingOff;
      timer_->At(After(next.delay),
                 [self = shared_from_this()] { self->TryNow(); });
      return;
    case Attempts::Next::kWait:
      break;
  }
  waited_ = true;
  const bool split = a.took_some;
  last_ = std::move(a);
  if (plan_.options.spin || !env_.policy().notified) return Spin();
  if (sub_ == nullptr) Subscribe();
  if (split) {
    // A split vote (Redlock): we took some masters, others took the rest.
    // Retrying as soon as the undos' unlock messages arrive would collide
    // again, every contender at once (a livelock); as Redlock prescribes,
    // back off for a random time first, longer after each split.
    phase_ = Phase::kBackingOff;
    const int64_t max_ms = int64_t{1} << std::min(++splits_, 7);
    timer_->At(
        Earliest(deadline_, After(absl::Milliseconds(absl::Uniform<int64_t>(
                                ThreadBitGen(), 1, max_ms + 1)))),
        [self = shared_from_this()] { self->Confirm(); });
    return;
  }
  if (!confirmed_) return Confirm();  // then re-check
  // Sleep until an unlock message, the holder's lease end, or the deadline.
  absl::Duration sleep = absl::Milliseconds(last_.min_pttl_ms + 1);
  if (last_.min_pttl_ms < 0) {
    // No lease: a lock set by hand, or not a lock at all (bounded either
    // way: FailedPrecondition, or a re-check every unleased_recheck());
    // or (a queue) nothing else to wait for.
    sleep = plan_.model->unleased_recheck();
    if (n == 1) CheckIsALock();
  }
  sleep = std::min(sleep, plan_.model->max_sleep());
  phase_ = Phase::kWaiting;
  timer_->At(Earliest(deadline_, After(sleep)), [self = shared_from_this()] {
    if (self->phase_ == Phase::kWaiting) self->Confirm();
  });
  Look();  // a message may be waiting already
}

void AcquireMachine::Spin() {
  const BackoffStrategy& backoff = env_.policy().spin_backoff != nullptr
                                       ? *env_.policy().spin_backoff
                                       : *DefaultSpinBackoff();
  const absl::optional<absl::Duration> delay = backoff.NextDelay(spins_);
  if (spins_ < kUnlimitedRetries) ++spins_;  // saturates
  if (!delay.has_value()) {
    return Finish(HeldByOther(*plan_.model, last_, env_.backend().nodes()));
  }
  phase_ = Phase::kBackingOff;
  timer_->At(Earliest(deadline_, After(*delay)),
             [self = shared_from_this()] { self->TryNow(); });
}

void AcquireMachine::Subscribe() {
  std::weak_ptr<AcquireMachine> weak = weak_from_this();
  sub_ = env_.backend().Subscribe(
      plan_.model->WaitChannel(LockName(name_), owner_),
      plan_.model->wake_policy(),
      /*waiter=*/"", [weak] {
        if (std::shared_ptr<AcquireMachine> self = weak.lock()) self->Look();
      });
}

void AcquireMachine::CheckIsALock() {
  const Step step = plan_.model->Inspect(LockName(name_), owner_);
  const backend::Call views = step.Views();
  env_.backend().RunAsync(
      CallOf(views, deadline_, Resend::kIfDropped),
      [self = shared_from_this()](const std::vector<backend::Answer>& answers) {
        if (!answers[0].reply.ok()) return;  // the next re-check tells
        // Only a key of another kind ends the wait;
        // anything else (an error reply of a server
        // that is busy or loading) is passing, and
        // the next re-check tells.
        absl::StatusOr<Inspection> what = ParseInspection(*answers[0].reply);
        if (absl::IsFailedPrecondition(what.status())) {
          self->Finish(what.status());
        }
      });
}

void AcquireMachine::Confirm() {
  if (phase_ == Phase::kDone) return;
  phase_ = Phase::kConfirming;
  confirm_by_ = Earliest(deadline_, After(env_.confirm_timeout() +
                                          env_.backend().failover_wait()));
  if (Confirmed()) return;
  timer_->At(confirm_by_, [self = shared_from_this()] { self->Look(); });
}

bool AcquireMachine::Confirmed() {
  absl::Status confirmed = sub_->AwaitConfirmed(Now());
  confirmed_ = confirmed.ok();
  if (!confirmed.ok()) {
    if (confirmed.code() != absl::StatusCode::kDeadlineExceeded) {
      Finish(confirmed);  // Cancelled, PermissionDenied
      return true;
    }
    if (!confirm_by_.Expired()) return false;  // not yet
    if (!deadline_.Expired()) {
      Finish(absl::UnavailableError(confirmed.message()));
      return true;
    }
    // The wait ended before its subscription was confirmed (pub/sub
    // reconnecting, or slow): no message could have reached it, so the
    // last attempt may be long past. One more attempt decides, as it does
    // at the end of a confirmed wait: what was freed meanwhile is taken,
    // and "held throughout" is said only of what is still held.
  }
  TryNow();  // the re-check
  return true;
}

void AcquireMachine::Look() {
  if (phase_ == Phase::kConfirming) {
    Confirmed();
    return;
  }
  if (phase_ != Phase::kWaiting) return;
  switch (sub_->Wait(Now())) {
    case pubsub::WakeReason::kNotified:
      woken_ = true;
      return Confirm();
    case pubsub::WakeReason::kResubscribed:
      confirmed_ = false;
      return Confirm();
    case pubsub::WakeReason::kClosed:
      return Finish(
          absl::CancelledError("the client was closed while waiting"));
    case pubsub::WakeReason::kTimeout:
      return;
  }
}

Deadline AcquireMachine::After(absl::Duration d) const {
  return Deadline::After(d, &env_.clock());
}

void AcquireMachine::Finish(const absl::Status& s, const Grant& grant) {
  if (phase_ == Phase::kDone) return;
  phase_ = Phase::kDone;
  timer_->Cancel();
  sub_ = nullptr;
  Done done = std::move(done_);
  done_ = nullptr;
  done(s, grant, waited_, owner_);
}

}  // namespace algorithm_internal
}  // namespace lock
}  // namespace relock
