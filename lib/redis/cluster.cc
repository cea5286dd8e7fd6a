#include "lib/redis/cluster.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace relock {
namespace redis {
namespace {

absl::Status Malformed(absl::string_view command, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("unexpected ", command, " reply: ", why));
}

// A node reached at `host`:`port`, with `from`'s credentials and TLS.
ClusterNode MakeNode(std::string id, absl::string_view host, int port,
                     const Endpoint& from) {
  ClusterNode node;
  node.id = std::move(id);
  node.endpoint.kind = Endpoint::Kind::kTcp;
  node.endpoint.host = host.empty() ? from.host : std::string(host);
  node.endpoint.port = port;
  node.endpoint.username = from.username;
  node.endpoint.password = from.password;
  node.endpoint.tls = from.tls;
  return node;
}

// An error reply, or anything but an array, is no answer to `command`.
absl::Status CheckArray(ReplyView reply, absl::string_view command) {
  if (reply.is_error()) {
    return Malformed(command, absl::StrCat("error ", reply.str()));
  }
  if (!reply.is_array()) return Malformed(command, "not an array");
  return absl::OkStatus();
}

bool ValidSlot(int64_t slot) { return slot >= 0 && slot < kClusterSlots; }

// One node of a CLUSTER SHARDS reply: a flat array of field, value.
struct ShardNode {
  std::string id;
  std::string ip;
  std::string endpoint;
  std::string role;
  std::string health;
  int64_t port = -1;
  int64_t tls_port = -1;
};

absl::StatusOr<ShardNode> ParseShardNode(ReplyView node) {
  if (!node.is_array() || node.size() % 2 != 0) {
    return Malformed("CLUSTER SHARDS", "a node is not a field-value array");
  }
  ShardNode n;
  for (size_t i = 0; i + 1 < node.size(); i += 2) {
    const absl::string_view field = node[i].str();
    const ReplyView value = node[i + 1];
    if (field == "port" || field == "tls-port") {
      if (!value.is_integer()) return Malformed("CLUSTER SHARDS", "bad port");
      (field == "port" ? n.port : n.tls_port) = value.integer();
    } else if (field == "id") {
      n.id = std::string(value.str());
    } else if (field == "ip") {
      n.ip = std::string(value.str());
    } else if (field == "endpoint") {
      n.endpoint = std::string(value.str());
    } else if (field == "role") {
      n.role = std::string(value.str());
    } else if (field == "health") {
      n.health = std::string(value.str());
    }
  }
  return n;
}

// Where to reach a CLUSTER SHARDS node: its preferred endpoint unless that
// is unknown ("?"), then its IP; its TLS port when the seed speaks TLS.
absl::StatusOr<ClusterNode> ShardNodeEndpoint(const ShardNode& n,
                                              const Endpoint& from) {
  const int64_t port = from.tls && n.tls_port > 0 ? n.tls_port : n.port;
  if (port <= 0 || port > 65535) {
    return Malformed("CLUSTER SHARDS",
                     absl::StrCat("node ", n.id, " has no port"));
  }
  const std::string& host =
      n.endpoint.empty() || n.endpoint == "?" ? n.ip : n.endpoint;
  if (host == "?") {
    return absl::UnavailableError(absl::StrCat(
        "cluster node ", n.id, " announces no address it can be reached at"));
  }
  return MakeNode(n.id, host, static_cast<int>(port), from);
}

// One node of a CLUSTER SLOTS entry: [ip, port, id, ...].
absl::StatusOr<ClusterNode> ParseSlotsNode(ReplyView node,
                                           const Endpoint& from) {
  if (!node.is_array() || node.size() < 2 || !node[1].is_integer()) {
    return Malformed("CLUSTER SLOTS", "a node is not [ip, port, ...]");
  }
  const int64_t port = node[1].integer();
  if (port <= 0 || port > 65535) {
    return Malformed("CLUSTER SLOTS", absl::StrCat("bad port ", port));
  }
  const absl::string_view host = node[0].str();
  std::string id = node.size() > 2 ? std::string(node[2].str()) : "";
  if (host == "?") {
    return absl::UnavailableError(absl::StrCat(
        "cluster node ", id, " announces no address it can be reached at"));
  }
  return MakeNode(std::move(id), host, static_cast<int>(port), from);
}

}  // namespace

