#include "tests/testing/redis_cluster.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/testing/raw_connection.h"

namespace relock {
namespace testing {
namespace {

constexpr int kSlots = 16384;
constexpr int kMigrateBatch = 100;  // keys per CLUSTER GETKEYSINSLOT/MIGRATE

// The command's reply, with error replies turned into Internal.
absl::StatusOr<RedisValue> Must(RedisServer& node,
                                const std::vector<std::string>& argv) {
  absl::StatusOr<RedisValue> v = node.Command(argv);
  if (!v.ok()) return v.status();
  if (v->is_error()) {
    return absl::InternalError(absl::StrCat(
        absl::StrJoin(argv, " "), " on :", node.port(), ": ", v->str));
  }
  return v;
}

// A field of a flat field-value array (CLUSTER SHARDS), or nullptr.
const RedisValue* Field(const RedisValue& v, absl::string_view name) {
  for (size_t i = 0; i + 1 < v.elements.size(); i += 2) {
    if (v.elements[i].str == name) return &v.elements[i + 1];
  }
  return nullptr;
}

// The port the node announces to the cluster, which the nodes connect to
// (replication, MIGRATE): its TLS port with tls-cluster.
int AnnouncedPort(const RedisServer& node) {
  return node.tls_port() != 0 ? node.tls_port() : node.port();
}

}  // namespace

absl::StatusOr<std::unique_ptr<RedisCluster>> RedisCluster::Start(
    RedisClusterOptions options) {
  if (options.masters < 1 || options.masters > 16 ||
      options.replicas_per_master < 0 || options.replicas_per_master > 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("RedisCluster::Start: masters must be in [1, 16] and "
                     "replicas_per_master in [0, 4], not ",
                     options.masters, " and ", options.replicas_per_master));
  }
  if (options.network != nullptr && options.tls) {
    return absl::InvalidArgumentError(
        "RedisCluster::Start: a cluster on a private network has no TLS");
  }
  RedisServerOptions server;
  server.cluster = true;
  server.requirepass = options.requirepass;
  server.cluster_node_timeout = options.node_timeout;
  server.tls = options.tls;
  const int total = options.masters * (1 + options.replicas_per_master);
  std::vector<std::unique_ptr<RedisServer>> nodes;
  for (int i = 0; i < total; ++i) {
    if (options.network != nullptr) {
      absl::StatusOr<PrivateNetwork::Host> host =
          options.network->AddHost(absl::StrCat("node", i));
      if (!host.ok()) return host.status();
      server.host = host->address;
      server.netns = host->netns;
    }
    absl::StatusOr<std::unique_ptr<RedisServer>> node =
        RedisServer::Start(server);
    if (!node.ok()) return node.status();
    nodes.push_back(*std::move(node));
    // One CA for all: the others copy node 0's certificates.
    if (options.tls) server.tls_files_from = nodes[0]->dir();
  }
  std::unique_ptr<RedisCluster> cluster(
      new RedisCluster(std::move(options), std::move(nodes)));
  if (absl::Status s = cluster->Join(); !s.ok()) return s;
  return cluster;
}

RedisCluster::RedisCluster(RedisClusterOptions options,
                           std::vector<std::unique_ptr<RedisServer>> nodes)
    : options_(std::move(options)), nodes_(std::move(nodes)) {}

RedisCluster::~RedisCluster() {
  for (const auto& [node, fds] : reserved_fds_) {
    for (const int fd : fds) close(fd);
  }
}

absl::Status RedisCluster::Kill(size_t i) {
  if (absl::Status s = nodes_[i]->Kill(); !s.ok()) return s;
  for (const int port :
       {nodes_[i]->port(), nodes_[i]->tls_port(), nodes_[i]->cluster_port()}) {
    if (port == 0) continue;  // no TLS port
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      return absl::InternalError(
          absl::StrCat("RedisCluster::Kill: socket: ", strerror(errno)));
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr;
    memset(&addr, 0, sizeof(addr));
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      const int err = errno;
      close(fd);
      return absl::InternalError(absl::StrCat(
          "RedisCluster::Kill: reserving port ", port, ": ", strerror(err)));
    }
    reserved_fds_[i].push_back(fd);
  }
  return absl::OkStatus();
}

