// relock on a real Redis Cluster over TLS (`rediss-cluster://`): 3 masters
// and 3 replicas whose client, cluster bus and replication connections are
// all TLS, with certificates from one test CA (tests/testing/redis_cluster.h
// with RedisClusterOptions::tls). What the nodes tell a TLS client (the TLS
// ports, in CLUSTER SHARDS, CLUSTER SLOTS and MOVED) and what relock does
// with it: locks on every master, exclusion and a sharded wake-up on the
// lock's master, a MOVED after a slot migration, and a CA that did not sign
// the nodes' certificates.

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/backend/cluster_backend.h"
#include "lib/backend/node_backend.h"
#include "lib/io/event_loop.h"
#include "lib/lock/lock_scripts.h"
#include "lib/redis/cluster.h"
#include "lib/redis/url.h"
#include "relock/relock.h"
#include "tests/cluster_test_util.h"
#include "tests/test_util.h"
#include "tests/testing/redis_cluster.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace {

using ::relock::testing::MustConnect;
using ::relock::testing::RedisCluster;
using ::relock::testing::RedisClusterOptions;
using ::relock::testing::RedisServer;
using ::relock::testing::RedisValue;
using ::relock::testing::Stopwatch;
using ::relock::testing::TestLockName;
using ::testing::HasSubstr;

// One TLS cluster for the binary's tests; a test that moves a slot moves it
// back before it ends.
class ClusterTlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    RedisClusterOptions options;
    options.tls = true;
    absl::StatusOr<std::unique_ptr<RedisCluster>> started =
        RedisCluster::Start(options);
    ASSERT_OK(started);
    cluster_ = started->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(cluster_, nullptr); }

  // A TLS client's options: rediss-cluster:// and the cluster's CA.
  static void UseTls(ClientOptions& o) {
    o.url = cluster_->tls_url();
    o.tls.ca_file = cluster_->ca_file();
    o.connect_timeout = absl::Seconds(5);  // TLS handshakes, a busy machine
  }

  // A connection (as the cluster backend makes them) to `node`'s TLS port
  // or to its plaintext port.
  static std::unique_ptr<backend::NodeBackend> ConnectToNode(
      io::EventLoop* loop, const RedisServer& node, bool tls) {
    backend::NodeOptions options;
    options.connection.endpoint.host = RedisServer::kHost;
    options.connection.endpoint.port = tls ? node.tls_port() : node.port();
    options.connection.endpoint.tls = tls;
    options.connection.tls.ca_file = cluster_->ca_file();
    options.connection.connect_timeout = absl::Seconds(5);
    absl::StatusOr<std::unique_ptr<backend::NodeBackend>> made =
        backend::NodeBackend::Create(loop, options, internal::LockScripts());
    EXPECT_OK(made);
    return made.ok() ? *std::move(made) : nullptr;
  }

  // Whether, eventually, the lock's master has one subscriber of the lock's
  // channel (sharded pub/sub) and a sharded subscriber connected to its TLS
  // port.
  static bool ShardedTlsSubscriberAppears(const std::string& name) {
    const std::string channel = testing::LockChannel(name);
    RedisServer& master = testing::MasterOf(*cluster_, name);
    const std::string tls_laddr = absl::StrCat(" laddr=", RedisServer::kHost,
                                               ":", master.tls_port(), " ");
    return testing::Eventually([&] {
      if (testing::Subscribers(master, channel, testing::PubSub::kSharded)
              .value_or(0) != 1) {
        return false;
      }
      absl::StatusOr<RedisValue> clients =
          master.Command({"CLIENT", "LIST", "TYPE", "pubsub"});
      if (!clients.ok()) return false;
      for (absl::string_view line : absl::StrSplit(clients->str, '\n')) {
        if (absl::StrContains(line, tls_laddr) &&
            !absl::StrContains(line, " ssub=0 ")) {
          return true;
        }
      }
      return false;
    });
  }

  // The node whose TLS port is `port`, or size() if none.
  static size_t IndexOfTlsPort(int port) {
    for (size_t i = 0; i < cluster_->size(); ++i) {
      if (cluster_->node(i).tls_port() == port) return i;
    }
    return cluster_->size();
  }

  static RedisCluster* cluster_;
};

RedisCluster* ClusterTlsTest::cluster_ = nullptr;

