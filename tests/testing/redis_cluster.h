// A real Redis Cluster for tests: RedisCluster starts M masters and M x R
// replicas (RedisServer with RedisServerOptions::cluster, each on its own
// free ports and temp dir, loopback only), gives each master an even share of
// the 16384 slots (CLUSTER ADDSLOTSRANGE), introduces the nodes to each other
// (CLUSTER MEET, with their cluster bus ports), makes the replicas replicate
// their masters (CLUSTER REPLICATE), and waits until every node reports
// cluster_state:ok with every slot covered and every replica's link up.
//
// clang-format off
//   absl::StatusOr<std::unique_ptr<RedisCluster>> cluster = RedisCluster::Start();
//   ASSERT_TRUE(cluster.ok()) << cluster.status();
//   client_options.url = (*cluster)->url();   // "redis-cluster://127.0.0.1:p0,..."
//   absl::StatusOr<size_t> i = (*cluster)->NodeForKey("order:42");
//   (*cluster)->node(*i).Kill();              // a master dies: its replica takes over
// clang-format on
//
// Nodes are numbered 0..M-1 for the masters as started and M.. for the
// replicas (replica r of master m is M + m * R + r); roles change with
// failovers, so ask NodeForSlot() / NodeForKey() / IsMaster() for who serves
// what now. The nodes stop when the RedisCluster is destroyed (and in every
// other case RedisServer stops its servers: see redis_server.h).
//
// TLS (RedisClusterOptions::tls): every node also listens on a TLS port with
// certificates from one CA (node 0 makes them, the others copy them: see
// RedisServerOptions::tls_files_from), and the nodes talk to each other over
// TLS only: the cluster bus (--tls-cluster yes), replication
// (--tls-replication yes) and MIGRATE. Clients may use either kind: the
// plaintext ports stay on (url(), RedisServer::Command() and every method
// here use them), and the nodes name their TLS ports to TLS clients
// (tls_url(), with ca_file()) and their plaintext ports to plaintext ones.
//
// clang-format off
//   options.tls = true;  ...  RedisCluster::Start(options)
//   client_options.url = (*cluster)->tls_url();  // "rediss-cluster://127.0.0.1:t0,..."
//   client_options.tls.ca_file = (*cluster)->ca_file();
// clang-format on
//
// Start() takes about 1-3 s for the default 6 nodes (the nodes must agree
// through their gossip). Needs redis-server >= 7.0 (--cluster-port,
// CLUSTER ADDSLOTSRANGE and CLUSTER SHARDS); FailedPrecondition otherwise.
//
// Thread-safety: as RedisServer (node(i) may be used from any thread).

#ifndef RELOCK_TESTS_TESTING_REDIS_CLUSTER_H_
#define RELOCK_TESTS_TESTING_REDIS_CLUSTER_H_

#include <cstddef>
#include <functional>
#include <map>
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

struct RedisClusterOptions {
  int masters = 3;              // 1..16
  int replicas_per_master = 1;  // 0..4
  // Every node's requirepass and masterauth; url() carries it.
  std::string requirepass;
  // --cluster-node-timeout: how long a master may be unreachable before its
  // replica is promoted (plus about a second of election).
  absl::Duration node_timeout = absl::Seconds(2);
  // How long Start() and WaitUntilHealthy() wait for the nodes to agree.
  absl::Duration ready_timeout = absl::Seconds(30);
  // Every node with a TLS port, the cluster bus and replication over TLS
  // (see the top of this file). Needs what RedisServerOptions::tls needs.
  bool tls = false;
  // Each node in a host of its own on this network ("node<i>": see
  // tests/testing/private_network.h), listening on its address, which url()
  // names, so that a test can cut nodes and clients apart (a split brain).
  // It must outlive the cluster. Not with `tls`.
  PrivateNetwork* network = nullptr;
};

class RedisCluster {
 public:
  // Starts and joins the nodes (see the top of this file). InvalidArgument for
  // options out of range; otherwise what RedisServer::Start() returns, or
  // DeadlineExceeded (quoting what the nodes last said) if they did not agree
  // within ready_timeout.
  static absl::StatusOr<std::unique_ptr<RedisCluster>> Start(
      RedisClusterOptions options = {});