absl::Status RedisCluster::Revive(size_t i) {
  auto reserved = reserved_fds_.find(i);
  if (reserved == reserved_fds_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("RedisCluster::Revive: node ", i, " was not killed"));
  }
  for (const int fd : reserved->second) close(fd);
  reserved_fds_.erase(reserved);
  return nodes_[i]->Restart();
}

absl::Status RedisCluster::Join() const {
  const int m = options_.masters;
  for (int i = 0; i < m; ++i) {
    const int first = kSlots * i / m;
    const int last = kSlots * (i + 1) / m - 1;
    absl::StatusOr<RedisValue> v = Must(
        *nodes_[i],
        {"CLUSTER", "ADDSLOTSRANGE", absl::StrCat(first), absl::StrCat(last)});
    if (!v.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "RedisCluster needs redis-server >= 7.0: ", v.status().message()));
    }
  }
  for (size_t i = 1; i < nodes_.size(); ++i) {
    absl::StatusOr<RedisValue> v =
        Must(*nodes_[i], {"CLUSTER", "MEET", nodes_[0]->host(),
                          absl::StrCat(AnnouncedPort(*nodes_[0])),
                          absl::StrCat(nodes_[0]->cluster_port())});
    if (!v.ok()) return v.status();
  }
  // A replica can only replicate a master it knows: wait for the gossip.
  const absl::Time deadline = absl::Now() + options_.ready_timeout;
  for (size_t r = m; r < nodes_.size(); ++r) {
    const size_t master = (r - m) / options_.replicas_per_master;
    absl::StatusOr<std::string> id = NodeId(master);
    if (!id.ok()) return id.status();
    while (true) {
      absl::StatusOr<RedisValue> v =
          nodes_[r]->Command({"CLUSTER", "REPLICATE", *id});
      if (!v.ok()) return v.status();
      if (v->is_ok()) break;
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("RedisCluster: node ", r, " cannot replicate ", *id,
                         ": ", v->DebugString()));
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
  }
  return WaitUntilHealthy(options_.ready_timeout);
}

std::string RedisCluster::url() const {
  // node 0's URL carries the credentials: redis://[:pass@]host:port.
  std::string url = absl::StrCat(
      "redis-cluster://", absl::StripPrefix(nodes_[0]->url(), "redis://"));
  for (size_t i = 1; i < nodes_.size(); ++i) {
    absl::StrAppend(&url, ",", nodes_[i]->host(), ":", nodes_[i]->port());
  }
  return url;
}

std::string RedisCluster::tls_url() const {
  if (!options_.tls) return "";
  std::string url =
      absl::StrCat("rediss-cluster://",
                   absl::StripPrefix(nodes_[0]->tls_url(), "rediss://"));
  for (size_t i = 1; i < nodes_.size(); ++i) {
    absl::StrAppend(&url, ",", nodes_[i]->host(), ":", nodes_[i]->tls_port());
  }
  return url;
}

absl::StatusOr<std::string> RedisCluster::NodeId(size_t i) const {
  absl::StatusOr<RedisValue> v = Must(*nodes_[i], {"CLUSTER", "MYID"});
  if (!v.ok()) return v.status();
  return v->str;
}

absl::StatusOr<bool> RedisCluster::IsMaster(size_t i) const {
  absl::StatusOr<RedisValue> v = Must(*nodes_[i], {"ROLE"});
  if (!v.ok()) return v.status();
  if (!v->is_array() || v->elements.empty()) {
    return absl::InternalError(absl::StrCat("ROLE: ", v->DebugString()));
  }
  return v->elements[0].str == "master";
}

absl::StatusOr<size_t> RedisCluster::IndexOfPort(int port) const {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i]->port() == port) return i;
  }
  return absl::NotFoundError(absl::StrCat("no cluster node on port ", port));
}

absl::StatusOr<size_t> RedisCluster::NodeForSlotSeenBy(size_t i,
                                                       int slot) const {
  absl::StatusOr<RedisValue> shards = Must(*nodes_[i], {"CLUSTER", "SHARDS"});
  if (!shards.ok()) return shards.status();
  for (const RedisValue& shard : shards->elements) {
    const RedisValue* slots = Field(shard, "slots");
    const RedisValue* nodes = Field(shard, "nodes");
    if (slots == nullptr || nodes == nullptr) continue;
    bool serves = false;
    for (size_t j = 0; j + 1 < slots->elements.size(); j += 2) {
      serves |= slots->elements[j].integer <= slot &&
                slot <= slots->elements[j + 1].integer;
    }
    if (!serves) continue;
    for (const RedisValue& n : nodes->elements) {
      const RedisValue* role = Field(n, "role");
      const RedisValue* port = Field(n, "port");
      if (role != nullptr && role->str == "master" && port != nullptr) {
        return IndexOfPort(static_cast<int>(port->integer));
      }
    }
  }
  return absl::NotFoundError(absl::StrCat("no node serves slot ", slot));
}

