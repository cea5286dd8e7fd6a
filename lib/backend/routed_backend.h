// A Redis deployment whose keys are served by masters that move (a Redis
// Cluster, a Sentinel-managed master) as one Backend: each call goes to the
// master that serves the hash slot of its first key per a slot map
// (lib/redis/cluster.h), through a NodeBackend per master (its own command
// and pub/sub connections on the client's loop, made when first needed). To
// the lock algorithm the deployment is one node: nodes() == quorum() == 1.
// Where the map comes from is the subclass's business (ClusterBackend:
// CLUSTER SHARDS; SentinelBackend: one master for every slot, named by the
// sentinels); this class routes, follows and waits.
//
//   reply / event            what the backend does (all within the deadline)
//   MOVED slot host:port     sends the call there, refreshes the slot map
//   ASK slot host:port       sends ASKING + the call there (once)
//   TRYAGAIN, CLUSTERDOWN    sends it again after a pause (10 ms, doubling
//   READONLY                 to 200 ms); CLUSTERDOWN and READONLY (a
//                            demoted master) also refresh the map
//   node unreachable         refreshes the map; a call harmless to run
//   (Unavailable)            twice (Resend::kIfDropped) is sent again to
//                            the slot's master after a pause, for up to
//                            kFailoverWait (a promotion takes about
//                            cluster-node-timeout + 1 s, or Sentinel's
//                            down-after-milliseconds + an election); any
//                            other call gets the answer as it is (it may
//                            have run)
//
// A MOVED, ASK, TRYAGAIN, CLUSTERDOWN or READONLY reply means the call did
// not write (a script stops at its first write on a replica), so it is sent
// again whatever its Resend says; at most kMaxRedirects redirections in a
// row (while a slot migrates, a call of several keys meets ASK, then
// TRYAGAIN at the importing master until every key is there: such a call
// retries until the migration ends, its deadline passes, or kFailoverWait
// of refusals has passed, which bounds a call without a deadline when a
// migration is left half done: Unavailable). Refreshes run on
// the loop, one at a time, on errors and every kRefreshInterval. A call's WAIT
// (Backend::Run's `wait`) goes with it to every node it is sent to.
//
// Batches (RunBatch) go to each master at once, one pipelined round trip per
// master (the caller groups keys by KeyGroup(), so that one call's keys share
// a slot where slots matter); a call of a batch that meets a redirection is
// run again alone.
//
// Waits (Subscribe) listen on the master of the channel's slot (classic
// SUBSCRIBE, or SSUBSCRIBE when sharded()). When a new slot map gives the
// slot another master (a failover, a migration), the wait moves there: a
// waiter that does not block is told at once (its listener), a blocking one
// notices within kWaitSlice; either then re-checks (kResubscribed, or a
// fresh confirmation).

#ifndef RELOCK_LIB_BACKEND_ROUTED_BACKEND_H_
#define RELOCK_LIB_BACKEND_ROUTED_BACKEND_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "lib/backend/backend.h"
#include "lib/backend/node_backend.h"
#include "lib/backend/redirect.h"
#include "lib/common/mutex.h"
#include "lib/io/event_loop.h"
#include "lib/redis/cluster.h"
#include "lib/redis/script.h"
#include "lib/redis/url.h"

namespace relock {
namespace backend {

class RoutedBackend : public Backend {
 public:
  static constexpr int kMaxRedirects = RedirectRules::kMaxRedirects;
  // How long a resendable call keeps trying a slot whose master does not
  // answer (within its deadline).
  static constexpr absl::Duration kFailoverWait = absl::Seconds(20);
  // How often the slot map is read again without a reason (errors, MOVED,
  // CLUSTERDOWN and READONLY refresh it at once; so does a subclass's own
  // news, such as Sentinel's +switch-master): the bound on how long a waiter
  // whose master died, on a client that sends nothing, takes to move.
  static constexpr absl::Duration kRefreshInterval = absl::Seconds(5);
  // How often a blocked wait looks whether its slot moved.
  static constexpr absl::Duration kWaitSlice = absl::Milliseconds(100);

  ~RoutedBackend() override;

  size_t nodes() const override { return 1; }
  size_t quorum() const override { return 1; }
  const std::string& node_name(size_t) const override { return name_; }
  absl::Duration failover_wait() const override { return kFailoverWait; }
  absl::string_view publish_command() const override {
    return sharded_.load() ? "spublish" : "publish";
  }
  // Whether waits use sharded pub/sub (decided when the backend is made).
  bool sharded() const { return sharded_.load(); }

  std::vector<Answer> Run(const ScriptCall& call) override;
  void RunAsync(ScriptCall call, AnswersDone done) override;
  std::unique_ptr<Timer> NewTimer() override;
  BatchReplies RunBatch(const std::vector<Call>& calls, Deadline deadline,
                        std::atomic<uint64_t>* round_trips = nullptr,
                        const WaitReplicas* wait = nullptr) override;
  // Runs `argv` on every master of the slot map; the first failure (or
  // error reply), else the first master's answer.
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

