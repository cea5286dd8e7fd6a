// The lock algorithm's shared pieces (lib/lock/attempt.h): one acquire
// attempt on every node and what its answers mean, the inspect script's
// reply, the texts of errors; and the checks of a lock name and of replica
// sync options (lib/lock/algorithm.h).

#include "lib/lock/attempt.h"

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/types/optional.h"
#include "lib/lock/algorithm.h"
#include "lib/lock/lease.h"
#include "lib/redis/errors.h"
#include "relock/limits.h"
#include "relock/options.h"

namespace relock {
namespace lock {
namespace algorithm_internal {
namespace {

using backend::Resend;

// A read-write lock's hash is another data model than a lock's (a plain,
// fenced or fair one, which share theirs): an owner's hold of one name is
// of one of the two. FailedPrecondition when `held` (the owner's hold of
// `name`, if any) is of the other model than `kind`.
bool IsReadWrite(LockKind kind) {
  return kind == LockKind::kRead || kind == LockKind::kWrite;
}

// The acquire script's answer (lua/acquire.lua) in either form: granted
// (nil; fenced: {-1, token}), held by another owner (the holder's PTTL;
// fenced: {PTTL, -1}), a re-entry that found this owner's hold gone (the
// error reply NOTHELD), or anything else.
struct AcquireReply {
  enum Kind { kGranted, kHeld, kNotHeld, kOther } kind = kOther;
  int64_t token = -1;  // kGranted, fenced (tokens start at 1)
  int64_t pttl = -1;   // kHeld
};
AcquireReply ReadAcquireReply(const redis::Reply& r) {
  AcquireReply out;
  if (r.is_nil()) {
    out.kind = AcquireReply::kGranted;
  } else if (r.is_error()) {
    if (absl::StartsWith(r.str(), "NOTHELD")) out.kind = AcquireReply::kNotHeld;
  } else if (r.is_integer()) {
    out.kind = AcquireReply::kHeld;
    out.pttl = r.integer();
  } else if (const redis::ReplyView v = r.view();
             v.size() == 2 && v[0].is_integer()) {
    // Granted: {-1, token}, the token never below 1: an integer below 2^53,
    // beyond that a string (exact over the whole int64 range). Held:
    // {PTTL, -1}, also when the holder's key has no TTL ({-1, -1}).
    int64_t token = 0;
    if (v[1].is_integer() && v[1].integer() > 0) {
      out.kind = AcquireReply::kGranted;
      out.token = v[1].integer();
    } else if (v[1].is_string() && absl::SimpleAtoi(v[1].str(), &token) &&
               token > 0) {
      out.kind = AcquireReply::kGranted;
      out.token = token;
    } else if (v[1].is_integer() && v[1].integer() == -1) {
      out.kind = AcquireReply::kHeld;
      out.pttl = v[0].integer();
    }
  }
  return out;
}

// Whether `answer` to the acquire script granted the lock, and (with
// `sync`) was acknowledged by enough replicas.
bool Granted(const backend::Answer& answer, const backend::WaitReplicas* sync) {
  return answer.reply.ok() &&
         ReadAcquireReply(*answer.reply).kind == AcquireReply::kGranted &&
         (sync == nullptr || answer.acked >= sync->replicas);
}

}  // namespace

absl::Status Annotate(absl::Status s, absl::string_view op,
                      const std::string& name, absl::string_view noun) {
  if (s.ok()) return s;
  return absl::Status(
      s.code(),
      absl::StrCat(op, " ", noun, " ", QuoteName(name), ": ", s.message()));
}

std::string Whom(const OwnerId& by) {
  return by.thread ? std::string("this thread")
                   : absl::StrCat("relock::Owner ", by.number & ~kWriteHoldBit);
}

std::string NodeNotes::Join() const {
  std::string joined;
  for (const Note& note : notes_) {
    if (!joined.empty()) joined.append("; ");
    if (note.who == nullptr) {
      joined.append(note.text);
    } else {
      absl::StrAppend(&joined, *note.who, ": ", note.outcome);
    }
  }
  return joined;
}

absl::Status CheckModel(LockEnv& env, const std::string& name,
                        const OwnerId& by, LockKind kind) {
  for (const uint64_t number : {by.number, by.number ^ kWriteHoldBit}) {
    const absl::optional<HoldFacts> held =
        env.holds().FindFactsExpiringDue(name, number);
    if (!held.has_value() || held->ended() ||
        IsReadWrite(held->kind) == IsReadWrite(kind)) {
      continue;
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "this owner holds the name as ",
        IsReadWrite(kind) ? "a lock" : "a read-write lock", ", not as ",
        IsReadWrite(kind) ? "a read-write lock" : "a lock",
        "; one name is one lock type"));
  }
  return absl::OkStatus();
}

absl::Status Unexpected(const redis::Reply& r, absl::string_view op) {
  if (r.is_error()) return redis::ErrorReplyToStatus(op, r.str());
  return absl::InternalError(
      absl::StrCat(op, ": unexpected reply ", r.view().Describe()));
}

absl::Duration ReplicaTime(const backend::WaitReplicas* sync) {
  return sync != nullptr ? sync->timeout + kWaitLateness : absl::ZeroDuration();
}

Deadline AttemptDeadline(LockEnv& env, absl::Duration lease, Deadline wait,
                         absl::Duration extra) {
  const LockPolicy& policy = env.policy();
  if (policy.attempt_timeout_factor > 0) {
    return Deadline::After(
        std::clamp(lease * policy.attempt_timeout_factor, absl::Milliseconds(2),
                   std::max(absl::Milliseconds(2), policy.command_timeout)) +
            extra,
        &env.clock());
  }
  if (wait.Remaining() < kMinAttemptTime + extra) {
    return Deadline::After(kMinAttemptTime + extra, &env.clock());
  }
  return wait;
}

backend::Enough FailFast(const LockPolicy& policy, size_t n, size_t quorum,
                         const backend::WaitReplicas* sync) {
  if (!policy.fail_fast) return nullptr;
  auto counts = std::make_shared<std::pair<size_t, size_t>>(0, 0);
  const absl::optional<backend::WaitReplicas> wait =
      sync != nullptr ? absl::make_optional(*sync) : absl::nullopt;
  return [counts, n, quorum, wait](size_t, const backend::Answer& answer) {
    if (Granted(answer, wait.has_value() ? &*wait : nullptr)) {
      ++counts->first;
    } else {
      ++counts->second;
    }
    return counts->first >= quorum || counts->second > n - quorum;
  };
}

Attempt Evaluate(LockEnv& env, const std::vector<backend::Answer>& answers,
                 SteadyClock::time_point start, absl::Duration lease,
                 bool fresh, const backend::WaitReplicas* sync,
                 std::vector<bool>* undo) {
  backend::Backend& backend = env.backend();
  const LockPolicy& policy = env.policy();
  const size_t n = backend.nodes();
  const size_t quorum = backend.quorum();
  Attempt a;
  a.start = start;
  size_t granted = 0, errors = 0;
  // unacked_at: granted, but too few replicas acknowledged it.
  absl::InlinedVector<bool, 8> granted_at(n), unknown_at(n), unacked_at(n);
  NodeNotes details;
  for (size_t i = 0; i < n; ++i) {
    const absl::StatusOr<redis::Reply>& r = answers[i].reply;
    const std::string& who = backend.node_name(i);
    const AcquireReply reply = r.ok() ? ReadAcquireReply(*r) : AcquireReply{};
    absl::Status error;
    if (!r.ok()) {
      error = r.status();
      unknown_at[i] = true;  // the request may still run
      details.Add(absl::StrCat(who, ": unavailable: ", r.status().message()));
    } else if (reply.kind == AcquireReply::kGranted &&
               !Granted(answers[i], sync)) {
      unacked_at[i] = true;
      // The undo is sent after this (Undo()), best effort: what it does
      // when it does not land depends on the lock type (ReplicaSync).
      const absl::Status& wait_error = answers[i].wait_error;
      if (!wait_error.ok()) {
        // The WAIT itself failed (an ACL user without it): its code says
        // why; what the script took is given back all the same.
        error = absl::Status(wait_error.code(),
                             absl::StrCat(wait_error.message(),
                                          "; the acquisition is being undone"));
        details.Add(absl::StrCat(who, ": acquired, but ", wait_error.message(),
                                 "; being undone"));
      } else {
        const std::string unacked = absl::StrCat(
            "only ", std::max<int64_t>(answers[i].acked, 0), " of the ",
            sync->replicas, " required replicas acknowledged within ",
            absl::FormatDuration(sync->timeout));
        error = absl::UnavailableError(absl::StrCat(
            unacked, " on ", who, "; the acquisition is being undone"));
        details.Add(
            absl::StrCat(who, ": acquired, but ", unacked, "; being undone"));
      }
    } else if (reply.kind == AcquireReply::kGranted) {
      ++granted;
      granted_at[i] = true;
      if (a.token < 0) a.token = reply.token;
      details.Add(who, "acquired");
    } else if (reply.kind == AcquireReply::kHeld) {
      const int64_t pttl = reply.pttl;
      if (pttl >= 0 && (a.min_pttl_ms < 0 || pttl < a.min_pttl_ms)) {
        a.min_pttl_ms = pttl;
      }
      details.Add(absl::StrCat(who, ": held by another owner (lease left ",
                               pttl, "ms)"));
    } else {
      error = Unexpected(*r, "acquire script");
      details.Add(absl::StrCat(who, ": ", error.ToString()));
      if (reply.kind == AcquireReply::kNotHeld) ++a.not_held;
    }
    if (!error.ok()) {
      ++errors;
      if (a.error.ok()) a.error = std::move(error);
    }
  }
  undo->clear();  // nothing to undo, unless set below
  a.unacknowledged = std::any_of(unacked_at.begin(), unacked_at.end(),
                                 [](bool b) { return b; });
  a.outcome_unknown = std::any_of(unknown_at.begin(), unknown_at.end(),
                                  [](bool b) { return b; });
  const absl::Duration elapsed = absl::FromChrono(env.clock().Now() - start);
  const bool valid =
      !policy.check_validity ||
      lease - elapsed - policy.Drift(lease) > absl::ZeroDuration();
  if (granted >= quorum && valid) {
    a.kind = Attempt::kAcquired;
    return a;
  }
  if (granted >= quorum) {
    details.Add(absl::StrCat("validity used up: the attempt took ",
                             absl::FormatDuration(elapsed), " of a ",
                             absl::FormatDuration(lease), " lease"));
  }
  a.details = details.Join();
  a.kind = granted < quorum && errors <= n - quorum ? Attempt::kHeldByOther
                                                    : Attempt::kFailed;
  if (n == 1) {
    // One node: no other node's answer can contradict it. An unanswered
    // request leaves at most an orphaned count that expires with its lease
    // and that this owner's next fresh acquire absorbs.
    if (a.kind == Attempt::kFailed && a.error.ok()) {
      a.error = absl::AbortedError(a.details);  // validity used up
    }
    // Except: what the node took without its replicas' acknowledgement (a
    // WAIT that counted too few, or failed: Answer::wait_error), and (with
    // replica sync) a fresh acquire with an unknown outcome, whose WAIT may
    // have failed after the script ran.
    if (granted == 0 && !unacked_at[0] &&
        !(sync != nullptr && fresh && unknown_at[0])) {
      return a;
    }
  }
  // Undo what this attempt may have taken. A fresh acquire removes our owner
  // field wherever it may exist (granted, or outcome unknown); a re-entry
  // only counts down where it counted up. Best effort, bounded like the
  // attempt: an undo that does not land leaves a key that expires with the
  // lease.
  undo->assign(n, false);
  for (size_t i = 0; i < n; ++i) {
    (*undo)[i] = granted_at[i] || unacked_at[i] || (fresh && unknown_at[i]);
  }
  a.took_some =
      a.kind == Attempt::kHeldByOther &&
      std::any_of(undo->begin(), undo->end(), [](bool b) { return b; });
  return a;
}

void Undo(LockEnv& env, const LockModel& model, LockName name,
          const OwnerField& owner, bool fresh, const AcquireOptions& options,
          const std::vector<bool>& undo, Deadline deadline, bool async) {
  if (std::none_of(undo.begin(), undo.end(), [](bool b) { return b; })) {
    return;
  }
  SendGiveBack(
      env,
      model.Undo(name, owner, fresh, options, env.backend().publish_command()),
      deadline, /*here=*/!async, [](const std::vector<backend::Answer>&) {},
      &undo);
}

absl::StatusOr<Inspection> ParseInspection(const redis::Reply& r) {
  const redis::ReplyView v = r.view();
  if (!v.is_array() || v.size() != 3 || !v[0].is_integer() ||
      !v[1].is_integer()) {
    return Unexpected(r, "inspect script");
  }
  int64_t count = 0;  // (a counter's comes as its text)
  if (!v[2].ToInt64(&count)) return Unexpected(r, "inspect script");
  return Inspection{v[0].integer() == 1, v[1].integer(), count};
}

absl::Status HeldByOther(const LockModel& model, const Attempt& a,
                         size_t nodes) {
  if (!model.wait_ended().empty()) {
    return absl::DeadlineExceededError(model.wait_ended());
  }
  if (nodes > 1) {
    return absl::DeadlineExceededError(
        absl::StrCat("held by another owner: ", a.details));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("held by another owner (lease left: ",
                   a.min_pttl_ms < 0 ? std::string("none set")
                                     : absl::StrCat(a.min_pttl_ms, "ms"),
                   ")"));
}

absl::StatusOr<absl::Duration> RetryAfter(const LockPolicy& policy,
                                          backend::Backend& backend,
                                          int failures, const Attempt& a,
                                          Deadline deadline) {
  const size_t n = backend.nodes();
  if (n == 1 && policy.tries <= 1) return a.error;
  absl::optional<absl::Duration> delay =
      failures < policy.tries && policy.retry_backoff != nullptr
          ? policy.retry_backoff->NextDelay(failures - 1)
          : absl::nullopt;
  if (!delay.has_value()) {
    return absl::UnavailableError(absl::StrCat("no quorum (", backend.quorum(),
                                               " of ", n, ") after ", failures,
                                               " attempt(s): ", a.details));
  }
  if (deadline.Remaining() <= *delay) {
    return absl::DeadlineExceededError(
        absl::StrCat("wait ended without a quorum: ", a.details));
  }
  return *delay;
}

absl::Status CheckAsyncOwner(LockEnv& env, const std::string& name,
                             const OwnerId& by, absl::string_view op) {
  if (!by.thread) return absl::OkStatus();
  return Annotate(
      absl::InvalidArgumentError(
          "an asynchronous call needs an explicit owner (relock::Owner::New"
          "()): the calling thread does not wait for it, so it cannot be "
          "the owner"),
      op, name, env.policy().noun);
}

absl::StatusOr<redis::Reply> RunOnFirstNode(LockEnv& env, const Step& step,
                                            backend::Resend resend) {
  const backend::Call views = step.Views();
  return std::move(
      env.backend().Run(CallOf(views, Deadline::Never(), resend))[0].reply);
}

}  // namespace algorithm_internal

absl::Status ValidateReplicaSync(const ReplicaSync& sync,
                                 absl::Duration command_timeout) {
  if (sync.replicas < 0 || sync.replicas > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replica_sync.replicas must be in [0, 64], not ", sync.replicas));
  }
  // Only with replicas: the default timeout (1s) must not make a short
  // command_timeout invalid for clients that never wait. A WAIT answered
  // late (kWaitLateness) must still beat the connection's silence check.
  if (sync.replicas > 0 &&
      (sync.timeout < absl::Milliseconds(1) ||
       sync.timeout + algorithm_internal::kWaitLateness >= command_timeout)) {
    return absl::InvalidArgumentError(
        absl::StrCat("replica_sync.timeout must be at least 1ms and less than "
                     "command_timeout (",
                     absl::FormatDuration(command_timeout), ") - ",
                     absl::FormatDuration(algorithm_internal::kWaitLateness),
                     " (Redis may answer a WAIT that late), not ",
                     absl::FormatDuration(sync.timeout)));
  }
  return absl::OkStatus();
}

absl::Status ValidateSpinBackoff(const BackoffStrategy* backoff) {
  if (backoff == nullptr) return absl::OkStatus();
  bool pauses = false;
  for (int retry = 0; retry < kSpinBackoffProbes; ++retry) {
    const absl::optional<absl::Duration> delay = backoff->NextDelay(retry);
    if (!delay.has_value()) return absl::OkStatus();  // gives up: bounded
    if (*delay < absl::ZeroDuration() || *delay == absl::InfiniteDuration()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spin_backoff (", backoff->DebugString(), ") gave the delay ",
          absl::FormatDuration(*delay), " for retry ", retry,
          "; a delay must be finite and not negative"));
    }
    pauses = pauses || *delay > absl::ZeroDuration();
  }
  if (pauses) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "spin_backoff (", backoff->DebugString(), ") never waits: its first ",
      kSpinBackoffProbes,
      " delays are all zero, so a spin wait would send its re-checks back "
      "to back (use one that pauses, or gives up)"));
}

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

}  // namespace lock
}  // namespace relock
