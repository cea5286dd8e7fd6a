// The pieces of the lock algorithm (lib/lock/algorithm.h) that its files
// share: one acquire attempt on every node and what its answers mean, the
// inspect script's reply, the texts of errors, and the completion of an
// asynchronous call. Internal to lib/lock: only the files that implement
// algorithm.h include it. (Its namespace is algorithm_internal, not
// lock::internal, which would hide relock::internal: lib/lock/lock_scripts.h.)

#ifndef RELOCK_LIB_LOCK_ATTEMPT_H_
#define RELOCK_LIB_LOCK_ATTEMPT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "lib/backend/backend.h"
#include "lib/common/deadline.h"
#include "lib/lock/lock_env.h"
#include "lib/lock/lock_model.h"
#include "lib/lock/owner.h"
#include "lib/redis/reply.h"

namespace relock {
namespace lock {
namespace algorithm_internal {

// Prefixes a failure with the operation and lock name (in tallies, the
// kind of lock too).
absl::Status Annotate(absl::Status s, absl::string_view op,
                      const std::string& name, absl::string_view noun = "lock");

// Who a call was for, in messages.
std::string Whom(const OwnerId& by);

// What each node said, for messages: "host:port: acquired; ...". Most
// notes are a node's name and a fixed outcome ("acquired", "released"); they
// are kept as that pair and spelled out only when a message is made, so a
// call that succeeds builds no text (and, on one node, allocates nothing).
class NodeNotes {
 public:
  // "<who>: <outcome>"; `who` (a Backend::node_name()) and `outcome` must
  // outlive the notes.
  void Add(const std::string& who, absl::string_view outcome) {
    notes_.push_back(Note{&who, outcome, {}});
  }
  void Add(std::string text) {
    notes_.push_back(Note{nullptr, {}, std::move(text)});
  }
  // The notes, "; "-joined.
  std::string Join() const;