absl::StatusOr<size_t> RedisCluster::NodeForSlot(int slot) const {
  absl::Status last = absl::UnavailableError("no cluster node is running");
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (!nodes_[i]->running()) continue;
    absl::StatusOr<size_t> node = NodeForSlotSeenBy(i, slot);
    if (node.ok() || absl::IsNotFound(node.status())) return node;
    last = node.status();
  }
  return last;
}

absl::StatusOr<size_t> RedisCluster::NodeForKey(const std::string& key) const {
  for (const std::unique_ptr<RedisServer>& node : nodes_) {
    if (!node->running()) continue;
    absl::StatusOr<RedisValue> slot = Must(*node, {"CLUSTER", "KEYSLOT", key});
    if (!slot.ok()) return slot.status();
    return NodeForSlot(static_cast<int>(slot->integer));
  }
  return absl::UnavailableError("no cluster node is running");
}

absl::Status RedisCluster::WaitUntilHealthy(absl::Duration timeout) const {
  const absl::Time deadline = absl::Now() + timeout;
  std::string why;
  while (true) {
    why.clear();
    const bool all_running =
        std::all_of(nodes_.begin(), nodes_.end(),
                    [](const auto& node) { return node->running(); });
    for (size_t i = 0; i < nodes_.size() && why.empty(); ++i) {
      if (!nodes_[i]->running()) continue;
      absl::StatusOr<RedisValue> info = Must(*nodes_[i], {"CLUSTER", "INFO"});
      if (!info.ok()) {
        why = std::string(info.status().message());
        break;
      }
      const std::string state = InfoField(info->str, "cluster_state");
      const std::string slots_ok = InfoField(info->str, "cluster_slots_ok");
      const std::string known = InfoField(info->str, "cluster_known_nodes");
      if (state != "ok" || slots_ok != absl::StrCat(kSlots) ||
          known != absl::StrCat(nodes_.size())) {
        why = absl::StrCat("node ", i, ": cluster_state:", state,
                           " cluster_slots_ok:", slots_ok,
                           " cluster_known_nodes:", known);
        break;
      }
      if (all_running) {
        absl::StatusOr<RedisValue> nodes =
            Must(*nodes_[i], {"CLUSTER", "NODES"});
        if (!nodes.ok()) {
          why = std::string(nodes.status().message());
          break;
        }
        const std::vector<absl::string_view> lines =
            absl::StrSplit(nodes->str, '\n');
        const size_t replicas = static_cast<size_t>(std::count_if(
            lines.begin(), lines.end(),
            [](absl::string_view l) { return absl::StrContains(l, "slave"); }));
        if (replicas != nodes_.size() - masters()) {
          why = absl::StrCat("node ", i, " knows ", replicas, " replicas");
          break;
        }
      }
      absl::StatusOr<RedisValue> repl =
          Must(*nodes_[i], {"INFO", "replication"});
      if (!repl.ok()) {
        why = std::string(repl.status().message());
        break;
      }
      if (InfoField(repl->str, "role") == "slave" &&
          InfoField(repl->str, "master_link_status") != "up") {
        why = absl::StrCat("node ", i, ": master_link_status:",
                           InfoField(repl->str, "master_link_status"));
      }
    }
    if (why.empty()) return absl::OkStatus();
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("RedisCluster: not healthy within ",
                       absl::FormatDuration(timeout), "; last: ", why));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
}

