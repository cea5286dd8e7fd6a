// A fake backend::Backend for unit tests of the lock engine (lib/lock/)
// without Redis: one or several nodes that run the reentrant lock's scripts
// on an in-memory model, on a FakeClock, with faults a test chooses per node.
//
//   what a test wants            how
//   ---------------------------  -------------------------------------------
//   N nodes, quorum Q            FakeBackend(&clock, N[, Q]) (Q: majority)
//   a node down                  SetFault(i, FakeFault::kDown): Unavailable,
//                                the call never ran
//   a lost reply                 kLoseReply: the call ran, the reply is lost
//                                (Unavailable)
//   a node that never answers    kSilent: the call never ran; the caller's
//                                deadline passes (the clock moves to it) and
//                                the answer is DeadlineExceeded
//   any other answer             SetResponder(i, fn): fn sees the call and
//                                the node's model (FakeNode) and answers
//                                (with WAIT: Answer::acked, else all acked;
//                                in a RunBatch() too, per call)
//   a lock held by another       Hold(i, name, owner, count, lease)
//   what was sent                calls(), CallsOf(script)
//
// The in-memory model (FakeNode) answers the reentrant lock's scripts as
// lua/acquire.lua, release.lua, release_all.lua, force_release.lua,
// renew.lua, inspect.lua and token.lua do, fenced acquires included, and
// publishes the unlock message when a lock becomes free. Other scripts (fair,
// read-write) get a test's responder, or an ERR reply.
//
// Asynchronous calls and timers run on the fake's own loop thread, in time
// order on the FakeClock. When the loop has nothing to run but timers, no
// synchronous call is in progress, and a little real time has passed, it
// moves the clock to the earliest timer (simulated time): a wait of minutes
// ends in milliseconds. Blocking calls (Run, RunBatch) answer on the calling
// thread at once (a kSilent node moves the clock to the call's deadline).
// Waiters (Subscribe) are woken by the model's unlock messages or Publish(),
// with the real wake policies.

#ifndef RELOCK_TESTS_TESTING_FAKE_BACKEND_H_
#define RELOCK_TESTS_TESTING_FAKE_BACKEND_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "lib/backend/backend.h"
#include "lib/common/clock.h"
#include "lib/common/deadline.h"
#include "lib/common/mutex.h"
#include "lib/pubsub/subscriber.h"
#include "lib/redis/reply.h"
#include "tests/testing/resp_reply.h"

namespace relock {
namespace testing {

// One call as a node received it.
struct FakeCall {
  size_t node = 0;
  size_t script = 0;  // a lib/lock/lock_scripts.h ScriptId
  std::vector<std::string> keys;
  std::vector<std::string> args;
  bool batch = false;  // part of a RunBatch()
  bool async = false;  // sent by RunAsync()
  // Whether a real backend would send it again after a dropped connection.
  backend::Resend resend = backend::Resend::kNever;
};

// One node's locks: name -> {owner field -> count}, with a lease end on the
// clock, and fencing counters. Not thread-safe (the backend's mutex guards).
class FakeNode {
 public:
  struct Lock {
    std::map<std::string, int64_t> counts;
    SteadyClock::time_point expires_at;  // max(): no TTL
  };
  // Answers `call` as the scripts do, at time `now`; `published` collects
  // {channel, message} of the unlock messages sent.
  redis::Reply Run(const FakeCall& call, SteadyClock::time_point now,
                   std::vector<std::pair<std::string, std::string>>* published);
  // The lock at `name` now (expired ones are gone), or null.
  const Lock* Find(const std::string& name, SteadyClock::time_point now);
  std::map<std::string, Lock>& locks() { return locks_; }
  std::map<std::string, int64_t>& counters() { return counters_; }

 private:
  std::map<std::string, Lock> locks_;
  std::map<std::string, int64_t> counters_;  // fencing token counters
};

enum class FakeFault { kNone, kDown, kLoseReply, kSilent };

class FakeBackend final : public backend::Backend {
 public:
  // The answer of node `call.node` to `call`, given its model.
  using Responder =
      std::function<backend::Answer(const FakeCall& call, FakeNode& node)>;

  // `quorum` 0: a majority of `nodes`.
  explicit FakeBackend(FakeClock* clock, size_t nodes = 1, size_t quorum = 0);
  ~FakeBackend() override;
  FakeBackend(const FakeBackend&) = delete;
  FakeBackend& operator=(const FakeBackend&) = delete;

