// The seam between lock algorithms (lib/lock/) and topology.
//
// A lock algorithm sees its Redis deployment only through a Backend: it runs
// its scripts (keys always as KEYS[]) on the backend's nodes, waits on its
// channel with a wake policy, and sends renewal batches. It never learns
// whether the nodes are one standalone server (NodeBackend), the N masters
// of a Redlock (QuorumBackend: every call goes to all N at once and the
// algorithm counts the answers against quorum()), and later a Cluster shard
// or a Sentinel-managed master.
//
//   backend        nodes()  quorum()  Run() goes to
//   NodeBackend    1        1         the server
//   QuorumBackend  N        N/2 + 1   all N masters in parallel
//
// Every method is thread-safe and blocks at most until its deadline (plus
// command_timeout for the connection to notice a silent server).

#ifndef RELOCK_LIB_BACKEND_BACKEND_H_
#define RELOCK_LIB_BACKEND_BACKEND_H_

#include <atomic>
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
#include "absl/types/span.h"
#include "lib/common/deadline.h"
#include "lib/pubsub/subscriber.h"
#include "lib/redis/reply.h"

namespace relock {
namespace backend {

// Whether a call may be sent again when the server dropped its connection
// (the request either never ran or ran and lost its reply): only for calls
// that are harmless to run twice.
enum class Resend { kNever, kIfDropped };

// One node's answer to one call.
struct Answer {
  Answer() = default;
  explicit Answer(absl::StatusOr<redis::Reply> r, bool was_resent = false)
      : reply(std::move(r)), resent(was_resent) {}

