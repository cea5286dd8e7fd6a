// Redis Cluster's routing rules, as pure functions: the hash slot of a key,
// the slot map a node reports (CLUSTER SHARDS, or CLUSTER SLOTS before Redis
// 7), and the redirections it answers with (MOVED, ASK). No I/O: the cluster
// backend (lib/backend/) feeds these with replies and acts on the results.
//
//   KeySlot("order:42")          == KeySlot("order:42")    one slot of 16384
//   KeySlot("{order:42}:queue")  == KeySlot("order:42")    the hash tag rules
//   KeySlot("a{}b")              hashes all of "a{}b"      (an empty tag is
//                                                           no tag)
//
// A SlotMap is immutable once built; the backend swaps in a new one when it
// refreshes. Node endpoints inherit the seed's credentials and TLS setting
// (a cluster shares them), and "" as a node's address means the address the
// reply came from (what the cluster spec says a client must assume).

#ifndef RELOCK_LIB_REDIS_CLUSTER_H_
#define RELOCK_LIB_REDIS_CLUSTER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/optional.h"
#include "lib/redis/reply.h"
#include "lib/redis/url.h"

namespace relock {
namespace redis {

inline constexpr int kClusterSlots = 16384;

// CRC16/XMODEM (polynomial 0x1021, initial value 0), the cluster's key hash.
uint16_t Crc16(absl::string_view data);

// The part of `key` that is hashed: the text between the first '{' and the
// first '}' after it when that is not empty, else the whole key.
absl::string_view HashTag(absl::string_view key);

// The hash slot of `key`: Crc16(HashTag(key)) mod 16384.
int KeySlot(absl::string_view key);

// One node as the slot map names it.
struct ClusterNode {
  std::string id;     // the node's 40-character id ("" if the reply had none)
  Endpoint endpoint;  // where to connect (seed's credentials, TLS, db 0)
};

// A contiguous range of slots [first, last] and the nodes that serve it.
struct SlotRange {
  int first = 0;
  int last = 0;
  ClusterNode master;
  std::vector<ClusterNode> replicas;
};

class SlotMap {
 public:
  SlotMap() = default;

  // From the reply to CLUSTER SHARDS (Redis >= 7.0), as sent by the node
  // at `from` (whose credentials and TLS every node gets). Shards without
  // slots and replicas whose health is "fail" are left out (a shard keeps its
  // master whatever its health). InvalidArgument
  // naming the problem if the reply is not a CLUSTER SHARDS reply.
  static absl::StatusOr<SlotMap> FromShards(ReplyView reply,
                                            const Endpoint& from);
  // From the reply to CLUSTER SLOTS (every Redis with cluster support).
  static absl::StatusOr<SlotMap> FromSlots(ReplyView reply,
                                           const Endpoint& from);
  // Every slot served by `master` (a master that Sentinel names: one
  // server holds every key).
  static SlotMap OneMaster(const Endpoint& master);

  // The range that holds `slot`, or nullptr if no node serves it.
  const SlotRange* Find(int slot) const;
  // Every range, by first slot.
  const std::vector<SlotRange>& ranges() const { return ranges_; }
  // Every master once (by the address it is reached at), in slot order.
  std::vector<ClusterNode> Masters() const;
  // Slots that no range covers (0 when the cluster serves every slot).
  int unassigned() const;

 private:
  // Sorts the ranges and rejects overlaps.
  static absl::StatusOr<SlotMap> Build(std::vector<SlotRange> ranges);

  std::vector<SlotRange> ranges_;  // sorted by first, not overlapping
};

// A redirection: "MOVED <slot> <host>:<port>" (the slot lives there now;
// refresh the map) or "ASK <slot> <host>:<port>" (this one call goes there,
// preceded by ASKING).
struct Redirect {
  enum class Kind { kMoved, kAsk };
  Kind kind = Kind::kMoved;
  int slot = 0;
  Endpoint endpoint;  // the `from` endpoint's credentials and TLS
};

// The redirection an error reply names, or nullopt if it is none (or is
// malformed). An empty host ("MOVED 3999 :6380") means `from`'s host.
absl::optional<Redirect> ParseRedirect(absl::string_view error,
                                       const Endpoint& from);

}  // namespace redis
}  // namespace relock

#endif  // RELOCK_LIB_REDIS_CLUSTER_H_
