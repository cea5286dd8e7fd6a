// Acquire() and AcquireAsync() (lib/lock/algorithm.h): what a call takes
// (its plan), a re-entry counted locally, the attempts (Attempts, in
// attempts.h: each step defined once, for both modes) and notified waits (a
// blocking call's attempts on the calling thread, then the AcquireMachine on
// the event loop thread, with the direct hand-off), the registration of the
// hold taken, and leaving a queue after a failed wait.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "lib/backend/backend.h"
#include "lib/backend/gather.h"
#include "lib/common/deadline.h"
#include "lib/common/random.h"
#include "lib/common/unshared.h"
#include "lib/lock/algorithm.h"
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

using algorithm_internal::AcquirePlan;
using algorithm_internal::Annotate;
using algorithm_internal::Attempt;
using algorithm_internal::Attempts;
using algorithm_internal::CallOf;
using algorithm_internal::CheckAsyncOwner;
using algorithm_internal::CheckModel;
using algorithm_internal::HeldByOther;
using algorithm_internal::Inspection;
using algorithm_internal::kMinAttemptTime;
using algorithm_internal::LoopCompletion;
using algorithm_internal::ParseInspection;
using algorithm_internal::SendIgnoringAnswers;
using algorithm_internal::Whom;

namespace {

using backend::Resend;

// What a successful acquire hands on: when the winning attempt was sent, and
// its fencing token (-1 unless fenced).
struct Grant {
  SteadyClock::time_point sent_at;
  int64_t token = -1;
};

// Counts an acquire that ended with `s` (see relock/metrics.h): `fresh`, a
// hold from zero (else a re-entry); `waited`, it found the lock held and
// waited, since `start`.
void CountAcquire(LockEnv& env, const absl::Status& s, bool fresh, bool waited,
                  SteadyClock::time_point start) {
  Metrics& m = env.metrics();
  if (waited) {
    m.waits.Add();
    m.wait_time.Observe(absl::FromChrono(env.clock().Now() - start));
  }
  if (s.ok()) {
    m.acquisitions.Add();
    if (!fresh) m.reentries.Add();
    if (waited) m.handoffs.Add();
  } else if (s.code() == absl::StatusCode::kDeadlineExceeded) {
    m.acquire_timeouts.Add();
  } else {
    m.acquire_failures.Add();
  }
}

void CountLocalReentry(LockEnv& env) {
  Metrics& m = env.metrics();
  m.acquisitions.Add();
  m.reentries.Add();
  m.local_reentries.Add();
}

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

// The plan of an acquire by `by` (see AcquirePlan). InvalidArgument for a
// lease out of range; the client's error once it is closed.
absl::StatusOr<AcquirePlan> PlanAcquire(LockEnv& env, const std::string& name,
                                        const OwnerId& by,
                                        absl::optional<absl::Duration> lease,
                                        const AcquireOptions& options) {
  if (lease.has_value() && (*lease < kMinLease || *lease > kMaxLease)) {
    return absl::InvalidArgumentError(
        absl::StrCat("acquire lock ", QuoteName(name), ": lease ",
                     absl::FormatDuration(*lease), " is outside [",
                     absl::FormatDuration(kMinLease), ", ",
                     absl::FormatDuration(kMaxLease), "]"));
  }
  if (absl::Status s = env.CheckOpen(); !s.ok()) {
    return Annotate(s, "acquire", name);
  }
  if (options.kind != LockKind::kReentrant && env.backend().nodes() > 1) {
    return Annotate(absl::UnimplementedError(
                        "this lock type has no form on several masters"),
                    "acquire", name, env.policy().noun);
  }
  // Only this owner changes its own hold (its calls on one lock do not
  // overlap), so this stays true for the call.
  if (absl::Status s = CheckModel(env, name, by, options.kind); !s.ok()) {
    return Annotate(s, "acquire", name, env.policy().noun);
  }
  const absl::optional<HoldFacts> held = env.holds().FindFacts(name, by.number);
  AcquirePlan plan;
  plan.fresh = !held.has_value() || held->ended();
  if (options.kind == LockKind::kWrite && plan.fresh) {
    // No upgrade: the write lock waits for every reader, this owner too, so
    // the wait could only end at its deadline (Redisson's would hang).
    const absl::optional<HoldFacts> read =
        env.holds().FindFacts(name, by.number & ~kWriteHoldBit);
    if (read.has_value() && !read->ended() && read->kind == LockKind::kRead) {
      return Annotate(
          absl::FailedPreconditionError(absl::StrCat(
              Whom(by),
              " holds the read lock; a read hold cannot be upgraded "
              "to the write lock (release the read lock first)")),
          "acquire", name, env.policy().noun);
    }
  }
  // A re-entry never shortens a hold: on a watchdog hold, a re-entry with an
  // explicit lease only counts (the watchdog keeps renewing the hold); on an
  // explicit hold, the script keeps whichever lease ends later.
  plan.watchdog = !lease.has_value() || (!plan.fresh && held->watchdog);
  plan.lease = plan.watchdog ? env.watchdog_lease() : *lease;
  plan.options = options;
  plan.model = &ModelOf(options.kind);
  return plan;
}

// Registers `owner`'s hold just taken (renewed from now on for a watchdog
// lease), unless the client closed meanwhile: Close() may have swept the
// registry before we registered, so the hold is released (and Cancelled
// returned) rather than leaked. `async`: send that release without waiting.
absl::Status RegisterHold(LockEnv& env, const std::string& name,
                          const OwnerId& by, const OwnerField& owner,
                          const AcquirePlan& plan,
                          SteadyClock::time_point sent_at, bool async) {
  env.holds().OnAcquired(
      name, by.number, owner.wire(), plan.watchdog, plan.lease, sent_at,
      plan.model->kind(),
      plan.fresh && plan.options.on_lost
          ? LossCallback(name, owner, plan.options.on_lost)
          : nullptr,
      watchdog::ReplicaAck{plan.options.replica_sync.replicas,
                           plan.options.replica_sync.timeout});
  if (plan.watchdog) env.ActivateWatchdog(sent_at);
  if (!env.closed()) return absl::OkStatus();
  env.holds().Forget(name, by.number);
  SendIgnoringAnswers(env,
                      plan.model->ReleaseAll(LockName(name), owner,
                                             env.backend().publish_command()),
                      Deadline::After(env.confirm_timeout(), &env.clock()),
                      Resend::kNever,
                      /*wait=*/!async);
  return absl::CancelledError("the client was closed");
}

// A re-entry of the owner's watchdog hold (a thread's or an explicit
// owner's), while the hold's lease is known current, is counted in the
// registry without a round trip: Redis keeps the count it has, and the
// outermost release frees the lock as always. Not for an explicit lease,
// which must reach Redis, nor for a fenced lock, whose every acquisition
// takes a token. Returns whether it was counted.
bool TryLocalReentry(LockEnv& env, const std::string& name, const OwnerId& by,
                     const AcquirePlan& plan,
                     const absl::optional<absl::Duration>& lease) {
  return !plan.fresh && !lease.has_value() && !plan.options.fenced &&
         env.holds().TryLocalReentry(name, by.number, env.clock().Now(),
                                     env.policy().Drift(env.watchdog_lease()));
}

// Acquire()'s attempts and notified waits, driven by callbacks. The
// asynchronous acquire runs all of it here; a blocking Acquire() hands its
// wait over once its first attempt (made on the calling thread) found the
// lock held. Then an unlock message is followed at once by the next
// attempt, sent by the event loop thread that read the message, and the
// blocked thread is woken once, with the lock already taken or with the
// outcome (the direct hand-off).
//
// Every step runs on the client's event loop thread (the first is posted
// there), so the machine needs no lock: the backend's answers, the pub/sub
// listener and the timer all call back on that thread. It is kept alive by
// its pending callbacks (the listener holds it weakly); should they be
// dropped unrun (the loop destroyed), its destructor reports Cancelled, so
// no caller waits forever. It does not register the hold: `done` does.
class AcquireMachine : public std::enable_shared_from_this<AcquireMachine> {
 public:
  // The outcome, unannotated; on success, when the winning acquire was sent
  // and its fencing token; whether the machine waited (found the lock held
  // before its deadline); the owner field it acquired for (valid during the
  // call).
  using Done = std::function<void(absl::Status, const Grant&, bool waited,
                                  const OwnerField& owner)>;

