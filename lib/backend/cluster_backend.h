// A Redis Cluster as one Backend: each call goes to the master that serves
// the hash slot of its first key (lib/redis/cluster.h), through a NodeBackend
// per master (its own command and pub/sub connections on the client's loop,
// made when first needed). To the lock algorithm the cluster is one node:
// nodes() == quorum() == 1.
//
//   reply / event            what the backend does (all within the deadline)
//   MOVED slot host:port     sends the call there, refreshes the slot map
//   ASK slot host:port       sends ASKING + the call there (once)
//   TRYAGAIN, CLUSTERDOWN    sends it again after a pause (10 ms, doubling
//                            to 200 ms); CLUSTERDOWN also refreshes the map
//   node unreachable         refreshes the map; a call harmless to run
//   (Unavailable)            twice (Resend::kIfDropped) is sent again to
//                            the slot's master after a pause, for up to
//                            kFailoverWait (a promotion takes about
//                            cluster-node-timeout + 1 s); any other call
//                            gets the answer as it is (it may have run)
//
// A MOVED, ASK, TRYAGAIN or CLUSTERDOWN reply means the call did not run, so
// it is sent again whatever its Resend says; at most kMaxRedirects
// redirections per call. The slot map comes from CLUSTER SHARDS (Redis >= 7)
// or CLUSTER SLOTS, from the seeds at start and from any known master after;
// refreshes run on the loop, one at a time, on errors and every
// kRefreshInterval.
//
// Batches (RunBatch) go to each master at once, one pipelined round trip per
// master (the caller groups keys by KeyGroup(), so that one call's keys share
// a slot); a call of a batch that meets a redirection is run again alone.
//
// Waits (Subscribe) listen with classic SUBSCRIBE on the master of the
// channel's slot; Redis Cluster delivers a PUBLISH from any node to every
// node, so the wait hears releases made through any node. When a new slot
// map gives the slot another master (a failover, a migration), the wait
// moves there: a waiter that does not block is told at once (its listener),
// a blocking one notices within kWaitSlice; either then re-checks
// (kResubscribed, or a fresh confirmation).

#ifndef RELOCK_LIB_BACKEND_CLUSTER_BACKEND_H_
#define RELOCK_LIB_BACKEND_CLUSTER_BACKEND_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "lib/backend/backend.h"
#include "lib/backend/node_backend.h"
#include "lib/common/mutex.h"
#include "lib/io/event_loop.h"
#include "lib/redis/cluster.h"
#include "lib/redis/script.h"
#include "lib/redis/url.h"

namespace relock {
namespace backend {

struct ClusterOptions {
  // Where to ask for the slot map first; tried in turn.
  std::vector<redis::Endpoint> seeds;
  // For every node (its connection's endpoint is the node's; its
  // pubsub_mode is set from `pubsub`).
  NodeOptions node;
  // How waits listen and releases publish: kAuto is sharded pub/sub
  // (SSUBSCRIBE / SPUBLISH, as Redisson does) when the cluster has it (Redis
  // >= 7, which answers CLUSTER SHARDS), else classic. Every client of a
  // lock must use the same kind: a classic PUBLISH does not reach a sharded
  // subscriber, nor the reverse.
  enum class PubSub { kAuto, kSharded, kClassic };
  PubSub pubsub = PubSub::kAuto;
};

class ClusterBackend : public Backend {
 public:
  static constexpr int kMaxRedirects = 5;
  // How long a resendable call keeps trying a slot whose master does not
  // answer (within its deadline).
  static constexpr absl::Duration kFailoverWait = absl::Seconds(20);
  // How often the slot map is read again without a reason (errors, MOVED
  // and CLUSTERDOWN refresh it at once): the bound on how long a waiter
  // whose master died, on a client that sends nothing, takes to move.
  static constexpr absl::Duration kRefreshInterval = absl::Seconds(5);
  // How often a blocked wait looks whether its slot moved.
  static constexpr absl::Duration kWaitSlice = absl::Milliseconds(100);

  // Connects to the first seed that answers and reads the slot map from it:
  // Unavailable if no seed answers (naming each), FailedPrecondition if the
  // server is not a cluster node, the seed's error otherwise (Unauthenticated,
  // PermissionDenied, ...). `loop` as for NodeBackend::Create.
  static absl::StatusOr<std::unique_ptr<ClusterBackend>> Create(
      io::EventLoop* loop, ClusterOptions options,
      std::vector<redis::ScriptSource> scripts);
  ~ClusterBackend() override;

