// Pure logic: Redis URL parsing.

#include "lib/redis/url.h"

#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace relock {
namespace redis {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ParseRedisUrlTest, HostOnlyUsesDefaults) {
  absl::StatusOr<Endpoint> ep = ParseRedisUrl("redis://example.com");
  ASSERT_TRUE(ep.ok()) << ep.status();
  EXPECT_EQ(ep->kind, Endpoint::Kind::kTcp);
  EXPECT_EQ(ep->host, "example.com");
  EXPECT_EQ(ep->port, 6379);
  EXPECT_EQ(ep->db, 0);
  EXPECT_EQ(ep->username, "");
  EXPECT_EQ(ep->password, "");
}

TEST(ParseRedisUrlTest, FullFormWithUserPasswordPortAndDb) {
  absl::StatusOr<Endpoint> ep =
      ParseRedisUrl("redis://alice:s%40cr%3At@10.0.0.7:7000/3");
  ASSERT_TRUE(ep.ok()) << ep.status();
  EXPECT_EQ(ep->username, "alice");
  EXPECT_EQ(ep->password, "s@cr:t");
  EXPECT_EQ(ep->host, "10.0.0.7");
  EXPECT_EQ(ep->port, 7000);
  EXPECT_EQ(ep->db, 3);
  EXPECT_EQ(ep->ToString(), "10.0.0.7:7000/3");
}

TEST(ParseRedisUrlTest, PasswordOnlyForms) {
  absl::StatusOr<Endpoint> a = ParseRedisUrl("redis://:pw@h:1");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->username, "");
  EXPECT_EQ(a->password, "pw");
  absl::StatusOr<Endpoint> b = ParseRedisUrl("redis://pw@h");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->password, "pw");
}

TEST(ParseRedisUrlTest, Ipv6InBrackets) {
  absl::StatusOr<Endpoint> ep = ParseRedisUrl("redis://[::1]:6380");
  ASSERT_TRUE(ep.ok()) << ep.status();
  EXPECT_EQ(ep->host, "::1");
  EXPECT_EQ(ep->port, 6380);
  EXPECT_EQ(ep->ToString(), "[::1]:6380");
}

TEST(ParseRedisUrlTest, UnixSocketWithDb) {
  absl::StatusOr<Endpoint> ep = ParseRedisUrl("unix:///run/redis.sock?db=2");
  ASSERT_TRUE(ep.ok()) << ep.status();
  EXPECT_EQ(ep->kind, Endpoint::Kind::kUnix);
  EXPECT_EQ(ep->path, "/run/redis.sock");
  EXPECT_EQ(ep->db, 2);
}