  // `keep` (may be null): held until the machine is gone (see keep_).
  // `failures`: attempts that already failed for lack of answers (made on a
  // blocking caller's thread).
  AcquireMachine(LockEnv& env, std::shared_ptr<void> keep, std::string name,
                 const OwnerId& by, const AcquirePlan& plan, Deadline deadline,
                 Done done, int failures = 0)
      : keep_(std::move(keep)),
        env_(env),
        name_(std::move(name)),
        owner_(env.id(), by.number),
        plan_(plan),
        deadline_(deadline),
        attempts_(env, LockName(name_), owner_, plan_, deadline, failures),
        done_(std::move(done)),
        timer_(env.backend().NewTimer()) {}

  ~AcquireMachine() {
    if (done_) {
      done_(absl::CancelledError("the client was closed while waiting"),
            Grant(), waited_, owner_);
    }
  }

  // From the first attempt.
  void Start() {
    timer_->At(After(absl::ZeroDuration()),
               [self = shared_from_this()] { self->TryNow(); });
  }

  // From attempt `held`, made elsewhere, that found the lock held.
  void WaitAfter(Attempt held) {
    timer_->At(After(absl::ZeroDuration()),
               [self = shared_from_this(), held = std::move(held)]() mutable {
                 self->OnAttempt(std::move(held));
               });
  }

