// Pure logic: Redis URL parsing.

#include "lib/redis/url.h"

#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace redis {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Each URL of `cases` is InvalidArgument with a message that contains its
// reason and never "hunter2" (every password in these cases); the plain
// parser (Redlock's URLs) says the same of the single-server forms.
void ExpectEachInvalidSaying(
    const std::vector<std::pair<std::string, std::string>>& cases) {
  for (const auto& [url, why] : cases) {
    absl::StatusOr<Topology> t = ParseTopologyUrl(url);
    ASSERT_FALSE(t.ok()) << url;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << url;
    EXPECT_THAT(std::string(t.status().message()), HasSubstr(why)) << url;
    EXPECT_THAT(std::string(t.status().message()), Not(HasSubstr("hunter2")))
        << url;
    if (url.rfind("redis://", 0) == 0 || url.rfind("unix://", 0) == 0) {
      EXPECT_THAT(std::string(ParseRedisUrl(url).status().message()),
                  HasSubstr(why))
          << url;
    }
  }
}

TEST(ParseRedisUrlTest, HostOnlyUsesDefaults) {
  absl::StatusOr<Endpoint> ep = ParseRedisUrl("redis://example.com");
  ASSERT_OK(ep);
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
  ASSERT_OK(ep);
  EXPECT_EQ(ep->username, "alice");
  EXPECT_EQ(ep->password, "s@cr:t");
  EXPECT_EQ(ep->host, "10.0.0.7");
  EXPECT_EQ(ep->port, 7000);
  EXPECT_EQ(ep->db, 3);
  EXPECT_EQ(ep->ToString(), "10.0.0.7:7000/3");
}

TEST(ParseRedisUrlTest, PasswordOnlyForms) {
  absl::StatusOr<Endpoint> a = ParseRedisUrl("redis://:pw@h:1");
  ASSERT_OK(a);
  EXPECT_EQ(a->username, "");
  EXPECT_EQ(a->password, "pw");
  absl::StatusOr<Endpoint> b = ParseRedisUrl("redis://pw@h");
  ASSERT_OK(b);
  EXPECT_EQ(b->password, "pw");
}

TEST(ParseRedisUrlTest, Ipv6InBrackets) {
  absl::StatusOr<Endpoint> ep = ParseRedisUrl("redis://[::1]:6380");
  ASSERT_OK(ep);
  EXPECT_EQ(ep->host, "::1");
  EXPECT_EQ(ep->port, 6380);
  EXPECT_EQ(ep->ToString(), "[::1]:6380");
}

TEST(ParseRedisUrlTest, UnixSocketWithDb) {
  absl::StatusOr<Endpoint> ep = ParseRedisUrl("unix:///run/redis.sock?db=2");
  ASSERT_OK(ep);
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
  ASSERT_OK(ep);
  EXPECT_TRUE(ep->tls);
  EXPECT_EQ(ep->kind, Endpoint::Kind::kTcp);
  EXPECT_EQ(ep->host, "h.example");
  EXPECT_EQ(ep->port, 6380);
  EXPECT_EQ(ep->username, "u");
  EXPECT_EQ(ep->password, "p@ss");
  EXPECT_EQ(ep->db, 2);
  absl::StatusOr<Endpoint> plain = ParseRedisUrl("redis://h");
  ASSERT_OK(plain);
  EXPECT_FALSE(plain->tls);
}

TEST(ParseRedisUrlTest, ErrorsNeverEchoThePassword) {
  for (const char* url :
       {"redis://bob:hunter2@h:notaport",
        "unix:///tmp/redis.sock?password=hunter2&db=x",
        "redis://h:6379/0?password=hunter2&x=1",
        // An unencoded '?' in the password: the "port"
        // would be the password's head.
        "redis://:hunter2?tail@h", "redis://:h/hunter2?x@h",
        // Issue 23 review: the query's parameter name was quoted.
        "redis://u:1?hunter2=v@h", "redis://u:1?db=hunter2@h"}) {
    absl::StatusOr<Endpoint> ep = ParseRedisUrl(url);
    ASSERT_FALSE(ep.ok()) << url;
    EXPECT_THAT(std::string(ep.status().message()), Not(HasSubstr("hunter2")))
        << url;
  }
}

