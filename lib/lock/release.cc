// Release(), ReleaseAsync() and ForceRelease() (lib/lock/algorithm.h): a
// release's call (a final one stops renewal first), the tally of the release
// script's answers, and the release-all of holds that Redis counted twice.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "lib/backend/backend.h"
#include "lib/common/deadline.h"
#include "lib/lock/algorithm.h"
#include "lib/lock/attempt.h"
#include "lib/lock/lease.h"
#include "lib/lock/lock_env.h"
#include "lib/lock/lock_model.h"
#include "lib/lock/lock_scripts.h"
#include "lib/lock/owner.h"
#include "lib/redis/reply.h"

namespace relock {
namespace lock {

using algorithm_internal::Annotate;
using algorithm_internal::CheckAsyncOwner;
using algorithm_internal::CheckModel;
using algorithm_internal::LoopCompletion;
using algorithm_internal::NodeNotes;
using algorithm_internal::RunOnFirstNode;
using algorithm_internal::Send;
using algorithm_internal::Unexpected;
using algorithm_internal::Whom;

namespace {

using backend::Resend;

void CountRelease(Metrics& m, const absl::Status& s) {
  (s.ok() ? m.releases : m.unlock_failures).Add();
}

// A release on its way: what was sent, and what the answers are read with.
struct ReleaseCall {
  ReleaseCall() = default;
  // Borrowed by the steps (LockModel): a ReleaseCall stays where it was made
  // until its continuations are done, so it cannot be copied or moved.
  ReleaseCall(const ReleaseCall&) = delete;
  ReleaseCall& operator=(const ReleaseCall&) = delete;