  RedisCluster(const RedisCluster&) = delete;
  RedisCluster& operator=(const RedisCluster&) = delete;
  ~RedisCluster();

  size_t size() const { return nodes_.size(); }
  size_t masters() const { return static_cast<size_t>(options_.masters); }
  RedisServer& node(size_t i) const { return *nodes_[i]; }

  // "redis-cluster://127.0.0.1:<port of node 0>,...", every node as a seed
  // (with ":<pass>@" after the scheme when requirepass is set).
  std::string url() const;
  // "rediss-cluster://127.0.0.1:<TLS port of node 0>,...", the same over
  // TLS; empty without RedisClusterOptions::tls.
  std::string tls_url() const;
  // The CA that signed every node's certificate (node 0's ca_file(); each
  // node has a copy), or empty without tls. node(i).other_ca_file() is one
  // that signed none of them.
  const std::string& ca_file() const { return nodes_[0]->ca_file(); }

  // The node's 40-character id (CLUSTER MYID).
  absl::StatusOr<std::string> NodeId(size_t i) const;
  // Whether node i is a master now (ROLE).
  absl::StatusOr<bool> IsMaster(size_t i) const;
  // The node that serves `slot` now, as the first running node that answers
  // CLUSTER SHARDS says; NotFound if no node serves it.
  absl::StatusOr<size_t> NodeForSlot(int slot) const;
  // The node that serves `slot` as node i says (CLUSTER SHARDS on node i).
  absl::StatusOr<size_t> NodeForSlotSeenBy(size_t i, int slot) const;
  // NodeForSlot(CLUSTER KEYSLOT key).
  absl::StatusOr<size_t> NodeForKey(const std::string& key) const;

  // Waits until every running node says cluster_state:ok,
  // cluster_slots_ok:16384 and cluster_known_nodes:size(), every running
  // replica's master link is up, and (while every node runs) every node
  // knows size() - masters() replicas.
  absl::Status WaitUntilHealthy(absl::Duration timeout) const;

  // Kills node i (SIGKILL) for good: its ports (the TLS port and the cluster
  // bus port too) stay reserved (bound, not listening) until the cluster is
  // destroyed, so that no server started meanwhile (another test's cluster)
  // gets them, which would make this cluster's nodes, still trying the dead
  // node's address, gossip with a foreign one.
  absl::Status Kill(size_t i);
  // Starts killed node i again on its ports, with its cluster state
  // (nodes.conf) but no data: it rejoins the cluster, as a replica of the
  // replica promoted in its place if there was one. FailedPrecondition if it
  // was not killed by Kill(). Does not wait: see WaitUntilHealthy().
  absl::Status Revive(size_t i);

  // Moves `slot` to master `to` as `redis-cli --cluster reshard` does:
  // IMPORTING on `to`, MIGRATING on the owner, MIGRATE of the slot's keys
  // (in batches), then SETSLOT NODE on both and the other masters; returns
  // once every running node says `to` serves it (DeadlineExceeded if they
  // do not agree within ready_timeout).
  // `while_open`, if given, runs once the slot is importing and migrating and
  // before any key moves (a slow migration: calls that meet it).
  absl::Status MigrateSlot(
      int slot, size_t to,
      const std::function<void()>& while_open = nullptr) const;

 private:
  RedisCluster(RedisClusterOptions options,
               std::vector<std::unique_ptr<RedisServer>> nodes);

  // Slots, MEET, REPLICATE, then WaitUntilHealthy().
  absl::Status Join() const;
  // The index of the node at `port`, or NotFound.
  absl::StatusOr<size_t> IndexOfPort(int port) const;

  const RedisClusterOptions options_;
  const std::vector<std::unique_ptr<RedisServer>> nodes_;
  // Per killed node, the sockets that reserve its ports (see Kill()).
  std::map<size_t, std::vector<int>> reserved_fds_;
};

// The test binary's shared cluster (default options): started on first use
// (thread-safe), its nodes stopped at exit. Aborts with a message on stderr
// if it cannot start. A test that moves slots puts them back and waits until
// the cluster is healthy before it ends; one that kills or pauses nodes
// starts its own cluster.
RedisCluster& SharedRedisCluster();

}  // namespace testing
}  // namespace relock

#endif  // RELOCK_TESTS_TESTING_REDIS_CLUSTER_H_