  size_t nodes() const override { return 1; }
  size_t quorum() const override { return 1; }
  const std::string& node_name(size_t) const override { return name_; }
  int KeyGroup(absl::string_view key) const override {
    return redis::KeySlot(key);
  }
  absl::Duration failover_wait() const override { return kFailoverWait; }
  absl::string_view publish_command() const override {
    return sharded_.load() ? "spublish" : "publish";
  }
  // Whether waits use sharded pub/sub (decided in Create()).
  bool sharded() const { return sharded_.load(); }

  std::vector<Answer> Run(size_t script,
                          absl::Span<const absl::string_view> keys,
                          absl::Span<const absl::string_view> args,
                          Deadline deadline, Resend resend,
                          const Enough& enough = nullptr,
                          const std::vector<bool>* only = nullptr) override;
  void RunAsync(size_t script, absl::Span<const absl::string_view> keys,
                absl::Span<const absl::string_view> args, Deadline deadline,
                Resend resend, Enough enough, AnswersDone done,
                const std::vector<bool>* only = nullptr) override;
  std::unique_ptr<Timer> NewTimer() override;
  BatchReplies RunBatch(size_t script, const std::vector<Call>& calls,
                        Deadline deadline,
                        std::atomic<uint64_t>* round_trips = nullptr) override;
  // Runs `argv` on every master of the slot map; the first failure (or
  // error reply), else the first master's answer.
  std::vector<Answer> Command(absl::Span<const absl::string_view> argv,
                              Deadline deadline) override;
  std::unique_ptr<Waiter> Subscribe(const std::string& channel,
                                    pubsub::WakePolicy policy,
                                    const std::string& waiter,
                                    pubsub::Listener listener) override;
  void CancelWaits() override;
  void Close() override;

  // The slot map in use now (for tests and diagnostics).
  std::shared_ptr<const redis::SlotMap> slot_map() const;
  // Slot-map refreshes made so far.
  uint64_t refreshes() const {
    return refreshes_.load(std::memory_order_relaxed);
  }

 private:
  class AsyncCall;
  class ClusterWaiter;
  // A wait's slot and listener, for telling it that its slot moved.
  struct Watch {
    int slot = 0;
    pubsub::Listener listener;  // null for a blocking waiter
  };

  ClusterBackend(io::EventLoop* loop, ClusterOptions options,
                 std::vector<redis::ScriptSource> scripts);

  // The NodeBackend for `endpoint`, made (not connected) on first use;
  // nullptr once closed.
  NodeBackend* NodeAt(const redis::Endpoint& endpoint);
  // The master of `slot` per the current map, or nullptr.
  NodeBackend* MasterOf(int slot);
  // Reads the map from `node` (blocking, within `deadline`) and installs it;
  // `*shards` (if given) says whether CLUSTER SHARDS gave it.
  absl::Status RefreshFrom(NodeBackend* node, Deadline deadline,
                           bool* shards = nullptr);
  // Refreshes the map in the background (on the loop), unless a refresh is
  // running already.
  void RefreshSoon();
  // One step of RefreshSoon(): asks candidate `i` (CLUSTER SLOTS if
  // `from_slots`), and the next one if it gives no map.
  void RefreshStep(
      const std::shared_ptr<const std::vector<NodeBackend*>>& candidates,
      size_t i, bool from_slots);
  // Installs a map read from `node`'s reply; false if it did not parse.
  bool Install(const redis::Reply& shards, bool from_slots, NodeBackend* node);
  // Refreshes the map every kRefreshInterval until Close().
  void ScheduleRefresh();
  // Every NodeBackend made so far.
  std::vector<NodeBackend*> AllNodes() const;

  io::EventLoop* const loop_;
  const ClusterOptions options_;
  const std::vector<redis::ScriptSource> scripts_;
  const std::string name_;  // "Redis Cluster <seed>,..." for messages

  mutable Mutex mu_;
  std::shared_ptr<const redis::SlotMap> map_ ABSL_GUARDED_BY(mu_);
  // By "host:port"; kept until the backend is destroyed (calls in flight
  // refer to them).
  absl::flat_hash_map<std::string, std::unique_ptr<NodeBackend>> nodes_
      ABSL_GUARDED_BY(mu_);
  // Closed nodes kept until the backend goes (a seed whose subscriber was of
  // the wrong kind).
  std::vector<std::unique_ptr<NodeBackend>> retired_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::weak_ptr<const Watch>> watches_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Timer> refresh_timer_;  // made in Create()
  std::atomic<bool> refreshing_{false};
  std::atomic<uint64_t> refreshes_{0};
  // Set in Create() before the backend is shared, read after.
  std::atomic<bool> sharded_{false};
};

}  // namespace backend
}  // namespace relock

#endif  // RELOCK_LIB_BACKEND_CLUSTER_BACKEND_H_
