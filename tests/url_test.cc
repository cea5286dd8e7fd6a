// Pure logic: Redis URL parsing.

#include "lib/redis/url.h"

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

}  // namespace
}  // namespace redis
}  // namespace relock
