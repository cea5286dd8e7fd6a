// The permit-expirable semaphore's model and calls
// (lib/lock/permit_semaphore.h).

#include "lib/lock/permit_semaphore.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/common/random.h"
#include "lib/lock/algorithm.h"
#include "lib/lock/attempt.h"
#include "lib/lock/counter.h"
#include "lib/lock/lease.h"
#include "lib/lock/lock_scripts.h"
#include "lib/lock/owner.h"
#include "lib/lock/semaphore.h"
#include "relock/limits.h"

namespace relock {
namespace lock {

using algorithm_internal::Annotate;
using counter_internal::CheckArguments;
using counter_internal::CounterModel;
using counter_internal::CounterType;
using counter_internal::CountRange;
using counter_internal::IntegerReply;
using counter_internal::RunCounterStep;
using counter_internal::RunCounterStepHere;

namespace {

constexpr absl::string_view kPermitNoun = "permit-expirable semaphore";

// The score of a permit without a lease (lua/permit_lib.lua's NO_LEASE,
// Redisson's nonExpirableTimeout).
constexpr int64_t kNoLeaseScore = 922337203685477;

// The three keys of the permit scripts.
StepTexts PermitKeys(absl::string_view name) {
  return {std::string(name), PermitTimeoutKey(name), SemaphoreChannel(name)};
}

// lua/permit_release.lua's step for permit `id`.
Step PermitReleaseStep(absl::string_view name, absl::string_view id,
                       absl::string_view publish, absl::string_view refused) {
  return Step{internal::kPermitReleaseScript,
              PermitKeys(name),
              {id, std::string(publish), std::string(refused)}};
}

// Gives back the permit of an acquire its replicas did not acknowledge.
Step GivePermitBack(LockName name, const AcquireOptions& options,
                    absl::string_view publish) {
  return PermitReleaseStep(name.key(), options.permit_id, publish, "ignore");
}

const CounterType kPermitType{
    kPermitNoun,
    "NOTASEMAPHORE",
    &SemaphoreChannel,
    internal::kPermitAcquireScript,
    /*wait_args=*/nullptr,  // PermitModel::Acquire()
    kMaxPermits,
    "no permit was available throughout the wait",
    "choose a name without \"}\", or one with a non-empty hash tag "
    "(\"jobs:{42}\")",
    &GivePermitBack,
    /*wait_is_read_only=*/false,
    &PermitTimeoutKey};

// A counter model whose grants are held: a permit, by its id (the owner
// field of its hold), renewed by permit_renew and released by
// permit_release.
class PermitModelImpl final : public CounterModel {
 public:
  PermitModelImpl() : CounterModel(kPermitType) {}

