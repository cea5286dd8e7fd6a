// One standalone Redis server (or anything that looks like one) as a
// Backend: its command connection(s) and its pub/sub connection on the
// client's event loop, and the scripts loaded there.
//
// Calls are asynchronous underneath (RunOnNode); a blocking call on an idle
// connection does its I/O on the caller's thread instead (see "Direct calls"
// in lib/io/connection.h), with the same results. An EVALSHA that meets
// NOSCRIPT (SCRIPT FLUSH, a restart) is sent again as EVAL of the source,
// which caches the script again; a call the server dropped is resent (at
// most kMaxSends sends) when Resend::kIfDropped says it is harmless. A call
// with a WaitReplicas is followed by `WAIT n ms` in the same write (every
// send of it, EVAL included), so both take one round trip on one
// connection. A blocking call whose connection is busy goes through the
// loop and waits for its answer within its deadline, abandoning the request
// when it passes. QuorumBackend fans out over several NodeBackends with
// RunAsync.
//
// node_backend.cc has the calls; node_probe.cc, Probe(); node_batch.cc, the
// batches (RunBatch*).

#ifndef RELOCK_LIB_BACKEND_NODE_BACKEND_H_
#define RELOCK_LIB_BACKEND_NODE_BACKEND_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/optional.h"
#include "lib/backend/backend.h"
#include "lib/io/connection.h"
#include "lib/io/event_loop.h"
#include "lib/pubsub/subscriber.h"
#include "lib/redis/script.h"

namespace relock {
namespace backend {

struct NodeOptions {
  io::ConnectionOptions connection;
  int command_connections = 1;
  // Connect (and load the scripts) in Create(), failing when the server
  // cannot be used; otherwise connect in the background (Redlock masters
  // that may be down at start).
  bool connect_now = true;
  // Probe() refuses a replica (ROLE; a server that will not answer ROLE is
  // taken as it is). Off where a replica is fine or judged elsewhere:
  // cluster seeds (any node gives the slot map), the master the sentinels
  // name (SentinelBackend asks ROLE itself: a replica there is a failover
  // in progress, Unavailable).
  bool require_master = true;
  // Blocking calls may do their own I/O on an idle command connection
  // (ConnectionOptions::direct_calls). Off for Redlock masters.
  bool direct_calls = true;
  // Waits listen with classic or sharded pub/sub (a cluster node on Redis
  // >= 7: see pubsub::Subscriber).
  pubsub::Subscriber::Mode pubsub_mode = pubsub::Subscriber::Mode::kClassic;
};

class NodeBackend : public Backend {
 public:
  static constexpr int kMaxSends = 3;

  // `loop` must outlive the backend's Close(), and be stopped (or at least
  // done with this backend's requests: Close(), then EventLoop::Stop()) before
  // the backend is destroyed: completions of its calls run on the loop and
  // refer to the backend.
  static absl::StatusOr<std::unique_ptr<NodeBackend>> Create(
      io::EventLoop* loop, NodeOptions options,
      std::vector<redis::ScriptSource> scripts);
  ~NodeBackend() override;

  size_t nodes() const override { return 1; }
  size_t quorum() const override { return 1; }
  const std::string& node_name(size_t) const override { return name_; }

  std::vector<Answer> Run(const ScriptCall& call) override;
  void RunAsync(ScriptCall call, AnswersDone done) override;
  std::unique_ptr<Timer> NewTimer() override;
  BatchReplies RunBatch(const std::vector<Call>& calls, Deadline deadline,
                        std::atomic<uint64_t>* round_trips = nullptr,
                        const WaitReplicas* wait = nullptr) override;
  std::vector<Answer> Command(absl::Span<const absl::string_view> argv,
                              Deadline deadline) override;
  absl::StatusOr<std::vector<std::string>> Masters() override;
  Answer CommandOn(absl::string_view master,
                   absl::Span<const absl::string_view> argv,
                   Deadline deadline) override;
  Answer CommandForKey(absl::string_view key,
                       absl::Span<const absl::string_view> argv,
                       Deadline deadline) override;
  void SendForKey(absl::string_view key,
                  std::vector<std::vector<std::string>> commands,
                  std::function<void(absl::Status)> done) override;
  std::unique_ptr<Waiter> Subscribe(const std::string& channel,
                                    pubsub::WakePolicy policy,
                                    const std::string& waiter,
                                    pubsub::Listener listener) override;
  void CancelWaits() override;
  void Close() override;