uint16_t Crc16(absl::string_view data) {
  uint16_t crc = 0;
  for (const char c : data) {
    crc ^= static_cast<uint16_t>(static_cast<unsigned char>(c) << 8);
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 0x8000) != 0 ? static_cast<uint16_t>((crc << 1) ^ 0x1021)
                                : static_cast<uint16_t>(crc << 1);
    }
  }
  return crc;
}

absl::string_view HashTag(absl::string_view key) {
  const size_t open = key.find('{');
  if (open == absl::string_view::npos) return key;
  const size_t close = key.find('}', open + 1);
  if (close == absl::string_view::npos || close == open + 1) return key;
  return key.substr(open + 1, close - open - 1);
}

int KeySlot(absl::string_view key) {
  return Crc16(HashTag(key)) % kClusterSlots;
}

absl::StatusOr<SlotMap> SlotMap::FromShards(ReplyView reply,
                                            const Endpoint& from) {
  if (absl::Status s = CheckArray(reply, "CLUSTER SHARDS"); !s.ok()) return s;
  std::vector<SlotRange> ranges;
  for (size_t s = 0; s < reply.size(); ++s) {
    const ReplyView shard = reply[s];
    if (!shard.is_array() || shard.size() % 2 != 0) {
      return Malformed("CLUSTER SHARDS", "a shard is not a field-value array");
    }
    absl::optional<ReplyView> slots;
    absl::optional<ReplyView> nodes;
    for (size_t i = 0; i + 1 < shard.size(); i += 2) {
      if (shard[i].str() == "slots") slots = shard[i + 1];
      if (shard[i].str() == "nodes") nodes = shard[i + 1];
    }
    if (!slots || !nodes || !slots->is_array() || !nodes->is_array() ||
        slots->size() % 2 != 0) {
      return Malformed("CLUSTER SHARDS", "a shard lacks slots or nodes");
    }
    if (slots->size() == 0) continue;  // a shard that serves nothing
    absl::optional<ClusterNode> master;
    std::vector<ClusterNode> replicas;
    for (size_t i = 0; i < nodes->size(); ++i) {
      absl::StatusOr<ShardNode> n = ParseShardNode((*nodes)[i]);
      if (!n.ok()) return n.status();
      const bool is_master = n->role == "master";
      // A replica that failed is no use; one that is "loading" may only not
      // have reported a replication offset yet (Redis 7.0 says so of every
      // replica of a master that has not written anything).
      if (!is_master && n->health == "fail") continue;
      absl::StatusOr<ClusterNode> node = ShardNodeEndpoint(*n, from);
      if (!node.ok()) {
        if (!is_master) continue;  // a replica we cannot reach: ignore it
        return node.status();
      }
      if (is_master) {
        master = *std::move(node);
      } else {
        replicas.push_back(*std::move(node));
      }
    }
    if (!master) {
      return Malformed("CLUSTER SHARDS", "a shard with slots has no master");
    }
    for (size_t i = 0; i + 1 < slots->size(); i += 2) {
      const ReplyView first = (*slots)[i];
      const ReplyView last = (*slots)[i + 1];
      if (!first.is_integer() || !last.is_integer() ||
          !ValidSlot(first.integer()) || !ValidSlot(last.integer()) ||
          first.integer() > last.integer()) {
        return Malformed("CLUSTER SHARDS", "bad slot range");
      }
      ranges.push_back(SlotRange{static_cast<int>(first.integer()),
                                 static_cast<int>(last.integer()), *master,
                                 replicas});
    }
  }
  return Build(std::move(ranges));
}