// Issue 23 review: '#' became a "fragment" error everywhere, so a password
// with an unencoded '#' (accepted before) stopped connecting.
TEST(ParseRedisUrlTest, AHashInThePasswordIsNoFragment) {
  absl::StatusOr<Endpoint> ep = ParseRedisUrl("redis://app:pa#ss@h:7000/1");
  ASSERT_OK(ep);
  EXPECT_EQ(ep->password, "pa#ss");
  EXPECT_EQ(ep->ToString(), "h:7000/1");
  EXPECT_FALSE(ParseRedisUrl("redis://app:pw@h:7000#frag").ok());
  EXPECT_FALSE(ParseRedisUrl("redis://h:7000#frag").ok());
}

TEST(ParseTopologyUrlTest, PlainUrlsAreOneServer) {
  absl::StatusOr<Topology> t = ParseTopologyUrl("redis://:pw@h:7000/2");
  ASSERT_OK(t);
  EXPECT_EQ(t->kind, Topology::Kind::kSingle);
  ASSERT_EQ(t->endpoints.size(), 1u);
  EXPECT_EQ(t->endpoints[0].ToString(), "h:7000/2");
  EXPECT_EQ(t->endpoints[0].password, "pw");
}

TEST(ParseTopologyUrlTest, ClusterSeedsShareTheCredentials) {
  absl::StatusOr<Topology> t = ParseTopologyUrl(
      "redis-cluster://app:s%40cret@10.0.0.1:7000,10.0.0.2,[::1]:7002");
  ASSERT_OK(t);
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
  ASSERT_OK(tls);
  EXPECT_TRUE(tls->endpoints[0].tls);
  EXPECT_TRUE(tls->endpoints[1].tls);
}

TEST(ParseTopologyUrlTest, SentinelNamesItsMasterAndDb) {
  absl::StatusOr<Topology> t =
      ParseTopologyUrl("redis-sentinel://:pw@s1,s2:26380,s3/3#my%20master");
  ASSERT_OK(t);
  EXPECT_EQ(t->kind, Topology::Kind::kSentinel);
  EXPECT_EQ(t->master_name, "my master");
  EXPECT_EQ(t->db, 3);
  ASSERT_EQ(t->endpoints.size(), 3u);
  EXPECT_EQ(t->endpoints[0].ToString(), "s1:26379");
  EXPECT_EQ(t->endpoints[1].ToString(), "s2:26380");
  EXPECT_EQ(t->endpoints[2].password, "pw");
  absl::StatusOr<Topology> tls = ParseTopologyUrl("rediss-sentinel://s#m");
  ASSERT_OK(tls);
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
      {"redis-cluster://u:hunter2%zz@h1", "bad percent-escape"},
      {"redis-sentinel://:hunter2@s1", "#master-name"},
      {"redis-sentinel://s1#", "#master-name"},
      {"redis-sentinel://s1/x#m", "db \"x\" is not a number"},
      {"redis-sentinel://s1:0#m", "address 1"},
      {"http://h", "expected redis://"},
  };
  ExpectEachInvalidSaying(cases);
}

// Issue 23 item 18: port 99999, db -1, a bad percent-escape and an unknown
// query parameter all failed Connect with the same "expected redis://, ..."
// (ParseTopologyUrl() replaced the single-node parser's reason).
TEST(ParseTopologyUrlTest, MalformedSingleNodeUrlsSayWhichPartIsWrong) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"redis://h:99999", "port \"99999\" is out of range 1..65535"},
      {"redis://h:99999999999999", "port \"99999999999999\" is out of range"},
      {"redis://h:12ab", "port \"12ab\" is not a number"},
      {"redis://h:", "port is empty"},
      {"redis://h/-1", "db \"-1\" is negative"},
      {"redis://h/x", "db \"x\" is not a number"},
      {"redis://h/2000000", "db \"2000000\" is out of range"},
      {"redis://h?db=-3", "db \"-3\" is negative"},
      {"unix:///s?db=x", "db \"x\" is not a number"},
      {"redis://al%zzce:hunter2@h",
       "bad percent-escape \"%zz\" at character 3 of the user"},
      {"redis://u:hunter2%4@h", "at character 8 of the password"},
      {"redis://h?user=%g1",
       "\"%g1\" at character 1 of the query parameter "
       "\"user\""},
      {"redis://h?color=red",
       "unknown query parameter \"color\" (known: db, password, user, "
       "username)"},
      {"unix:///s?colour=red", "unknown query parameter \"colour\""},
      {"redis://alice:@h", "user \"alice\" has no password"},
      {"redis://[::1", "no closing ']'"},
      {"redis://[::1]x", "expected ':port' after the IPv6 address"},
      {"redis://::1", "write an IPv6 address in brackets"},
      {"redis://:6379", "host is empty"},
      // An unencoded '?' in the password: the part after it, read as a
      // query, holds the '@'; nothing of it is echoed.
      {"redis://u:x?hunter2@h:6379", "percent-encode it as %3F"},
      {"redis://:se?cret@localhost/2", "host is empty (the URL's query"},
      // (Its text, quoted back as a userinfo, is not the password's.)
      {"redis://an at sign: if the password?x=1@h", "percent-encode it"},
      {"redis://h1,h2:6379", "redis-cluster://"},
      {"redis://h#m", "#fragment"},
      {"unix://relative.sock", "\"relative.sock\" is not absolute"},
      {"http://h", "unknown scheme \"http://\"; expected redis://"},
      {"localhost:6379", "no scheme; expected redis://"},
  };
  ExpectEachInvalidSaying(cases);
}