TEST(ParseRedisUrlTest, RejectsMalformedUrls) {
  for (const char* bad :
       {"", "http://h", "redis://", "redis://h:", "redis://h:0",
        "redis://h:65536", "redis://h:12ab", "redis://h/x", "redis://h/-1",
        "redis://[::1", "redis://[::1]x", "unix://relative.sock",
        "unix:///s?db=x", "unix:///s?color=red", "redis://u:%zz@h",
        "redis://alice:@h", "redis://h:+5"}) {
    absl::StatusOr<Endpoint> ep = ParseRedisUrl(bad);
    EXPECT_EQ(ep.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(ParseRedisUrlTest, RedissIsTcpWithTls) {
  absl::StatusOr<Endpoint> ep =
      ParseRedisUrl("rediss://u:p%40ss@h.example:6380/2");
  ASSERT_TRUE(ep.ok()) << ep.status();
  EXPECT_TRUE(ep->tls);
  EXPECT_EQ(ep->kind, Endpoint::Kind::kTcp);
  EXPECT_EQ(ep->host, "h.example");
  EXPECT_EQ(ep->port, 6380);
  EXPECT_EQ(ep->username, "u");
  EXPECT_EQ(ep->password, "p@ss");
  EXPECT_EQ(ep->db, 2);
  absl::StatusOr<Endpoint> plain = ParseRedisUrl("redis://h");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->tls);
}

TEST(ParseRedisUrlTest, ErrorsNeverEchoThePassword) {
  for (const char* url : {"redis://bob:hunter2@h:notaport",
                          "unix:///tmp/redis.sock?password=hunter2&db=x",
                          "redis://h:6379/0?password=hunter2&x=1"}) {
    absl::StatusOr<Endpoint> ep = ParseRedisUrl(url);
    ASSERT_FALSE(ep.ok()) << url;
    EXPECT_THAT(std::string(ep.status().message()), Not(HasSubstr("hunter2")))
        << url;
  }
}

TEST(ParseTopologyUrlTest, PlainUrlsAreOneServer) {
  absl::StatusOr<Topology> t = ParseTopologyUrl("redis://:pw@h:7000/2");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->kind, Topology::Kind::kSingle);
  ASSERT_EQ(t->endpoints.size(), 1u);
  EXPECT_EQ(t->endpoints[0].ToString(), "h:7000/2");
  EXPECT_EQ(t->endpoints[0].password, "pw");
}

TEST(ParseTopologyUrlTest, ClusterSeedsShareTheCredentials) {
  absl::StatusOr<Topology> t = ParseTopologyUrl(
      "redis-cluster://app:s%40cret@10.0.0.1:7000,10.0.0.2,[::1]:7002");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->kind, Topology::Kind::kCluster);
  ASSERT_EQ(t->endpoints.size(), 3u);
  EXPECT_EQ(t->endpoints[0].ToString(), "10.0.0.1:7000");
  EXPECT_EQ(t->endpoints[1].ToString(), "10.0.0.2:6379");
  EXPECT_EQ(t->endpoints[2].ToString(), "[::1]:7002");
  for (const Endpoint& ep : t->endpoints) {
    EXPECT_EQ(ep.username, "app");
    EXPECT_EQ(ep.password, "s@cret");
    EXPECT_FALSE(ep.tls);
  }
  absl::StatusOr<Topology> tls = ParseTopologyUrl("rediss-cluster://h1,h2");
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_TRUE(tls->endpoints[0].tls);
  EXPECT_TRUE(tls->endpoints[1].tls);
}

TEST(ParseTopologyUrlTest, SentinelNamesItsMasterAndDb) {
  absl::StatusOr<Topology> t =
      ParseTopologyUrl("redis-sentinel://:pw@s1,s2:26380,s3/3#my%20master");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->kind, Topology::Kind::kSentinel);
  EXPECT_EQ(t->master_name, "my master");
  EXPECT_EQ(t->db, 3);
  ASSERT_EQ(t->endpoints.size(), 3u);
  EXPECT_EQ(t->endpoints[0].ToString(), "s1:26379");
  EXPECT_EQ(t->endpoints[1].ToString(), "s2:26380");
  EXPECT_EQ(t->endpoints[2].password, "pw");
  absl::StatusOr<Topology> tls = ParseTopologyUrl("rediss-sentinel://s#m");
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_TRUE(tls->endpoints[0].tls);
  EXPECT_EQ(tls->db, 0);
}

TEST(ParseTopologyUrlTest, BadUrlsSayWhatIsWrongWithoutThePassword) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"redis-cluster://:hunter2@h1:7000/1", "only db 0"},
      {"redis-cluster://h1#m", "no #fragment"},
      {"redis-cluster://h1?db=1", "no ?query"},
      {"redis-cluster://h1,,h2", "address 2 is empty"},
      {"redis-cluster://", "address 1 is empty"},
      {"redis-cluster://:hunter2@h1:notaport", "address 1"},
      {"redis-cluster://u:hunter2%zz@h1", "percent-encoding"},
      {"redis-sentinel://:hunter2@s1", "#master-name"},
      {"redis-sentinel://s1#", "#master-name"},
      {"redis-sentinel://s1/x#m", "database"},
      {"redis-sentinel://s1:0#m", "address 1"},
      {"http://h", "expected redis://"},
  };
  for (const auto& [url, why] : cases) {
    absl::StatusOr<Topology> t = ParseTopologyUrl(url);
    ASSERT_FALSE(t.ok()) << url;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << url;
    EXPECT_THAT(std::string(t.status().message()), HasSubstr(why)) << url;
    EXPECT_THAT(std::string(t.status().message()), Not(HasSubstr("hunter2")))
        << url;
  }
}

}  // namespace
}  // namespace redis
}  // namespace relock