  absl::StatusOr<redis::Reply> reply;  // error replies are replies
  bool resent = false;                 // sent again after a drop
  // Replicas that acknowledged the call's write (WAIT's reply); -1 when no
  // WAIT was sent or it gave no count.
  int64_t acked = -1;
  // Why a WAIT sent after a call that ran gave no count (an error reply,
  // e.g. an ACL user without WAIT, or an unexpected one); OK otherwise. The
  // call's own reply is kept: it ran, and what it did must be judged (and
  // undone) like any write too few replicas acknowledged.
  absl::Status wait_error;
};

// A WAIT sent after a script call, in the same write on the same connection
// (one round trip): the node's replicas that must have received the call's
// writes, and how long the server waits for them (WAIT's timeout, at least
// 1 ms; 0 would wait forever). The answer says how many did (Answer::acked);
// judging that is the caller's business.
struct WaitReplicas {
  int replicas = 0;
  absl::Duration timeout = absl::ZeroDuration();
};

// Called with each node's answer as it arrives (node index, answer);
// returning true stops waiting for the others (their answers become
// Cancelled "not awaited"). Runs on the calling thread.
using Enough = std::function<bool(size_t node, const Answer& answer)>;

// A thread's wait on one channel, on every node (see pubsub::Subscription).
class Waiter {
 public:
  virtual ~Waiter() = default;
  // OK once every node confirmed the subscription (a re-check after it
  // misses no message); Cancelled on close, PermissionDenied if a node
  // refused it, DeadlineExceeded at `deadline`.
  virtual absl::Status AwaitConfirmed(Deadline deadline) = 0;
  // Sleeps until a message (per the wake policy), a reconnect (re-check), a
  // close, or `deadline`.
  virtual pubsub::WakeReason Wait(Deadline deadline) = 0;
  // Hands a consumed wake-up to another waiter (wake-one channels).
  virtual void PassOn() = 0;
};

// One script call, as Run() and RunAsync() take it: the script (an index
// into the backend's script set), its keys and arguments (views that must
// stay valid until Run() returns, or RunAsync() has returned), the deadline
// of its answers, whether it may be resent, and optionally when to stop
// waiting, which nodes it goes to and a WAIT after it.
struct ScriptCall {
  size_t script = 0;
  absl::Span<const absl::string_view> keys;
  absl::Span<const absl::string_view> args;
  Deadline deadline = Deadline::Never();
  Resend resend = Resend::kNever;
  // Asked after each answer (null: every node is waited for).
  Enough enough;
  // Only the nodes i with (*only)[i] (null: every node); the others answer
  // Cancelled "not sent".
  const std::vector<bool>* only = nullptr;
  // Each node's call is followed by this WAIT in the same round trip (every
  // resend too), and its answer carries the count (Answer::acked).
  const WaitReplicas* wait = nullptr;
};

// One call of a batch (RunBatch()): the script (each call names its own),
// its keys and arguments.
struct Call {
  // Views kept inline: a lock step has at most 6 keys and 6 arguments, so a
  // call on the hot path allocates nothing for them.
  using Views = absl::InlinedVector<absl::string_view, 6>;
  size_t script = 0;
  Views keys;
  Views args;
};

// RunBatch()'s answer: [node][call], each call's reply or why there is none.
// With a WAIT (RunBatch's `wait`), Answer::acked is the count of the WAIT
// sent after the batch that carried the call (on a cluster, the batch of the
// call's master); -1 without one. A WAIT that gave no count leaves acked at
// -1 and says why in Answer::wait_error, as Run() does.
using BatchReplies = std::vector<std::vector<Answer>>;

// Starts call `i` of `n` with `done` (see AwaitAnswers).
using Done = std::function<void(Answer)>;
using StartCall = std::function<void(size_t i, Done done)>;
// Gets one answer per node, in node order (Backend::RunAsync).
using AnswersDone = std::function<void(std::vector<Answer>)>;

// The answer of a node that did not answer a call to `where` that waited
// until `limit` (the earlier of the caller's `deadline` and the transport's
// `backstop`): Cancelled "not awaited" when `enough` stopped the wait,
// DeadlineExceeded when the caller's deadline ended it, else Unavailable.
absl::Status MissingAnswer(const std::string& where, bool stopped,
                           Deadline deadline, Deadline limit,
                           absl::Duration backstop);

// Starts n asynchronous calls and waits for their answers until `deadline`
// (DeadlineExceeded for those missing) or `backstop` (Unavailable: the
// transport should have failed them by then), asking `enough` after each
// answer (Cancelled "not awaited" for those missing once it says stop).
// `where(i)` names call i's node in messages.
// `order`, if given, is the order in which the calls are started.
std::vector<Answer> AwaitAnswers(
    size_t n, Deadline deadline, absl::Duration backstop, const Enough& enough,
    const StartCall& start, const std::function<std::string(size_t)>& where,
    const std::vector<size_t>* order = nullptr);

// A one-shot timer on the backend's event loop, for waiters that do not
// block. Thread-safe; `fn` runs on the loop thread. Destroying the timer
// cancels it.
class Timer {
 public:
  virtual ~Timer() = default;
  // Runs `fn` at `when` (replacing what was set before).
  virtual void At(Deadline when, std::function<void()> fn) = 0;
  virtual void Cancel() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual size_t nodes() const = 0;
  virtual size_t quorum() const = 0;
  // "host:port" of node `i`, for messages.
  virtual const std::string& node_name(size_t i) const = 0;
  // The command the release scripts publish unlock messages with (their
  // last argument): "publish", or "spublish" where waiters listen on sharded
  // pub/sub (Redis Cluster >= 7).
  virtual absl::string_view publish_command() const { return "publish"; }
  // Keys of one call of RunBatch() must share a group (on Redis Cluster: the
  // hash slot, since a script's keys must share one); 0 for every key
  // elsewhere.
  virtual int KeyGroup(absl::string_view /*key*/) const { return 0; }
  // How much longer than usual a subscription may take to be confirmed
  // because the topology is healing (a cluster promoting a replica); zero
  // for a single server or a Redlock.
  virtual absl::Duration failover_wait() const { return absl::ZeroDuration(); }

  // Runs `call` on every node at once (or on those in call.only); one
  // answer per node, in node order.
  virtual std::vector<Answer> Run(const ScriptCall& call) = 0;

  // Run(), asynchronously: `done` gets one answer per node once every node
  // answered, call.enough said stop (asked on the thread that delivers each
  // answer), or call.deadline passed. `done` runs once, on the client's
  // event loop thread (or on the calling thread when the call ends at once,
  // e.g. on a closed backend); it must not block.
  virtual void RunAsync(ScriptCall call, AnswersDone done) = 0;
  // A timer on the loop that RunAsync's and Subscribe's callbacks run on.
  virtual std::unique_ptr<Timer> NewTimer() = 0;

