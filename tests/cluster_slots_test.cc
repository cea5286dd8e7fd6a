// Redis Cluster routing rules (lib/redis/cluster.h): key slots and hash tags,
// slot maps from hand-made CLUSTER SHARDS / CLUSTER SLOTS replies (the odd
// cases) and from a real 3-master, 3-replica cluster started by the fixture
// (tests/testing/redis_cluster.h), which also checks the fixture itself:
// its slot migration moves keys and makes the old owner answer MOVED.

#include <hiredis/hiredis.h>

#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/redis/cluster.h"
#include "relock/relock.h"
#include "tests/test_util.h"
#include "tests/testing/fake_server.h"
#include "tests/testing/raw_connection.h"
#include "tests/testing/redis_cluster.h"
#include "tests/testing/resp_reply.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace redis {
namespace {

using ::relock::testing::FakeServer;
using ::relock::testing::FakeServerOptions;
using ::relock::testing::RedisCluster;
using ::relock::testing::RedisValue;
using ::relock::testing::RespReply;
using ::testing::HasSubstr;

// --- RESP text for hand-made replies -----------------------------------------

std::string Bulk(absl::string_view s) {
  return absl::StrCat("$", s.size(), "\r\n", s, "\r\n");
}
std::string Int(int64_t n) { return absl::StrCat(":", n, "\r\n"); }
std::string Arr(const std::vector<std::string>& elements) {
  std::string out = absl::StrCat("*", elements.size(), "\r\n");
  for (const std::string& e : elements) out += e;
  return out;
}

// A CLUSTER SHARDS node entry.
std::string ShardNode(const std::string& id, int port, const std::string& ip,
                      const std::string& endpoint, const std::string& role,
                      const std::string& health = "online", int tls_port = 0) {
  std::vector<std::string> fields = {Bulk("id"), Bulk(id), Bulk("port"),
                                     Int(port)};
  if (tls_port != 0) {
    fields.insert(fields.end(), {Bulk("tls-port"), Int(tls_port)});
  }
  fields.insert(fields.end(),
                {Bulk("ip"), Bulk(ip), Bulk("endpoint"), Bulk(endpoint),
                 Bulk("role"), Bulk(role), Bulk("replication-offset"), Int(7),
                 Bulk("health"), Bulk(health)});
  return Arr(fields);
}

std::string Shard(const std::vector<int>& slots,
                  const std::vector<std::string>& nodes) {
  std::vector<std::string> s;
  s.reserve(slots.size());
  for (int slot : slots) s.push_back(Int(slot));
  return Arr({Bulk("slots"), Arr(s), Bulk("nodes"), Arr(nodes)});
}

Endpoint Seed(bool tls = false) {
  Endpoint seed;
  seed.host = "10.0.0.1";
  seed.port = 7000;
  seed.username = "app";
  seed.password = "secret";
  seed.tls = tls;
  return seed;
}

// --- Key slots
// ----------------------------------------------------------------

TEST(KeySlotTest, Crc16IsXmodem) {
  EXPECT_EQ(Crc16("123456789"), 0x31C3);  // the standard check value
  EXPECT_EQ(Crc16(""), 0);
}

TEST(KeySlotTest, KnownSlots) {
  // Values from the cluster specification's examples and CLUSTER KEYSLOT.
  EXPECT_EQ(KeySlot("foo"), 12182);
  EXPECT_EQ(KeySlot("bar"), 5061);
  EXPECT_EQ(KeySlot("somekey"), 11058);
}

TEST(KeySlotTest, HashTags) {
  EXPECT_EQ(HashTag("{user1000}.following"), "user1000");
  EXPECT_EQ(HashTag("foo{}{bar}"), "foo{}{bar}");  // an empty first tag
  EXPECT_EQ(HashTag("foo{{bar}}zap"), "{bar");
  EXPECT_EQ(HashTag("foo{bar}{zap}"), "bar");
  EXPECT_EQ(HashTag("no-tag"), "no-tag");
  EXPECT_EQ(HashTag("open{only"), "open{only");
  EXPECT_EQ(KeySlot("{order:42}:queue"), KeySlot("order:42"));
  // Redisson's companion names of lock N share N's slot.
  EXPECT_EQ(KeySlot("redisson_lock__channel:{order:42}"), KeySlot("order:42"));
  EXPECT_EQ(KeySlot(std::string("a\0b", 3)),
            Crc16(std::string("a\0b", 3)) % 16384);
}

// --- Redirections
// ---------------------------------------------------------------

TEST(RedirectTest, MovedAndAsk) {
  absl::optional<Redirect> moved =
      ParseRedirect("MOVED 3999 127.0.0.1:6381", Seed());
  ASSERT_TRUE(moved.has_value());
  EXPECT_EQ(moved->kind, Redirect::Kind::kMoved);
  EXPECT_EQ(moved->slot, 3999);
  EXPECT_EQ(moved->endpoint.host, "127.0.0.1");
  EXPECT_EQ(moved->endpoint.port, 6381);
  EXPECT_EQ(moved->endpoint.password, "secret");
  EXPECT_EQ(moved->endpoint.username, "app");

  absl::optional<Redirect> ask = ParseRedirect("ASK 0 ::1:7002", Seed(true));
  ASSERT_TRUE(ask.has_value());
  EXPECT_EQ(ask->kind, Redirect::Kind::kAsk);
  EXPECT_EQ(ask->slot, 0);
  EXPECT_EQ(ask->endpoint.host, "::1");
  EXPECT_EQ(ask->endpoint.port, 7002);
  EXPECT_TRUE(ask->endpoint.tls);
}

TEST(RedirectTest, EmptyHostMeansTheSameHost) {
  absl::optional<Redirect> moved = ParseRedirect("MOVED 16383 :7005", Seed());
  ASSERT_TRUE(moved.has_value());
  EXPECT_EQ(moved->endpoint.host, "10.0.0.1");
  EXPECT_EQ(moved->endpoint.port, 7005);
}

TEST(RedirectTest, OtherErrorsAndMalformedOnesAreNone) {
  for (const char* error :
       {"ERR unknown command", "TRYAGAIN Multiple keys", "CLUSTERDOWN down",
        "MOVED", "MOVED 3999", "MOVED 16384 h:1", "MOVED -1 h:1", "MOVED 1 h",
        "MOVED 1 h:0", "MOVED 1 h:65536", "MOVED x h:1", "ASK 1 h:1 extra"}) {
    EXPECT_FALSE(ParseRedirect(error, Seed()).has_value()) << error;
  }
}

// --- Slot maps from hand-made replies
// ------------------------------------------

TEST(SlotMapTest, FromShards) {
  const Reply reply = RespReply(Arr({
      Shard({0, 5460},
            {ShardNode("m1", 7000, "10.0.0.1", "10.0.0.1", "master"),
             ShardNode("r1", 7003, "10.0.0.4", "10.0.0.4", "replica")}),
      Shard({5461, 10922, 16000, 16383},
            {ShardNode("m2", 7001, "10.0.0.2", "db2.example", "master"),
             ShardNode("r2", 7004, "10.0.0.5", "10.0.0.5", "replica", "fail")}),
      Shard({}, {ShardNode("m4", 7009, "10.0.0.9", "10.0.0.9", "master")}),
  }));
  absl::StatusOr<SlotMap> map = SlotMap::FromShards(reply.view(), Seed());
  ASSERT_OK(map);
  ASSERT_EQ(map->ranges().size(), 3u);
  EXPECT_EQ(map->unassigned(), 16384 - 5461 - 5462 - 384);

  const SlotRange* r = map->Find(0);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->master.id, "m1");
  EXPECT_EQ(r->master.endpoint.password, "secret");
  ASSERT_EQ(r->replicas.size(), 1u);
  EXPECT_EQ(r->replicas[0].endpoint.port, 7003);