 private:
  struct Note {
    const std::string* who;  // null: `text` is the whole note
    absl::string_view outcome;
    std::string text;
  };
  absl::InlinedVector<Note, 1> notes_;
};

// FailedPrecondition when owner `by` (as HolderOf() gives it for `kind`)
// holds `name` as the other model than `kind`: under its number, or under
// its number with or without kWriteHoldBit (a read-write lock's write hold).
absl::Status CheckModel(LockEnv& env, const std::string& name,
                        const OwnerId& by, LockKind kind);

// A reply that is not what the script returns means a foreign value at the
// key or a misbehaving server.
absl::Status Unexpected(const redis::Reply& r, absl::string_view op);

// Every attempt may take this long even when the caller's wait is shorter
// (TryAcquire(0) is one attempt, not none).
inline constexpr absl::Duration kMinAttemptTime = absl::Milliseconds(100);

// How late Redis may answer a WAIT that times out: it notices the timeout on
// its next timer tick, up to 1/hz later (100 ms at the default hz 10;
// measured 300-400 ms for WAIT 1 300 with the replica paused).
inline constexpr absl::Duration kWaitLateness = absl::Milliseconds(100);

// How much longer than usual an attempt's requests (and their undo, queued
// behind WAITs) may take: the WAIT's timeout and its lateness.
absl::Duration ReplicaTime(const backend::WaitReplicas* sync);

// The deadline of one attempt's requests (see LockPolicy), `extra` (the
// replicas' time) beyond the usual, on the env's clock.
Deadline AttemptDeadline(LockEnv& env, absl::Duration lease, Deadline wait,
                         absl::Duration extra);

// The outcome of one acquire attempt on every node.
struct Attempt {
  enum Kind { kAcquired, kHeldByOther, kFailed } kind = kFailed;
  SteadyClock::time_point start;  // when the requests were sent
  int64_t token = -1;             // kAcquired, fenced: the fencing token
  int64_t min_pttl_ms = -1;       // shortest lease left among holders
  absl::Status error;             // kFailed on one node: that node's own error
  std::string details;            // each node's answer, on several nodes
  bool took_some = false;  // held by others, yet it took (and undid) nodes
  // kFailed: a node granted it, but too few replicas acknowledged that (see
  // ReplicaSync): never re-tried, not even by a waiter.
  bool unacknowledged = false;
  // A node gave no answer (lost, cut off by the deadline or by Close()):
  // the request may have run there, or still run.
  bool outcome_unknown = false;
  // Nodes where a re-entry found this owner's hold gone (NOTHELD).
  size_t not_held = 0;
};

// Policy::fail_fast: stop waiting once the attempt's outcome is certain.
backend::Enough FailFast(const LockPolicy& policy, size_t n, size_t quorum,
                         const backend::WaitReplicas* sync);

// What one attempt's answers mean. `*undo` is set to the nodes where what
// the attempt may have taken must be undone, or left empty when there is
// nothing to undo (always when it acquired: no allocation then). With
// `sync`, a node that granted without enough replicas acknowledging counts
// as not granted (Unavailable) and is undone.
Attempt Evaluate(LockEnv& env, const std::vector<backend::Answer>& answers,
                 SteadyClock::time_point start, absl::Duration lease,
                 bool fresh, const backend::WaitReplicas* sync,
                 std::vector<bool>* undo);

// The undo (LockModel::Undo()) of an attempt with `options` on the nodes in
// `undo` (none if it is empty): blocking until `deadline`, or (with `async`)
// sent without waiting for its answers.
void Undo(LockEnv& env, const LockModel& model, LockName name,
          const OwnerField& owner, bool fresh, const AcquireOptions& options,
          const std::vector<bool>& undo, Deadline deadline, bool async);

// What is at `name`: {held, pttl ms, the caller's hold count}. A key that
// holds anything but a lock is FailedPrecondition.
struct Inspection {
  bool held = false;
  int64_t pttl_ms = -2;
  int64_t count = 0;
};
absl::StatusOr<Inspection> ParseInspection(const redis::Reply& r);

// The DeadlineExceeded of a wait for `model`'s lock that ended on attempt
// `a`, which found the lock held by another owner: on several `nodes`, each
// node's answer; on one, the holder's lease left. (A model with its own
// text, LockModel::wait_ended(), gets that.)
absl::Status HeldByOther(const LockModel& model, const Attempt& a,
                         size_t nodes);

// After the `failures`th failed attempt `a` (no quorum of answers): how
// long to wait before the next one, or why to stop (the error itself on a
// single node without retries).
absl::StatusOr<absl::Duration> RetryAfter(const LockPolicy& policy,
                                          backend::Backend& backend,
                                          int failures, const Attempt& a,
                                          Deadline deadline);

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
    c->timer_->At(Deadline::After(absl::ZeroDuration(), &env.clock()), [c] {
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

// The backend call of a step's `views` (Step::Views(), kept alive by the
// caller while the call is made).
inline backend::ScriptCall CallOf(const backend::Call& views, Deadline deadline,
                                  backend::Resend resend) {
  backend::ScriptCall call;
  call.script = views.script;
  call.keys = views.keys;
  call.args = views.args;
  call.deadline = deadline;
  call.resend = resend;
  return call;
}

// Sends `step` to every node (or those i with (*only)[i]) with `deadline`
// and `resend`, and hands the answers to `then` (a callable taking
// std::vector<backend::Answer>): `here`, blocking on the calling thread
// (its own I/O; `then` runs before Send() returns); else on the event loop
// (`then` runs there). A step of an algorithm is so written once for both
// modes.
template <typename Then>
void Send(LockEnv& env, const Step& step, Deadline deadline,
          backend::Resend resend, bool here, Then then,
          const std::vector<bool>* only = nullptr) {
  const backend::Call views = step.Views();
  backend::ScriptCall call = CallOf(views, deadline, resend);
  call.only = only;
  if (here) {
    then(env.backend().Run(call));
  } else {
    env.backend().RunAsync(std::move(call), std::move(then));
  }
}

// Send() for a step whose answers nobody reads (an undo, a release of a
// hold the client no longer wants): `wait`, until they arrived.
inline void SendIgnoringAnswers(LockEnv& env, const Step& step,
                                Deadline deadline, backend::Resend resend,
                                bool wait,
                                const std::vector<bool>* only = nullptr) {
  Send(
      env, step, deadline, resend, wait,
      [](const std::vector<backend::Answer>& /*answers*/) {}, only);
}

// Counts an acquire call in flight in the hold registry for as long as it
// lives (HoldRegistry::BeginInFlight()), so that Close() waits for the call
// before it closes the backend: a grant that comes as Close() runs is then
// given back by its call while the backend still runs. Made before the call
// checks that the client is open.
class InFlight {
 public:
  explicit InFlight(LockEnv& env) : env_(env) { env_.holds().BeginInFlight(); }
  ~InFlight() { env_.holds().EndInFlight(); }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

 private:
  LockEnv& env_;
};

// Send() for a give-back, release or undo of what a call took that its
// caller will not release (it met Close(), or the call failed; never
// resent): counted in the hold registry until its answers arrive, as
// InFlight counts a call. `then` runs after the count is dropped: it may end
// the client.
template <class Then>
void SendGiveBack(LockEnv& env, const Step& step, Deadline deadline, bool here,
                  Then then, const std::vector<bool>* only = nullptr) {
  env.holds().BeginInFlight();
  Send(
      env, step, deadline, backend::Resend::kNever, here,
      [&env, then = std::move(then)](
          const std::vector<backend::Answer>& answers) mutable {
        env.holds().EndInFlight();
        then(answers);
      },
      only);
}

// Runs `step` on the backend's first node without a deadline and returns
// its reply (error replies included) or the failure: for the queries and
// force-release of the single-node API (Lock), whose backend has one node.
absl::StatusOr<redis::Reply> RunOnFirstNode(LockEnv& env, const Step& step,
                                            backend::Resend resend);

// The asynchronous calls act for explicit owners only.
absl::Status CheckAsyncOwner(LockEnv& env, const std::string& name,
                             const OwnerId& by, absl::string_view op);

}  // namespace algorithm_internal
}  // namespace lock
}  // namespace relock

#endif  // RELOCK_LIB_LOCK_ATTEMPT_H_
