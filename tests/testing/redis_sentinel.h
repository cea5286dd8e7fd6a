// A real Redis Sentinel group for tests: RedisSentinelGroup starts one
// primary and N replicas (RedisServer, replicas with --replicaof the
// primary), then S sentinels (RedisServer with sentinel_config: Debian's
// redis-server in sentinel mode, each on its own free port and temp dir,
// loopback only) that monitor the primary under master_name, and waits until
// every sentinel sees the other sentinels and every replica, and every
// replica's link is up.
//
// clang-format off
//   absl::StatusOr<std::unique_ptr<RedisSentinelGroup>> g = RedisSentinelGroup::Start();
//   ASSERT_TRUE(g.ok()) << g.status();
//   client_options.url = (*g)->url();  // "redis-sentinel://127.0.0.1:s1,...#mymaster"
//   absl::StatusOr<size_t> p = (*g)->PrimaryIndex();
//   (*g)->node(*p).Kill();  (*g)->WaitForNewPrimary(*p, absl::Seconds(60));
//   absl::StatusOr<size_t> q = (*g)->Failover();  // SENTINEL FAILOVER
// clang-format on
//
// On a private network (RedisSentinelOptions::network, for split-brain
// tests: tests/testing/private_network.h) data node i runs in host
// "node<i>" and sentinel j in host "sen<j>", each listening on its host's
// address, which url() and the sentinels' config name.
//
// Data nodes are numbered 0 (the first primary) .. replicas; roles change
// with failovers, so ask PrimaryIndex() who is primary now. Everything stops
// when the group is destroyed (and in every other case RedisServer stops its
// servers: see redis_server.h).
//
// Thread-safety: as RedisServer (node(i) and sentinel(i) from any thread).

#ifndef RELOCK_TESTS_TESTING_REDIS_SENTINEL_H_
#define RELOCK_TESTS_TESTING_REDIS_SENTINEL_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/testing/private_network.h"
#include "tests/testing/redis_server.h"

namespace relock {
namespace testing {

struct RedisSentinelOptions {
  int replicas = 2;   // 0..4
  int sentinels = 3;  // 1..5; the quorum is a majority of them
  std::string master_name = "mymaster";
  // The data nodes' requirepass and masterauth (the sentinels get it as
  // auth-pass); url() carries it.
  std::string requirepass;
  // The sentinels' own requirepass; not in url() (ClientOptions::sentinel).
  std::string sentinel_pass;
  // down-after-milliseconds: how long the primary may be unreachable before
  // the sentinels fail it over (plus an election, about a second).
  absl::Duration down_after = absl::Seconds(1);
  // failover-timeout (also the least time between two failovers of one
  // master).
  absl::Duration failover_timeout = absl::Seconds(5);
  // How long Start() and the waits below wait for the group to agree.
  absl::Duration ready_timeout = absl::Seconds(30);
  // Each data node and sentinel in a host of its own on this network
  // ("node<i>", "sen<j>"), listening on its address; null: all on
  // 127.0.0.1. The network must outlive the group.
  PrivateNetwork* network = nullptr;
};

class RedisSentinelGroup {
 public:
  // Starts the servers and the sentinels and waits until healthy. NotFound
  // without a redis-server binary; InvalidArgument for options out of range;
  // DeadlineExceeded (quoting what the sentinels last said) if the group did
  // not come together within ready_timeout.
  static absl::StatusOr<std::unique_ptr<RedisSentinelGroup>> Start(
      RedisSentinelOptions options = {});

  RedisSentinelGroup(const RedisSentinelGroup&) = delete;
  RedisSentinelGroup& operator=(const RedisSentinelGroup&) = delete;
  ~RedisSentinelGroup();

  size_t data_nodes() const { return nodes_.size(); }
  RedisServer& node(size_t i) const { return *nodes_[i]; }
  size_t sentinels() const { return sentinels_.size(); }
  RedisServer& sentinel(size_t i) const { return *sentinels_[i]; }
  const std::string& master_name() const { return options_.master_name; }

  // The host of data node i on RedisSentinelOptions::network: "node<i>".
  static std::string NodeHostName(size_t i);

  // "redis-sentinel://127.0.0.1:<s0>,127.0.0.1:<s1>,...#<master_name>" (each
  // sentinel's own address on a private network), with
  // ":<requirepass>@" after the scheme when set.
  std::string url() const;

  // The data node that a majority of the running sentinels name as the
  // master and that says role:master; NotFound otherwise.
  absl::StatusOr<size_t> PrimaryIndex() const;

  // Waits until the sentinels agree on a primary other than `old_primary`
  // that says role:master; returns it.
  absl::StatusOr<size_t> WaitForNewPrimary(size_t old_primary,
                                           absl::Duration timeout) const;

  // SENTINEL FAILOVER, then WaitForNewPrimary(), then (the old primary
  // running) waits until it is a replica of the new one with its link up.
  absl::StatusOr<size_t> Failover() const;

  // Waits until every running sentinel names the primary and counts the
  // other sentinels and the running replicas, and every running replica's
  // link is up.
  absl::Status WaitUntilHealthy(absl::Duration timeout) const;

 private:
  RedisSentinelGroup(RedisSentinelOptions options,
                     std::vector<std::unique_ptr<RedisServer>> nodes,
                     std::vector<std::unique_ptr<RedisServer>> sentinels);

  // The index of the data node at `port`, or NotFound.
  absl::StatusOr<size_t> IndexOfPort(int port) const;
  // What running sentinel `i` names as the master's port, or an error.
  absl::StatusOr<int> NamedPort(size_t i) const;

  const RedisSentinelOptions options_;
  const std::vector<std::unique_ptr<RedisServer>> nodes_;
  const std::vector<std::unique_ptr<RedisServer>> sentinels_;
};

}  // namespace testing
}  // namespace relock

#endif  // RELOCK_TESTS_TESTING_REDIS_SENTINEL_H_