  // --- What a test sets up and looks at (thread-safe).
  void SetFault(size_t node, FakeFault fault);
  // Replaces node `node`'s model for every later call (null: the model).
  void SetResponder(size_t node, Responder responder);
  // `owner` holds `name` `count` times on node `node`, for `lease` (what
  // was at `name` before is gone: its lease ran out, or the lock was taken
  // over).
  void Hold(size_t node, const std::string& name, const std::string& owner,
            int64_t count, absl::Duration lease);
  // `owner`'s count at `name` on `node` now (0: none).
  int64_t CountOf(size_t node, const std::string& name,
                  const std::string& owner);
  // Publishes `message` on `channel` as the model's scripts do.
  void Publish(const std::string& channel, const std::string& message);
  // Whether subscriptions are confirmed (default OK), or how they fail.
  void SetSubscribeStatus(absl::Status status);
  std::vector<FakeCall> calls() const;
  size_t CallsOf(size_t script) const;
  void ClearCalls();
  // Whether the loop moves the clock to its next timer when nothing else
  // happens (default true). Off, time moves only by FakeClock::Advance()
  // (then Poke()), so a test can act while a waiter sleeps.
  void SetAutoAdvance(bool on);
  // Makes the loop look at the clock again (after an Advance()).
  void Poke();
  // Waits (real time, up to `timeout`) until the loop has nothing left to
  // run now; false on timeout.
  bool WaitIdle(absl::Duration timeout = absl::Seconds(10));

  // --- backend::Backend
  size_t nodes() const override { return names_.size(); }
  size_t quorum() const override { return quorum_; }
  const std::string& node_name(size_t i) const override { return names_[i]; }
  std::vector<backend::Answer> Run(const backend::ScriptCall& call) override;
  void RunAsync(backend::ScriptCall call, backend::AnswersDone done) override;
  std::unique_ptr<backend::Timer> NewTimer() override;
  backend::BatchReplies RunBatch(
      const std::vector<backend::Call>& calls, Deadline deadline,
      std::atomic<uint64_t>* round_trips,
      const backend::WaitReplicas* wait = nullptr) override;
  std::vector<backend::Answer> Command(absl::Span<const absl::string_view> argv,
                                       Deadline deadline) override;
  absl::StatusOr<std::vector<std::string>> Masters() override;
  backend::Answer CommandOn(absl::string_view master,
                            absl::Span<const absl::string_view> argv,
                            Deadline deadline) override;
  backend::Answer CommandForKey(absl::string_view key,
                                absl::Span<const absl::string_view> argv,
                                Deadline deadline) override;
  void SendForKey(absl::string_view key,
                  std::vector<std::vector<std::string>> commands,
                  std::function<void(absl::Status)> done) override;
  std::unique_ptr<backend::Waiter> Subscribe(
      const std::string& channel, pubsub::WakePolicy policy,
      const std::string& waiter, pubsub::Listener listener) override;
  void CancelWaits() override;
  void Close() override;

 private:
  class FakeTimer;
  class FakeWaiter;
  struct TimerEntry {
    SteadyClock::time_point when;
    uint64_t seq = 0;
    std::function<void()> fn;
  };

  // One node's answer to `call` (the fault, the responder or the model);
  // `*silent`: the node does not answer (kSilent).
  backend::Answer AnswerLocked(const FakeCall& call, Deadline deadline,
                               bool* silent) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `proto` sent to every node (or those in `only`): the answers, and
  // whether a silent node leaves the call waiting until its deadline.
  struct Sent {
    std::vector<backend::Answer> answers;
    bool silent = false;
  };
  Sent Send(const backend::ScriptCall& call, bool async);
  // When a silent node's call ends: its deadline, or the command timeout.
  SteadyClock::time_point SilentUntil(Deadline deadline) const;
  void PublishLocked(const std::string& channel, const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Post(std::function<void()> fn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t SetTimer(Deadline when, std::function<void()> fn);
  void CancelTimer(uint64_t id);
  void Loop();

  FakeClock* const clock_;
  std::vector<std::string> names_;
  size_t quorum_;
  mutable Mutex mu_;
  CondVar cv_;
  std::vector<FakeNode> nodes_ ABSL_GUARDED_BY(mu_);
  std::vector<FakeFault> faults_ ABSL_GUARDED_BY(mu_);
  std::vector<Responder> responders_ ABSL_GUARDED_BY(mu_);
  std::vector<FakeCall> calls_ ABSL_GUARDED_BY(mu_);
  std::deque<std::function<void()>> ready_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, TimerEntry> timers_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t timer_changes_ ABSL_GUARDED_BY(mu_) = 0;
  bool auto_advance_ ABSL_GUARDED_BY(mu_) = true;
  std::vector<FakeWaiter*> waiters_ ABSL_GUARDED_BY(mu_);
  absl::Status subscribe_status_ ABSL_GUARDED_BY(mu_);
  int in_call_ ABSL_GUARDED_BY(mu_) = 0;  // synchronous calls running
  bool running_fn_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread loop_;
};

}  // namespace testing
}  // namespace relock

#endif  // RELOCK_TESTS_TESTING_FAKE_BACKEND_H_
