#include "lib/lock/reentrant_lock.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/lock/lock_scripts.h"
#include "lib/lock/owner.h"
#include "lib/redis/errors.h"
#include "relock/lock.h"

namespace relock {
namespace lock {
namespace {

using backend::Resend;

// Runs `script` on the backend's node and returns its reply (error replies
// included) or the failure.
absl::StatusOr<redis::Reply> RunScript(
    LockEnv& env, internal::ScriptId script,
    std::initializer_list<absl::string_view> keys,
    std::initializer_list<absl::string_view> args,
    Deadline deadline = Deadline::Never(), Resend resend = Resend::kNever,
    bool* resent = nullptr) {
  std::vector<backend::Answer> answers = env.backend().Run(
      script, absl::MakeConstSpan(keys.begin(), keys.size()),
      absl::MakeConstSpan(args.begin(), args.size()), deadline, resend);
  if (resent != nullptr) *resent = answers[0].resent;
  return std::move(answers[0].reply);
}

// Prefixes a failure with the operation and lock name.
absl::Status Annotate(absl::Status s, absl::string_view op,
                      const std::string& name) {
  if (s.ok()) return s;
  return absl::Status(
      s.code(), absl::StrCat(op, " lock ", QuoteName(name), ": ", s.message()));
}

// A reply that is not what the script returns means a foreign value at the
// key or a misbehaving server.
absl::Status Unexpected(const redis::Reply& r, absl::string_view op) {
  if (r.is_error()) return redis::ErrorReplyToStatus(op, r.str());
  return absl::InternalError(
      absl::StrCat(op, ": unexpected reply ", r.view().Describe()));
}

// Every attempt may take this long even when the caller's wait is shorter
// (TryAcquire(0) is one attempt, not none).
constexpr absl::Duration kMinAttemptTime = absl::Milliseconds(100);

// One attempt, bounded by `deadline` (but at least kMinAttemptTime) and the
// command timeout. Returns nullopt when acquired, else the holder's PTTL in
// ms (-1: no TTL).
absl::StatusOr<absl::optional<int64_t>> TryOnce(
    LockEnv& env, const std::string& name, const std::string& owner,
    const std::string& lease_ms, bool fresh, Deadline deadline,
    SteadyClock::time_point* sent_at) {
  if (deadline.Remaining() < kMinAttemptTime) {
    deadline = Deadline::After(kMinAttemptTime);
  }
  *sent_at = SteadyClock::now();
  // Safe to resend on a dropped connection: a fresh acquire that ran twice
  // sets the count to 1 twice; a re-entry counted twice is cleared at the
  // outermost release.
  absl::StatusOr<redis::Reply> r = RunScript(
      env, internal::kAcquireScript, {name},
      {lease_ms, owner, fresh ? "1" : "0"}, deadline, Resend::kIfDropped);
  if (!r.ok()) return r.status();
  if (r->is_nil()) return absl::optional<int64_t>();
  if (r->is_integer()) return absl::optional<int64_t>(r->integer());
  return Unexpected(*r, "acquire script");
}

// A holder without a lease (a key set by hand) is re-checked this often, so
// that a waiter is not stuck forever when the key is deleted without an
// unlock message.
constexpr absl::Duration kNoLeaseRecheck = absl::Seconds(1);

// What is at `name`: {held, pttl ms, the caller's hold count}. A key that
// holds anything but a lock is FailedPrecondition.
struct Inspection {
  bool held = false;
  int64_t pttl_ms = -2;
  int64_t count = 0;
};
absl::StatusOr<Inspection> Inspect(LockEnv& env, const std::string& name,
                                   const std::string& owner,
                                   Deadline deadline = Deadline::Never()) {
  absl::StatusOr<redis::Reply> r =
      RunScript(env, internal::kInspectScript, {name}, {owner}, deadline,
                Resend::kIfDropped);
  if (!r.ok()) return r.status();
  const redis::ReplyView v = r->view();
  if (!v.is_array() || v.size() != 3 || !v[0].is_integer() ||
      !v[1].is_integer() || !v[2].is_integer()) {
    return Unexpected(*r, "inspect script");
  }
  return Inspection{v[0].integer() == 1, v[1].integer(), v[2].integer()};
}

absl::Status HeldByOther(int64_t pttl_ms) {
  return absl::DeadlineExceededError(absl::StrCat(
      "held by another owner (lease left: ",
      pttl_ms < 0 ? std::string("none set") : absl::StrCat(pttl_ms, "ms"),
      ")"));
}

// On success, `*sent_at` is when the winning acquire was sent. `fresh`: the
// thread holds no hold of its own (see lua/acquire.lua).
absl::Status AcquireLoop(LockEnv& env, const std::string& name,
                         const std::string& owner, const std::string& lease_ms,
                         bool fresh, Deadline deadline,
                         SteadyClock::time_point* sent_at) {
  absl::StatusOr<absl::optional<int64_t>> ttl =
      TryOnce(env, name, owner, lease_ms, fresh, deadline, sent_at);
  if (!ttl.ok() || !ttl->has_value()) return ttl.status();
  if (deadline.Expired()) return HeldByOther(**ttl);

  std::unique_ptr<backend::Waiter> sub = env.backend().Subscribe(
      UnlockChannel(name), pubsub::WakePolicy::kWakeOne);
  const absl::Duration confirm_limit = env.confirm_timeout();
  while (true) {
    // Only after the server confirmed the subscription is a re-check free of
    // lost wake-ups.
    absl::Status confirmed =
        sub->AwaitConfirmed(Earliest(deadline, Deadline::After(confirm_limit)));
    if (confirmed.code() == absl::StatusCode::kDeadlineExceeded) {
      if (deadline.Expired()) return HeldByOther(**ttl);
      return absl::UnavailableError(confirmed.message());
    }
    if (!confirmed.ok()) return confirmed;  // Cancelled, PermissionDenied
    ttl = TryOnce(env, name, owner, lease_ms, fresh, deadline, sent_at);
    if (!ttl.ok()) {
      sub->PassOn();  // a notification we may have consumed is not wasted
      return ttl.status();
    }
    if (!ttl->has_value()) return absl::OkStatus();
    if (deadline.Expired()) return HeldByOther(**ttl);
    // Sleep until an unlock message, the holder's lease end, or our deadline.
    absl::Duration sleep = absl::Milliseconds(**ttl);
    if (**ttl < 0) {
      // No lease: a lock set by hand, or not a lock at all (bounded either
      // way: FailedPrecondition now, or a re-check every kNoLeaseRecheck).
      absl::StatusOr<Inspection> what = Inspect(env, name, owner, deadline);
      if (!what.ok()) return what.status();
      sleep = kNoLeaseRecheck;
    }
    const Deadline wake = Earliest(deadline, Deadline::After(sleep));
    if (sub->Wait(wake) == pubsub::WakeReason::kClosed) {
      return absl::CancelledError("the client was closed while waiting");
    }
  }
}

}  // namespace

absl::Status ValidateName(const std::string& name) {
  if (name.empty()) {
    return absl::InvalidArgumentError("lock name must not be empty");
  }
  if (name.size() > kMaxLockNameSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("lock name ", QuoteName(name), " is longer than ",
                     kMaxLockNameSize, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status Acquire(LockEnv& env, const std::string& name,
                     absl::optional<absl::Duration> lease, Deadline deadline) {
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
  const uint64_t thread = CurrentThreadNumber();
  const std::string owner = OwnerField(env.id(), thread);
  // Only this thread changes its own hold, so this stays true for the call.
  const absl::optional<Hold> held = env.holds().Find(name, thread);
  const bool fresh = !held.has_value() || held->ended();
  // A re-entry never shortens a hold: on a watchdog hold, a re-entry with an
  // explicit lease only counts (the watchdog keeps renewing the hold); on an
  // explicit hold, the script keeps whichever lease ends later.
  const bool watchdog = !lease.has_value() || (!fresh && held->watchdog);
  const absl::Duration effective = watchdog ? env.watchdog_lease() : *lease;
  const std::string lease_ms =
      absl::StrCat(absl::ToInt64Milliseconds(effective));
  SteadyClock::time_point sent_at;
  absl::Status s =
      AcquireLoop(env, name, owner, lease_ms, fresh, deadline, &sent_at);
  if (!s.ok()) return Annotate(s, "acquire", name);
  // Registered (and, for a watchdog lease, renewed from now on) before
  // Acquire() returns.
  if (fresh) env.OnFreshHold();
  env.holds().OnAcquired(name, thread, owner, watchdog, effective, sent_at);
  if (watchdog) env.ActivateWatchdog();
  if (env.closed()) {
    // Close() may have swept the registry before we registered: do not leak
    // a hold nobody will release.
    env.holds().Forget(name, thread);
    absl::Status ignored =
        RunScript(env, internal::kReleaseAllScript, {name, UnlockChannel(name)},
                  {kUnlockMessage, owner})
            .status();
    (void)ignored;
    return Annotate(absl::CancelledError("the client was closed"), "acquire",
                    name);
  }
  return absl::OkStatus();
}

absl::Status Release(LockEnv& env, const std::string& name) {
  if (absl::Status s = env.CheckOpen(); !s.ok()) {
    return Annotate(s, "release", name);
  }
  const uint64_t thread = CurrentThreadNumber();
  const std::string owner = OwnerField(env.id(), thread);
  // A final release stops renewal before the script is sent, whatever its
  // outcome: a failed final release leaves a lock that frees itself at the
  // end of its lease, never one renewed forever.
  const absl::optional<Hold> hold = env.holds().BeginRelease(name, thread);
  // When holds remain, refresh a watchdog lease; keep an explicit lease's TTL.
  const std::string lease_ms =
      hold.has_value() && hold->watchdog
          ? absl::StrCat(absl::ToInt64Milliseconds(env.watchdog_lease()))
          : "0";
  // The outermost release may be resent on a dropped connection: if the
  // first one ran, the resent one finds the lock already released. An inner
  // one may not (counting down twice would free the lock early).
  const bool outermost = hold.has_value() && hold->count <= 1;
  bool retried = false;
  absl::StatusOr<redis::Reply> r =
      RunScript(env, internal::kReleaseScript, {name, UnlockChannel(name)},
                {kUnlockMessage, lease_ms, owner}, Deadline::Never(),
                outermost ? Resend::kIfDropped : Resend::kNever, &retried);
  if (!r.ok()) {
    // The outcome is unknown. A final release abandons the hold: it stays
    // unrenewed (it frees at the end of its lease at the latest), and this
    // thread's next acquire starts afresh, absorbing a count that survived.
    // Retrying Release() frees it now if this attempt did not run.
    if (outermost) env.holds().Forget(name, thread);
    return Annotate(r.status(), "release", name);
  }
  if (internal::IsUnpublished(*r)) {  // freed, but its waiters not told
    env.holds().Forget(name, thread);
    return Annotate(internal::UnpublishedStatus("release script", *r),
                    "release", name);
  }
  if (r->is_nil() && retried) {
    env.holds().Forget(name, thread);  // the dropped first attempt ran
    return absl::OkStatus();
  }
  if (r->is_nil()) {
    if (absl::optional<Hold> lost = env.holds().Forget(name, thread)) {
      return Annotate(
          absl::AbortedError(absl::StrCat(
              "lease lost: this thread held the lock, but ",
              lost->lost      ? "the watchdog could not keep its lease alive"
              : lost->expired ? "its explicit lease ran out"
                              : "its lease ran out or it was force-released",
              " before this release; work done under it may have overlapped "
              "with another owner")),
          "release", name);
    }
    return Annotate(
        absl::FailedPreconditionError(absl::StrCat(
            "not held by this thread (owner ", owner,
            "; a hold whose explicit lease ran out is forgotten ",
            absl::FormatDuration(kExpiredHoldRetention), " after it ended)")),
        "release", name);
  }
  if (!r->is_integer()) {
    return Annotate(Unexpected(*r, "release script"), "release", name);
  }
  if (r->integer() == 0 && outermost) {
    // This was the outermost release by our count, yet Redis still counts
    // holds for this owner: re-entries whose replies were lost (timeouts,
    // dropped connections). Nobody would ever release them; release them now
    // (only this thread uses this owner field).
    absl::StatusOr<redis::Reply> all =
        RunScript(env, internal::kReleaseAllScript, {name, UnlockChannel(name)},
                  {kUnlockMessage, owner});
    if (!all.ok()) return Annotate(all.status(), "release", name);
  }
  env.holds().OnReleased(name, thread,
                         /*freed=*/r->integer() == 1 || outermost);
  return absl::OkStatus();
}

absl::StatusOr<SteadyClock::time_point> SafeUntil(LockEnv& env,
                                                  const std::string& name) {
  if (absl::Status s = env.CheckOpen(); !s.ok()) {
    return Annotate(s, "query", name);
  }
  absl::optional<Hold> hold = env.holds().Find(name, CurrentThreadNumber());
  if (!hold.has_value()) {
    return Annotate(absl::FailedPreconditionError("not held by this thread"),
                    "query", name);
  }
  if (hold->lost) {
    return Annotate(absl::AbortedError("lease lost (reported as kLockLost)"),
                    "query", name);
  }
  // Redis set the TTL no earlier than acked_at; allow for clock drift
  // between this host and Redis (1% of the lease plus 2 ms, as Redlock).
  const absl::Duration drift = hold->lease / 100 + absl::Milliseconds(2);
  const SteadyClock::time_point safe_until =
      hold->acked_at + absl::ToChronoNanoseconds(hold->lease - drift);
  if (hold->expired || safe_until <= SteadyClock::now()) {
    return Annotate(
        absl::AbortedError(absl::StrCat(
            hold->watchdog ? "no renewal of the watchdog lease was confirmed "
                             "in time"
                           : "its explicit lease ran out",
            ": the lock may already belong to another owner")),
        "query", name);
  }
  return safe_until;
}

absl::StatusOr<bool> ForceRelease(LockEnv& env, const std::string& name) {
  if (absl::Status s = env.CheckOpen(); !s.ok()) {
    return Annotate(s, "force-release", name);
  }
  absl::StatusOr<redis::Reply> r =
      RunScript(env, internal::kForceReleaseScript, {name, UnlockChannel(name)},
                {kUnlockMessage});
  if (!r.ok()) return Annotate(r.status(), "force-release", name);
  if (internal::IsUnpublished(*r)) {
    return Annotate(internal::UnpublishedStatus("force_release script", *r),
                    "force-release", name);
  }
  if (!r->is_integer()) {
    return Annotate(Unexpected(*r, "force_release script"), "force-release",
                    name);
  }
  return r->integer() == 1;
}

absl::StatusOr<bool> IsLocked(LockEnv& env, const std::string& name) {
  if (absl::Status s = env.CheckOpen(); !s.ok()) {
    return Annotate(s, "query", name);
  }
  absl::StatusOr<Inspection> what =
      Inspect(env, name, OwnerField(env.id(), CurrentThreadNumber()));
  if (!what.ok()) return Annotate(what.status(), "query", name);
  return what->held;
}

absl::StatusOr<int64_t> HoldCount(LockEnv& env, const std::string& name) {
  if (absl::Status s = env.CheckOpen(); !s.ok()) {
    return Annotate(s, "query", name);
  }
  absl::StatusOr<Inspection> what =
      Inspect(env, name, OwnerField(env.id(), CurrentThreadNumber()));
  if (!what.ok()) return Annotate(what.status(), "query", name);
  return what->count;
}

absl::StatusOr<absl::Duration> RemainingLease(LockEnv& env,
                                              const std::string& name) {
  if (absl::Status s = env.CheckOpen(); !s.ok()) {
    return Annotate(s, "query", name);
  }
  absl::StatusOr<Inspection> what =
      Inspect(env, name, OwnerField(env.id(), CurrentThreadNumber()));
  if (!what.ok()) return Annotate(what.status(), "query", name);
  if (!what->held) {
    return absl::NotFoundError(
        absl::StrCat("lock ", QuoteName(name), " is not held"));
  }
  if (what->pttl_ms < 0) return absl::InfiniteDuration();
  return absl::Milliseconds(what->pttl_ms);
}

absl::StatusOr<std::vector<bool>> RenewHolds(
    backend::Backend& backend, const std::string& lease_ms,
    const std::vector<RenewItem>& items, std::atomic<uint64_t>* round_trips) {
  std::vector<backend::Call> calls((items.size() + kRenewKeysPerCall - 1) /
                                   kRenewKeysPerCall);
  for (size_t call = 0; call < calls.size(); ++call) {
    const size_t first = call * kRenewKeysPerCall;
    const size_t end = std::min(items.size(), first + kRenewKeysPerCall);
    calls[call].keys.reserve(end - first);
    calls[call].args.reserve(end - first + 1);
    calls[call].args.push_back(lease_ms);
    for (size_t i = first; i < end; ++i) {
      calls[call].keys.push_back(items[i].name);
      calls[call].args.push_back(items[i].owner);
    }
  }
  std::vector<absl::StatusOr<std::vector<redis::Reply>>> batches =
      backend.RunBatch(internal::kRenewScript, calls, Deadline::Never(),
                       round_trips);
  absl::StatusOr<std::vector<redis::Reply>>& replies = batches[0];
  if (!replies.ok()) return replies.status();
  std::vector<bool> renewed(items.size());
  for (size_t call = 0; call < calls.size(); ++call) {
    const redis::Reply& reply = (*replies)[call];
    if (reply.is_error()) {
      return redis::ErrorReplyToStatus("renew script", reply.str());
    }
    const redis::ReplyView v = reply.view();
    const size_t n = calls[call].keys.size();
    if (!v.is_array() || v.size() != n) {
      return absl::InternalError(
          absl::StrCat("renew script: unexpected reply ", v.Describe()));
    }
    for (size_t i = 0; i < n; ++i) {
      if (!v[i].is_integer()) {
        return absl::InternalError(
            absl::StrCat("renew script: unexpected element ", v[i].Describe()));
      }
      renewed[call * kRenewKeysPerCall + i] = v[i].integer() == 1;
    }
  }
  return renewed;
}

std::vector<absl::Status> ReleaseHolds(
    backend::Backend& backend,
    const std::vector<std::pair<HoldRegistry::Key, Hold>>& held,
    Deadline deadline) {
  std::vector<std::string> channels;
  channels.reserve(held.size());
  std::vector<backend::Call> calls(held.size());
  for (size_t i = 0; i < held.size(); ++i) {
    const std::string& name = held[i].first.first;
    channels.push_back(UnlockChannel(name));
    calls[i].keys = {name, channels.back()};
    calls[i].args = {kUnlockMessage, held[i].second.owner};
  }
  std::vector<absl::Status> out;
  if (held.empty()) return out;
  std::vector<absl::StatusOr<std::vector<redis::Reply>>> batches =
      backend.RunBatch(internal::kReleaseAllScript, calls, deadline);
  const absl::StatusOr<std::vector<redis::Reply>>& replies = batches[0];
  for (size_t i = 0; i < held.size(); ++i) {
    out.push_back(replies.ok() ? internal::ReleaseAllResult((*replies)[i],
                                                            "release on close")
                               : replies.status());
  }
  return out;
}

}  // namespace lock
}  // namespace relock