absl::StatusOr<SlotMap> SlotMap::FromSlots(ReplyView reply,
                                           const Endpoint& from) {
  if (absl::Status s = CheckArray(reply, "CLUSTER SLOTS"); !s.ok()) return s;
  std::vector<SlotRange> ranges;
  for (size_t e = 0; e < reply.size(); ++e) {
    const ReplyView entry = reply[e];
    if (!entry.is_array() || entry.size() < 3 || !entry[0].is_integer() ||
        !entry[1].is_integer() || !ValidSlot(entry[0].integer()) ||
        !ValidSlot(entry[1].integer()) ||
        entry[0].integer() > entry[1].integer()) {
      return Malformed("CLUSTER SLOTS",
                       "an entry is not [first, last, node...]");
    }
    SlotRange range;
    range.first = static_cast<int>(entry[0].integer());
    range.last = static_cast<int>(entry[1].integer());
    absl::StatusOr<ClusterNode> master = ParseSlotsNode(entry[2], from);
    if (!master.ok()) return master.status();
    range.master = *std::move(master);
    for (size_t i = 3; i < entry.size(); ++i) {
      absl::StatusOr<ClusterNode> replica = ParseSlotsNode(entry[i], from);
      if (replica.ok()) range.replicas.push_back(*std::move(replica));
    }
    ranges.push_back(std::move(range));
  }
  return Build(std::move(ranges));
}

SlotMap SlotMap::OneMaster(const Endpoint& master) {
  SlotMap map;
  SlotRange all;
  all.first = 0;
  all.last = kClusterSlots - 1;
  all.master.endpoint = master;
  map.ranges_.push_back(std::move(all));
  return map;
}

absl::StatusOr<SlotMap> SlotMap::Build(std::vector<SlotRange> ranges) {
  std::sort(
      ranges.begin(), ranges.end(),
      [](const SlotRange& a, const SlotRange& b) { return a.first < b.first; });
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first <= ranges[i - 1].last) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cluster slot map: slot ", ranges[i].first, " is served by both ",
          ranges[i - 1].master.endpoint.ToString(), " and ",
          ranges[i].master.endpoint.ToString()));
    }
  }
  SlotMap map;
  map.ranges_ = std::move(ranges);
  return map;
}

const SlotRange* SlotMap::Find(int slot) const {
  auto it =
      std::upper_bound(ranges_.begin(), ranges_.end(), slot,
                       [](int s, const SlotRange& r) { return s < r.first; });
  if (it == ranges_.begin()) return nullptr;
  --it;
  return slot <= it->last ? &*it : nullptr;
}

std::vector<ClusterNode> SlotMap::Masters() const {
  std::vector<ClusterNode> masters;
  std::set<std::string> seen;
  for (const SlotRange& r : ranges_) {
    if (seen.insert(r.master.endpoint.ToString()).second) {
      masters.push_back(r.master);
    }
  }
  return masters;
}

int SlotMap::unassigned() const {
  int assigned = 0;
  for (const SlotRange& r : ranges_) assigned += r.last - r.first + 1;
  return kClusterSlots - assigned;
}

absl::optional<Redirect> ParseRedirect(absl::string_view error,
                                       const Endpoint& from) {
  Redirect redirect;
  if (absl::ConsumePrefix(&error, "MOVED ")) {
    redirect.kind = Redirect::Kind::kMoved;
  } else if (absl::ConsumePrefix(&error, "ASK ")) {
    redirect.kind = Redirect::Kind::kAsk;
  } else {
    return absl::nullopt;
  }
  std::vector<absl::string_view> parts =
      absl::StrSplit(error, ' ', absl::SkipEmpty());
  if (parts.size() != 2) return absl::nullopt;
  int slot = 0;
  if (!absl::SimpleAtoi(parts[0], &slot) || !ValidSlot(slot)) {
    return absl::nullopt;
  }
  const size_t colon = parts[1].rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos ||
      !absl::SimpleAtoi(parts[1].substr(colon + 1), &port) || port <= 0 ||
      port > 65535) {
    return absl::nullopt;
  }
  redirect.slot = slot;
  redirect.endpoint =
      MakeNode("", parts[1].substr(0, colon), port, from).endpoint;
  return redirect;
}

}  // namespace redis
}  // namespace relock
