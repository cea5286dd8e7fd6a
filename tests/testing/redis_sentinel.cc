#include "tests/testing/redis_sentinel.h"

#include <algorithm>
#include <map>
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

constexpr absl::Duration kPoll = absl::Milliseconds(100);

// A field of a flat field-value array (SENTINEL MASTER), or "".
std::string FieldText(const RedisValue& v, absl::string_view name) {
  for (size_t i = 0; i + 1 < v.elements.size(); i += 2) {
    if (v.elements[i].str == name) return v.elements[i + 1].str;
  }
  return "";
}

}  // namespace

absl::StatusOr<std::unique_ptr<RedisSentinelGroup>> RedisSentinelGroup::Start(
    RedisSentinelOptions options) {
  if (options.replicas < 0 || options.replicas > 4 || options.sentinels < 1 ||
      options.sentinels > 5 || options.master_name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RedisSentinelGroup::Start: replicas must be in [0, 4], sentinels in "
        "[1, 5] and master_name set, not ",
        options.replicas, ", ", options.sentinels, " and \"",
        options.master_name, "\""));
  }
  RedisServerOptions data;
  data.requirepass = options.requirepass;
  data.extra_args = {"--repl-diskless-sync-delay", "0"};
  if (!options.requirepass.empty()) {
    data.extra_args.insert(data.extra_args.end(),
                           {"--masterauth", options.requirepass});
  }
  // Places a server in host `name` of the private network, if any.
  auto place = [&options](const std::string& name,
                          RedisServerOptions* server) -> absl::Status {
    if (options.network == nullptr) return absl::OkStatus();
    absl::StatusOr<PrivateNetwork::Host> host = options.network->AddHost(name);
    if (!host.ok()) return host.status();
    server->host = host->address;
    server->netns = host->netns;
    return absl::OkStatus();
  };
  std::vector<std::unique_ptr<RedisServer>> nodes;
  for (int i = 0; i <= options.replicas; ++i) {
    RedisServerOptions node = data;
    if (i > 0) {
      node.extra_args.insert(
          node.extra_args.end(),
          {"--replicaof", nodes[0]->host(), absl::StrCat(nodes[0]->port())});
    }
    if (absl::Status s = place(NodeHostName(static_cast<size_t>(i)), &node);
        !s.ok()) {
      return s;
    }
    absl::StatusOr<std::unique_ptr<RedisServer>> started =
        RedisServer::Start(node);
    if (!started.ok()) return started.status();
    nodes.push_back(*std::move(started));
  }
  const std::string& name = options.master_name;
  std::vector<std::string> config = {
      absl::StrCat("sentinel monitor ", name, " ", nodes[0]->host(), " ",
                   nodes[0]->port(), " ", options.sentinels / 2 + 1),
      absl::StrCat("sentinel down-after-milliseconds ", name, " ",
                   absl::ToInt64Milliseconds(options.down_after)),
      absl::StrCat("sentinel failover-timeout ", name, " ",
                   absl::ToInt64Milliseconds(options.failover_timeout)),
      absl::StrCat("sentinel parallel-syncs ", name, " 1")};
  if (!options.requirepass.empty()) {
    config.push_back(
        absl::StrCat("sentinel auth-pass ", name, " ", options.requirepass));
  }
  if (!options.sentinel_pass.empty()) {
    // How the sentinels authenticate to each other.
    config.push_back(
        absl::StrCat("sentinel sentinel-pass ", options.sentinel_pass));
  }
  RedisServerOptions sentinel;
  sentinel.sentinel_config = absl::StrJoin(config, "\n");
  sentinel.requirepass = options.sentinel_pass;
  std::vector<std::unique_ptr<RedisServer>> sentinels;
  for (int i = 0; i < options.sentinels; ++i) {
    RedisServerOptions one = sentinel;
    if (absl::Status s = place(absl::StrCat("sen", i), &one); !s.ok()) {
      return s;
    }
    absl::StatusOr<std::unique_ptr<RedisServer>> started =
        RedisServer::Start(one);
    if (!started.ok()) return started.status();
    sentinels.push_back(*std::move(started));
  }
  std::unique_ptr<RedisSentinelGroup> group(new RedisSentinelGroup(
      std::move(options), std::move(nodes), std::move(sentinels)));
  if (absl::Status s = group->WaitUntilHealthy(group->options_.ready_timeout);
      !s.ok()) {
    return s;
  }
  return group;
}

