// The I/O core (lib/io/): one pipelined connection on the event loop, shared
// by many threads, against real redis-servers: pipelining, abandoned
// requests, stalls, restarts, a server that is down, unix sockets, AUTH and
// SELECT, reconnecting by itself, Close().

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/io/connection.h"
#include "lib/io/event_loop.h"
#include "lib/redis/url.h"
#include "tests/test_util.h"

namespace relock {
namespace io {
namespace {

using ::relock::testing::RedisServer;
using ::relock::testing::RedisServerOptions;
using ::relock::testing::Stopwatch;
using ::testing::HasSubstr;

std::unique_ptr<RedisServer> MustStart(RedisServerOptions options = {}) {
  absl::StatusOr<std::unique_ptr<RedisServer>> s =
      RedisServer::Start(std::move(options));
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

ConnectionOptions OptionsFor(const std::string& url) {
  ConnectionOptions o;
  absl::StatusOr<redis::Endpoint> ep = redis::ParseRedisUrl(url);
  EXPECT_TRUE(ep.ok()) << ep.status();
  if (ep.ok()) o.endpoint = *ep;
  return o;
}

std::shared_ptr<Connection> MustCreate(EventLoop* loop, ConnectionOptions o) {
  absl::StatusOr<std::shared_ptr<Connection>> c =
      Connection::Create(loop, std::move(o));
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

Result Send(Connection& conn, std::initializer_list<absl::string_view> argv,
            Deadline deadline = Deadline::Never()) {
  std::string wire;
  AppendCommand(argv, &wire);
  return Call(conn, std::move(wire), 1, deadline);
}

// Connections to `server` other than the one asking (CLIENT LIST).
int OtherConnections(RedisServer& server) {
  absl::StatusOr<testing::RedisValue> list = server.Command({"CLIENT", "LIST"});
  EXPECT_TRUE(list.ok()) << list.status();
  if (!list.ok()) return -1;
  int lines = 0;
  for (char c : list->str) lines += c == '\n' ? 1 : 0;
  return lines - 1;
}

TEST(IoConnectionTest, ManyThreadsShareOneConnectionInOrder) {
  std::unique_ptr<RedisServer> server = MustStart();
  ASSERT_NE(server, nullptr);
  EventLoop loop;
  std::shared_ptr<Connection> conn =
      MustCreate(&loop, OptionsFor(server->url()));
  ASSERT_NE(conn, nullptr);
  constexpr int kThreads = 32;
  constexpr int kCalls = 200;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::string key = absl::StrCat("counter:", t);
      for (int i = 1; i <= kCalls; ++i) {
        Result r = Send(*conn, {"INCR", key});
        // Each thread's own counter: its replies come back in its order.
        if (!r.status.ok() || r.replies.size() != 1 ||
            !r.replies[0].is_integer() || r.replies[0].integer() != i) {
          wrong.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(OtherConnections(*server), 1);
  EXPECT_EQ(conn->connects(), 1u);
  EXPECT_EQ(conn->outstanding(), 0u);
  conn->Close();
}

TEST(IoConnectionTest, PipelinedRequestGetsEveryReplyInOrder) {
  std::unique_ptr<RedisServer> server = MustStart();
  ASSERT_NE(server, nullptr);
  EventLoop loop;
  std::shared_ptr<Connection> conn =
      MustCreate(&loop, OptionsFor(server->url()));
  ASSERT_NE(conn, nullptr);
  const absl::string_view binary("v\r\n\0x", 5);
  std::string wire;
  AppendCommand({"SET", "k", binary}, &wire);
  AppendCommand({"GET", "k"}, &wire);
  AppendCommand({"INCR", "k"}, &wire);
  Result r = Call(*conn, wire, 3, Deadline::Never());
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_EQ(r.replies.size(), 3u);
  EXPECT_EQ(r.replies[0].str(), "OK");
  EXPECT_EQ(r.replies[1].str(), binary);
  EXPECT_TRUE(r.replies[2].is_error());
  conn->Close();
}

TEST(IoConnectionTest, AnAbandonedRequestDoesNotBreakTheConnection) {
  std::unique_ptr<RedisServer> server = MustStart();
  ASSERT_NE(server, nullptr);
  EventLoop loop;
  std::shared_ptr<Connection> conn =
      MustCreate(&loop, OptionsFor(server->url()));
  ASSERT_NE(conn, nullptr);
  ASSERT_TRUE(Send(*conn, {"PING"}).status.ok());
  Stopwatch watch;
  Result slow = Send(*conn, {"DEBUG", "SLEEP", "0.5"},
                     Deadline::After(absl::Milliseconds(50)));
  EXPECT_EQ(slow.status.code(), absl::StatusCode::kDeadlineExceeded)
      << slow.status;
  EXPECT_FALSE(slow.resendable);
  EXPECT_LT(watch.Elapsed(), absl::Milliseconds(450));
  // The late reply is discarded; the next request gets its own.
  Result echo = Send(*conn, {"ECHO", "after"});
  ASSERT_TRUE(echo.status.ok()) << echo.status;
  EXPECT_EQ(echo.replies[0].str(), "after");
  EXPECT_EQ(conn->connects(), 1u);
  conn->Close();
}

TEST(IoConnectionTest, ASilentServerIsReplacedAfterTheCommandTimeout) {
  std::unique_ptr<RedisServer> server = MustStart();
  ASSERT_NE(server, nullptr);
  EventLoop loop;
  ConnectionOptions o = OptionsFor(server->url());
  o.command_timeout = absl::Milliseconds(300);
  o.connect_timeout = absl::Milliseconds(300);
  std::shared_ptr<Connection> conn = MustCreate(&loop, o);
  ASSERT_NE(conn, nullptr);
  ASSERT_TRUE(Send(*conn, {"PING"}).status.ok());
  ASSERT_TRUE(server->Pause().ok());
  Stopwatch watch;
  Result r = Send(*conn, {"PING"});
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable) << r.status;
  EXPECT_FALSE(r.resendable);  // it may still run
  EXPECT_LT(watch.Elapsed(), absl::Seconds(3));
  ASSERT_TRUE(server->Resume().ok());
  Result again = Send(*conn, {"PING"});
  EXPECT_TRUE(again.status.ok()) << again.status;
  EXPECT_EQ(conn->connects(), 2u);
  conn->Close();
}

TEST(IoConnectionTest, ARestartDropsWrittenRequestsAsResendable) {
  std::unique_ptr<RedisServer> server = MustStart();
  ASSERT_NE(server, nullptr);
  EventLoop loop;
  std::shared_ptr<Connection> conn =
      MustCreate(&loop, OptionsFor(server->url()));
  ASSERT_NE(conn, nullptr);
  ASSERT_TRUE(Send(*conn, {"PING"}).status.ok());
  ASSERT_TRUE(server->Restart().ok());
  // The first request finds the old connection closed (resendable), or the
  // loop already saw the EOF and it went out on a new connection.
  Result r = Send(*conn, {"PING"});
  if (!r.status.ok()) {
    EXPECT_TRUE(r.resendable) << r.status;
    r = Send(*conn, {"PING"});
  }
  EXPECT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(conn->connects(), 2u);
  conn->Close();
}

TEST(IoConnectionTest, AServerThatIsDownFailsCallsAtOnce) {
  std::unique_ptr<RedisServer> server = MustStart();
  ASSERT_NE(server, nullptr);
  EventLoop loop;
  std::shared_ptr<Connection> conn =
      MustCreate(&loop, OptionsFor(server->url()));
  ASSERT_NE(conn, nullptr);
  ASSERT_TRUE(server->Stop().ok());
  for (int i = 0; i < 3; ++i) {
    Stopwatch watch;
    Result r = Send(*conn, {"PING"});
    EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable) << r.status;
    EXPECT_THAT(std::string(r.status.message()),
                HasSubstr(absl::StrCat("127.0.0.1:", server->port())));
    EXPECT_LT(watch.Elapsed(), absl::Seconds(1));
  }
  conn->Close();
}

TEST(IoConnectionTest, UnixSocketAuthAndSelect) {
  RedisServerOptions so;
  so.unix_socket = true;
  so.requirepass = "s3cret";
  std::unique_ptr<RedisServer> server = MustStart(so);
  ASSERT_NE(server, nullptr);
  EventLoop loop;
  std::shared_ptr<Connection> conn =
      MustCreate(&loop, OptionsFor(absl::StrCat(server->unix_url(), "&db=3")));
  ASSERT_NE(conn, nullptr);
  ASSERT_TRUE(Send(*conn, {"SET", "where", "db3"}).status.ok());
  absl::StatusOr<testing::RedisValue> v =
      server->Command({"EVAL",
                       "redis.call('SELECT', 3) return "
                       "redis.call('GET', 'where')",
                       "0"});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->str, "db3");
  conn->Close();

  ConnectionOptions wrong = OptionsFor(server->unix_url());
  wrong.endpoint.password = "wrong";
  std::shared_ptr<Connection> refused = MustCreate(&loop, wrong);
  ASSERT_NE(refused, nullptr);
  Result r = Send(*refused, {"PING"});
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnauthenticated) << r.status;
  EXPECT_THAT(std::string(r.status.message()),
              ::testing::Not(HasSubstr("wrong")));
  refused->Close();
}

TEST(IoConnectionTest, KeepConnectedReconnectsByItselfAndReportsIt) {
  std::unique_ptr<RedisServer> server = MustStart();
  ASSERT_NE(server, nullptr);
  EventLoop loop;
  ConnectionOptions o = OptionsFor(server->url());
  o.keep_connected = true;
  std::shared_ptr<Connection> conn = MustCreate(&loop, o);
  ASSERT_NE(conn, nullptr);
  struct Seen {
    Mutex mu;
    int up ABSL_GUARDED_BY(mu) = 0;
    int down ABSL_GUARDED_BY(mu) = 0;
  } seen;
  conn->set_state_handler([&seen](bool connected, const absl::Status&) {
    MutexLock lock(&seen.mu);
    (connected ? seen.up : seen.down) += 1;
  });
  ASSERT_TRUE(Send(*conn, {"PING"}).status.ok());
  ASSERT_TRUE(server->Command({"CLIENT", "KILL", "TYPE", "normal"}).ok());
  {
    MutexLock lock(&seen.mu);
    EXPECT_TRUE(seen.mu.AwaitWithTimeout(
        absl::Condition(
            +[](Seen* s)
                 ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) { return s->up >= 2; },
            &seen),
        absl::Seconds(10)));
    EXPECT_GE(seen.down, 1);
  }
  conn->Close();
}

TEST(IoConnectionTest, CloseFailsWhatIsOutstandingAndLaterCalls) {
  std::unique_ptr<RedisServer> server = MustStart();
  ASSERT_NE(server, nullptr);
  EventLoop loop;
  std::shared_ptr<Connection> conn =
      MustCreate(&loop, OptionsFor(server->url()));
  ASSERT_NE(conn, nullptr);
  ASSERT_TRUE(Send(*conn, {"PING"}).status.ok());
  Result slow;
  std::thread waiter([&] { slow = Send(*conn, {"DEBUG", "SLEEP", "1"}); });
  absl::SleepFor(absl::Milliseconds(100));
  conn->Close();
  waiter.join();
  EXPECT_EQ(slow.status.code(), absl::StatusCode::kFailedPrecondition)
      << slow.status;
  EXPECT_EQ(Send(*conn, {"PING"}).status.code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace io
}  // namespace relock