  r = map->Find(16100);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->master.endpoint.host, "db2.example");  // the preferred endpoint
  EXPECT_TRUE(r->replicas.empty());                   // "fail" is left out
  EXPECT_EQ(map->Find(12000), nullptr);               // nobody serves it

  std::vector<ClusterNode> masters = map->Masters();
  ASSERT_EQ(masters.size(), 2u);  // m4 serves nothing
  EXPECT_EQ(masters[0].id, "m1");
  EXPECT_EQ(masters[1].id, "m2");
}

TEST(SlotMapTest, ShardsUseTheTlsPortForATlsSeedAndTheIpForAnUnknownEndpoint) {
  const Reply reply = RespReply(
      Arr({Shard({0, 16383}, {ShardNode("m1", 7000, "10.0.0.1", "?", "master",
                                        "online", 8000)})}));
  absl::StatusOr<SlotMap> tls = SlotMap::FromShards(reply.view(), Seed(true));
  ASSERT_OK(tls);
  EXPECT_EQ(tls->Find(5)->master.endpoint.port, 8000);
  EXPECT_EQ(tls->Find(5)->master.endpoint.host, "10.0.0.1");
  EXPECT_TRUE(tls->Find(5)->master.endpoint.tls);
  absl::StatusOr<SlotMap> plain = SlotMap::FromShards(reply.view(), Seed());
  ASSERT_OK(plain);
  EXPECT_EQ(plain->Find(5)->master.endpoint.port, 7000);
  EXPECT_EQ(plain->unassigned(), 0);
}