// The fixture: the nodes gossip and replicate over TLS (a replica's master
// is at its master's TLS port), and each node's TLS port shows a certificate
// that the cluster's one CA signed.
TEST_F(ClusterTlsTest, TheNodesTalkToEachOtherOverTls) {
  for (size_t i = 0; i < cluster_->size(); ++i) {
    RedisServer& node = cluster_->node(i);
    absl::StatusOr<RedisValue> bus =
        node.Command({"CONFIG", "GET", "tls-cluster"});
    ASSERT_OK(bus);
    ASSERT_EQ(bus->elements.size(), 2u);
    EXPECT_EQ(bus->elements[1].str, "yes") << "node " << i;
    if (i >= cluster_->masters()) {
      const size_t master = i - cluster_->masters();  // one replica each
      absl::StatusOr<RedisValue> repl = node.Command({"INFO", "replication"});
      ASSERT_OK(repl);
      EXPECT_THAT(repl->str,
                  HasSubstr(absl::StrCat("master_port:",
                                         cluster_->node(master).tls_port())))
          << "node " << i;
      EXPECT_THAT(repl->str, HasSubstr("master_link_status:up"));
    }
    ClientOptions o;
    o.url = node.tls_url();
    o.tls.ca_file = cluster_->ca_file();
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(o);
    if (i >= cluster_->masters()) {
      // A replica answers over TLS too, and is refused for being one (its
      // ROLE came over the TLS connection).
      EXPECT_EQ(client.status().code(), absl::StatusCode::kFailedPrecondition)
          << "node " << i << ": " << client.status();
      EXPECT_THAT(std::string(client.status().message()),
                  HasSubstr("is a replica of"))
          << "node " << i;
      continue;
    }
    ASSERT_OK(client) << "node " << i << ": " << client.status();
    EXPECT_TRUE((*client)->Ping().ok());
  }
}

// What the nodes tell a TLS connection, as the library parses it: CLUSTER
// SHARDS ("tls-port") and CLUSTER SLOTS both give every master's TLS port
// (and the seed's TLS setting), while on a plaintext connection they give
// the plaintext ports.
TEST_F(ClusterTlsTest, TheSlotMapOverTlsNamesTheTlsPorts) {
  io::EventLoop loop;
  for (const bool tls : {true, false}) {
    std::unique_ptr<backend::NodeBackend> node =
        ConnectToNode(&loop, cluster_->node(0), tls);
    ASSERT_NE(node, nullptr);
    for (const bool from_slots : {false, true}) {
      const absl::string_view argv[] = {"CLUSTER",
                                        from_slots ? "SLOTS" : "SHARDS"};
      std::vector<backend::Answer> answers =
          node->Command(argv, Deadline::After(absl::Seconds(10)));
      ASSERT_OK(answers[0].reply);
      absl::StatusOr<redis::SlotMap> map =
          from_slots ? redis::SlotMap::FromSlots(answers[0].reply->view(),
                                                 node->endpoint())
                     : redis::SlotMap::FromShards(answers[0].reply->view(),
                                                  node->endpoint());
      ASSERT_OK(map);
      EXPECT_EQ(map->unassigned(), 0);
      const std::vector<redis::ClusterNode> masters = map->Masters();
      ASSERT_EQ(masters.size(), cluster_->masters());
      for (size_t m = 0; m < masters.size(); ++m) {
        const RedisServer& expected = cluster_->node(m);
        EXPECT_EQ(masters[m].endpoint.port,
                  tls ? expected.tls_port() : expected.port())
            << argv[1] << (tls ? " over TLS" : " over plaintext");
        EXPECT_EQ(masters[m].endpoint.tls, tls);
      }
    }
    node->Close();
  }
  loop.Stop();
}

TEST_F(ClusterTlsTest, LocksOnEveryMasterLiveOnTheMasterOfTheirSlot) {
  std::unique_ptr<Client> client = MustConnect("", UseTls);
  ASSERT_NE(client, nullptr);
  testing::ExpectLocksLiveOnTheMasterOfTheirSlot(*cluster_, *client, 2);
}

// On every master, with the waiter's sharded subscription on the lock's
// master, on a connection to its TLS port.
TEST_F(ClusterTlsTest, TwoClientsExcludeAndAReleaseWakesTheWaiter) {
  std::unique_ptr<Client> a = MustConnect("", UseTls);
  std::unique_ptr<Client> b = MustConnect("", UseTls);
  ASSERT_TRUE(a != nullptr && b != nullptr);
  testing::ExpectAReleaseWakesTheWaiter(
      *cluster_, *a, *b, [&b](const std::string& name) {
        EXPECT_TRUE(ShardedTlsSubscriberAppears(name)) << name;
        EXPECT_OK(testing::WaitUntilIdle(*b)) << name;  // the waiter sleeps
      });
}