  LockKind kind() const override { return kPermitKind; }
  Step Acquire(LockName name, const OwnerField& /*owner*/, Lease /*lease*/,
               bool /*fresh*/, bool /*queue*/, const AcquireOptions& options,
               absl::string_view publish) const override {
    return Step{internal::kPermitAcquireScript,
                PermitKeys(name.key()),
                {options.permit_id, Lease::Of(options.permit_lease).wire(),
                 std::string(publish)}};
  }
  // A closing client's release (HoldRegistry's holds): the permit goes
  // back; a refused publish is no error there.
  Step Release(LockName name, const OwnerField& owner, Lease /*lease*/,
               absl::string_view publish, bool /*last*/) const override {
    return ReleaseAll(name, owner, publish);
  }
  Step ReleaseAll(LockName name, const OwnerField& owner,
                  absl::string_view publish) const override {
    return PermitReleaseStep(name.key(), owner.wire(), publish, "ignore");
  }
  internal::ScriptId renew_script() const override {
    return internal::kPermitRenewScript;
  }
  std::string RenewKey(absl::string_view name) const override {
    return PermitTimeoutKey(name);
  }
};

const PermitModelImpl& PermitModelInstance() {
  static const PermitModelImpl* const kModel = new PermitModelImpl();
  return *kModel;
}

// A permit's id: 8 random bytes, then the 8 bytes of the number its hold
// is registered under (never a thread's), 32 hex digits; Redisson's ids are
// 16 random bytes in hex.
std::string NewPermitId() {
  return absl::StrFormat("%016x%016x", OsRandom64(), NewOwnerNumber());
}

// InvalidArgument unless `id` has the form of a permit id: lower-case hex
// digits, an even number of them, 2 to 64 (Redisson's and relock's have 32,
// both in lower case). Upper case is refused rather than taken for the same
// id: Redis would decode it to the same bytes, but this client's registry
// knows its permits by their text (OurPermit()).
absl::Status CheckPermitId(absl::string_view op, const std::string& name,
                           const std::string& id) {
  bool ok = !id.empty() && id.size() % 2 == 0 && id.size() <= 64;
  for (char c : id) {
    ok = ok && (absl::ascii_isdigit(c) || (c >= 'a' && c <= 'f'));
  }
  if (ok) return absl::OkStatus();
  return Annotate(
      absl::InvalidArgumentError(absl::StrCat(
          "a permit id is 2 to 64 lower-case hex digits, an even number of "
          "them; got \"",
          absl::CHexEscape(id.substr(0, 80)), "\"")),
      op, name, kPermitNoun);
}

// The registry number permit `id` of this client is held under, if it has
// the form of one of ours (any other id is nobody's here).
uint64_t PermitNumber(const std::string& id) {
  uint64_t n = 0;
  if (id.size() != 32 || !absl::SimpleHexAtoi(id.substr(16), &n)) return 0;
  return n;
}

// The lease's checks: InfiniteDuration (the watchdog's) or in
// [kMinLease, kMaxLease].
absl::Status CheckPermitLease(absl::string_view op, const std::string& name,
                              absl::Duration lease, bool infinite_ok) {
  if ((infinite_ok && lease == absl::InfiniteDuration()) ||
      (lease >= kMinLease && lease <= kMaxLease)) {
    return absl::OkStatus();
  }
  return Annotate(
      absl::InvalidArgumentError(absl::StrCat(
          "lease ", absl::FormatDuration(lease), " is outside [",
          absl::FormatDuration(kMinLease), ", ",
          absl::FormatDuration(kMaxLease), "]",
          infinite_ok ? " (or InfiniteDuration: the watchdog's)" : "")),
      op, name, kPermitNoun);
}

// The acquire's checks and options: a new id, the lease, the client's
// replica acknowledgement.
absl::Status CheckPermitAcquire(LockEnv& env, const std::string& name,
                                absl::Duration lease, AcquireOptions* options,
                                bool* watchdog) {
  if (absl::Status s = CheckArguments(env, kPermitType, "acquire", name,
                                      "permits", 1, CountRange{});
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckPermitLease("acquire", name, lease, true);
      !s.ok()) {
    return s;
  }
  *watchdog = lease == absl::InfiniteDuration();
  options->permit_id = NewPermitId();
  options->permit_lease = *watchdog ? env.watchdog_lease() : lease;
  options->replica_sync = env.policy().replica_sync;
  return absl::OkStatus();
}

// Registers a permit taken by an acquire sent at `sent_at` (renewed from now
// on when `watchdog`), unless the client closed meanwhile: Close() may have
// swept the registry before, so the permit is given back (and Cancelled
// returned) rather than leaked. `async`: send that release without waiting.
absl::Status RegisterPermit(LockEnv& env, const std::string& name,
                            const AcquireOptions& options, bool watchdog,
                            SteadyClock::time_point sent_at, bool async) {
  const uint64_t number = PermitNumber(options.permit_id);
  // Its renewals wait for the replicas the acquire waited for.
  env.holds().OnAcquired(name, number, options.permit_id, watchdog,
                         options.permit_lease, sent_at, kPermitKind,
                         /*on_lost=*/nullptr,
                         watchdog::ReplicaAck{options.replica_sync.replicas,
                                              options.replica_sync.timeout});
  if (watchdog) env.ActivateWatchdog(sent_at);
  if (!env.closed()) return absl::OkStatus();
  env.holds().Forget(name, number);
  algorithm_internal::SendGiveBack(
      env,
      PermitReleaseStep(name, options.permit_id,
                        env.backend().publish_command(), "ignore"),
      Deadline::After(env.confirm_timeout(), &env.clock()), /*here=*/!async,
      [](const std::vector<backend::Answer>&) {});
  return Annotate(absl::CancelledError("the client was closed"), "acquire",
                  name, kPermitNoun);
}

// Whether this client holds permit `id` in its registry (then its renewal
// stops before a release and its hold goes after).
bool OurPermit(LockEnv& env, const std::string& name, const std::string& id) {
  const absl::optional<Hold> hold = env.holds().Find(name, PermitNumber(id));
  return hold.has_value() && hold->owner == id;
}

// What permit_release's answer `r` means.
absl::Status PermitReleaseResult(const absl::StatusOr<redis::Reply>& r,
                                 const std::string& name,
                                 const std::string& id) {
  if (!r.ok()) return r.status();
  absl::StatusOr<int64_t> n = IntegerReply(*r, "release");
  if (!n.ok()) return Annotate(n.status(), "release", name, kPermitNoun);
  if (*n == 0) {
    return Annotate(absl::NotFoundError(absl::StrCat(
                        "no permit with id ", id,
                        " is out (released, expired and reclaimed, or "
                        "never given out); nothing changed")),
                    "release", name, kPermitNoun);
  }
  if (*n == 2) {
    return Annotate(
        absl::AbortedError(absl::StrCat(
            "the lease of permit ", id,
            " had run out before the release (it is given back now, but "
            "another holder may have had its place meanwhile)")),
        "release", name, kPermitNoun);
  }
  return absl::OkStatus();
}

// Before a release of `id`: stops its renewal if it is ours.
bool BeginPermitRelease(LockEnv& env, const std::string& name,
                        const std::string& id) {
  if (!OurPermit(env, name, id)) return false;
  (void)env.holds().BeginRelease(name, PermitNumber(id));
  return true;
}

// After it, whatever its outcome: drops the hold. An answered release gave
// the permit back or found it gone (a refused publish too). One that failed
// or went unanswered abandons it, as a lock's outermost release does: no
// longer renewed, the permit returns at its lease end at the latest, and
// retrying Release() gives it back at once if the first one did not run.
// Kept, the hold would be renewed again and, had the release run after all,
// reported lost to the holder that released it. Returns the release's
// result `s`, or why the permit was gone: Close() took the hold meanwhile and
// its round gave the permit back first.
absl::Status EndPermitRelease(LockEnv& env, const std::string& name,
                              const std::string& id, absl::Status s) {
  const uint64_t number = PermitNumber(id);
  if (!s.ok() && !absl::IsNotFound(s) && !absl::IsAborted(s) && env.closed()) {
    // Unanswered while the client closes: left to Close()'s round, which
    // gives it back (or reports why not).
    env.holds().OnReleaseFailed(name, number);
    return s;
  }
  if (env.holds().Forget(name, number).has_value() || !absl::IsNotFound(s) ||
      !env.holds().TakenOnClose(name, number)) {
    return s;
  }
  return Annotate(
      absl::FailedPreconditionError(absl::StrCat(
          "the client was closed while this release was under way: Close() "
          "gave permit ",
          id,
          " back (its released-on-close event says whether the lease had "
          "run out)")),
      "release", name, kPermitNoun);
}

Step UserPermitReleaseStep(LockEnv& env, const std::string& name,
                           const std::string& id) {
  return PermitReleaseStep(name, id, counter_internal::PublishArg(env),
                           counter_internal::RefusedArg(env));
}

// `open`: whether the call may be made (CheckBlockingCall() or CheckOpen()),
// checked before the release begins: a closing client's holds are left to
// Close().
absl::Status CheckPermitRelease(LockEnv& env, const std::string& name,
                                const std::string& id,
                                const absl::Status& open) {
  if (absl::Status s = CheckArguments(env, kPermitType, "release", name,
                                      "permits", 1, CountRange{});
      !s.ok()) {
    return s;
  }
  if (!open.ok()) return Annotate(open, "release", name, kPermitNoun);
  return CheckPermitId("release", name, id);
}

}  // namespace

const LockModel& PermitModel() { return PermitModelInstance(); }

std::string PermitTimeoutKey(absl::string_view name) {
  if (absl::StrContains(name, "{")) return absl::StrCat(name, ":timeout");
  return absl::StrCat("{", name, "}:timeout");
}

absl::StatusOr<std::string> AcquirePermit(LockEnv& env, const std::string& name,
                                          absl::Duration lease,
                                          Deadline deadline) {
  const algorithm_internal::InFlight in_flight(env);
  AcquireOptions options;
  bool watchdog = false;
  if (absl::Status s =
          CheckPermitAcquire(env, name, lease, &options, &watchdog);
      !s.ok()) {
    return s;
  }
  SteadyClock::time_point sent_at;
  if (absl::Status s =
          AwaitGrant(env, name, PermitModelInstance(), options, deadline,
                     GrantOp{"acquire", kPermitNoun}, &sent_at);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          RegisterPermit(env, name, options, watchdog, sent_at, false);
      !s.ok()) {
    return s;
  }
  return options.permit_id;
}

void AcquirePermitAsync(LockEnv& env, const std::shared_ptr<void>& keep,
                        const std::string& name, absl::Duration lease,
                        Deadline deadline,
                        std::function<void(absl::StatusOr<std::string>)> done) {
  env.holds().BeginInFlight();  // (see InFlight; ended before `done` runs)
  AcquireOptions options;
  bool watchdog = false;
  if (absl::Status s =
          CheckPermitAcquire(env, name, lease, &options, &watchdog);
      !s.ok()) {
    env.holds().EndInFlight();
    return done(s);
  }
  AwaitGrantAsync(env, keep, name, PermitModelInstance(), options, deadline,
                  GrantOp{"acquire", kPermitNoun},
                  [&env, keep, name, options, watchdog, done = std::move(done)](
                      absl::Status s, SteadyClock::time_point sent_at) {
                    if (s.ok()) {
                      s = RegisterPermit(env, name, options, watchdog, sent_at,
                                         true);
                    }
                    env.holds().EndInFlight();
                    if (!s.ok()) return done(s);
                    done(options.permit_id);
                  });
}

absl::Status ReleasePermit(LockEnv& env, const std::string& name,
                           const std::string& id) {
  if (absl::Status s =
          CheckPermitRelease(env, name, id, env.CheckBlockingCall());
      !s.ok()) {
    return s;
  }
  const bool ours = BeginPermitRelease(env, name, id);
  absl::Status s = PermitReleaseResult(
      RunCounterStepHere(env, kPermitType, "release", name,
                         UserPermitReleaseStep(env, name, id),
                         backend::Resend::kNever),
      name, id);
  return ours ? EndPermitRelease(env, name, id, std::move(s)) : s;
}

void ReleasePermitAsync(LockEnv& env, std::shared_ptr<void> keep,
                        const std::string& name, const std::string& id,
                        std::function<void(absl::Status)> done) {
  if (absl::Status s = CheckPermitRelease(env, name, id, env.CheckOpen());
      !s.ok()) {
    return done(s);
  }
  const bool ours = BeginPermitRelease(env, name, id);
  RunCounterStep(
      env, kPermitType, "release", name, UserPermitReleaseStep(env, name, id),
      backend::Resend::kNever,
      /*here=*/false,
      [&env, keep = std::move(keep), name, id, ours,
       done = std::move(done)](absl::StatusOr<redis::Reply> r) {
        absl::Status s = PermitReleaseResult(r, name, id);
        done(ours ? EndPermitRelease(env, name, id, std::move(s)) : s);
      });
}

absl::Status UpdatePermitLease(LockEnv& env, const std::string& name,
                               const std::string& id, absl::Duration lease) {
  if (absl::Status s = CheckArguments(env, kPermitType, "update lease of", name,
                                      "permits", 1, CountRange{});
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckPermitId("update lease of", name, id); !s.ok())
    return s;
  if (absl::Status s = CheckPermitLease("update lease of", name, lease, false);
      !s.ok()) {
    return s;
  }
  const SteadyClock::time_point sent_at = env.clock().Now();
  const Step step{
      internal::kPermitUpdateScript,
      PermitKeys(name),
      {id, Lease::Of(lease).wire(), counter_internal::PublishArg(env)}};
  absl::StatusOr<redis::Reply> r =
      RunCounterStepHere(env, kPermitType, "update lease of", name, step,
                         backend::Resend::kIfDropped);
  if (!r.ok()) return r.status();
  absl::StatusOr<int64_t> n = IntegerReply(*r, "update lease of");
  if (!n.ok())
    return Annotate(n.status(), "update lease of", name, kPermitNoun);
  if (*n == 0) {
    if (OurPermit(env, name, id)) env.holds().Forget(name, PermitNumber(id));
    return Annotate(absl::NotFoundError(absl::StrCat(
                        "no permit with id ", id,
                        " is out (released, expired, or never given out)")),
                    "update lease of", name, kPermitNoun);
  }
  // An explicit lease from now on: the watchdog no longer renews it.
  if (OurPermit(env, name, id)) {
    env.holds().OnExtended(name, PermitNumber(id), lease, sent_at);
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> TrySetExpirablePermits(LockEnv& env,
                                            const std::string& name,
                                            int64_t permits) {
  if (absl::Status s = CheckArguments(env, kPermitType, "set permits of", name,
                                      "permits", permits, CountRange{});
      !s.ok()) {
    return s;
  }
  return counter_internal::TrySet(env, kPermitType, name, permits,
                                  absl::StrCat(permits));
}

absl::StatusOr<int64_t> AvailableExpirablePermits(LockEnv& env,
                                                  const std::string& name) {
  if (absl::Status s = CheckArguments(env, kPermitType, "query", name,
                                      "permits", 0, CountRange{});
      !s.ok()) {
    return s;
  }
  const Step step{internal::kPermitAvailableScript,
                  PermitKeys(name),
                  {counter_internal::PublishArg(env)}};
  absl::StatusOr<redis::Reply> r = RunCounterStepHere(
      env, kPermitType, "query", name, step, backend::Resend::kIfDropped);
  if (!r.ok()) return r.status();
  absl::StatusOr<int64_t> n = IntegerReply(*r, "query");
  if (!n.ok()) return Annotate(n.status(), "query", name, kPermitNoun);
  return n;
}

absl::StatusOr<SemaphoreInfo> ReadSemaphore(LockEnv& env,
                                            const std::string& name,
                                            int64_t max_listed) {
  constexpr absl::string_view kOp = "inspect";
  if (absl::Status s = CheckArguments(env, kPermitType, kOp, name, "permits", 0,
                                      CountRange{});
      !s.ok()) {
    return s;
  }
  const Step step{internal::kSemaphoreInfoScript,
                  {name, PermitTimeoutKey(name)},
                  {absl::StrCat(max_listed)}};
  absl::StatusOr<redis::Reply> r = RunCounterStepHere(
      env, kPermitType, kOp, name, step, backend::Resend::kIfDropped);
  if (!r.ok()) return r.status();
  const redis::ReplyView v = r->view();
  SemaphoreInfo info;
  if (!v.is_array() || v.size() != 5 || !v[0].is_integer() ||
      !v[1].ToInt64(&info.available) || !v[2].is_integer() ||
      !v[3].is_integer() || !v[4].is_array() || v[4].size() % 2 != 0) {
    return Annotate(algorithm_internal::Unexpected(*r, kOp), kOp, name,
                    kPermitNoun);
  }
  info.name = name;
  info.permits_out = v[2].integer();
  if (info.permits_out > 0) {
    info.shape = SemaphoreShape::kPermitExpirable;
  } else if (v[0].integer() == 1) {
    info.shape = SemaphoreShape::kSemaphore;
  }
  const int64_t now_ms = v[3].integer();
  const redis::ReplyView listed = v[4];
  for (size_t i = 0; i + 1 < listed.size(); i += 2) {
    PermitInfo permit;
    permit.id = absl::BytesToHexString(listed[i].str());
    int64_t score = 0;
    if (!absl::SimpleAtoi(listed[i + 1].str(), &score)) {
      return Annotate(algorithm_internal::Unexpected(*r, kOp), kOp, name,
                      kPermitNoun);
    }
    if (score != kNoLeaseScore) {
      permit.lease_end = absl::FromUnixMillis(score);
      permit.remaining_lease = absl::Milliseconds(score - now_ms);
    }
    info.permits.push_back(std::move(permit));
  }
  return info;
}

}  // namespace lock
}  // namespace relock