TEST(SlotMapTest, FromSlots) {
  const Reply reply = RespReply(Arr({
      Arr({Int(5461), Int(16383), Arr({Bulk(""), Int(7001), Bulk("m2")}),
           Arr({Bulk("?"), Int(7004), Bulk("r2")})}),
      Arr({Int(0), Int(5460), Arr({Bulk("10.0.0.1"), Int(7000), Bulk("m1")}),
           Arr({Bulk("10.0.0.4"), Int(7003), Bulk("r1")})}),
  }));
  absl::StatusOr<SlotMap> map = SlotMap::FromSlots(reply.view(), Seed());
  ASSERT_OK(map);
  EXPECT_EQ(map->unassigned(), 0);
  ASSERT_EQ(map->ranges().size(), 2u);
  EXPECT_EQ(map->ranges()[0].master.id, "m1");  // sorted by slot
  const SlotRange* r = map->Find(9000);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->master.endpoint.host, "10.0.0.1");  // "": the seed's host
  EXPECT_EQ(r->master.endpoint.port, 7001);
  EXPECT_TRUE(r->replicas.empty());  // "?": unreachable, left out
}

TEST(SlotMapTest, BadRepliesAreInvalidArgument) {
  const std::vector<std::string> bad_shards = {
      Bulk("not an array"),
      "-ERR This instance has cluster support disabled\r\n",
      Arr({Arr({Bulk("slots")})}),
      Arr({Shard({5, 3}, {ShardNode("m", 1, "h", "h", "master")})}),
      Arr({Shard({0, 16384}, {ShardNode("m", 1, "h", "h", "master")})}),
      Arr({Shard({0, 10}, {ShardNode("r", 1, "h", "h", "replica")})}),
      Arr({Shard({0, 10}, {ShardNode("a", 1, "h", "h", "master")}),
           Shard({10, 20}, {ShardNode("b", 2, "h", "h", "master")})}),
  };
  for (const std::string& resp : bad_shards) {
    const Reply reply = RespReply(resp);
    absl::StatusOr<SlotMap> map = SlotMap::FromShards(reply.view(), Seed());
    EXPECT_EQ(map.status().code(), absl::StatusCode::kInvalidArgument) << resp;
  }
  const Reply overlap = RespReply(
      Arr({Shard({0, 10}, {ShardNode("a", 1, "h", "h", "master")}),
           Shard({10, 20}, {ShardNode("b", 2, "h", "h", "master")})}));
  EXPECT_THAT(SlotMap::FromShards(overlap.view(), Seed()).status().message(),
              HasSubstr("slot 10 is served by both h:1 and h:2"));
  const Reply slots = RespReply(Arr({Arr({Int(0), Int(5)})}));
  EXPECT_EQ(SlotMap::FromSlots(slots.view(), Seed()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SlotMapTest, AMasterWithoutAnAddressIsUnavailable) {
  const Reply reply = RespReply(
      Arr({Shard({0, 16383}, {ShardNode("m", 7000, "?", "?", "master")})}));
  EXPECT_EQ(SlotMap::FromShards(reply.view(), Seed()).status().code(),
            absl::StatusCode::kUnavailable);
}

// --- A real cluster
// ---------------------------------------------------------------

class RealClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = &testing::SharedRedisCluster(); }

  // `argv` on node `i` through hiredis, as the library would read it.
  static Reply Raw(size_t i, const std::vector<std::string>& argv) {
    absl::StatusOr<testing::RawConnection> c =
        testing::RawConnection::Connect(cluster_->node(i).port());
    EXPECT_OK(c);
    if (!c.ok()) return Reply(nullptr);
    absl::StatusOr<testing::RawReply> r = c->Call(argv);
    EXPECT_OK(r);
    return Reply(r.ok() ? r->release() : nullptr);
  }

  static Endpoint NodeEndpoint(size_t i) {
    Endpoint ep;
    ep.host = "127.0.0.1";
    ep.port = cluster_->node(i).port();
    return ep;
  }

  static RedisCluster* cluster_;
};

