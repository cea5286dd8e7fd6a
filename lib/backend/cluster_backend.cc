#include "lib/backend/cluster_backend.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/redis/resp.h"

namespace relock {
namespace backend {
namespace {

bool IsUnknownSubcommand(absl::string_view error) {
  return absl::StrContains(absl::AsciiStrToLower(error), "unknown subcommand");
}

std::string ClusterName(const std::vector<redis::Endpoint>& seeds) {
  return absl::StrCat(
      "Redis Cluster at ",
      absl::StrJoin(seeds, ",",
                    [](std::string* out, const redis::Endpoint& ep) {
                      out->append(ep.ToString());
                    }));
}

}  // namespace

ClusterBackend::ClusterBackend(io::EventLoop* loop, ClusterOptions options,
                               std::vector<redis::ScriptSource> scripts)
    : RoutedBackend(loop, std::move(options.node), std::move(scripts),
                    ClusterName(options.seeds)),
      seeds_(std::move(options.seeds)),
      pubsub_(options.pubsub) {}

absl::StatusOr<std::unique_ptr<ClusterBackend>> ClusterBackend::Create(
    io::EventLoop* loop, ClusterOptions options,
    std::vector<redis::ScriptSource> scripts) {
  if (options.seeds.empty()) {
    return absl::InvalidArgumentError("Redis Cluster: no seed nodes");
  }
  std::unique_ptr<ClusterBackend> backend(
      new ClusterBackend(loop, std::move(options), std::move(scripts)));
  std::vector<std::string> failures;
  for (const redis::Endpoint& seed : backend->seeds_) {
    NodeOptions node = backend->node_options();
    node.connection.endpoint = seed;
    node.connect_now = true;
    node.require_master = false;  // a replica gives the slot map too
    absl::StatusOr<std::unique_ptr<NodeBackend>> made =
        NodeBackend::Create(loop, std::move(node), backend->scripts());
    if (!made.ok()) {
      // A refusal is the same on every node: say it now.
      if (made.status().code() != absl::StatusCode::kUnavailable &&
          made.status().code() != absl::StatusCode::kDeadlineExceeded) {
        return made.status();
      }
      failures.push_back(std::string(made.status().message()));
      continue;
    }
    NodeBackend* raw = made->get();
    backend->Adopt(*std::move(made));
    bool shards = false;
    absl::Status s =
        backend->RefreshFrom(raw, Deadline::After(raw->backstop()), &shards);
    if (s.ok()) {
      // CLUSTER SHARDS came with sharded pub/sub (Redis 7.0).
      const ClusterPubSub mode = backend->pubsub_;
      if (mode == ClusterPubSub::kSharded && !shards) {
        return absl::FailedPreconditionError(absl::StrCat(
            backend->name(),
            ": sharded pub/sub was asked for (ClusterPubSub::kSharded), but "
            "the cluster has no CLUSTER SHARDS (Redis < 7)"));
      }
      backend->set_sharded(mode == ClusterPubSub::kSharded ||
                           (mode == ClusterPubSub::kAuto && shards));
      // The seed's subscriber is classic: made again when first needed.
      if (backend->sharded()) backend->Retire(seed);
      backend->ScheduleRefresh();
      return backend;
    }
    if (s.code() == absl::StatusCode::kFailedPrecondition) return s;
    failures.push_back(std::string(s.message()));
  }
  return absl::UnavailableError(absl::StrCat(
      backend->name(),
      ": no seed node gave a slot map: ", absl::StrJoin(failures, "; ")));
}

bool ClusterBackend::InstallReply(const redis::Reply& reply, bool from_slots,
                                  NodeBackend* node) {
  absl::StatusOr<redis::SlotMap> map =
      from_slots ? redis::SlotMap::FromSlots(reply.view(), node->endpoint())
                 : redis::SlotMap::FromShards(reply.view(), node->endpoint());
  if (!map.ok() || map->ranges().empty()) return false;
  Install(*std::move(map));
  return true;
}

absl::Status ClusterBackend::RefreshFrom(NodeBackend* node, Deadline deadline,
                                         bool* shards) {
  for (const bool from_slots : {false, true}) {
    const absl::string_view argv[] = {"CLUSTER",
                                      from_slots ? "SLOTS" : "SHARDS"};
    std::vector<Answer> answers = node->Command(argv, deadline);
    if (!answers[0].reply.ok()) return answers[0].reply.status();
    const redis::Reply& reply = *answers[0].reply;
    if (reply.is_error()) {
      const absl::string_view error = reply.str();
      if (absl::StrContains(error, "cluster support disabled")) {
        return absl::FailedPreconditionError(absl::StrCat(
            node->node_name(0),
            " is not a Redis Cluster node (use a redis:// URL for a single "
            "server): ",
            error));
      }
      // Before Redis 7.0 there is no CLUSTER SHARDS.
      if (!from_slots && IsUnknownSubcommand(error)) continue;
      return absl::UnavailableError(absl::StrCat(
          "CLUSTER ", argv[1], " on ", node->node_name(0), ": ", error));
    }
    if (!InstallReply(reply, from_slots, node)) {
      return absl::UnavailableError(
          absl::StrCat("CLUSTER ", argv[1], " on ", node->node_name(0),
                       ": no usable slot map in the reply"));
    }
    if (shards != nullptr) *shards = !from_slots;
    return absl::OkStatus();
  }
  return absl::UnavailableError("unreachable");
}

void ClusterBackend::StartRefresh() {
  // The masters of the current map first, then every other known node; one
  // at a time, on the loop, until one gives a map.
  auto candidates = std::make_shared<std::vector<NodeBackend*>>();
  if (std::shared_ptr<const redis::SlotMap> map = slot_map()) {
    for (const redis::ClusterNode& m : map->Masters()) {
      if (NodeBackend* node = NodeAt(m.endpoint)) candidates->push_back(node);
    }
  }
  for (NodeBackend* node : AllNodes()) {
    if (std::find(candidates->begin(), candidates->end(), node) ==
        candidates->end()) {
      candidates->push_back(node);
    }
  }
  RefreshStep(std::move(candidates), 0, /*from_slots=*/false);
}

void ClusterBackend::RefreshStep(
    const std::shared_ptr<const std::vector<NodeBackend*>>& candidates,
    size_t i, bool from_slots) {
  if (i >= candidates->size()) {
    return RefreshDone();
  }
  NodeBackend* node = (*candidates)[i];
  std::string wire;
  redis::AppendCommand({"CLUSTER", from_slots ? "SLOTS" : "SHARDS"}, &wire);
  node->SendOnNode(
      std::move(wire), Resend::kIfDropped, nullptr,
      [this, candidates, i, from_slots, node](Answer answer) {
        if (answer.reply.ok() && answer.reply->is_error()) {
          if (!from_slots && IsUnknownSubcommand(answer.reply->str())) {
            return RefreshStep(candidates, i, /*from_slots=*/true);
          }
        } else if (answer.reply.ok() &&
                   InstallReply(*answer.reply, from_slots, node)) {
          return RefreshDone();
        }
        RefreshStep(candidates, i + 1, /*from_slots=*/false);
      });
}

}  // namespace backend
}  // namespace relock
