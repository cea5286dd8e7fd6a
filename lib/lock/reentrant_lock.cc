#include "lib/lock/reentrant_lock.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/backend/gather.h"
#include "lib/common/random.h"
#include "lib/common/unshared.h"
#include "lib/lock/lock_scripts.h"
#include "lib/lock/owner.h"
#include "lib/redis/errors.h"
#include "relock/limits.h"

namespace relock {
namespace lock {
namespace {

using backend::Resend;

// Runs `script` on the backend's first node and returns its reply (error
// replies included) or the failure: for the queries and calls of the
// single-node API (Lock), whose backend has one node.
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

// Prefixes a failure with the operation and lock name (in tallies, the
// kind of lock too).
absl::Status Annotate(absl::Status s, absl::string_view op,
                      const std::string& name,
                      absl::string_view noun = "lock") {
  if (s.ok()) return s;
  return absl::Status(
      s.code(),
      absl::StrCat(op, " ", noun, " ", QuoteName(name), ": ", s.message()));
}

// What each node said, for messages: "host:port: acquired; ...".
// Who a call was for, in messages.
std::string Whom(const OwnerId& by) {
  return by.thread ? std::string("this thread")
                   : absl::StrCat("relock::Owner ", by.number & ~kWriteHoldBit);
}

std::string Details(const std::vector<std::string>& details) {
  return absl::StrJoin(details, "; ");
}

// A read-write lock's hash is another data model than a lock's (a plain,
// fenced or fair one, which share theirs): an owner's hold of one name is
// of one of the two. FailedPrecondition when `held` (the owner's hold of
// `name`, if any) is of the other model than `kind`.
bool IsReadWrite(LockKind kind) {
  return kind == LockKind::kRead || kind == LockKind::kWrite;
}
// FailedPrecondition when owner `by` (as HolderOf() gives it for `kind`)
// holds `name` as the other model than `kind`: under its number, or under
// its number with or without kWriteHoldBit (a read-write lock's write hold).
absl::Status CheckModel(LockEnv& env, const std::string& name,
                        const OwnerId& by, LockKind kind) {
  for (const uint64_t number : {by.number, by.number ^ kWriteHoldBit}) {
    const absl::optional<Hold> held = env.holds().Find(name, number);
    if (!held.has_value() || held->ended() ||
        IsReadWrite(static_cast<LockKind>(held->kind)) == IsReadWrite(kind)) {
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

// The replicas an acquire must wait for, as the backend takes them: null for
// none.
const backend::WaitReplicas* ReplicaWait(const backend::WaitReplicas& sync) {
  return sync.replicas > 0 ? &sync : nullptr;
}

// How much longer than usual an attempt's requests (and their undo, queued
// behind WAITs) may take: the WAIT's timeout.
absl::Duration ReplicaTime(const backend::WaitReplicas* sync) {
  return sync != nullptr ? sync->timeout : absl::ZeroDuration();
}

// The deadline of one attempt's requests (see LockPolicy), `extra` (the
// replicas' time) beyond the usual.
Deadline AttemptDeadline(const LockPolicy& policy, absl::Duration lease,
                         Deadline wait, absl::Duration extra) {
  if (policy.attempt_timeout_factor > 0) {
    return Deadline::After(
        std::clamp(lease * policy.attempt_timeout_factor, absl::Milliseconds(2),
                   std::max(absl::Milliseconds(2), policy.command_timeout)) +
        extra);
  }
  if (wait.Remaining() < kMinAttemptTime + extra) {
    return Deadline::After(kMinAttemptTime + extra);
  }
  return wait;
}

// The outcome of one acquire attempt on every node.
struct Attempt {
  enum Kind { kAcquired, kHeldByOther, kFailed } kind = kFailed;
  SteadyClock::time_point start;  // when the requests were sent
  int64_t token = -1;             // kAcquired, fenced: the fencing token
  int64_t min_pttl_ms = -1;       // shortest lease left among holders
  absl::Status error;             // kFailed on one node: that node's own error
  std::string details;            // each node's answer, on several nodes
  bool took_some = false;  // held by others, yet it took (and undid) nodes
};

// The acquire script's answer (lua/acquire.lua) in either form: granted
// (nil; fenced: {-1, token}), held by another owner (the holder's PTTL;
// fenced: {PTTL, -1}), or anything else.
struct AcquireReply {
  enum Kind { kGranted, kHeld, kOther } kind = kOther;
  int64_t token = -1;  // kGranted, fenced (tokens start at 1)
  int64_t pttl = -1;   // kHeld
};
AcquireReply ReadAcquireReply(const redis::Reply& r) {
  AcquireReply out;
  if (r.is_nil()) {
    out.kind = AcquireReply::kGranted;
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
    m.wait_time.Observe(absl::FromChrono(SteadyClock::now() - start));
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

void CountRelease(Metrics& m, const absl::Status& s) {
  (s.ok() ? m.releases : m.unlock_failures).Add();
}

// Policy::fail_fast: stop waiting once the attempt's outcome is certain.
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

// What one attempt's answers mean. `*undo` is set to the nodes where what
// the attempt may have taken must be undone (none when it acquired). With
// `sync`, a node that granted without enough replicas acknowledging counts
// as not granted (Unavailable) and is undone.
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
  std::vector<bool> granted_at(n), unknown_at(n), unacked_at(n);
  std::vector<std::string> details;
  for (size_t i = 0; i < n; ++i) {
    const absl::StatusOr<redis::Reply>& r = answers[i].reply;
    const std::string& who = backend.node_name(i);
    const AcquireReply reply = r.ok() ? ReadAcquireReply(*r) : AcquireReply{};
    absl::Status error;
    if (!r.ok()) {
      error = r.status();
      unknown_at[i] = true;  // the request may still run
      details.push_back(
          absl::StrCat(who, ": unavailable: ", r.status().message()));
    } else if (reply.kind == AcquireReply::kGranted &&
               !Granted(answers[i], sync)) {
      unacked_at[i] = true;
      const std::string unacked = absl::StrCat(
          "only ", std::max<int64_t>(answers[i].acked, 0), " of the ",
          sync->replicas, " required replicas acknowledged within ",
          absl::FormatDuration(sync->timeout));
      error = absl::UnavailableError(
          absl::StrCat(unacked, " on ", who, "; the acquisition was undone"));
      details.push_back(
          absl::StrCat(who, ": acquired, but ", unacked, "; undone"));
    } else if (reply.kind == AcquireReply::kGranted) {
      ++granted;
      granted_at[i] = true;
      if (a.token < 0) a.token = reply.token;
      details.push_back(absl::StrCat(who, ": acquired"));
    } else if (reply.kind == AcquireReply::kHeld) {
      const int64_t pttl = reply.pttl;
      if (pttl >= 0 && (a.min_pttl_ms < 0 || pttl < a.min_pttl_ms)) {
        a.min_pttl_ms = pttl;
      }
      details.push_back(absl::StrCat(
          who, ": held by another owner (lease left ", pttl, "ms)"));
    } else {
      error = Unexpected(*r, "acquire script");
      details.push_back(absl::StrCat(who, ": ", error.ToString()));
    }
    if (!error.ok()) {
      ++errors;
      if (a.error.ok()) a.error = std::move(error);
    }
  }
  undo->assign(n, false);
  const absl::Duration elapsed = absl::FromChrono(SteadyClock::now() - start);
  const bool valid =
      !policy.check_validity ||
      lease - elapsed - policy.Drift(lease) > absl::ZeroDuration();
  if (granted >= quorum && valid) {
    a.kind = Attempt::kAcquired;
    return a;
  }
  if (granted >= quorum) {
    details.push_back(absl::StrCat("validity used up: the attempt took ",
                                   absl::FormatDuration(elapsed), " of a ",
                                   absl::FormatDuration(lease), " lease"));
  }
  a.details = Details(details);
  a.kind = granted < quorum && errors <= n - quorum ? Attempt::kHeldByOther
                                                    : Attempt::kFailed;
  if (n == 1) {
    // One node: no other node's answer can contradict it. An unanswered
    // request leaves at most an orphaned count that expires with its lease
    // and that this owner's next fresh acquire absorbs.
    if (a.kind == Attempt::kFailed && a.error.ok()) {
      a.error = absl::AbortedError(a.details);  // validity used up
    }
    // Except: what the node took without its replicas' acknowledgement, and
    // (with replica sync) a fresh acquire with an unknown outcome, since a
    // WAIT that failed after the script ran makes it one.
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
  for (size_t i = 0; i < n; ++i) {
    (*undo)[i] = granted_at[i] || unacked_at[i] || (fresh && unknown_at[i]);
  }
  a.took_some =
      a.kind == Attempt::kHeldByOther &&
      std::any_of(undo->begin(), undo->end(), [](bool b) { return b; });
  return a;
}

// The undo of an attempt on the nodes in `undo`: blocking until `deadline`,
// or (with `async`) sent without waiting for its answers.
void Undo(LockEnv& env, const LockModel& model, const std::string& name,
          const std::string& owner, bool fresh, const std::vector<bool>& undo,
          Deadline deadline, bool async) {
  if (std::none_of(undo.begin(), undo.end(), [](bool b) { return b; })) {
    return;
  }
  backend::Backend& backend = env.backend();
  const Step step =
      fresh ? model.ReleaseAll(name, owner, backend.publish_command())
            : model.Release(name, owner, "0", backend.publish_command(),
                            /*last=*/false);
  const backend::Call call = step.Views();
  if (async) {
    backend.RunAsync(
        step.script, call.keys, call.args, deadline, Resend::kNever, nullptr,
        [](const std::vector<backend::Answer>&) {}, &undo);
  } else {
    backend.Run(step.script, call.keys, call.args, deadline, Resend::kNever,
                nullptr, &undo);
  }
}

// One attempt: the acquire script on every node at once (each followed by
// WAIT with `sync`). On fewer than a quorum of grants (or no validity left),
// undoes what it may have taken. `fresh`: the owner holds no hold of its own
// (see lua/acquire.lua); `queue`: the caller waits if it does not get the
// lock (see LockModel::Acquire).
Attempt TryOnce(LockEnv& env, const LockModel& model,
                const AcquireOptions& options, const std::string& name,
                const std::string& owner, absl::Duration lease, bool fresh,
                bool queue, Deadline wait, const backend::WaitReplicas* sync) {
  backend::Backend& backend = env.backend();
  const LockPolicy& policy = env.policy();
  const SteadyClock::time_point start = SteadyClock::now();
  // Safe to resend on a dropped connection: a fresh acquire that ran twice
  // sets the count to 1 twice; a re-entry counted twice is cleared at the
  // outermost release. (A fenced acquire that ran twice took two tokens:
  // they still only grow.)
  const Step step = model.Acquire(name, owner, lease, fresh, queue, options,
                                  backend.publish_command());
  const backend::Call call = step.Views();
  const absl::Duration extra = ReplicaTime(sync);
  std::vector<backend::Answer> answers = backend.Run(
      step.script, call.keys, call.args,
      AttemptDeadline(policy, lease, wait, extra), Resend::kIfDropped,
      FailFast(policy, backend.nodes(), backend.quorum(), sync), nullptr, sync);
  std::vector<bool> undo;
  Attempt a = Evaluate(env, answers, start, lease, fresh, sync, &undo);
  Undo(env, model, name, owner, fresh, undo,
       AttemptDeadline(policy, lease, wait, extra), /*async=*/false);
  return a;
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
absl::StatusOr<Inspection> ParseInspection(const redis::Reply& r) {
  const redis::ReplyView v = r.view();
  if (!v.is_array() || v.size() != 3 || !v[0].is_integer() ||
      !v[1].is_integer() || !v[2].is_integer()) {
    return Unexpected(r, "inspect script");
  }
  return Inspection{v[0].integer() == 1, v[1].integer(), v[2].integer()};
}
absl::StatusOr<Inspection> Inspect(LockEnv& env, const LockModel& model,
                                   const std::string& name,
                                   const std::string& owner) {
  const Step step = model.Inspect(name, owner);
  const backend::Call call = step.Views();
  absl::StatusOr<redis::Reply> r =
      std::move(env.backend()
                    .Run(step.script, call.keys, call.args, Deadline::Never(),
                         Resend::kIfDropped)[0]
                    .reply);
  if (!r.ok()) return r.status();
  return ParseInspection(*r);
}

absl::Status HeldByOther(const Attempt& a, size_t nodes) {
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

// After the `failures`th failed attempt `a` (no quorum of answers): how
// long to wait before the next one, or why to stop (the error itself on a
// single node without retries).
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

// Adds one node's answers to a renewal batch to the per-item counts; the
// first error that left some of them uncounted goes to `*error`.
void CountRenewals(const std::vector<absl::StatusOr<redis::Reply>>& replies,
                   const std::vector<backend::Call>& calls,
                   const std::vector<std::vector<size_t>>& call_items,
                   std::vector<size_t>* renewed, std::vector<size_t>* gone,
                   absl::Status* error) {
  auto fail = [error](absl::Status s) {
    if (error->ok()) *error = std::move(s);
  };
  for (size_t call = 0; call < calls.size(); ++call) {
    if (!replies[call].ok()) {
      fail(replies[call].status());
      continue;
    }
    const redis::Reply& reply = *replies[call];
    if (reply.is_error()) {
      fail(redis::ErrorReplyToStatus("renew script", reply.str()));
      continue;
    }
    const redis::ReplyView v = reply.view();
    const size_t k = calls[call].keys.size();
    if (!v.is_array() || v.size() != k) {
      fail(absl::InternalError(
          absl::StrCat("renew script: unexpected reply ", v.Describe())));
      continue;
    }
    for (size_t i = 0; i < k; ++i) {
      if (!v[i].is_integer()) {
        fail(absl::InternalError(absl::StrCat(
            "renew script: unexpected element ", v[i].Describe())));
        continue;
      }
      const size_t item = call_items[call][i];
      (v[i].integer() == 1 ? (*renewed)[item] : (*gone)[item]) += 1;
    }
  }
}

}  // namespace

absl::Status ValidateReplicaSync(const ReplicaSync& sync,
                                 absl::Duration command_timeout) {
  if (sync.replicas < 0 || sync.replicas > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replica_sync.replicas must be in [0, 64], not ", sync.replicas));
  }
  // Only with replicas: the default timeout (1s) must not make a short
  // command_timeout invalid for clients that never wait.
  if (sync.replicas > 0 && (sync.timeout < absl::Milliseconds(1) ||
                            sync.timeout >= command_timeout)) {
    return absl::InvalidArgumentError(
        absl::StrCat("replica_sync.timeout must be at least 1ms and less than "
                     "command_timeout (",
                     absl::FormatDuration(command_timeout), "), not ",
                     absl::FormatDuration(sync.timeout)));
  }
  return absl::OkStatus();
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

namespace {

// What an acquire by `by` takes: its lease (the watchdog's or an explicit
// one) and whether the owner holds no hold of its own yet. InvalidArgument
// for a lease out of range; the client's error once it is closed.
struct AcquirePlan {
  bool fresh = true;
  bool watchdog = true;
  absl::Duration lease;
  AcquireOptions options;
  const LockModel* model = &ReentrantModel();
  const backend::WaitReplicas* sync() const {
    return ReplicaWait(options.replica_sync);
  }
};
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
  const absl::optional<Hold> held = env.holds().Find(name, by.number);
  AcquirePlan plan;
  plan.fresh = !held.has_value() || held->ended();
  if (options.kind == LockKind::kWrite && plan.fresh) {
    // No upgrade: the write lock waits for every reader, this owner too, so
    // the wait could only end at its deadline (Redisson's would hang).
    const absl::optional<Hold> read =
        env.holds().Find(name, by.number & ~kWriteHoldBit);
    if (read.has_value() && !read->ended() &&
        static_cast<LockKind>(read->kind) == LockKind::kRead) {
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

// Registers a hold just taken (renewed from now on for a watchdog lease),
// unless the client closed meanwhile: Close() may have swept the registry
// before we registered, so the hold is released (and Cancelled returned)
// rather than leaked. `async`: send that release without waiting.
absl::Status RegisterHold(LockEnv& env, const std::string& name,
                          const OwnerId& by, const AcquirePlan& plan,
                          SteadyClock::time_point sent_at, bool async) {
  const std::string owner = OwnerField(env.id(), by.number);
  env.holds().OnAcquired(name, by.number, owner, plan.watchdog, plan.lease,
                         sent_at, static_cast<uint8_t>(plan.model->kind()),
                         plan.fresh && plan.options.on_lost
                             ? LossCallback(name, owner, plan.options.on_lost)
                             : nullptr);
  if (plan.watchdog) env.ActivateWatchdog();
  if (!env.closed()) return absl::OkStatus();
  env.holds().Forget(name, by.number);
  const Step step =
      plan.model->ReleaseAll(name, owner, env.backend().publish_command());
  const backend::Call call = step.Views();
  const Deadline deadline = Deadline::After(env.confirm_timeout());
  if (async) {
    env.backend().RunAsync(step.script, call.keys, call.args, deadline,
                           Resend::kNever, nullptr,
                           [](const std::vector<backend::Answer>&) {});
  } else {
    env.backend().Run(step.script, call.keys, call.args, deadline,
                      Resend::kNever);
  }
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
         env.holds().TryLocalReentry(name, by.number, SteadyClock::now(),
                                     env.policy().Drift(env.watchdog_lease()));
}

// Completes an asynchronous call that needed no I/O (a local re-entry or
// release) on the client's event loop thread, where every asynchronous call
// completes: `done` runs there with OK, or with Cancelled should the loop
// drop it unrun (the client closed; Close() then released the hold).
class LoopCompletion {
 public:
  // `keep`: the client, held until the completion is gone.
  static void Post(LockEnv& env, std::shared_ptr<void> keep,
                   std::function<void(absl::Status)> done) {
    std::shared_ptr<LoopCompletion> c(new LoopCompletion(
        std::move(keep), env.backend().NewTimer(), std::move(done)));
    c->timer_->At(Deadline::After(absl::ZeroDuration()), [c] {
      std::function<void(absl::Status)> done = std::move(c->done_);
      c->done_ = nullptr;
      done(absl::OkStatus());
    });
  }
  ~LoopCompletion() {
    if (done_) done_(absl::CancelledError("the client was closed"));
  }

 private:
  LoopCompletion(std::shared_ptr<void> keep,
                 std::unique_ptr<backend::Timer> timer,
                 std::function<void(absl::Status)> done)
      : keep_(std::move(keep)),
        timer_(std::move(timer)),
        done_(std::move(done)) {}
  // Declared first, destroyed last: the timer's destruction reaches the
  // client's loop.
  const std::shared_ptr<void> keep_;
  const std::unique_ptr<backend::Timer> timer_;
  std::function<void(absl::Status)> done_;
};

// The asynchronous calls act for explicit owners only.
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
  // before its deadline).
  using Done = std::function<void(absl::Status, const Grant&, bool waited)>;

  // `keep` (may be null): held until the machine is gone (see keep_).
  AcquireMachine(LockEnv& env, std::shared_ptr<void> keep, std::string name,
                 const OwnerId& by, const AcquirePlan& plan, Deadline deadline,
                 Done done)
      : keep_(std::move(keep)),
        env_(env),
        name_(std::move(name)),
        owner_(OwnerField(env.id(), by.number)),
        lease_(plan.lease),
        fresh_(plan.fresh),
        model_(*plan.model),
        options_(plan.options),
        deadline_(deadline),
        queue_(!deadline.Expired()),
        done_(std::move(done)),
        timer_(env.backend().NewTimer()) {}

  ~AcquireMachine() {
    if (done_) {
      done_(absl::CancelledError("the client was closed while waiting"),
            Grant(), waited_);
    }
  }

  // From the first attempt.
  void Start() {
    timer_->At(Deadline::After(absl::ZeroDuration()),
               [self = shared_from_this()] { self->TryNow(); });
  }

  // From attempt `held`, made elsewhere, that found the lock held.
  void WaitAfter(Attempt held) {
    timer_->At(Deadline::After(absl::ZeroDuration()),
               [self = shared_from_this(), held = std::move(held)]() mutable {
                 self->OnAttempt(std::move(held));
               });
  }

 private:
  enum class Phase { kAttempting, kBackingOff, kConfirming, kWaiting, kDone };

  void TryNow() {
    if (phase_ == Phase::kDone) return;
    phase_ = Phase::kAttempting;
    backend::Backend& backend = env_.backend();
    const LockPolicy& policy = env_.policy();
    const Step step = model_.Acquire(name_, owner_, lease_, fresh_, queue_,
                                     options_, backend.publish_command());
    const backend::Call call = step.Views();
    const SteadyClock::time_point start = SteadyClock::now();
    const backend::WaitReplicas* sync = ReplicaWait(options_.replica_sync);
    backend.RunAsync(
        step.script, call.keys, call.args,
        AttemptDeadline(policy, lease_, deadline_, ReplicaTime(sync)),
        Resend::kIfDropped,
        FailFast(policy, backend.nodes(), backend.quorum(), sync),
        [self = shared_from_this(),
         start](const std::vector<backend::Answer>& answers) {
          self->OnAnswers(answers, start);
        },
        nullptr, sync);
  }

  void OnAnswers(const std::vector<backend::Answer>& answers,
                 SteadyClock::time_point start) {
    if (phase_ == Phase::kDone) return;
    std::vector<bool> undo;
    const backend::WaitReplicas* sync = ReplicaWait(options_.replica_sync);
    Attempt a = Evaluate(env_, answers, start, lease_, fresh_, sync, &undo);
    Undo(env_, model_, name_, owner_, fresh_, undo,
         AttemptDeadline(env_.policy(), lease_, deadline_, ReplicaTime(sync)),
         /*async=*/true);
    OnAttempt(std::move(a));
  }

  void OnAttempt(Attempt a) {
    if (phase_ == Phase::kDone) return;
    const size_t n = env_.backend().nodes();
    if (a.kind == Attempt::kAcquired) {
      return Finish(absl::OkStatus(), Grant{a.start, a.token});
    }
    if (a.kind == Attempt::kFailed) {
      if (sub_ != nullptr) sub_->PassOn();  // a wake-up we consumed goes on
      absl::StatusOr<absl::Duration> delay =
          RetryAfter(env_.policy(), env_.backend(), ++failures_, a, deadline_);
      if (!delay.ok()) return Finish(delay.status());
      phase_ = Phase::kBackingOff;
      timer_->At(Deadline::After(*delay),
                 [self = shared_from_this()] { self->TryNow(); });
      return;
    }
    if (deadline_.Expired()) return Finish(HeldByOther(a, n));
    waited_ = true;
    const bool split = a.took_some;
    last_ = std::move(a);
    if (sub_ == nullptr) Subscribe();
    if (split) {
      // A split vote (Redlock): we took some masters, others took the rest.
      // Retrying as soon as the undos' unlock messages arrive would collide
      // again, every contender at once (a livelock); as Redlock prescribes,
      // back off for a random time first, longer after each split.
      phase_ = Phase::kBackingOff;
      const int64_t max_ms = int64_t{1} << std::min(++splits_, 7);
      timer_->At(
          Earliest(deadline_,
                   Deadline::After(absl::Milliseconds(
                       absl::Uniform<int64_t>(ThreadBitGen(), 1, max_ms + 1)))),
          [self = shared_from_this()] { self->Confirm(); });
      return;
    }
    if (!confirmed_) return Confirm();  // then re-check
    // Sleep until an unlock message, the holder's lease end, or the deadline.
    absl::Duration sleep = absl::Milliseconds(last_.min_pttl_ms + 1);
    if (last_.min_pttl_ms < 0) {
      // No lease: a lock set by hand, or not a lock at all (bounded either
      // way: FailedPrecondition, or a re-check every kNoLeaseRecheck); or
      // (a queue) nothing else to wait for.
      sleep = kNoLeaseRecheck;
      if (n == 1) CheckIsALock();
    }
    sleep = std::min(sleep, model_.max_sleep());
    phase_ = Phase::kWaiting;
    timer_->At(Earliest(deadline_, Deadline::After(sleep)),
               [self = shared_from_this()] {
                 if (self->phase_ == Phase::kWaiting) self->Confirm();
               });
    Look();  // a message may be waiting already
  }

  void Subscribe() {
    std::weak_ptr<AcquireMachine> weak = weak_from_this();
    sub_ = env_.backend().Subscribe(
        model_.WaitChannel(name_, owner_), model_.wake_policy(), /*waiter=*/"",
        [weak] {
          if (std::shared_ptr<AcquireMachine> self = weak.lock()) self->Look();
        });
  }

  // The inspect script: a key that holds anything but a lock ends the wait.
  void CheckIsALock() {
    const Step step = model_.Inspect(name_, owner_);
    const backend::Call call = step.Views();
    env_.backend().RunAsync(step.script, call.keys, call.args, deadline_,
                            Resend::kIfDropped, nullptr,
                            [self = shared_from_this()](
                                const std::vector<backend::Answer>& answers) {
                              if (!answers[0].reply.ok())
                                return;  // the next re-check tells
                              absl::StatusOr<Inspection> what =
                                  ParseInspection(*answers[0].reply);
                              if (!what.ok()) self->Finish(what.status());
                            });
  }

  // Only after the servers confirmed the subscription is a re-check free of
  // lost wake-ups. Confirmed once, it stays confirmed until the pub/sub
  // connection is replaced; then the re-check waits for the SUBSCRIBE on
  // the new one (messages sent in between are lost).
  void Confirm() {
    if (phase_ == Phase::kDone) return;
    phase_ = Phase::kConfirming;
    confirm_by_ =
        Earliest(deadline_, Deadline::After(env_.confirm_timeout() +
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
      Finish(HeldByOther(last_, env_.backend().nodes()));
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

  static Deadline Now() { return Deadline::After(absl::ZeroDuration()); }

  void Finish(const absl::Status& s, const Grant& grant = Grant()) {
    if (phase_ == Phase::kDone) return;
    phase_ = Phase::kDone;
    timer_->Cancel();
    sub_ = nullptr;
    Done done = std::move(done_);
    done_ = nullptr;
    done(s, grant, waited_);
  }

  // The client, for an asynchronous acquire: declared first, so destroyed
  // last, after timer_, whose destruction still reaches the client's loop
  // (`done`, which holds the client too, may drop its reference first).
  const std::shared_ptr<void> keep_;
  LockEnv& env_;
  const std::string name_;
  const std::string owner_;
  const absl::Duration lease_;
  const bool fresh_;
  const LockModel& model_;
  const AcquireOptions options_;
  const Deadline deadline_;
  const bool queue_;  // the caller may wait (see LockModel::Acquire)
  Done done_;
  const std::unique_ptr<backend::Timer> timer_;
  std::unique_ptr<backend::Waiter> sub_;
  bool confirmed_ = false;  // the subscription, as of the last look
  Phase phase_ = Phase::kAttempting;
  int failures_ = 0;
  Attempt last_;  // the latest attempt that found the lock held
  Deadline confirm_by_ = Deadline::Never();
  int splits_ = 0;  // split votes so far
  bool waited_ = false;
};

// Waits for the lock that attempt `held` found held: the machine above
// waits (notified) and makes the next attempts on the loop thread; this
// thread blocks until it is done. On success, `*grant` is the winning
// acquire's.
absl::Status WaitForLock(LockEnv& env, const std::string& name,
                         const OwnerId& by, const AcquirePlan& plan,
                         Deadline deadline, Attempt held, Grant* grant) {
  struct Result {
    absl::Status status;
    Grant grant;
  };
  backend::Gather<Result> gather(1);
  std::function<void(Result)> slot = gather.Slot(0);
  // The client outlives this call (its caller holds it): no keep-alive.
  std::make_shared<AcquireMachine>(
      env, /*keep=*/nullptr, name, by, plan, deadline,
      [slot](const absl::Status& s, const Grant& won, bool /*waited*/) {
        slot(Result{Unshared(s), won});  // it crosses to the waiting thread
      })
      ->WaitAfter(std::move(held));
  // The machine always ends: with the lock, at its deadline, or on Close()
  // (or, its callbacks dropped, from its destructor).
  bool stopped = false;
  std::vector<absl::optional<Result>> got =
      gather.Wait(Deadline::Never(), nullptr, &stopped);
  *grant = got[0]->grant;
  return got[0]->status;
}

// On success, `*grant` is the winning acquire's. The first attempt runs on
// the calling thread (on an idle connection, with its own I/O); a lock found
// held is waited for by WaitForLock() (`*waited` is then set). `queue`: the
// caller may wait.
absl::Status AcquireLoop(LockEnv& env, const std::string& name,
                         const OwnerId& by, const AcquirePlan& plan,
                         Deadline deadline, bool queue, Grant* grant,
                         bool* waited) {
  const std::string owner = OwnerField(env.id(), by.number);
  for (int failures = 0;;) {
    Attempt a = TryOnce(env, *plan.model, plan.options, name, owner, plan.lease,
                        plan.fresh, queue, deadline, plan.sync());
    if (a.kind == Attempt::kAcquired) {
      *grant = Grant{a.start, a.token};
      return absl::OkStatus();
    }
    if (a.kind == Attempt::kHeldByOther) {
      if (deadline.Expired()) return HeldByOther(a, env.backend().nodes());
      *waited = true;
      return WaitForLock(env, name, by, plan, deadline, std::move(a), grant);
    }
    absl::StatusOr<absl::Duration> delay =
        RetryAfter(env.policy(), env.backend(), ++failures, a, deadline);
    if (!delay.ok()) return delay.status();
    absl::SleepFor(*delay);
  }
}

// A waiter that gave up leaves the lock's queue, if its type has one: sent
// at once, and (`wait`) awaited for at most kMinAttemptTime, so that the
// queue no longer holds it when the failed call returns.
void LeaveQueue(LockEnv& env, const std::string& name, const OwnerId& by,
                const AcquirePlan& plan, bool wait) {
  const absl::optional<Step> step =
      plan.model->Leave(name, OwnerField(env.id(), by.number), plan.options,
                        plan.fresh, env.backend().publish_command());
  if (!step.has_value()) return;
  const backend::Call call = step->Views();
  const Deadline deadline = Deadline::After(kMinAttemptTime);
  if (wait) {
    env.backend().Run(step->script, call.keys, call.args, deadline,
                      Resend::kIfDropped);
  } else {
    env.backend().RunAsync(step->script, call.keys, call.args, deadline,
                           Resend::kIfDropped, nullptr,
                           [](const std::vector<backend::Answer>&) {});
  }
}

}  // namespace

absl::Status Acquire(LockEnv& env, const std::string& name, const OwnerId& by,
                     absl::optional<absl::Duration> lease, Deadline deadline,
                     const AcquireOptions& options, int64_t* token) {
  const SteadyClock::time_point start = SteadyClock::now();
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
  absl::Status s =
      AcquireLoop(env, name, by, *plan, deadline, queue, &grant, &waited);
  if (s.ok()) {
    // Registered (and, for a watchdog lease, renewed from now on) before
    // Acquire() returns.
    if (plan->fresh && by.thread) env.OnFreshHold();
    s = RegisterHold(env, name, by, *plan, grant.sent_at, /*async=*/false);
  } else if (queue) {
    LeaveQueue(env, name, by, *plan, /*wait=*/true);
  }
  CountAcquire(env, s, plan->fresh, waited, start);
  if (!s.ok()) return Annotate(s, "acquire", name, env.policy().noun);
  if (token != nullptr) *token = grant.token;
  return s;
}

namespace {

// A release on its way: what was sent, and what the answers are read with.
struct ReleaseCall {
  std::string owner;
  std::string lease_ms;
  const LockModel* model = nullptr;
  absl::optional<Hold> hold;
  bool outermost = false;
  // As far as this client knows, the release frees the lock: its outermost
  // hold, or one it no longer tracks.
  bool last = true;
  Deadline deadline = Deadline::Never();
  Resend resend = Resend::kNever;
};

// Starts a release (stops renewal of a final one): what to send.
ReleaseCall BeginReleaseCall(LockEnv& env, const std::string& name,
                             const OwnerId& by, LockKind kind) {
  ReleaseCall c;
  c.owner = OwnerField(env.id(), by.number);
  // A final release stops renewal before the script is sent, whatever its
  // outcome: a failed final release leaves a lock that frees itself at the
  // end of its lease, never one renewed forever.
  c.hold = env.holds().BeginRelease(name, by.number);
  // When holds remain, refresh a watchdog lease; keep an explicit lease's TTL.
  c.lease_ms =
      c.hold.has_value() && c.hold->watchdog
          ? absl::StrCat(absl::ToInt64Milliseconds(env.watchdog_lease()))
          : "0";
  // The outermost release may be resent on a dropped connection: if the
  // first one ran, the resent one finds the lock already released. An inner
  // one may not (counting down twice would free the lock early).
  c.outermost = c.hold.has_value() && c.hold->count <= 1;
  c.last = !c.hold.has_value() || c.hold->count <= 1;
  c.resend = c.outermost ? Resend::kIfDropped : Resend::kNever;
  // The hold's own lock type, should the handle's differ.
  c.model =
      &ModelOf(c.hold.has_value() ? static_cast<LockKind>(c.hold->kind) : kind);
  c.deadline = env.backend().nodes() == 1
                   ? Deadline::Never()
                   : Deadline::After(env.policy().command_timeout);
  return c;
}

// What the release script's answers say: the call's result, or (with
// `*release_all`) that holds counted twice must be released too first (see
// below), and then FinishRelease().
absl::Status JudgeRelease(LockEnv& env, const std::string& name,
                          const OwnerId& by, const ReleaseCall& call,
                          const std::vector<backend::Answer>& answers,
                          bool* release_all, bool* freed_all) {
  *release_all = false;
  backend::Backend& backend = env.backend();
  const std::string& noun = env.policy().noun;
  const size_t n = backend.nodes();
  const size_t quorum = backend.quorum();
  const uint64_t thread = by.number;
  const std::string& owner = call.owner;
  const bool outermost = call.outermost;
  size_t released = 0, freed = 0, not_owner = 0;
  absl::Status error, unpublished;
  std::vector<std::string> details;
  for (size_t i = 0; i < n; ++i) {
    const absl::StatusOr<redis::Reply>& r = answers[i].reply;
    const std::string& who = backend.node_name(i);
    if (r.ok() && internal::IsUnpublished(*r)) {
      // Freed, but Redis refused to tell its waiters.
      ++released;
      ++freed;
      if (unpublished.ok()) {
        unpublished = internal::UnpublishedStatus("release script", *r);
      }
      details.push_back(absl::StrCat(who, ": released, waiters not told"));
    } else if (r.ok() && r->is_nil() && answers[i].resent) {
      ++released;  // the dropped first attempt ran
      ++freed;
      details.push_back(absl::StrCat(who, ": released"));
    } else if (r.ok() && r->is_integer()) {
      ++released;
      freed += r->integer() == 1 ? 1 : 0;
      details.push_back(absl::StrCat(who, ": released"));
    } else if (r.ok() && r->is_nil()) {
      ++not_owner;
      details.push_back(absl::StrCat(who, ": not held by ", Whom(by)));
    } else {
      absl::Status e = r.ok() ? Unexpected(*r, "release script") : r.status();
      details.push_back(absl::StrCat(who, ": ", e.ToString()));
      if (error.ok()) error = std::move(e);
    }
  }
  if (released >= quorum) {
    if (!unpublished.ok()) {
      env.holds().Forget(name, thread);
      return Annotate(unpublished, "release", name, noun);
    }
    *freed_all = freed >= quorum || outermost;
    if (outermost && freed < released) {
      // This was the outermost release by our count, yet Redis still counts
      // holds for this owner: re-entries whose replies were lost (timeouts,
      // dropped connections). Nobody would ever release them; release them
      // now (only this owner uses this owner field).
      *release_all = true;
      return absl::OkStatus();
    }
    env.holds().OnReleased(name, thread, *freed_all);
    return absl::OkStatus();
  }
  if (not_owner > n - quorum) {
    if (absl::optional<Hold> lost = env.holds().Forget(name, thread)) {
      return Annotate(
          absl::AbortedError(absl::StrCat(
              "lease lost: ", Whom(by), " held the lock, but ",
              lost->lost      ? "the watchdog could not keep its lease alive"
              : lost->expired ? "its explicit lease ran out"
              : n > 1         ? "a majority of masters no longer have it"
                              : "its lease ran out or it was force-released",
              " before this release; work done under it may have overlapped "
              "with another owner",
              n > 1 ? absl::StrCat(": ", Details(details)) : "")),
          "release", name, noun);
    }
    return Annotate(
        absl::FailedPreconditionError(absl::StrCat(
            "not held by ", Whom(by), " (owner ", owner,
            "; a hold whose explicit lease ran out is forgotten ",
            absl::FormatDuration(kExpiredHoldRetention), " after it ended)")),
        "release", name, noun);
  }
  // The outcome is unknown. A final release abandons the hold: it stays
  // unrenewed (it frees at the end of its lease at the latest), and this
  // thread's next acquire starts afresh, absorbing a count that survived.
  // Retrying Release() frees it now if this attempt did not run.
  if (outermost) env.holds().Forget(name, thread);
  if (n == 1) return Annotate(error, "release", name, noun);
  return Annotate(absl::UnavailableError(absl::StrCat(
                      "no quorum of masters answered: ", Details(details))),
                  "release", name, noun);
}

// After the release-all that JudgeRelease() asked for.
absl::Status FinishRelease(LockEnv& env, const std::string& name,
                           const OwnerId& by,
                           const std::vector<backend::Answer>& all,
                           bool freed_all) {
  if (env.backend().nodes() == 1 && !all[0].reply.ok()) {
    return Annotate(all[0].reply.status(), "release", name, env.policy().noun);
  }
  env.holds().OnReleased(name, by.number, freed_all);
  return absl::OkStatus();
}

}  // namespace

namespace {

absl::Status ReleaseOnce(LockEnv& env, const std::string& name,
                         const OwnerId& by, LockKind kind) {
  if (absl::Status s = env.CheckBlockingCall(); !s.ok()) {
    return Annotate(s, "release", name, env.policy().noun);
  }
  if (absl::Status s = CheckModel(env, name, by, kind); !s.ok()) {
    return Annotate(s, "release", name, env.policy().noun);
  }
  // A re-entry counted locally is released locally.
  if (env.holds().TryLocalRelease(name, by.number)) {
    return absl::OkStatus();
  }
  const ReleaseCall call = BeginReleaseCall(env, name, by, kind);
  const absl::string_view publish = env.backend().publish_command();
  const Step step =
      call.model->Release(name, call.owner, call.lease_ms, publish, call.last);
  const backend::Call views = step.Views();
  std::vector<backend::Answer> answers = env.backend().Run(
      step.script, views.keys, views.args, call.deadline, call.resend);
  bool release_all = false, freed_all = false;
  absl::Status s =
      JudgeRelease(env, name, by, call, answers, &release_all, &freed_all);
  if (!release_all) return s;
  const Step all_step = call.model->ReleaseAll(name, call.owner, publish);
  const backend::Call all_views = all_step.Views();
  std::vector<backend::Answer> all =
      env.backend().Run(all_step.script, all_views.keys, all_views.args,
                        call.deadline, Resend::kNever);
  return FinishRelease(env, name, by, all, freed_all);
}

}  // namespace

absl::Status Release(LockEnv& env, const std::string& name, const OwnerId& by,
                     LockKind kind) {
  absl::Status s = ReleaseOnce(env, name, by, kind);
  CountRelease(env.metrics(), s);
  return s;
}

void AcquireAsync(LockEnv& env, std::shared_ptr<void> keep,
                  const std::string& name, const OwnerId& by,
                  absl::optional<absl::Duration> lease, Deadline deadline,
                  const AcquireOptions& options, AcquireDone done) {
  if (absl::Status s = CheckAsyncOwner(env, name, by, "acquire"); !s.ok()) {
    return done(s, -1);
  }
  const SteadyClock::time_point start = SteadyClock::now();
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
                               bool waited) {
        if (!s.ok() && queue) LeaveQueue(env, name, by, plan, /*wait=*/false);
        absl::Status result =
            s.ok() ? RegisterHold(env, name, by, plan, grant.sent_at,
                                  /*async=*/true)
                   : s;
        CountAcquire(env, result, plan.fresh, waited, start);
        if (result.ok()) return done(result, grant.token);
        done(Annotate(result, "acquire", name, env.policy().noun), -1);
      })
      ->Start();
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
  if (absl::Status s = env.CheckOpen(); !s.ok()) {
    return done(Annotate(s, "release", name, env.policy().noun));
  }
  if (absl::Status s = CheckModel(env, name, by, kind); !s.ok()) {
    return done(Annotate(s, "release", name, env.policy().noun));
  }
  // A re-entry counted locally is released locally.
  if (env.holds().TryLocalRelease(name, by.number)) {
    return LoopCompletion::Post(env, std::move(keep), std::move(done));
  }
  auto call = std::make_shared<const ReleaseCall>(
      BeginReleaseCall(env, name, by, kind));
  const Step step =
      call->model->Release(name, call->owner, call->lease_ms,
                           env.backend().publish_command(), call->last);
  const backend::Call views = step.Views();
  env.backend().RunAsync(
      step.script, views.keys, views.args, call->deadline, call->resend,
      nullptr,
      [&env, keep = std::move(keep), name, by, call,
       done = std::move(done)](const std::vector<backend::Answer>& answers) {
        bool release_all = false, freed_all = false;
        absl::Status s = JudgeRelease(env, name, by, *call, answers,
                                      &release_all, &freed_all);
        if (!release_all) return done(s);
        const Step all_step = call->model->ReleaseAll(
            name, call->owner, env.backend().publish_command());
        const backend::Call all_views = all_step.Views();
        env.backend().RunAsync(
            all_step.script, all_views.keys, all_views.args, call->deadline,
            Resend::kNever, nullptr,
            [&env, keep, name, by, freed_all,
             done](const std::vector<backend::Answer>& all) {
              done(FinishRelease(env, name, by, all, freed_all));
            });
      });
}

absl::Status Extend(LockEnv& env, const std::string& name, const OwnerId& by,
                    absl::Duration lease) {
  const std::string& noun = env.policy().noun;
  if (lease < kMinLease || lease > kMaxLease) {
    return Annotate(absl::InvalidArgumentError(absl::StrCat(
                        "lease ", absl::FormatDuration(lease), " is outside [",
                        absl::FormatDuration(kMinLease), ", ",
                        absl::FormatDuration(kMaxLease), "]")),
                    "extend", name, noun);
  }
  if (absl::Status s = env.CheckBlockingCall(); !s.ok()) {
    return Annotate(s, "extend", name, noun);
  }
  backend::Backend& backend = env.backend();
  const LockPolicy& policy = env.policy();
  const size_t n = backend.nodes();
  const size_t quorum = backend.quorum();
  const uint64_t thread = by.number;
  const absl::optional<Hold> hold = env.holds().Find(name, thread);
  if (!hold.has_value()) {
    return Annotate(
        absl::FailedPreconditionError(absl::StrCat("not held by ", Whom(by))),
        "extend", name, noun);
  }
  if (hold->ended()) {
    return Annotate(absl::AbortedError("lease lost"), "extend", name, noun);
  }
  const SteadyClock::time_point start = SteadyClock::now();
  const std::string lease_ms = absl::StrCat(absl::ToInt64Milliseconds(lease));
  const absl::string_view keys[] = {name};
  const absl::string_view args[] = {lease_ms, hold->owner};
  std::vector<backend::Answer> answers = backend.Run(
      internal::kRenewScript, keys, args,
      AttemptDeadline(policy, lease, Deadline::Never(), absl::ZeroDuration()),
      Resend::kIfDropped);
  size_t renewed = 0, gone = 0;
  std::vector<std::string> details;
  for (size_t i = 0; i < n; ++i) {
    const absl::StatusOr<redis::Reply>& r = answers[i].reply;
    if (r.ok() && r->view().is_array() && r->view().size() == 1 &&
        r->view()[0].is_integer()) {
      const bool ok = r->view()[0].integer() == 1;
      renewed += ok ? 1 : 0;
      gone += ok ? 0 : 1;
      details.push_back(
          absl::StrCat(backend.node_name(i), ok ? ": extended" : ": not held"));
    } else {
      details.push_back(
          absl::StrCat(backend.node_name(i), ": ",
                       r.ok() ? r->view().Describe() : r.status().ToString()));
    }
  }
  const absl::Duration elapsed = absl::FromChrono(SteadyClock::now() - start);
  if (renewed >= quorum &&
      lease - elapsed - policy.Drift(lease) > absl::ZeroDuration()) {
    env.holds().OnExtended(name, thread, lease, start);
    return absl::OkStatus();
  }
  if (gone > n - quorum) {
    return Annotate(absl::AbortedError(absl::StrCat(
                        "lease lost: a majority of masters no longer have it: ",
                        Details(details))),
                    "extend", name, noun);
  }
  return Annotate(absl::UnavailableError(absl::StrCat(
                      "no quorum extended in time: ", Details(details))),
                  "extend", name, noun);
}

watchdog::LossFn LossCallback(const std::string& name, const std::string& owner,
                              std::function<void(const LockEvent&)> fn) {
  return [name, owner, fn = std::move(fn)](const absl::Status& why) {
    fn(LockEvent{LockEventType::kLockLost, name, why, owner});
  };
}

absl::Status OnLost(LockEnv& env, const std::string& name, const OwnerId& by,
                    std::function<void(const LockEvent&)> fn) {
  if (!fn) {
    return absl::InvalidArgumentError(
        absl::StrCat("on lost ", QuoteName(name), ": the callback is empty"));
  }
  if (absl::Status s = env.CheckOpen(); !s.ok()) {
    return Annotate(s, "on lost", name, env.policy().noun);
  }
  absl::Status s = env.holds().AddLossCallback(
      name, by.number,
      LossCallback(name, OwnerField(env.id(), by.number), std::move(fn)));
  if (!s.ok()) {
    return Annotate(
        absl::Status(s.code(), absl::StrCat(Whom(by), ": ", s.message())),
        "on lost", name, env.policy().noun);
  }
  return s;
}

absl::StatusOr<SteadyClock::time_point> SafeUntil(LockEnv& env,
                                                  const std::string& name,
                                                  const OwnerId& by) {
  if (absl::Status s = env.CheckOpen(); !s.ok()) {
    return Annotate(s, "query", name);
  }
  absl::optional<Hold> hold = env.holds().Find(name, by.number);
  if (!hold.has_value()) {
    return Annotate(
        absl::FailedPreconditionError(absl::StrCat("not held by ", Whom(by))),
        "query", name);
  }
  if (hold->lost) {
    return Annotate(absl::AbortedError("lease lost (reported as kLockLost)"),
                    "query", name);
  }
  // Redis set the TTL no earlier than acked_at; allow for clock drift
  // between this host and Redis (by default 1% of the lease plus 2 ms, as
  // Redlock).
  const absl::Duration drift = env.policy().Drift(hold->lease);
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

absl::StatusOr<bool> ForceRelease(LockEnv& env, const std::string& name,
                                  LockKind kind) {
  if (absl::Status s = env.CheckBlockingCall(); !s.ok()) {
    return Annotate(s, "force-release", name);
  }
  const Step step =
      ModelOf(kind).ForceRelease(name, env.backend().publish_command());
  const backend::Call views = step.Views();
  absl::StatusOr<redis::Reply> r =
      std::move(env.backend()
                    .Run(step.script, views.keys, views.args, Deadline::Never(),
                         Resend::kNever)[0]
                    .reply);
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

absl::StatusOr<bool> IsLocked(LockEnv& env, const std::string& name,
                              LockKind kind) {
  if (absl::Status s = env.CheckBlockingCall(); !s.ok()) {
    return Annotate(s, "query", name);
  }
  absl::StatusOr<Inspection> what = Inspect(env, ModelOf(kind), name, "");
  if (!what.ok()) return Annotate(what.status(), "query", name);
  return what->held;
}

absl::StatusOr<int64_t> HoldCount(LockEnv& env, const std::string& name,
                                  const OwnerId& by, LockKind kind) {
  if (absl::Status s = env.CheckBlockingCall(); !s.ok()) {
    return Annotate(s, "query", name);
  }
  absl::StatusOr<Inspection> what =
      Inspect(env, ModelOf(kind), name, OwnerField(env.id(), by.number));
  if (!what.ok()) return Annotate(what.status(), "query", name);
  // Redis's count, plus the re-entries counted locally.
  const absl::optional<Hold> held = env.holds().Find(name, by.number);
  if (what->count > 0 && held.has_value() && !held->ended()) {
    return what->count + held->local;
  }
  return what->count;
}

absl::StatusOr<absl::Duration> RemainingLease(LockEnv& env,
                                              const std::string& name,
                                              LockKind kind) {
  if (absl::Status s = env.CheckBlockingCall(); !s.ok()) {
    return Annotate(s, "query", name);
  }
  absl::StatusOr<Inspection> what = Inspect(env, ModelOf(kind), name, "");
  if (!what.ok()) return Annotate(what.status(), "query", name);
  if (!what->held) {
    return absl::NotFoundError(
        absl::StrCat("lock ", QuoteName(name), " is not held"));
  }
  if (what->pttl_ms < 0) return absl::InfiniteDuration();
  return absl::Milliseconds(what->pttl_ms);
}

absl::StatusOr<int64_t> LastToken(LockEnv& env, const std::string& name) {
  if (absl::Status s = env.CheckBlockingCall(); !s.ok()) {
    return Annotate(s, "query", name);
  }
  absl::StatusOr<redis::Reply> r =
      RunScript(env, internal::kTokenScript, {TokenKey(name)}, {},
                Deadline::Never(), Resend::kIfDropped);
  if (!r.ok()) return Annotate(r.status(), "query", name);
  // 0 (no token yet) as an integer, else the counter's exact string.
  int64_t token = 0;
  if (r->is_integer()) return r->integer();
  if (!r->view().is_string() || !absl::SimpleAtoi(r->str(), &token) ||
      token < 0) {
    return Annotate(Unexpected(*r, "token script"), "query", name);
  }
  return token;
}

watchdog::RenewResult RenewHolds(LockEnv& env,
                                 const std::vector<RenewItem>& items,
                                 std::atomic<uint64_t>* round_trips) {
  backend::Backend& backend = env.backend();
  const absl::Duration lease = env.watchdog_lease();
  const std::string lease_ms = absl::StrCat(absl::ToInt64Milliseconds(lease));
  const Deadline deadline =
      env.policy().attempt_timeout_factor > 0
          ? AttemptDeadline(env.policy(), lease, Deadline::Never(),
                            absl::ZeroDuration())
          : Deadline::Never();
  // Up to kRenewKeysPerCall locks per call, of one key group each (one hash
  // slot on a cluster, where a script's keys must share one) and one renew
  // script (per lock type).
  std::vector<size_t> order(items.size());
  std::vector<std::pair<int, size_t>> group(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    order[i] = i;
    group[i] = {backend.KeyGroup(items[i].name),
                ModelOf(static_cast<LockKind>(items[i].kind)).renew_script()};
  }
  std::stable_sort(order.begin(), order.end(), [&group](size_t a, size_t b) {
    return group[a] < group[b];
  });
  std::vector<backend::Call> calls;
  std::vector<std::vector<size_t>> call_items;  // the items of each call
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t i = order[k];
    if (calls.empty() || call_items.back().size() == kRenewKeysPerCall ||
        group[call_items.back().front()] != group[i]) {
      calls.emplace_back();
      calls.back().script = group[i].second;
      calls.back().args.push_back(lease_ms);
      call_items.emplace_back();
    }
    calls.back().keys.push_back(items[i].name);
    calls.back().args.push_back(items[i].owner);
    call_items.back().push_back(i);
  }
  const backend::BatchReplies batches =
      backend.RunBatch(calls, deadline, round_trips);
  const size_t n = backend.nodes();
  const size_t quorum = backend.quorum();
  // Per item: nodes that renewed it, and nodes where its owner field is gone.
  std::vector<size_t> renewed(items.size()), gone(items.size());
  absl::Status error;
  for (size_t node = 0; node < n; ++node) {
    CountRenewals(batches[node], calls, call_items, &renewed, &gone, &error);
  }
  watchdog::RenewResult out;
  out.items.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    if (renewed[i] >= quorum) {
      out.items.push_back(watchdog::Renewal::kRenewed);
    } else if (gone[i] > n - quorum) {
      out.items.push_back(watchdog::Renewal::kGone);
    } else {
      // Undecided (nodes did not answer): retried soon; lost only if its
      // lease runs out first.
      out.items.push_back(watchdog::Renewal::kUndecided);
      if (out.error.ok()) {
        const absl::Status why =
            error.ok() ? absl::UnavailableError("no answer") : error;
        out.error = n == 1
                        ? why
                        : absl::UnavailableError(absl::StrCat(
                              "no quorum of masters answered the renewal "
                              "of ",
                              QuoteName(items[i].name), ": ", why.message()));
      }
    }
  }
  return out;
}

namespace {

// Call `i` of a release-all batch, over every node: OK on a quorum, else the
// error (on several nodes, where it was released and what the others said).
absl::Status ReleaseResult(backend::Backend& backend,
                           const backend::BatchReplies& batches, size_t i) {
  const size_t n = backend.nodes();
  size_t released = 0;
  std::vector<std::string> failures;
  absl::Status first;
  for (size_t node = 0; node < n; ++node) {
    absl::Status s =
        batches[node][i].ok()
            ? internal::ReleaseAllResult(*batches[node][i], "release on close")
            : batches[node][i].status();
    if (s.ok()) {
      ++released;
    } else {
      failures.push_back(
          absl::StrCat(backend.node_name(node), ": ", s.message()));
      if (first.ok()) first = std::move(s);
    }
  }
  if (released >= backend.quorum()) return absl::OkStatus();
  if (n == 1) return first;
  return absl::UnavailableError(
      absl::StrCat("released on only ", released,
                   " masters: ", absl::StrJoin(failures, "; ")));
}

}  // namespace

std::vector<absl::Status> ReleaseHolds(
    LockEnv& env, const std::vector<std::pair<HoldRegistry::Key, Hold>>& held,
    Deadline deadline) {
  if (held.empty()) return {};
  backend::Backend& backend = env.backend();
  // One batch (each hold with its own type's release-all script).
  std::vector<Step> steps;
  steps.reserve(held.size());
  for (const auto& [key, hold] : held) {
    steps.push_back(
        ModelOf(static_cast<LockKind>(hold.kind))
            .ReleaseAll(key.first, hold.owner, backend.publish_command()));
  }
  std::vector<backend::Call> calls;
  calls.reserve(steps.size());
  for (const Step& step : steps) calls.push_back(step.Views());
  const backend::BatchReplies batches = backend.RunBatch(calls, deadline);
  std::vector<absl::Status> out(held.size());
  for (size_t i = 0; i < held.size(); ++i) {
    out[i] = ReleaseResult(backend, batches, i);
  }
  return out;
}

}  // namespace lock
}  // namespace relock