RedisSentinelGroup::RedisSentinelGroup(
    RedisSentinelOptions options,
    std::vector<std::unique_ptr<RedisServer>> nodes,
    std::vector<std::unique_ptr<RedisServer>> sentinels)
    : options_(std::move(options)),
      nodes_(std::move(nodes)),
      sentinels_(std::move(sentinels)) {}

RedisSentinelGroup::~RedisSentinelGroup() = default;

std::string RedisSentinelGroup::NodeHostName(size_t i) {
  return absl::StrCat("node", i);
}

std::string RedisSentinelGroup::url() const {
  std::vector<std::string> hosts;
  for (const std::unique_ptr<RedisServer>& s : sentinels_) {
    hosts.push_back(absl::StrCat(s->host(), ":", s->port()));
  }
  return absl::StrCat(
      "redis-sentinel://",
      options_.requirepass.empty()
          ? ""
          : absl::StrCat(":", PercentEncode(options_.requirepass), "@"),
      absl::StrJoin(hosts, ","), "#", PercentEncode(options_.master_name));
}

absl::StatusOr<size_t> RedisSentinelGroup::IndexOfPort(int port) const {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i]->port() == port) return i;
  }
  return absl::NotFoundError(absl::StrCat("no data node has port ", port));
}

absl::StatusOr<int> RedisSentinelGroup::NamedPort(size_t i) const {
  absl::StatusOr<RedisValue> v = sentinels_[i]->Command(
      {"SENTINEL", "get-master-addr-by-name", options_.master_name});
  if (!v.ok()) return v.status();
  int port = 0;
  if (!v->is_array() || v->elements.size() != 2 ||
      !absl::SimpleAtoi(v->elements[1].str, &port)) {
    return absl::UnavailableError(absl::StrCat(
        "sentinel :", sentinels_[i]->port(), " names ", v->DebugString()));
  }
  return port;
}

absl::StatusOr<size_t> RedisSentinelGroup::PrimaryIndex() const {
  std::map<int, int> votes;
  int running = 0;
  std::vector<std::string> said;
  for (size_t i = 0; i < sentinels_.size(); ++i) {
    if (!sentinels_[i]->running()) continue;
    ++running;
    absl::StatusOr<int> port = NamedPort(i);
    if (port.ok()) {
      ++votes[*port];
    } else {
      said.push_back(port.status().ToString());
    }
  }
  for (const auto& [port, count] : votes) {
    if (count * 2 <= running) continue;
    absl::StatusOr<size_t> index = IndexOfPort(port);
    if (!index.ok()) return index.status();
    absl::StatusOr<RedisValue> info =
        nodes_[*index]->Command({"INFO", "replication"});
    if (info.ok() && InfoField(info->str, "role") == "master") return *index;
    said.push_back(absl::StrCat(":", port, " is named but is not a master"));
  }
  return absl::NotFoundError(
      absl::StrCat("no primary that a majority of the sentinels names: ",
                   absl::StrJoin(said, "; ")));
}

absl::StatusOr<size_t> RedisSentinelGroup::WaitForNewPrimary(
    size_t old_primary, absl::Duration timeout) const {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Status last = absl::UnknownError("not asked yet");
  while (true) {
    absl::StatusOr<size_t> primary = PrimaryIndex();
    if (primary.ok() && *primary != old_primary) return primary;
    last = primary.ok() ? absl::UnavailableError("still the old primary")
                        : primary.status();
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("no new primary after ", absl::FormatDuration(timeout),
                       ": ", last.ToString()));
    }
    absl::SleepFor(kPoll);
  }
}