  // The slot map in use now (for tests and diagnostics).
  std::shared_ptr<const redis::SlotMap> slot_map() const;
  // Slot-map refreshes installed so far.
  uint64_t refreshes() const {
    return refreshes_.load(std::memory_order_relaxed);
  }
  // Reads the map again in the background (on the loop). One asked for
  // while a refresh is running runs once that one is done (it may have
  // read its sources before the news that asked for this one).
  void RefreshSoon();

 protected:
  // `node`: the options of every master's NodeBackend (its endpoint is the
  // master's; its pubsub_mode follows sharded()). `name` names the
  // deployment in messages.
  RoutedBackend(io::EventLoop* loop, NodeOptions node,
                std::vector<redis::ScriptSource> scripts, std::string name);

  // Starts reading the map (on the loop, without blocking); must end with
  // RefreshDone() exactly once, having installed the map it read, if any.
  virtual void StartRefresh() = 0;
  void RefreshDone();
  // Installs `map` (tells the waits whose slot moved).
  void Install(redis::SlotMap map);
  // Refreshes the map every kRefreshInterval until Close(); call once the
  // first map is installed.
  void ScheduleRefresh();

  // The NodeBackend for `endpoint`, made (not connected) on first use;
  // nullptr once closed.
  NodeBackend* NodeAt(const redis::Endpoint& endpoint);
  // The master of `slot` per the current map, or nullptr.
  NodeBackend* MasterOf(int slot);
  // Every NodeBackend made so far.
  std::vector<NodeBackend*> AllNodes() const;
  // Keeps `node` (made elsewhere, connected) as the backend of its
  // endpoint.
  void Adopt(std::unique_ptr<NodeBackend> node);
  // Closes the backend of `endpoint` (kept until the backend goes, for calls
  // in flight); the next NodeAt() makes a new one.
  void Retire(const redis::Endpoint& endpoint);
  void set_sharded(bool sharded) { sharded_.store(sharded); }
  io::EventLoop* loop() const { return loop_; }
  const NodeOptions& node_options() const { return node_options_; }
  const std::vector<redis::ScriptSource>& scripts() const { return scripts_; }
  const std::string& name() const { return name_; }
  bool closed() const;

 private:
  class AsyncCall;
  class RoutedWaiter;
  // Where a call is sent next: `node`, after ASKING when `asking`.
  struct Hop {
    NodeBackend* node = nullptr;
    bool asking = false;
  };
  // The first stop of a call to `slot` (the slot's master), or why it does
  // not start: Cancelled "not sent" (per `only`, as Run's), Unavailable when
  // no master serves the slot (or the backend is closed).
  absl::StatusOr<NodeBackend*> FirstNode(int slot,
                                         const std::vector<bool>* only);
  // Following `redirect` (RouteStep::kRedirect): the node it names, after
  // ASKING for an ASK; node == nullptr once the backend is closed.
  Hop Redirected(const redis::Redirect& redirect);
  // After a pause (RouteStep::kRetry): the master of `slot` now, or `from`
  // while the map names none.
  Hop Retried(int slot, NodeBackend* from);
  // An administrative command's answer, as it is; an error that says the
  // map may be stale (unreachable, MOVED, CLUSTERDOWN...) refreshes it.
  Answer Settled(Answer answer);
  // A wait's slot and listener, for telling it that its slot moved.
  struct Watch {
    int slot = 0;
    pubsub::Listener listener;  // null for a blocking waiter
  };

  io::EventLoop* const loop_;
  const NodeOptions node_options_;
  const std::vector<redis::ScriptSource> scripts_;
  const std::string name_;

  mutable Mutex mu_;
  std::shared_ptr<const redis::SlotMap> map_ ABSL_GUARDED_BY(mu_);
  // By "host:port"; kept until the backend is destroyed (calls in flight
  // refer to them).
  absl::flat_hash_map<std::string, std::unique_ptr<NodeBackend>> nodes_
      ABSL_GUARDED_BY(mu_);
  // Closed nodes kept until the backend goes.
  std::vector<std::unique_ptr<NodeBackend>> retired_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::weak_ptr<const Watch>> watches_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Timer> refresh_timer_;  // made by ScheduleRefresh()
  std::atomic<bool> refreshing_{false};
  // A RefreshSoon() came while refreshing_: RefreshDone() starts another.
  std::atomic<bool> refresh_again_{false};
  std::atomic<uint64_t> refreshes_{0};
  // Set before the backend is shared, read after.
  std::atomic<bool> sharded_{false};
};

}  // namespace backend
}  // namespace relock

#endif  // RELOCK_LIB_BACKEND_ROUTED_BACKEND_H_