  // The asynchronous call underneath Run(): `done` runs once, on the loop
  // thread (or on the calling thread if the backend is closed). Setting
  // `*abandon` (if given) to true makes the backend drop the call at its
  // next step. `asking`: precede it with ASKING in the same write, for a
  // call that a Redis Cluster node redirected with ASK to this node. `wait`:
  // follow it with that WAIT in the same write (see Backend::Run()).
  void RunOnNode(size_t script, absl::Span<const absl::string_view> keys,
                 absl::Span<const absl::string_view> args, Resend resend,
                 std::shared_ptr<std::atomic<bool>> abandon, Done done,
                 bool asking = false, const WaitReplicas* wait = nullptr);
  // RunOnNode() after ASKING, with a deadline: as RunAsync() / Run().
  void RunAskingAsync(size_t script, absl::Span<const absl::string_view> keys,
                      absl::Span<const absl::string_view> args,
                      Deadline deadline, Resend resend, AnswersDone done,
                      const WaitReplicas* wait = nullptr);
  std::vector<Answer> RunAskingBlocking(
      size_t script, absl::Span<const absl::string_view> keys,
      absl::Span<const absl::string_view> args, Deadline deadline,
      Resend resend, const WaitReplicas* wait = nullptr);
  // The same for a prepared command.
  void SendOnNode(std::string wire, Resend resend,
                  std::shared_ptr<std::atomic<bool>> abandon, Done done);
  // RunBatch() on this node, asynchronously: `done` runs once, on the loop
  // thread, with one answer per call (the batch's error for each when it
  // failed as a whole); `wait`, if given, follows the batch (see
  // Backend::RunBatch()).
  using BatchDone = std::function<void(std::vector<Answer>)>;
  void RunBatchAsync(const std::vector<Call>& calls,
                     const std::shared_ptr<std::atomic<bool>>& abandon,
                     const WaitReplicas* wait, BatchDone done);
  // RunBatch() on several nodes at once (started in `order`), each within
  // `deadline`: one result per node.
  static BatchReplies RunBatchOn(absl::Span<NodeBackend* const> nodes,
                                 const std::vector<size_t>& order,
                                 const std::vector<Call>& calls,
                                 Deadline deadline,
                                 std::atomic<uint64_t>* round_trips,
                                 const WaitReplicas* wait);
  // A batch that failed as a whole: `status` for each of its `calls` calls.
  static std::vector<Answer> FailedBatch(const absl::Status& status,
                                         size_t calls);
  // RunAsync() on several nodes at once (started in `order`): one answer
  // per node.
  static void RunAsyncOn(absl::Span<NodeBackend* const> nodes,
                         const std::vector<size_t>& order, ScriptCall call,
                         AnswersDone done);
  // SCRIPT LOAD of every script: connects, and says now whether this server
  // can be used: Unavailable, Unauthenticated, FailedPrecondition (a
  // replica, with require_master; a Sentinel), PermissionDenied (the user
  // may not run SCRIPT LOAD, EVALSHA or EVAL)... A check whose own command
  // the server refuses (ROLE denied or renamed) is skipped.
  absl::Status Probe(Deadline deadline);
  // How long a call may wait for the transport before giving up on it
  // (connect_timeout + command_timeout).
  absl::Duration backstop() const;
  pubsub::Subscriber& subscriber() { return *subscriber_; }
  const redis::Endpoint& endpoint() const {
    return options_.connection.endpoint;
  }
  io::EventLoop* loop() const { return loop_; }

 private:
  struct Pending;
  struct LoopCall;
  NodeBackend(io::EventLoop* loop, NodeOptions options,
              std::vector<redis::ScriptSource> scripts);
  io::Connection& Pick();
  std::shared_ptr<Pending> MakePending(
      Resend resend, std::shared_ptr<std::atomic<bool>> abandon, Done done);
  std::shared_ptr<Pending> MakeScriptCall(
      size_t script, absl::Span<const absl::string_view> keys,
      absl::Span<const absl::string_view> args, Resend resend,
      std::shared_ptr<std::atomic<bool>> abandon, Done done,
      const WaitReplicas* wait = nullptr);
  // Writes the script call into `pending` (its wire, script and WAIT).
  void WriteScriptCall(size_t script, absl::Span<const absl::string_view> keys,
                       absl::Span<const absl::string_view> args,
                       const WaitReplicas* wait, Pending* pending) const;
  void Send(const std::shared_ptr<Pending>& pending);
  // Writes `pending`'s next send into `request` (ASKING and WAIT around
  // it). A send of the wire alone borrows it (moves it into the request):
  // TakeBackWire() returns it once the request is done, before the result is
  // settled (NOSCRIPT rewrites it, a resend sends it again).
  static void PrepareSend(Pending& pending, io::Request* request);
  static void TakeBackWire(Pending& pending, io::Request& request);
  // `WAIT replicas timeout-in-ms` on the wire.
  static std::string WaitCommand(const WaitReplicas& wait);
  // Fills `answer->acked` from the reply to the WAIT after the call; a WAIT
  // that gave no count after a call that ran without error sets
  // `answer->wait_error` instead (the call's reply is kept).
  void SettleWait(const redis::Reply& waited, Answer* answer) const;
  // The answer a send's result gives, or nullopt when `pending` must be sent
  // again (after a drop, or as EVAL after NOSCRIPT).
  absl::optional<Answer> Settle(Pending& pending, io::Result result);
  void OnResult(const std::shared_ptr<Pending>& pending, io::Result result);
  // Run() and Command(): `pending` for a caller that blocks until `deadline`.
  // Kept on the caller's stack while it does its own I/O (a direct call);
  // moved to the heap only when the call goes through the loop.
  std::vector<Answer> CallBlocking(Pending pending, Deadline deadline,
                                   const Enough& enough);
  // A loop-path blocking call's result: its answer to the caller, or a
  // resend.
  void OnLoopResult(LoopCall* call, io::Result result);

  io::EventLoop* const loop_;
  const NodeOptions options_;
  const std::string name_;
  const redis::ScriptSet scripts_;
  std::vector<std::shared_ptr<io::Connection>> connections_;
  std::atomic<size_t> next_connection_{0};
  std::shared_ptr<pubsub::Subscriber> subscriber_;
};

}  // namespace backend
}  // namespace relock

#endif  // RELOCK_LIB_BACKEND_NODE_BACKEND_H_