RedisCluster* RealClusterTest::cluster_ = nullptr;

TEST_F(RealClusterTest, ShardsAndSlotsAgreeAndCoverEverySlot) {
  ASSERT_NE(cluster_, nullptr);
  EXPECT_EQ(cluster_->size(), 6u);
  // Node 4's view lists every shard's replica once gossip has settled; on a
  // loaded machine a replica may be flagged failed for a moment (the node
  // timeout is 2 s), and CLUSTER SHARDS then leaves it out. Wait for a view
  // with all of them (the map is parsed from each reply either way).
  absl::StatusOr<SlotMap> from_shards;
  const bool settled = testing::Eventually(
      [&] {
        const Reply shards = Raw(4, {"CLUSTER", "SHARDS"});
        from_shards = SlotMap::FromShards(shards.view(), NodeEndpoint(4));
        if (!from_shards.ok()) return false;
        for (const SlotRange& r : from_shards->ranges()) {
          if (r.replicas.size() != 1) return false;
        }
        return true;
      },
      absl::Seconds(60), absl::Milliseconds(100));
  EXPECT_TRUE(settled) << "a replica stayed missing from CLUSTER SHARDS";
  ASSERT_OK(from_shards);
  const Reply slots = Raw(4, {"CLUSTER", "SLOTS"});
  absl::StatusOr<SlotMap> from_slots =
      SlotMap::FromSlots(slots.view(), NodeEndpoint(4));
  ASSERT_OK(from_slots);

  for (const SlotMap* map : {&*from_shards, &*from_slots}) {
    EXPECT_EQ(map->unassigned(), 0);
    std::vector<ClusterNode> masters = map->Masters();
    ASSERT_EQ(masters.size(), 3u);
    std::set<int> ports;
    for (const ClusterNode& m : masters) ports.insert(m.endpoint.port);
    EXPECT_EQ(ports,
              (std::set<int>{cluster_->node(0).port(), cluster_->node(1).port(),
                             cluster_->node(2).port()}));
    for (const SlotRange& r : map->ranges()) {
      // CLUSTER SLOTS leaves out a replica until it reported a replication
      // offset (Redis 7.0: "isReplicaAvailable"); CLUSTER SHARDS lists it.
      if (map == &*from_shards) {
        EXPECT_EQ(r.replicas.size(), 1u) << r.first;
      }
      EXPECT_LE(r.replicas.size(), 1u) << r.first;
      EXPECT_EQ(r.master.id.size(), 40u);
    }
  }
  for (int slot : {0, 5460, 5461, 10922, 10923, 16383}) {
    absl::StatusOr<size_t> owner = cluster_->NodeForSlot(slot);
    ASSERT_OK(owner);
    EXPECT_EQ(from_shards->Find(slot)->master.endpoint.port,
              cluster_->node(*owner).port())
        << slot;
    EXPECT_EQ(from_slots->Find(slot)->master.endpoint.port,
              cluster_->node(*owner).port())
        << slot;
  }
}

// Issue 23 item 19: a seed that answers in another protocol (an HTTP server)
// failed Connect with Internal "Protocol error" without trying the next,
// healthy seed. It is skipped like a dead one now, whether it closes the
// connection after its answer or keeps it open.
TEST_F(RealClusterTest, ASeedThatSpeaksAnotherProtocolIsSkippedLikeADeadOne) {
  ASSERT_NE(cluster_, nullptr);
  absl::StatusOr<std::unique_ptr<FakeServer>> closes = FakeServer::Start();
  ASSERT_OK(closes);
  FakeServerOptions open_options;
  open_options.close_after_answer = false;
  absl::StatusOr<std::unique_ptr<FakeServer>> stays =
      FakeServer::Start(open_options);
  ASSERT_OK(stays);
  ClientOptions options;
  options.url = absl::StrCat("redis-cluster://", (*closes)->address(), ",",
                             (*stays)->address(),
                             ",127.0.0.1:", cluster_->node(0).port());
  // Long, so that a seed waited out (rather than skipped) is unmistakable.
  options.connect_timeout = absl::Seconds(20);
  testing::Stopwatch watch;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  ASSERT_OK(client);
  EXPECT_TRUE((*client)->Ping().ok());
  EXPECT_LT(watch.Elapsed(), absl::Seconds(10));
  EXPECT_GE((*closes)->accepted(), 1);
  EXPECT_GE((*stays)->accepted(), 1);
}

