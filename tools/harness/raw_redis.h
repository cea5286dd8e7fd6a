// The safety harness's plain hiredis connections (relock has no raw command
// API): RawRedis, one connection to one server, for the counters; RawKeys,
// reads of lock hashes where they live (a single server, or the node of a
// cluster that serves the key). The workers (worker.h) use both.
//
// Part of tools/harness (see harness.h); raw_redis.cc has the definitions.

#ifndef RELOCK_TOOLS_HARNESS_RAW_REDIS_H_
#define RELOCK_TOOLS_HARNESS_RAW_REDIS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "tests/testing/raw_connection.h"

namespace relock {
namespace harness {

// The name the raw (non-relock) connections give themselves, so that the
// "kill pool connections" fault can spare them.
inline constexpr char kRawClientName[] = "harness-raw";

// A plain hiredis connection for the counters (relock has no raw command
// API): a testing::RawConnection (tests/testing/raw_connection.h), made again
// on the next call after any error.
class RawRedis {
 public:
  RawRedis(std::string host, int port, absl::Duration timeout);
  RawRedis(const RawRedis&) = delete;
  RawRedis& operator=(const RawRedis&) = delete;

  bool EnsureConnected();

  // GET as an integer (0 when absent); nullopt on any failure.
  absl::optional<int64_t> Get(const std::string& key);

  bool Set(const std::string& key, int64_t value);

  // INCR: the new value; nullopt on failure (it may or may not have run).
  absl::optional<int64_t> Incr(const std::string& key);

  // A fenced write (--fenced runs): the counter server's script sets `key`
  // to `value` only if `token` is not below the highest token it has
  // accepted for `key` (kept at FenceKey(key)), and then records `token` as
  // the highest. nullopt on failure (the write may or may not have run).
  struct FencedWrite {
    bool accepted = false;
    int64_t highest_before = 0;  // the highest token accepted before it
  };
  absl::optional<FencedWrite> FencedSet(const std::string& key, int64_t value,
                                        int64_t token);
  // Where the highest accepted token of counter `key` is kept.
  static std::string FenceKey(const std::string& key) { return key + ":fence"; }

  // A bulk-string integer reply as a number (nil: 0); nullopt for no reply
  // or anything else.
  static absl::optional<int64_t> IntegerOrZero(const testing::RawReply& r);

  // Any command; the reply, or null on failure (and the connection is made
  // again on the next call).
  testing::RawReply Command(const std::vector<std::string>& argv);

 private:
  const std::string host_;
  const int port_;
  const absl::Duration timeout_;
  absl::optional<testing::RawConnection> conn_;
};

// Reads lock hashes where they live, on plain hiredis connections: on a
// single server, that server; on a cluster, the node that serves the key's
// slot, found by following MOVED and ASK replies from the seed (hiredis has
// no cluster support); on a Sentinel group (`sentinels` given), the primary
// that the sentinels name for `master_name`, asked again at least every
// second and after a failure (while no sentinel answers, as on the cut-off
// side of a split brain, the last one). Failures (a node down, a paused one
// timing out) read as "unknown".
class RawKeys {
 public:
  RawKeys(std::string host, int port, absl::Duration timeout,
          std::vector<std::string> sentinels = {},
          std::string master_name = "");

  // HGET as an integer: nullopt on failure, 0 when absent.
  absl::optional<int64_t> HGet(const std::string& key,
                               const std::string& field);

  // PTTL; -3 on failure.
  int64_t PTtl(const std::string& key);

  // HKEYS; empty on failure.
  std::vector<std::string> HKeys(const std::string& key);

 private:
  // Runs `argv` on the node that serves `key` (the last one that did, or
  // the seed), following up to 5 redirections; null on failure or on an
  // error reply.
  testing::RawReply Run(const std::string& key,
                        const std::vector<std::string>& argv);

  RawRedis& Node(const std::string& node);

  // Sentinel mode: the primary ("host:port") the sentinels name, or "".
  std::string AskSentinels();

  const std::string seed_;
  const absl::Duration timeout_;
  const std::vector<std::string> sentinels_;  // "host:port"
  const std::string master_name_;
  std::string primary_;           // sentinel mode: the last primary named
  int64_t primary_asked_ns_ = 0;  // when (MonotonicNanos())
  std::map<std::string, std::unique_ptr<RawRedis>> nodes_;  // "host:port"
  std::map<std::string, std::string> where_;  // key -> the node serving it
};

}  // namespace harness
}  // namespace relock

#endif  // RELOCK_TOOLS_HARNESS_RAW_REDIS_H_