// The same for each part of a cluster or Sentinel URL: the address that is
// wrong, and what is wrong with it.
TEST(ParseTopologyUrlTest, MalformedClusterAndSentinelPartsSayWhichIsWrong) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"redis-cluster://h1:7000,h2:99999",
       "address 2 (\"h2:99999\"): port \"99999\" is out of range 1..65535"},
      {"redis-cluster://h1,[::1", "address 2 (\"[::1\"): IPv6 address"},
      {"redis-cluster://u:hunter2%q1@h1", "at character 8 of the password"},
      {"redis-cluster://u%q1:hunter2@h1", "\"%q1\" at character 2 of the user"},
      {"redis-cluster://h1/3", "only db 0 (found \"/3\")"},
      {"redis-cluster://h1?db=2", "no ?query (found \"?db=2\")"},
      {"redis-sentinel://s1/-1#m", "db \"-1\" is negative"},
      {"redis-sentinel://s1:0#m",
       "address 1 (\"s1:0\"): port \"0\" is out "
       "of range"},
      {"redis-sentinel://s1#my%2master",
       "\"%2m\" at character 3 of the master name"},
      {"redis-sentinel://s1?password=hunter2#m", "no ?query"},
      {"rediss-sentinel://alice:@s1#m", "user \"alice\" has no password"},
      // A '#' in the password is no master name, nor a fragment.
      {"redis-sentinel://:x#hunter2@s1", "#master-name"},
      {"redis-cluster://:x#hunter2@h1#f", "no #fragment"},
      {"redis-cluster://:x?hunter2@h1?db=1", "no ?query"},
      // A query is no credentials, whatever '@' it holds.
      {"redis-cluster://h1:7000,h2:7001?user=a@elsewhere.invalid:7002",
       "no ?query"},
      {"redis-sentinel://s1,s2?client=x@elsewhere.invalid#m", "no ?query"},
  };
  ExpectEachInvalidSaying(cases);
}

// A review found a Sentinel URL's '#' taken from the password: the master
// name was its tail, the host list its head, echoed in the error.
TEST(ParseTopologyUrlTest, AHashInThePasswordStaysThere) {
  absl::StatusOr<Topology> s = ParseTopologyUrl(
      "redis-sentinel://:top#se%3Fcret@127.0.0.1:1,s2#mymaster");
  ASSERT_OK(s);
  EXPECT_EQ(s->master_name, "mymaster");
  ASSERT_EQ(s->endpoints.size(), 2u);
  EXPECT_EQ(s->endpoints[0].password, "top#se?cret");  // %3F decoded
  EXPECT_EQ(s->endpoints[0].ToString(), "127.0.0.1:1");
  EXPECT_EQ(s->endpoints[1].ToString(), "s2:26379");
  absl::StatusOr<Topology> c =
      ParseTopologyUrl("redis-cluster://u:p#wd@h1:7000");
  ASSERT_OK(c);
  EXPECT_EQ(c->endpoints[0].password, "p#wd");
  EXPECT_EQ(c->endpoints[0].username, "u");
}

}  // namespace
}  // namespace redis
}  // namespace relock
