// Acquire() and AcquireAsync() (lib/lock/algorithm.h): what a call takes
// (its plan), a re-entry counted locally, the attempts (Attempts, in
// attempts.h: each step defined once, for both modes) and notified waits (a
// blocking call's attempts on the calling thread, then the AcquireMachine of
// acquire_machine.h on the event loop thread, with the direct hand-off), the
// registration of the hold taken, and leaving a queue after a failed wait.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "lib/backend/backend.h"
#include "lib/backend/gather.h"
#include "lib/common/deadline.h"
#include "lib/common/unshared.h"
#include "lib/lock/acquire_machine.h"
#include "lib/lock/algorithm.h"
#include "lib/lock/attempt.h"
#include "lib/lock/attempts.h"
#include "lib/lock/lease.h"
#include "lib/lock/lock_env.h"
#include "lib/lock/lock_model.h"
#include "lib/lock/owner.h"
#include "relock/limits.h"

namespace relock {
namespace lock {

using algorithm_internal::AcquireMachine;
using algorithm_internal::AcquirePlan;
using algorithm_internal::Annotate;
using algorithm_internal::Attempt;
using algorithm_internal::Attempts;
using algorithm_internal::CallOf;
using algorithm_internal::CheckAsyncOwner;
using algorithm_internal::CheckModel;
using algorithm_internal::Grant;
using algorithm_internal::HeldByOther;
using algorithm_internal::InFlight;
using algorithm_internal::Inspection;
using algorithm_internal::kMinAttemptTime;
using algorithm_internal::LoopCompletion;
using algorithm_internal::ParseInspection;
using algorithm_internal::SendGiveBack;
using algorithm_internal::SendIgnoringAnswers;
using algorithm_internal::Whom;

namespace {

using backend::Resend;

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

// Whether `name`'s companion keys and channels share its Redis Cluster
// slot. Redisson names them "<prefix>:{<name>}", or "<prefix>:<name>" when
// the name contains "{" (PrefixName(); the read-write lock's lease keys
// "<name>:<reader>:rwlock_timeout:<i>" likewise), so they share it unless
// the name has "{" without a usable hash tag after it ("a{b", "x{}y"), or
// "}" without any "{" ("a}b": braced, its tag would be "a"). Structural,
// with no allocation: every acquire asks.
bool CompanionsShareTheSlot(absl::string_view name) {
  const size_t open = name.find('{');
  if (open == absl::string_view::npos) {
    return name.find('}') == absl::string_view::npos;
  }
  const size_t close = name.find('}', open + 1);
  return close != absl::string_view::npos && close > open + 1;
}

// InvalidArgument when, on a Redis Cluster, `name`'s companions are in
// other hash slots than the name (see above). Every lock type's scripts use
// such companions, and a script's keys must share one slot: the acquire
// (or, worse, only the release) would fail with CROSSSLOT. Elsewhere every
// name works.
absl::Status CheckCompanionSlot(LockEnv& env, const std::string& name) {
  if (CompanionsShareTheSlot(name)) return absl::OkStatus();
  // Slots matter only where KeyGroup() tells keys apart (it is 0 for every
  // key elsewhere); "a" and "b" are in different slots.
  if (env.backend().KeyGroup("a") == env.backend().KeyGroup("b")) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "on a Redis Cluster the name's companion keys and channels (Redisson's "
      "names for them, such as \"",
      absl::CHexEscape(PrefixName(kUnlockChannelPrefix, name)),
      "\") are in other hash slots than the name, and a script's keys must "
      "share one: choose a name without \"{\" or \"}\", or one with a "
      "non-empty hash tag (\"orders:{42}\")"));
}

// The plan of an acquire by `by` (see AcquirePlan). InvalidArgument for a
// lease out of range or (on a cluster) a name whose companions are in
// another slot; the client's error once it is closed.
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
  if (absl::Status s = CheckCompanionSlot(env, name); !s.ok()) {
    return Annotate(s, "acquire", name, env.policy().noun);
  }
  const absl::optional<HoldFacts> held =
      env.holds().FindFactsExpiringDue(name, by.number);
  AcquirePlan plan;
  plan.fresh = !held.has_value() || held->ended();
  if (options.kind == LockKind::kWrite && plan.fresh) {
    // No upgrade: the write lock waits for every reader, this owner too, so
    // the wait could only end at its deadline (Redisson's would hang).
    const absl::optional<HoldFacts> read =
        env.holds().FindFactsExpiringDue(name, by.number & ~kWriteHoldBit);
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
  if (!env.holds().OnAcquired(
          name, by.number, owner.wire(), plan.watchdog, plan.lease, sent_at,
          plan.model->kind(),
          plan.fresh && plan.options.on_lost
              ? LossCallback(name, owner, plan.options.on_lost)
              : nullptr,
          watchdog::ReplicaAck{plan.options.replica_sync.replicas,
                               plan.options.replica_sync.timeout},
          /*reentry=*/!plan.fresh)) {
    // A re-entry that Redis counted while the client found the hold lost
    // (its loss check ran meanwhile, and reported it): the caller hears of
    // the loss as from a re-entry that found the hold gone (Aborted), rather
    // than holding a fresh count of 1 whose release would free the lock
    // under the outer levels. On one node the level it added is given back.
    // (On several, only the nodes that granted it counted it, and a count
    // down elsewhere could free an outer level's node: the outermost
    // release's release-all removes the extra count instead, or its lease.)
    if (env.backend().nodes() == 1) {
      SendGiveBack(env,
                   plan.model->Release(LockName(name), owner, Lease::Keep(),
                                       env.backend().publish_command(),
                                       /*last=*/false),
                   Deadline::After(env.confirm_timeout(), &env.clock()),
                   /*here=*/!async, [](const std::vector<backend::Answer>&) {});
    }
    return absl::AbortedError(
        "lease lost: the hold was found lost (and reported) while this "
        "re-entry was under way");
  }
  if (plan.watchdog) env.ActivateWatchdog(sent_at);
  if (!env.closed()) return absl::OkStatus();
  env.holds().Forget(name, by.number);
  SendGiveBack(env,
               plan.model->ReleaseAll(LockName(name), owner,
                                      env.backend().publish_command()),
               Deadline::After(env.confirm_timeout(), &env.clock()),
               /*here=*/!async, [](const std::vector<backend::Answer>&) {});
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

// Waits for the lock that attempt `held` found held: the AcquireMachine
// (acquire_machine.h) waits (notified) and makes the next attempts on the loop
// thread; this thread blocks until it is done. On success, `*grant` is the
// winning acquire's. `failures`: attempts that failed for lack of answers so
// far.
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
        *grant = Grant{a.start, a.token, next.hold_lost};
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

// After a failed acquire: a re-entry that found its hold lost on Redis
// (NOTHELD: its lease ran out, or the key was deleted or force-released)
// marks the hold lost, whose outer levels are gone too, and reports it as
// the watchdog reports a loss (kLockLost, the hold's loss callbacks): the
// caller hears it now (Aborted), and a later Release() says Aborted ("lease
// lost") instead of freeing a lock another owner may hold by then.
void MarkLostHold(LockEnv& env, const std::string& name, const OwnerId& by,
                  const AcquirePlan& plan, const Grant& outcome) {
  if (plan.fresh || !outcome.hold_lost) return;
  if (absl::optional<watchdog::LostHold> lost =
          env.holds().MarkLost(name, by.number)) {
    env.ReportLost(*lost,
                   absl::AbortedError(
                       "lease lost: a re-entry found the lock's owner field "
                       "gone from Redis (its lease ran out, or it was deleted "
                       "or force-released)"));
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
  // Counted from here (a local re-entry takes nothing from Redis), and the
  // client checked again after that (see InFlight).
  const InFlight in_flight(env);
  if (absl::Status s = env.CheckOpen(); !s.ok()) {
    s = Annotate(s, "acquire", name, env.policy().noun);
    CountAcquire(env, s, plan->fresh, false, start);
    return s;
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
  } else {
    MarkLostHold(env, name, by, *plan, grant);
    if (queue) LeaveQueue(env, name, owner, *plan, /*wait=*/true);
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
  // As Acquire(): counted from here, ended before `done` runs.
  env.holds().BeginInFlight();
  if (absl::Status s = env.CheckOpen(); !s.ok()) {
    env.holds().EndInFlight();
    CountAcquire(env, s, plan->fresh, false, start);
    return done(Annotate(s, "acquire", name, env.policy().noun), -1);
  }
  std::make_shared<AcquireMachine>(
      env, keep, name, by, *plan, deadline,
      [&env, keep, name, by, plan = *plan, queue = !deadline.Expired(), start,
       done = std::move(done)](const absl::Status& s, const Grant& grant,
                               bool waited, const OwnerField& owner) {
        if (!s.ok()) MarkLostHold(env, name, by, plan, grant);
        if (!s.ok() && queue) {
          LeaveQueue(env, name, owner, plan, /*wait=*/false);
        }
        absl::Status result =
            s.ok() ? RegisterHold(env, name, by, owner, plan, grant.sent_at,
                                  /*async=*/true)
                   : s;
        env.holds().EndInFlight();
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