absl::Status RedisCluster::MigrateSlot(
    int slot, size_t to, const std::function<void()>& while_open) const {
  absl::StatusOr<size_t> from = NodeForSlot(slot);
  if (!from.ok()) return from.status();
  if (*from == to) return absl::OkStatus();
  absl::StatusOr<std::string> from_id = NodeId(*from);
  if (!from_id.ok()) return from_id.status();
  absl::StatusOr<std::string> to_id = NodeId(to);
  if (!to_id.ok()) return to_id.status();
  const std::string s = absl::StrCat(slot);
  RedisServer& source = *nodes_[*from];
  RedisServer& target = *nodes_[to];
  if (absl::StatusOr<RedisValue> v =
          Must(target, {"CLUSTER", "SETSLOT", s, "IMPORTING", *from_id});
      !v.ok()) {
    return v.status();
  }
  if (absl::StatusOr<RedisValue> v =
          Must(source, {"CLUSTER", "SETSLOT", s, "MIGRATING", *to_id});
      !v.ok()) {
    return v.status();
  }
  if (while_open) while_open();
  while (true) {
    absl::StatusOr<RedisValue> keys = Must(
        source, {"CLUSTER", "GETKEYSINSLOT", s, absl::StrCat(kMigrateBatch)});
    if (!keys.ok()) return keys.status();
    if (keys->elements.empty()) break;
    std::vector<std::string> migrate = {
        "MIGRATE", target.host(), absl::StrCat(AnnouncedPort(target)),
        "",        "0",           "5000"};
    if (!options_.requirepass.empty()) {
      migrate.insert(migrate.end(), {"AUTH", options_.requirepass});
    }
    migrate.push_back("KEYS");
    for (const RedisValue& key : keys->elements) migrate.push_back(key.str);
    if (absl::StatusOr<RedisValue> v = Must(source, migrate); !v.ok()) {
      return v.status();
    }
  }
  // The new owner first, then the old one, then every other master, as
  // redis-cli does (the gossip would spread it too, but more slowly).
  std::vector<size_t> order = {to, *from};
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (i == to || i == *from || !nodes_[i]->running()) continue;
    absl::StatusOr<bool> master = IsMaster(i);
    if (master.ok() && *master) order.push_back(i);
  }
  for (size_t i : order) {
    if (absl::StatusOr<RedisValue> v =
            Must(*nodes_[i], {"CLUSTER", "SETSLOT", s, "NODE", *to_id});
        !v.ok()) {
      return v.status();
    }
  }
  // Done when every running node says so (the replicas hear it by gossip):
  // the next NodeForSlot() or MigrateSlot(), whichever node it asks, then
  // finds the new owner. SETSLOT NODE gives the new owner a config epoch
  // above those it knows of; one it has not heard of yet (an earlier
  // migration's, moments ago) can win the slot back for the old owner
  // through a gossip message sent before the old owner let go. The new owner
  // is then told again, with the epochs it knows by now.
  const absl::Time deadline = absl::Now() + options_.ready_timeout;
  absl::Time retold = absl::Now();
  while (true) {
    std::string why;
    for (size_t i = 0; i < nodes_.size() && why.empty(); ++i) {
      if (!nodes_[i]->running()) continue;
      absl::StatusOr<size_t> seen = NodeForSlotSeenBy(i, slot);
      if (!seen.ok()) {
        why = absl::StrCat("node ", i, ": ", seen.status().ToString());
      } else if (*seen != to) {
        why = absl::StrCat("node ", i, " says node ", *seen, " serves it");
      }
    }
    if (why.empty()) return absl::OkStatus();
    absl::StatusOr<size_t> own = NodeForSlotSeenBy(to, slot);
    if ((!own.ok() || *own != to) &&
        absl::Now() - retold > absl::Milliseconds(500)) {
      retold = absl::Now();
      if (absl::StatusOr<RedisValue> v =
              Must(target, {"CLUSTER", "SETSLOT", s, "NODE", *to_id});
          !v.ok()) {
        return v.status();
      }
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "RedisCluster: slot ", slot, " moved to node ", to,
          ", but the nodes did not all agree within ",
          absl::FormatDuration(options_.ready_timeout), "; last: ", why));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

RedisCluster& SharedRedisCluster() {
  static RedisCluster* const cluster = [] {
    absl::StatusOr<std::unique_ptr<RedisCluster>> started =
        RedisCluster::Start();
    if (!started.ok()) {
      fprintf(stderr,
              "FATAL: relock::testing::SharedRedisCluster(): cannot start "
              "the cluster: %s\n",
              started.status().ToString().c_str());
      fflush(stderr);
      abort();
    }
    // Leaked on purpose, as SharedRedisServer(): its servers are stopped at
    // exit by RedisServer's at-exit handler.
    return started->release();
  }();
  return *cluster;
}

}  // namespace testing
}  // namespace relock