// A lock's slot moves to another master while the lock is held (its hash
// goes along, by MIGRATE over TLS): the old master answers MOVED naming the
// new one's TLS port to a TLS connection (its plaintext port to a plaintext
// one), which the client follows to release the lock there and to take it
// again; the slot map that a MOVED makes the backend read names the TLS
// port too.
TEST_F(ClusterTlsTest, AMovedSlotIsFollowedOverTls) {
  const std::string name = TestLockName();
  const int slot = redis::KeySlot(name);
  absl::StatusOr<size_t> home = cluster_->NodeForSlot(slot);
  ASSERT_OK(home);
  const size_t away = (*home + 1) % cluster_->masters();
  std::unique_ptr<Client> client = MustConnect("", UseTls);
  ASSERT_NE(client, nullptr);
  Lock lock = client->GetLock(name);
  ASSERT_OK(lock.Acquire());

  ASSERT_OK(cluster_->MigrateSlot(slot, away));
  io::EventLoop loop;
  for (const bool tls : {true, false}) {
    std::unique_ptr<backend::NodeBackend> node =
        ConnectToNode(&loop, cluster_->node(*home), tls);
    ASSERT_NE(node, nullptr);
    const absl::string_view argv[] = {"EXISTS", name};
    std::vector<backend::Answer> answers =
        node->Command(argv, Deadline::After(absl::Seconds(10)));
    ASSERT_OK(answers[0].reply);
    ASSERT_TRUE(answers[0].reply->is_error()) << "expected MOVED";
    absl::optional<redis::Redirect> moved =
        redis::ParseRedirect(answers[0].reply->str(), node->endpoint());
    ASSERT_TRUE(moved.has_value()) << answers[0].reply->str();
    EXPECT_EQ(moved->kind, redis::Redirect::Kind::kMoved);
    const RedisServer& target = cluster_->node(away);
    EXPECT_EQ(moved->endpoint.port, tls ? target.tls_port() : target.port())
        << answers[0].reply->str();
    EXPECT_EQ(moved->endpoint.tls, tls);
    node->Close();
  }
  absl::StatusOr<RedisValue> there =
      cluster_->node(away).Command({"HGETALL", name});
  ASSERT_OK(there);
  ASSERT_EQ(there->elements.size(), 2u) << "the lock did not move";
  EXPECT_OK(lock.Release());  // MOVED, followed
  ASSERT_OK(lock.Acquire());
  there = cluster_->node(away).Command({"EXISTS", name});
  ASSERT_OK(there);
  EXPECT_EQ(there->integer, 1);
  EXPECT_OK(lock.Release());

  // The backend's view: MOVED over TLS names the TLS port, and so does the
  // map refreshed after it.
  absl::StatusOr<redis::Topology> topology =
      redis::ParseTopologyUrl(cluster_->tls_url());
  ASSERT_OK(topology);
  backend::ClusterOptions options;
  options.seeds = topology->endpoints;
  options.node.connection.tls.ca_file = cluster_->ca_file();
  options.node.connection.connect_timeout = absl::Seconds(5);
  absl::StatusOr<std::unique_ptr<backend::ClusterBackend>> backend =
      backend::ClusterBackend::Create(&loop, options, internal::LockScripts());
  ASSERT_OK(backend);
  auto mapped_port = [&] {
    const redis::SlotRange* r = (*backend)->slot_map()->Find(slot);
    return r == nullptr ? 0 : r->master.endpoint.port;
  };
  EXPECT_EQ(mapped_port(), cluster_->node(away).tls_port());
  ASSERT_OK(cluster_->MigrateSlot(slot, *home));
  const uint64_t refreshes = (*backend)->refreshes();
  const absl::string_view keys[] = {name};
  const absl::string_view args[] = {"owner"};
  backend::ScriptCall call;
  call.script = internal::kInspectScript;
  call.keys = keys;
  call.args = args;
  call.deadline = Deadline::After(absl::Seconds(10));
  call.resend = backend::Resend::kIfDropped;
  std::vector<backend::Answer> answers = (*backend)->Run(call);
  ASSERT_OK(answers[0].reply);
  EXPECT_FALSE(answers[0].reply->is_error()) << answers[0].reply->str();
  EXPECT_TRUE(testing::Eventually(
      [&] { return mapped_port() == cluster_->node(*home).tls_port(); }));
  EXPECT_GT((*backend)->refreshes(), refreshes);
  EXPECT_EQ(IndexOfTlsPort(mapped_port()), *home);
  (*backend)->Close();
  loop.Stop();
  ASSERT_OK(cluster_->WaitUntilHealthy(absl::Seconds(30)));
}

// A CA that did not sign the nodes' certificates: Connect fails as on a
// single TLS server (tls_test.cc), at the first seed, without trying the
// others (every node would refuse the same way).
TEST_F(ClusterTlsTest, AWrongCaFailsConnect) {
  Stopwatch watch;
  ClientOptions o;
  UseTls(o);
  o.tls.ca_file = cluster_->node(0).other_ca_file();
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(o);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnauthenticated)
      << client.status();
  EXPECT_THAT(std::string(client.status().message()),
              HasSubstr("certificate verify failed"));
  EXPECT_LT(watch.Elapsed(), absl::Seconds(10));
}

}  // namespace
}  // namespace relock