 private:
  enum class Phase { kAttempting, kBackingOff, kConfirming, kWaiting, kDone };

  // One attempt on the loop: OnAttempt() gets its outcome.
  void TryNow() {
    if (phase_ == Phase::kDone) return;
    phase_ = Phase::kAttempting;
    const Step step = attempts_.Request();
    const backend::Call views = step.Views();
    const SteadyClock::time_point start = env_.clock().Now();
    env_.backend().RunAsync(attempts_.Call(views),
                            [self = shared_from_this(), start](
                                const std::vector<backend::Answer>& answers) {
                              if (self->phase_ == Phase::kDone) return;
                              self->OnAttempt(self->attempts_.Judge(
                                  answers, start, /*async=*/true));
                            });
  }

  void OnAttempt(Attempt a) {
    if (phase_ == Phase::kDone) return;
    const size_t n = env_.backend().nodes();
    // A wake-up this attempt consumed goes on if the attempt failed (only
    // that one: the re-checks of an outage ridden out consumed none).
    if (a.kind == Attempt::kFailed && woken_ && sub_ != nullptr) {
      sub_->PassOn();
    }
    woken_ = false;
    const Attempts::Next next = attempts_.Decide(a);
    switch (next.what) {
      case Attempts::Next::kFinish:
        return Finish(next.status, Grant{a.start, a.token});
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

  // A wait that no message wakes (a spin lock; a client without pub/sub):
  // the next attempt after the spin backoff's next delay, within the
  // deadline (the attempt at the deadline ends it); a backoff that gives up
  // ends it at once.
  void Spin() {
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

  void Subscribe() {
    std::weak_ptr<AcquireMachine> weak = weak_from_this();
    sub_ = env_.backend().Subscribe(
        plan_.model->WaitChannel(LockName(name_), owner_),
        plan_.model->wake_policy(),
        /*waiter=*/"", [weak] {
          if (std::shared_ptr<AcquireMachine> self = weak.lock()) self->Look();
        });
  }

  // The inspect script: a key that holds anything but a lock ends the wait.
  void CheckIsALock() {
    const Step step = plan_.model->Inspect(LockName(name_), owner_);
    const backend::Call views = step.Views();
    env_.backend().RunAsync(CallOf(views, deadline_, Resend::kIfDropped),
                            [self = shared_from_this()](
                                const std::vector<backend::Answer>& answers) {
                              if (!answers[0].reply.ok())
                                return;  // the next re-check tells
                              // Only a key of another kind ends the wait;
                              // anything else (an error reply of a server
                              // that is busy or loading) is passing, and
                              // the next re-check tells.
                              absl::StatusOr<Inspection> what =
                                  ParseInspection(*answers[0].reply);
                              if (absl::IsFailedPrecondition(what.status())) {
                                self->Finish(what.status());
                              }
                            });
  }

  // Only after the servers confirmed the subscription is a re-check free of
  // lost wake-ups. Confirmed once, it stays confirmed until the pub/sub
  // connection is replaced; then the re-check waits for the SUBSCRIBE on
  // the new one (messages sent in between are lost).
  void Confirm() {
    if (phase_ == Phase::kDone) return;
    phase_ = Phase::kConfirming;
    confirm_by_ = Earliest(deadline_, After(env_.confirm_timeout() +
                                            env_.backend().failover_wait()));
    if (Confirmed()) return;
    timer_->At(confirm_by_, [self = shared_from_this()] { self->Look(); });
  }

  // In kConfirming: re-checks (true) once confirmed, or ends the machine on
  // a refusal or at `confirm_by_`.
  bool Confirmed() {
    absl::Status confirmed = sub_->AwaitConfirmed(Now());
    confirmed_ = confirmed.ok();
    if (confirmed.ok()) {
      TryNow();
    } else if (confirmed.code() != absl::StatusCode::kDeadlineExceeded) {
      Finish(confirmed);  // Cancelled, PermissionDenied
    } else if (!confirm_by_.Expired()) {
      return false;  // not yet
    } else if (deadline_.Expired()) {
      Finish(HeldByOther(*plan_.model, last_, env_.backend().nodes()));
    } else {
      Finish(absl::UnavailableError(confirmed.message()));
    }
    return true;
  }

  // The listener and the timers: has what we wait for happened?
  void Look() {
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

  // Deadlines on the env's clock.
  Deadline After(absl::Duration d) const {
    return Deadline::After(d, &env_.clock());
  }
  Deadline Now() const { return After(absl::ZeroDuration()); }

  void Finish(const absl::Status& s, const Grant& grant = Grant()) {
    if (phase_ == Phase::kDone) return;
    phase_ = Phase::kDone;
    timer_->Cancel();
    sub_ = nullptr;
    Done done = std::move(done_);
    done_ = nullptr;
    done(s, grant, waited_, owner_);
  }

  // The client, for an asynchronous acquire: declared first, so destroyed
  // last, after timer_, whose destruction still reaches the client's loop
  // (`done`, which holds the client too, may drop its reference first).
  const std::shared_ptr<void> keep_;
  LockEnv& env_;
  const std::string name_;
  const OwnerField owner_;
  const AcquirePlan plan_;
  const Deadline deadline_;
  Attempts attempts_;  // refers to name_, owner_ and plan_
  Done done_;
  const std::unique_ptr<backend::Timer> timer_;
  std::unique_ptr<backend::Waiter> sub_;
  bool confirmed_ = false;  // the subscription, as of the last look
  bool woken_ = false;      // the next attempt follows a consumed wake-up
  Phase phase_ = Phase::kAttempting;
  Attempt last_;  // the latest attempt that found the lock held
  Deadline confirm_by_ = Deadline::Never();
  int splits_ = 0;  // split votes so far
  int spins_ = 0;   // re-checks by backoff so far (see Spin())
  bool waited_ = false;
};

// Waits for the lock that attempt `held` found held: the machine above
// waits (notified) and makes the next attempts on the loop thread; this
// thread blocks until it is done. On success, `*grant` is the winning
// acquire's. `failures`: attempts that failed for lack of answers so far.
absl::Status WaitForLock(LockEnv& env, const std::string& name,
                         const OwnerId& by, const AcquirePlan& plan,
                         Deadline deadline, int failures, Attempt held,
                         Grant* grant) {
  struct Result {
    absl::Status status;
    Grant grant;
  };
  backend::Gather<Result> gather(1);
  std::function<void(Result)> slot = gather.Slot(0);
  // The client outlives this call (its caller holds it): no keep-alive.
  std::make_shared<AcquireMachine>(
      env, /*keep=*/nullptr, name, by, plan, deadline,
      [slot](const absl::Status& s, const Grant& won, bool /*waited*/,
             const OwnerField& /*owner*/) {
        slot(Result{Unshared(s), won});  // it crosses to the waiting thread
      },
      failures)
      ->WaitAfter(std::move(held));
  // The machine always ends: with the lock, at its deadline, or on Close()
  // (or, its callbacks dropped, from its destructor).
  bool stopped = false;
  std::vector<absl::optional<Result>> got =
      gather.Wait(Deadline::Never(), nullptr, &stopped);
  *grant = got[0]->grant;
  return got[0]->status;
}

// A blocking acquire by `by`, whose owner field is `owner`: the attempts
// run on the calling thread (on an idle connection, with its own I/O), the
// pauses between them on the env's clock, by the rules of Attempts, the
// async machine's own; a lock found held is waited for by WaitForLock()
// (`*waited` is then set). On success, `*grant` is the winning acquire's.
absl::Status AcquireHere(LockEnv& env, const std::string& name,
                         const OwnerId& by, const OwnerField& owner,
                         const AcquirePlan& plan, Deadline deadline,
                         Grant* grant, bool* waited) {
  Attempts attempts(env, LockName(name), owner, plan, deadline);
  for (;;) {
    Attempt a = attempts.SendHere();
    const Attempts::Next next = attempts.Decide(a);
    switch (next.what) {
      case Attempts::Next::kFinish:
        *grant = Grant{a.start, a.token};
        return next.status;
      case Attempts::Next::kRetry:
        env.clock().SleepFor(next.delay);
        continue;
      case Attempts::Next::kWait:
        *waited = true;
        return WaitForLock(env, name, by, plan, deadline, attempts.failures(),
                           std::move(a), grant);
    }
  }
}

// A waiter that gave up leaves the lock's queue, if its type has one: sent
// at once, and (`wait`) awaited for at most kMinAttemptTime, so that the
// queue no longer holds it when the failed call returns.
void LeaveQueue(LockEnv& env, const std::string& name, const OwnerField& owner,
                const AcquirePlan& plan, bool wait) {
  const absl::optional<Step> step =
      plan.model->Leave(LockName(name), owner, plan.options, plan.fresh,
                        env.backend().publish_command());
  if (!step.has_value()) return;
  SendIgnoringAnswers(env, *step,
                      Deadline::After(kMinAttemptTime, &env.clock()),
                      Resend::kIfDropped, wait);
}

// The plan of a wait for `model`'s grant (AwaitGrant()): one fresh attempt
// after another, no lease, no hold. The client's error once it is closed.
// (Only relock::Client, whose backend is one node however many masters a
// cluster has, makes synchronizers: a Redlock client has none.)
absl::StatusOr<AcquirePlan> PlanGrant(LockEnv& env, const std::string& name,
                                      const LockModel& model,
                                      const AcquireOptions& options,
                                      const GrantOp& op) {
  if (absl::Status s = env.CheckOpen(); !s.ok()) {
    return Annotate(s, op.op, name, op.noun);
  }
  AcquirePlan plan;
  plan.watchdog = false;
  // Bounds no attempt on one node (see AttemptDeadline).
  plan.lease = env.watchdog_lease();
  plan.options = options;
  plan.model = &model;
  return plan;
}

// Nobody owns what a grant takes: the owner field of its attempts is no
// owner's (the scripts do not read it).
constexpr OwnerId kNoOwner{0, false};

}  // namespace

absl::Status Acquire(LockEnv& env, const std::string& name, const OwnerId& by,
                     absl::optional<absl::Duration> lease, Deadline deadline,
                     const AcquireOptions& options, int64_t* token) {
  const SteadyClock::time_point start = env.clock().Now();
  // (Counted as a failed acquire, as PlanAcquire's failures are.)
  if (absl::Status s = env.CheckBlockingCall(); !s.ok()) {
    s = Annotate(s, "acquire", name, env.policy().noun);
    CountAcquire(env, s, true, false, start);
    return s;
  }
  absl::StatusOr<AcquirePlan> plan = PlanAcquire(env, name, by, lease, options);
  if (!plan.ok()) {
    CountAcquire(env, plan.status(), true, false, start);
    return plan.status();
  }
  if (TryLocalReentry(env, name, by, *plan, lease)) {
    CountLocalReentry(env);
    return absl::OkStatus();
  }
  Grant grant;
  // A call that may not wait leaves no trace in a queue.
  const bool queue = !deadline.Expired();
  bool waited = false;
  // Made once for the call: its attempts, its hold, its queue.
  const OwnerField owner(env.id(), by.number);
  absl::Status s =
      AcquireHere(env, name, by, owner, *plan, deadline, &grant, &waited);
  if (s.ok()) {
    // Registered (and, for a watchdog lease, renewed from now on) before
    // Acquire() returns.
    if (plan->fresh && by.thread) env.OnFreshHold();
    s = RegisterHold(env, name, by, owner, *plan, grant.sent_at,
                     /*async=*/false);
  } else if (queue) {
    LeaveQueue(env, name, owner, *plan, /*wait=*/true);
  }
  CountAcquire(env, s, plan->fresh, waited, start);
  if (!s.ok()) return Annotate(s, "acquire", name, env.policy().noun);
  if (token != nullptr) *token = grant.token;
  return s;
}

void AcquireAsync(LockEnv& env, std::shared_ptr<void> keep,
                  const std::string& name, const OwnerId& by,
                  absl::optional<absl::Duration> lease, Deadline deadline,
                  const AcquireOptions& options, AcquireDone done) {
  if (absl::Status s = CheckAsyncOwner(env, name, by, "acquire"); !s.ok()) {
    return done(s, -1);
  }
  const SteadyClock::time_point start = env.clock().Now();
  absl::StatusOr<AcquirePlan> plan = PlanAcquire(env, name, by, lease, options);
  if (!plan.ok()) {
    CountAcquire(env, plan.status(), true, false, start);
    return done(plan.status(), -1);
  }
  if (TryLocalReentry(env, name, by, *plan, lease)) {
    CountLocalReentry(env);
    return LoopCompletion::Post(
        env, std::move(keep),
        [done = std::move(done)](absl::Status s) { done(std::move(s), -1); });
  }
  std::make_shared<AcquireMachine>(
      env, keep, name, by, *plan, deadline,
      [&env, keep, name, by, plan = *plan, queue = !deadline.Expired(), start,
       done = std::move(done)](const absl::Status& s, const Grant& grant,
                               bool waited, const OwnerField& owner) {
        if (!s.ok() && queue) {
          LeaveQueue(env, name, owner, plan, /*wait=*/false);
        }
        absl::Status result =
            s.ok() ? RegisterHold(env, name, by, owner, plan, grant.sent_at,
                                  /*async=*/true)
                   : s;
        CountAcquire(env, result, plan.fresh, waited, start);
        if (result.ok()) return done(result, grant.token);
        done(Annotate(result, "acquire", name, env.policy().noun), -1);
      })
      ->Start();
}

absl::Status AwaitGrant(LockEnv& env, const std::string& name,
                        const LockModel& model, const AcquireOptions& options,
                        Deadline deadline, const GrantOp& op,
                        SteadyClock::time_point* granted_at) {
  if (absl::Status s = env.CheckBlockingCall(); !s.ok()) {
    return Annotate(s, op.op, name, op.noun);
  }
  absl::StatusOr<AcquirePlan> plan = PlanGrant(env, name, model, options, op);
  if (!plan.ok()) return plan.status();
  Grant grant;
  bool waited = false;
  absl::Status s =
      AcquireHere(env, name, kNoOwner, OwnerField(env.id(), kNoOwner.number),
                  *plan, deadline, &grant, &waited);
  if (s.ok() && granted_at != nullptr) *granted_at = grant.sent_at;
  return Annotate(s, op.op, name, op.noun);
}

void AwaitGrantAsync(LockEnv& env, std::shared_ptr<void> keep,
                     const std::string& name, const LockModel& model,
                     const AcquireOptions& options, Deadline deadline,
                     const GrantOp& op,
                     std::function<void(absl::Status)> done) {
  AwaitGrantAsync(
      env, std::move(keep), name, model, options, deadline, op,
      [done = std::move(done)](absl::Status s, SteadyClock::time_point /*at*/) {
        done(std::move(s));
      });
}

void AwaitGrantAsync(
    LockEnv& env, std::shared_ptr<void> keep, const std::string& name,
    const LockModel& model, const AcquireOptions& options, Deadline deadline,
    const GrantOp& op,
    std::function<void(absl::Status, SteadyClock::time_point granted_at)>
        done) {
  absl::StatusOr<AcquirePlan> plan = PlanGrant(env, name, model, options, op);
  if (!plan.ok()) return done(plan.status(), SteadyClock::time_point());
  std::make_shared<AcquireMachine>(
      env, std::move(keep), name, kNoOwner, *plan, deadline,
      [name, verb = std::string(op.op), noun = std::string(op.noun),
       done = std::move(done)](const absl::Status& s, const Grant& grant,
                               bool /*waited*/, const OwnerField& /*owner*/) {
        done(Annotate(s, verb, name, noun), grant.sent_at);
      })
      ->Start();
}

}  // namespace lock
}  // namespace relock