  // Runs `calls` (each its own script), sent together to every node (one
  // round trip per node, plus one if a node lost its script cache; on a
  // cluster, one per master). Per node, per call: the reply, or why there is
  // none (the node's batch failed: every call of it gets the error).
  // `*round_trips`, if given, counts the batches sent. `wait`, if given:
  // each batch is followed by that WAIT in the same write on the same
  // connection (one WAIT per batch, not per call; after a script cache miss,
  // again after the calls sent anew), and each call's answer carries its
  // count (Answer::acked; see BatchReplies).
  virtual BatchReplies RunBatch(const std::vector<Call>& calls,
                                Deadline deadline,
                                std::atomic<uint64_t>* round_trips = nullptr,
                                const WaitReplicas* wait = nullptr) = 0;

  // Any command (PING, ...) on every node; resent if dropped.
  virtual std::vector<Answer> Command(absl::Span<const absl::string_view> argv,
                                      Deadline deadline) = 0;

  // --- Administration (lock inspection, the client info record): commands
  // aimed at one master of a deployment whose keys are spread over several
  // (a cluster), where Command() would send them to all.
  //
  //   backend         Masters()              CommandOn / CommandForKey /
  //                                          SendForKey
  //   NodeBackend     {its server}           that server
  //   RoutedBackend   the slot map's masters that master / the master of
  //                   (Sentinel: the one)    the key's slot
  //   QuorumBackend   Unimplemented          Unimplemented
  //
  // CommandOn() and CommandForKey() are sent again when their connection
  // dropped (as Command(): use them for commands harmless to run twice).
  // A redirection (MOVED, ASK) comes back as the error reply it is; the
  // backend then reads its slot map again.

  // The masters that serve keys now, as "host:port" names for CommandOn().
  // FailedPrecondition once closed; Unimplemented where a key lives on
  // several independent masters at once (Redlock).
  virtual absl::StatusOr<std::vector<std::string>> Masters() = 0;
  // Runs `argv` on the master named `master` (from Masters()). NotFound when
  // no such master is known now (the map changed: call Masters() again).
  virtual Answer CommandOn(absl::string_view master,
                           absl::Span<const absl::string_view> argv,
                           Deadline deadline) = 0;
  // Runs `argv` on the master that serves `key` (a key or a channel: on a
  // cluster, the master of its hash slot).
  virtual Answer CommandForKey(absl::string_view key,
                               absl::Span<const absl::string_view> argv,
                               Deadline deadline) = 0;
  // Sends `commands` (each an argv) to the master that serves `key`, written
  // together on one connection (one round trip; not atomic), without
  // waiting: `done`, if given, gets OK once every command succeeded, else the
  // first failure or error reply, on the loop thread (or on the calling
  // thread when nothing could be sent). Never resent: for best-effort writes
  // that the caller repeats anyway (the client info record). Bounded by the
  // connection's command_timeout.
  virtual void SendForKey(absl::string_view key,
                          std::vector<std::vector<std::string>> commands,
                          std::function<void(absl::Status)> done) = 0;

  // A wait on `channel`: one unlock message wakes one waiter (kWakeOne,
  // Redisson's lock channel), any message every waiter (kWakeAll, Redisson's
  // read-lock release), or a message naming it the waiter called `waiter`
  // (kWakeNamed; `waiter` is ignored by the other policies). With a
  // `listener` (a waiter that does not block), the listener is called on the
  // loop thread whenever the wait may be over; the waiter then looks with
  // AwaitConfirmed() / Wait() given a deadline that has passed.
  virtual std::unique_ptr<Waiter> Subscribe(const std::string& channel,
                                            pubsub::WakePolicy policy,
                                            const std::string& waiter,
                                            pubsub::Listener listener) = 0;

  // Wakes every waiter, now and later, with Cancelled; calls still work (a
  // client that closes releases its locks after this). Idempotent.
  virtual void CancelWaits() = 0;
  // CancelWaits(), then closes every connection: later calls fail with
  // FailedPrecondition. Idempotent.
  virtual void Close() = 0;
};

}  // namespace backend
}  // namespace relock

#endif  // RELOCK_LIB_BACKEND_BACKEND_H_