  OwnerField owner = OwnerField::None();
  Lease lease = Lease::Keep();
  const LockModel* model = nullptr;
  absl::optional<HoldFacts> hold;
  bool outermost = false;
  // As far as this client knows, the release frees the lock: its outermost
  // hold, or one it no longer tracks.
  bool last = true;
  Deadline deadline = Deadline::Never();
  Resend resend = Resend::kNever;
  // An asynchronous release's copy of the lock's name, which the caller's
  // need not outlive (a blocking release reads the caller's).
  std::string kept_name;
};

// Starts a release (stops renewal of a final one): what to send, into
// `*out`.
void BeginReleaseCall(LockEnv& env, const std::string& name, const OwnerId& by,
                      LockKind kind, ReleaseCall* out) {
  ReleaseCall& c = *out;
  c.owner = OwnerField(env.id(), by.number);
  // A final release stops renewal before the script is sent, whatever its
  // outcome: a failed final release leaves a lock that frees itself at the
  // end of its lease, never one renewed forever.
  c.hold = env.holds().BeginRelease(name, by.number);
  // When holds remain, refresh a watchdog lease; keep an explicit lease's TTL.
  c.lease = c.hold.has_value() && c.hold->watchdog
                ? Lease::Of(env.watchdog_lease())
                : Lease::Keep();
  // The outermost release may be resent on a dropped connection: if the
  // first one ran, the resent one finds the lock already released. An inner
  // one may not (counting down twice would free the lock early).
  c.outermost = c.hold.has_value() && c.hold->count <= 1;
  c.last = !c.hold.has_value() || c.hold->count <= 1;
  c.resend = c.outermost ? Resend::kIfDropped : Resend::kNever;
  // The hold's own lock type, should the handle's differ.
  c.model = &ModelOf(c.hold.has_value() ? c.hold->kind : kind);
  c.deadline =
      env.backend().nodes() == 1
          ? Deadline::Never()
          : Deadline::After(env.policy().command_timeout, &env.clock());
}

// What the release script's answers say.
struct ReleaseVerdict {
  // The call's result, unless release_all.
  absl::Status status;
  // Holds that Redis counted twice must be released too (see
  // JudgeRelease()), and then FinishRelease(freed_all) gives the result.
  bool release_all = false;
  // A quorum freed the lock, or this was the outermost release.
  bool freed_all = false;
};
ReleaseVerdict JudgeRelease(LockEnv& env, const std::string& name,
                            const OwnerId& by, const ReleaseCall& call,
                            const std::vector<backend::Answer>& answers) {
  ReleaseVerdict verdict;
  backend::Backend& backend = env.backend();
  const std::string& noun = env.policy().noun;
  const size_t n = backend.nodes();
  const size_t quorum = backend.quorum();
  const uint64_t thread = by.number;
  const OwnerField& owner = call.owner;
  const bool outermost = call.outermost;
  size_t released = 0, freed = 0, not_owner = 0;
  absl::Status error, unpublished;
  NodeNotes details;
  for (size_t i = 0; i < n; ++i) {
    const absl::StatusOr<redis::Reply>& r = answers[i].reply;
    const std::string& who = backend.node_name(i);
    if (r.ok() && internal::IsUnpublished(*r)) {
      // Freed, but Redis refused to tell its waiters.
      ++released;
      ++freed;
      if (unpublished.ok() && env.policy().notified) {
        unpublished = internal::UnpublishedStatus("release script", *r);
      }
      details.Add(who, "released, waiters not told");
    } else if (r.ok() && r->is_nil() && answers[i].resent) {
      ++released;  // the dropped first attempt ran
      ++freed;
      details.Add(who, "released");
    } else if (r.ok() && r->is_integer()) {
      ++released;
      freed += r->integer() == 1 ? 1 : 0;
      details.Add(who, "released");
    } else if (r.ok() &&
               (r->is_nil() || (call.model->kind() != LockKind::kFair &&
                                internal::IsWrongType(*r)))) {
      // (A key of another type now: the hold is gone just the same. Not for
      // a fair lock, whose release reads its queue first: the error may be
      // the queue's, the lock intact.)
      ++not_owner;
      details.Add(absl::StrCat(who, ": not held by ", Whom(by)));
    } else {
      absl::Status e = r.ok() ? Unexpected(*r, "release script") : r.status();
      details.Add(absl::StrCat(who, ": ", e.ToString()));
      if (error.ok()) error = std::move(e);
    }
  }
  if (released >= quorum) {
    if (!unpublished.ok()) {
      env.holds().Forget(name, thread);
      verdict.status = Annotate(unpublished, "release", name, noun);
      return verdict;
    }
    verdict.freed_all = freed >= quorum || outermost;
    if (outermost && freed < released) {
      // This was the outermost release by our count, yet Redis still counts
      // holds for this owner: re-entries whose replies were lost (timeouts,
      // dropped connections). Nobody would ever release them; release them
      // now (only this owner uses this owner field).
      verdict.release_all = true;
      return verdict;
    }
    env.holds().OnReleased(name, thread, verdict.freed_all);
    return verdict;
  }
  if (not_owner > n - quorum) {
    auto lease_lost = [&](const HoldFacts& hold) {
      return Annotate(
          absl::AbortedError(absl::StrCat(
              "lease lost: ", Whom(by), " held the lock, but ",
              hold.lost()      ? "the watchdog could not keep its lease alive"
              : hold.expired() ? "its explicit lease ran out"
              : n > 1          ? "a majority of masters no longer have it"
                               : "its lease ran out or it was force-released",
              " before this release; work done under it may have overlapped "
              "with another owner",
              n > 1 ? absl::StrCat(": ", details.Join()) : "")),
          "release", name, noun);
    };
    // (Expired first, should its explicit lease have ended: that is no
    // loss to report. Gone if Close() took it: said below.)
    const absl::optional<HoldFacts> now_held =
        outermost ? absl::nullopt
                  : env.holds().FindFactsExpiringDue(name, thread);
    if (now_held.has_value()) {
      // An inner release found the hold gone: a loss like any other,
      // reported now (kLockLost, the hold's loss callbacks) unless it
      // ended already; the hold stays, ended and one level shallower, so
      // that the outer levels' releases say Aborted too (lock.h).
      verdict.status = lease_lost(*now_held);
      if (absl::optional<watchdog::LostHold> lost =
              env.holds().MarkLost(name, thread)) {
        env.ReportLost(
            *lost, absl::AbortedError("lease lost: a release of an inner level "
                                      "found the lock's owner field gone from "
                                      "Redis (its lease ran out, or it was "
                                      "deleted or force-released)"));
      }
      env.holds().OnReleased(name, thread, /*freed=*/false);
      return verdict;
    }
    if (absl::optional<Hold> lost = env.holds().Forget(name, thread)) {
      verdict.status = lease_lost(*lost);
      return verdict;
    }
    if (env.holds().TakenOnClose(name, thread)) {
      // Close() took the hold while this release was under way (it waits
      // for such releases, up to a command timeout), and released it.
      verdict.status = Annotate(
          absl::FailedPreconditionError(absl::StrCat(
              "the client was closed while this release was under way: "
              "Close() released the hold of ",
              Whom(by),
              " (its released-on-close event says whether the lease had "
              "been lost)")),
          "release", name, noun);
      return verdict;
    }
    verdict.status = Annotate(
        absl::FailedPreconditionError(absl::StrCat(
            "not held by ", Whom(by), " (owner ", owner.wire(),
            "; a hold whose explicit lease ran out is forgotten ",
            absl::FormatDuration(kExpiredHoldRetention), " after it ended)")),
        "release", name, noun);
    return verdict;
  }
  // The outcome is unknown. A final release abandons the hold: it stays
  // unrenewed (it frees at the end of its lease at the latest), and this
  // thread's next acquire starts afresh, absorbing a count that survived.
  // Retrying Release() frees it now if this attempt did not run. While the
  // client closes, the hold is left to Close()'s release round instead.
  if (outermost && env.closed()) {
    env.holds().OnReleaseFailed(name, thread);
  } else if (outermost) {
    env.holds().Forget(name, thread);
  }
  verdict.status =
      n == 1 ? Annotate(error, "release", name, noun)
             : Annotate(absl::UnavailableError(absl::StrCat(
                            "no quorum of masters answered: ", details.Join())),
                        "release", name, noun);
  return verdict;
}

// After the release-all that JudgeRelease() asked for.
absl::Status FinishRelease(LockEnv& env, const std::string& name,
                           const OwnerId& by,
                           const std::vector<backend::Answer>& all,
                           bool freed_all) {
  if (env.backend().nodes() == 1 && !all[0].reply.ok()) {
    env.holds().OnReleaseFailed(name, by.number);
    return Annotate(all[0].reply.status(), "release", name, env.policy().noun);
  }
  env.holds().OnReleased(name, by.number, freed_all);
  return absl::OkStatus();
}

// A release after its checks, written once for both modes: the release
// script, the judgement of its answers, and the release-all of holds that
// Redis counted twice. `here`: blocking on the calling thread, and `done`
// runs before this returns; else on the loop (`keep`, the client, is held
// until `done` ran).
void SendRelease(LockEnv& env, std::shared_ptr<void> keep,
                 const std::string& name, const OwnerId& by, LockKind kind,
                 bool here, std::function<void(absl::Status)> done) {
  // A blocking release's continuations run before this returns, so its call
  // stays on this stack (and `call` owns nothing: no allocation); an
  // asynchronous one's lives on the heap as long as they do, with a copy of
  // the name.
  ReleaseCall on_stack;
  std::shared_ptr<ReleaseCall> started;
  if (here) {
    started = std::shared_ptr<ReleaseCall>(std::shared_ptr<void>(), &on_stack);
  } else {
    started = std::make_shared<ReleaseCall>();
    started->kept_name = name;
  }
  BeginReleaseCall(env, name, by, kind, started.get());
  const std::shared_ptr<const ReleaseCall> call = std::move(started);
  // The name the continuations read: the caller's, or the kept copy.
  const std::string* const lock_name = here ? &name : &call->kept_name;
  Send(env,
       call->model->Release(LockName(*lock_name), call->owner, call->lease,
                            env.backend().publish_command(), call->last),
       call->deadline, call->resend, here,
       [&env, keep = std::move(keep), lock_name, by, call, here,
        done = std::move(done)](const std::vector<backend::Answer>& answers) {
         const std::string& name = *lock_name;
         const ReleaseVerdict verdict =
             JudgeRelease(env, name, by, *call, answers);
         if (!verdict.release_all) return done(verdict.status);
         Send(env,
              call->model->ReleaseAll(LockName(name), call->owner,
                                      env.backend().publish_command()),
              call->deadline, Resend::kNever, here,
              [&env, keep, lock_name, by, call, freed_all = verdict.freed_all,
               done](const std::vector<backend::Answer>& all) {
                done(FinishRelease(env, *lock_name, by, all, freed_all));
              });
       });
}

// The checks of a release, in either mode: what fails them, else whether
// a re-entry counted locally was released locally (true: done).
absl::StatusOr<bool> CheckRelease(LockEnv& env, const std::string& name,
                                  const OwnerId& by, LockKind kind,
                                  const absl::Status& open) {
  if (!open.ok()) return Annotate(open, "release", name, env.policy().noun);
  if (absl::Status s = CheckModel(env, name, by, kind); !s.ok()) {
    return Annotate(s, "release", name, env.policy().noun);
  }
  return env.holds().TryLocalRelease(name, by.number);
}

absl::Status ReleaseOnce(LockEnv& env, const std::string& name,
                         const OwnerId& by, LockKind kind) {
  const absl::StatusOr<bool> local =
      CheckRelease(env, name, by, kind, env.CheckBlockingCall());
  if (!local.ok()) return local.status();
  if (*local) return absl::OkStatus();
  // Set by the continuation, which runs before SendRelease() returns here
  // (an optional, so that the success path makes no error status).
  absl::optional<absl::Status> result;
  SendRelease(env, /*keep=*/nullptr, name, by, kind, /*here=*/true,
              [&result](absl::Status s) { result = std::move(s); });
  if (!result.has_value()) {
    return absl::InternalError("release: no answer was judged");
  }
  return *std::move(result);
}

}  // namespace

absl::Status Release(LockEnv& env, const std::string& name, const OwnerId& by,
                     LockKind kind) {
  absl::Status s = ReleaseOnce(env, name, by, kind);
  CountRelease(env.metrics(), s);
  return s;
}

void ReleaseAsync(LockEnv& env, std::shared_ptr<void> keep,
                  const std::string& name, const OwnerId& by, LockKind kind,
                  std::function<void(absl::Status)> done) {
  if (absl::Status s = CheckAsyncOwner(env, name, by, "release"); !s.ok()) {
    return done(s);
  }
  // Counted as it completes (the client outlives the call: `keep`).
  done = [metrics = &env.metrics(), done = std::move(done)](absl::Status s) {
    CountRelease(*metrics, s);
    done(std::move(s));
  };
  const absl::StatusOr<bool> local =
      CheckRelease(env, name, by, kind, env.CheckOpen());
  if (!local.ok()) return done(local.status());
  if (*local)
    return LoopCompletion::Post(env, std::move(keep), std::move(done));
  SendRelease(env, std::move(keep), name, by, kind, /*here=*/false,
              std::move(done));
}

absl::StatusOr<bool> ForceRelease(LockEnv& env, const std::string& name,
                                  LockKind kind) {
  if (absl::Status s = env.CheckBlockingCall(); !s.ok()) {
    return Annotate(s, "force-release", name);
  }
  absl::StatusOr<redis::Reply> r =
      RunOnFirstNode(env,
                     ModelOf(kind).ForceRelease(
                         LockName(name), env.backend().publish_command()),
                     backend::Resend::kNever);
  if (!r.ok()) return Annotate(r.status(), "force-release", name);
  if (internal::IsUnpublished(*r)) {
    if (!env.policy().notified) return true;  // freed; nobody listens
    return Annotate(internal::UnpublishedStatus("force_release script", *r),
                    "force-release", name);
  }
  if (!r->is_integer()) {
    return Annotate(Unexpected(*r, "force_release script"), "force-release",
                    name);
  }
  return r->integer() == 1;
}

}  // namespace lock
}  // namespace relock