absl::StatusOr<size_t> RedisSentinelGroup::Failover() const {
  absl::StatusOr<size_t> old = PrimaryIndex();
  if (!old.ok()) return old.status();
  absl::StatusOr<RedisValue> asked =
      sentinels_[0]->Command({"SENTINEL", "FAILOVER", options_.master_name});
  if (!asked.ok()) return asked.status();
  if (!asked->is_ok()) {
    return absl::InternalError(
        absl::StrCat("SENTINEL FAILOVER: ", asked->DebugString()));
  }
  absl::StatusOr<size_t> promoted =
      WaitForNewPrimary(*old, options_.ready_timeout);
  if (!promoted.ok()) return promoted;
  // The old primary becomes a replica of the new one.
  const absl::Time deadline = absl::Now() + options_.ready_timeout;
  const std::string master_port = absl::StrCat(nodes_[*promoted]->port());
  while (nodes_[*old]->running()) {
    absl::StatusOr<RedisValue> info =
        nodes_[*old]->Command({"INFO", "replication"});
    if (info.ok() && InfoField(info->str, "role") == "slave" &&
        InfoField(info->str, "master_port") == master_port &&
        InfoField(info->str, "master_link_status") == "up") {
      break;
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("the old primary :", nodes_[*old]->port(),
                       " did not become a replica of :", master_port, ": ",
                       info.ok() ? info->str : info.status().ToString()));
    }
    absl::SleepFor(kPoll);
  }
  return promoted;
}

absl::Status RedisSentinelGroup::WaitUntilHealthy(
    absl::Duration timeout) const {
  const absl::Time deadline = absl::Now() + timeout;
  std::string last;
  while (true) {
    last.clear();
    absl::StatusOr<size_t> primary = PrimaryIndex();
    if (!primary.ok()) {
      last = primary.status().ToString();
    } else {
      size_t running_sentinels = 0, running_replicas = 0;
      for (const std::unique_ptr<RedisServer>& s : sentinels_) {
        running_sentinels += s->running() ? 1 : 0;
      }
      for (size_t i = 0; i < nodes_.size(); ++i) {
        if (i == *primary || !nodes_[i]->running()) continue;
        ++running_replicas;
        absl::StatusOr<RedisValue> info =
            nodes_[i]->Command({"INFO", "replication"});
        if (!info.ok() || InfoField(info->str, "master_link_status") != "up") {
          absl::StrAppend(&last, "replica :", nodes_[i]->port(),
                          " has no link up; ");
        }
      }
      for (const std::unique_ptr<RedisServer>& s : sentinels_) {
        if (!s->running()) continue;
        absl::StatusOr<RedisValue> master =
            s->Command({"SENTINEL", "MASTER", options_.master_name});
        absl::StatusOr<RedisValue> replicas =
            s->Command({"SENTINEL", "REPLICAS", options_.master_name});
        if (!master.ok() || !replicas.ok()) {
          absl::StrAppend(&last, "sentinel :", s->port(), " does not answer; ");
          continue;
        }
        size_t live = 0;
        for (const RedisValue& r : replicas->elements) {
          if (FieldText(r, "flags") == "slave") ++live;
        }
        const std::string others = FieldText(*master, "num-other-sentinels");
        if (others != absl::StrCat(running_sentinels - 1) ||
            live < running_replicas) {
          absl::StrAppend(&last, "sentinel :", s->port(), " knows ", others,
                          " other sentinels and ", live, " live replicas; ");
        }
      }
    }
    if (last.empty()) return absl::OkStatus();
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("the Sentinel group is not healthy after ",
                       absl::FormatDuration(timeout), ": ", last));
    }
    absl::SleepFor(kPoll);
  }
}

}  // namespace testing
}  // namespace relock
