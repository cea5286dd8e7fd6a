// A Redis Cluster as one Backend (a RoutedBackend, which routes each call to
// the master of its first key's slot and follows MOVED, ASK, TRYAGAIN and
// CLUSTERDOWN: see routed_backend.h). This file is where the slot map comes
// from: CLUSTER SHARDS (Redis >= 7) or CLUSTER SLOTS, read from the seeds at
// start and from any known node after (the masters of the current map
// first).
//
// Pub/sub: on Redis >= 7 waits use sharded pub/sub (SSUBSCRIBE on the slot's
// master, releases SPUBLISH), as Redisson does; before, classic SUBSCRIBE on
// the slot's master, which hears a PUBLISH made through any node.

#ifndef RELOCK_LIB_BACKEND_CLUSTER_BACKEND_H_
#define RELOCK_LIB_BACKEND_CLUSTER_BACKEND_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/backend/node_backend.h"
#include "lib/backend/routed_backend.h"
#include "lib/io/event_loop.h"
#include "lib/redis/cluster.h"
#include "lib/redis/script.h"
#include "lib/redis/url.h"
#include "relock/options.h"

namespace relock {
namespace backend {

struct ClusterOptions {
  // Where to ask for the slot map first; tried in turn.
  std::vector<redis::Endpoint> seeds;
  // For every node (its connection's endpoint is the node's; its
  // pubsub_mode is set from `pubsub`).
  NodeOptions node;
  // How waits listen and releases publish (see relock::ClusterPubSub):
  // kAuto is sharded pub/sub (SSUBSCRIBE / SPUBLISH, as Redisson does) when
  // the cluster has it (Redis >= 7, which answers CLUSTER SHARDS), else
  // classic; kSharded on a cluster without it fails Create() with
  // FailedPrecondition.
  ClusterPubSub pubsub = ClusterPubSub::kAuto;
};

class ClusterBackend final : public RoutedBackend {
 public:
  // Connects to the first seed that answers and reads the slot map from it:
  // Unavailable if no seed answers (naming each), FailedPrecondition if the
  // server is not a cluster node, the seed's error otherwise (Unauthenticated,
  // PermissionDenied, ...). `loop` as for NodeBackend::Create.
  static absl::StatusOr<std::unique_ptr<ClusterBackend>> Create(
      io::EventLoop* loop, ClusterOptions options,
      std::vector<redis::ScriptSource> scripts);

  // A script's keys must share a slot.
  int KeyGroup(absl::string_view key) const override {
    return redis::KeySlot(key);
  }

 private:
  ClusterBackend(io::EventLoop* loop, ClusterOptions options,
                 std::vector<redis::ScriptSource> scripts);

  // Reads the map from `node` (blocking, within `deadline`) and installs it;
  // `*shards` (if given) says whether CLUSTER SHARDS gave it.
  absl::Status RefreshFrom(NodeBackend* node, Deadline deadline,
                           bool* shards = nullptr);
  // The masters of the current map first, then every other known node; one
  // at a time, on the loop, until one gives a map.
  void StartRefresh() override;
  // One step of StartRefresh(): asks candidate `i` (CLUSTER SLOTS if
  // `from_slots`), and the next one if it gives no map.
  void RefreshStep(
      const std::shared_ptr<const std::vector<NodeBackend*>>& candidates,
      size_t i, bool from_slots);
  // Installs a map read from `node`'s reply; false if it did not parse.
  bool InstallReply(const redis::Reply& reply, bool from_slots,
                    NodeBackend* node);

  const std::vector<redis::Endpoint> seeds_;
  const ClusterPubSub pubsub_;
};

}  // namespace backend
}  // namespace relock

#endif  // RELOCK_LIB_BACKEND_CLUSTER_BACKEND_H_