// When no seed is usable, the error names each seed and its reason.
TEST(ClusterSeedTest, SeedsThatAllSpeakAnotherProtocolAreEachNamed) {
  absl::StatusOr<std::unique_ptr<FakeServer>> a = FakeServer::Start();
  ASSERT_OK(a);
  absl::StatusOr<std::unique_ptr<FakeServer>> b = FakeServer::Start();
  ASSERT_OK(b);
  ClientOptions options;
  options.url =
      absl::StrCat("redis-cluster://", (*a)->address(), ",", (*b)->address());
  options.connect_timeout = absl::Seconds(20);
  const absl::Status s = Client::Connect(options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  for (const std::string& where : {(*a)->address(), (*b)->address()}) {
    EXPECT_THAT(std::string(s.message()),
                HasSubstr(absl::StrCat("the server at ", where,
                                       " does not speak the Redis protocol "
                                       "(RESP): it answered \"HTTP/1.1 400 "
                                       "Bad Request\" (an HTTP server)")))
        << s;
  }
}

TEST_F(RealClusterTest, KeySlotMatchesTheServer) {
  ASSERT_NE(cluster_, nullptr);
  std::vector<std::string> keys = {"",
                                   "a",
                                   "order:42",
                                   "{order:42}:queue",
                                   "redisson_lock__channel:{x}",
                                   "foo{}{bar}",
                                   std::string("nul\0key", 7),
                                   "ключ"};
  for (int i = 0; i < 200; ++i) keys.push_back(absl::StrCat("lock-", i * 7919));
  for (const std::string& key : keys) {
    const Reply slot = Raw(0, {"CLUSTER", "KEYSLOT", key});
    ASSERT_TRUE(slot.is_integer()) << key;
    EXPECT_EQ(KeySlot(key), slot.integer()) << key;
  }
}

TEST_F(RealClusterTest, AWriteToTheWrongMasterIsMovedToTheOwner) {
  ASSERT_NE(cluster_, nullptr);
  const std::string key = "moved-check";
  absl::StatusOr<size_t> owner = cluster_->NodeForKey(key);
  ASSERT_OK(owner);
  const size_t wrong = (*owner + 1) % cluster_->masters();
  const Reply reply = Raw(wrong, {"SET", key, "v"});
  ASSERT_TRUE(reply.is_error());
  absl::optional<Redirect> redirect =
      ParseRedirect(reply.str(), NodeEndpoint(wrong));
  ASSERT_TRUE(redirect.has_value()) << reply.str();
  EXPECT_EQ(redirect->kind, Redirect::Kind::kMoved);
  EXPECT_EQ(redirect->slot, KeySlot(key));
  EXPECT_EQ(redirect->endpoint.port, cluster_->node(*owner).port());
}

TEST_F(RealClusterTest, MigrateSlotMovesTheKeysAndTheRouting) {
  ASSERT_NE(cluster_, nullptr);
  const std::string key = "{migrating}:k";
  const int slot = KeySlot(key);
  absl::StatusOr<size_t> from = cluster_->NodeForSlot(slot);
  ASSERT_OK(from);
  absl::StatusOr<RedisValue> set =
      cluster_->node(*from).Command({"SET", key, "v1"});
  ASSERT_TRUE(set.ok() && set->is_ok()) << set.status();
  const size_t to = (*from + 1) % cluster_->masters();
  ASSERT_OK(cluster_->MigrateSlot(slot, to));

  absl::StatusOr<size_t> now = cluster_->NodeForSlot(slot);
  ASSERT_OK(now);
  EXPECT_EQ(*now, to);
  absl::StatusOr<RedisValue> got = cluster_->node(to).Command({"GET", key});
  ASSERT_OK(got);
  EXPECT_EQ(got->str, "v1");
  const Reply old = Raw(*from, {"GET", key});
  ASSERT_TRUE(old.is_error());
  absl::optional<Redirect> redirect =
      ParseRedirect(old.str(), NodeEndpoint(*from));
  ASSERT_TRUE(redirect.has_value()) << old.str();
  EXPECT_EQ(redirect->endpoint.port, cluster_->node(to).port());
  // And back, so that the other tests see the initial layout.
  ASSERT_OK(cluster_->MigrateSlot(slot, *from));
  ASSERT_OK(cluster_->WaitUntilHealthy(absl::Seconds(30)));
}

}  // namespace
}  // namespace redis
}  // namespace relock
