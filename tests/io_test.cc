// The I/O core (lib/io/): one pipelined connection on the event loop, shared
// by many threads, against real redis-servers: pipelining, abandoned
// requests, stalls, restarts, a server that is down, unix sockets, AUTH and
// SELECT, reconnecting by itself, Close(). The scenarios that depend on who
// does the I/O run twice: through the loop, and as direct calls on a parked
// connection (the caller's own I/O).

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/io/connection.h"
#include "lib/io/event_loop.h"
#include "lib/redis/url.h"
#include "tests/test_util.h"
#include "tests/testing/notification.h"
#include "tests/testing/status_matchers.h"

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
  EXPECT_OK(s);
  return s.ok() ? *std::move(s) : nullptr;
}

ConnectionOptions OptionsFor(const std::string& url) {
  ConnectionOptions o;
  o.direct_calls = true;
  absl::StatusOr<redis::Endpoint> ep = redis::ParseRedisUrl(url);
  EXPECT_OK(ep);
  if (ep.ok()) o.endpoint = *ep;
  return o;
}

std::shared_ptr<Connection> MustCreate(EventLoop* loop, ConnectionOptions o) {
  absl::StatusOr<std::shared_ptr<Connection>> c =
      Connection::Create(loop, std::move(o));
  EXPECT_OK(c);
  return c.ok() ? *std::move(c) : nullptr;
}

Result Send(Connection& conn, std::initializer_list<absl::string_view> argv,
            Deadline deadline = Deadline::Never(), bool direct = true) {
  std::string wire;
  AppendCommand(argv, &wire);
  return Call(conn, std::move(wire), 1, deadline, direct);
}

// Waits (up to a minute) until `conn` is parked: idle, free for a direct
// call.
bool AwaitParked(const Connection& conn) {
  return testing::Eventually([&] { return conn.parked(); });
}

// Who does a call's I/O: the loop thread, or the caller on a parked
// connection.
enum class Path { kLoop, kDirect };

std::string PathName(const ::testing::TestParamInfo<Path>& info) {
  return info.param == Path::kLoop ? "Loop" : "Direct";
}

// A redis-server and an event loop per test; Connect() opens connections
// to the server on the loop (closed at the end of the test).
class IoConnectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = MustStart();
    ASSERT_NE(server_, nullptr);
  }
  void TearDown() override {
    for (const std::shared_ptr<Connection>& c : conns_) c->Close();
  }
  std::shared_ptr<Connection> Connect() {
    return Connect(OptionsFor(server_->url()));
  }
  std::shared_ptr<Connection> Connect(ConnectionOptions o) {
    std::shared_ptr<Connection> c = MustCreate(&loop_, std::move(o));
    if (c != nullptr) conns_.push_back(c);
    return c;
  }

  std::unique_ptr<RedisServer> server_;
  EventLoop loop_;
  std::vector<std::shared_ptr<Connection>> conns_;
};

class IoPathTest : public IoConnectionTest,
                   public ::testing::WithParamInterface<Path> {
 protected:
  bool direct() const { return GetParam() == Path::kDirect; }
  // Send() by this test's path; a direct call first waits until `conn` is
  // parked.
  Result SendByPath(Connection& conn,
                    std::initializer_list<absl::string_view> argv,
                    Deadline deadline = Deadline::Never()) {
    if (direct()) {
      EXPECT_TRUE(AwaitParked(conn));
    }
    return Send(conn, argv, deadline, direct());
  }
  // A connection with 300 ms command and connect timeouts that has made one
  // call (and, on the direct path, is parked), to a server then paused
  // (SIGSTOP): null after a failed assertion.
  std::shared_ptr<Connection> ConnectedThenPaused() {
    ConnectionOptions o = OptionsFor(server_->url());
    o.command_timeout = absl::Milliseconds(300);
    o.connect_timeout = absl::Milliseconds(300);
    std::shared_ptr<Connection> conn = Connect(o);
    if (conn == nullptr) return nullptr;
    const Result ping = Send(*conn, {"PING"});
    EXPECT_OK(ping.status);
    if (!ping.status.ok() || (direct() && !AwaitParked(*conn))) return nullptr;
    if (!server_->Pause().ok()) return nullptr;
    return conn;
  }
};

INSTANTIATE_TEST_SUITE_P(BothPaths, IoPathTest,
                         ::testing::Values(Path::kLoop, Path::kDirect),
                         PathName);

// Connections to `server` other than the one asking (CLIENT LIST).
int OtherConnections(RedisServer& server) {
  absl::StatusOr<testing::RedisValue> list = server.Command({"CLIENT", "LIST"});
  EXPECT_OK(list);
  if (!list.ok()) return -1;
  int lines = 0;
  for (char c : list->str) lines += c == '\n' ? 1 : 0;
  return lines - 1;
}

TEST_F(IoConnectionTest, ManyThreadsShareOneConnectionInOrder) {
  std::shared_ptr<Connection> conn = Connect();
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
  EXPECT_EQ(OtherConnections(*server_), 1);
  EXPECT_EQ(conn->connects(), 1u);
  EXPECT_EQ(conn->outstanding(), 0u);
}

TEST_F(IoConnectionTest, DirectCallsAndLoopCallsInterleaveInOrder) {
  std::shared_ptr<Connection> conn = Connect();
  ASSERT_NE(conn, nullptr);
  constexpr int kThreads = 8;
  constexpr int kCalls = 300;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    // Even threads may do their own I/O, odd ones always go through the
    // loop; every few calls are two commands in one request.
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        const std::string a = absl::StrCat("t", t, "-", i);
        const std::string b = absl::StrCat(a, "-second");
        std::string wire;
        AppendCommand({"ECHO", a}, &wire);
        const size_t commands = i % 4 == 0 ? 2 : 1;
        if (commands == 2) AppendCommand({"ECHO", b}, &wire);
        Result r = Call(*conn, std::move(wire), commands, Deadline::Never(),
                        /*direct=*/t % 2 == 0);
        if (!r.status.ok() || r.replies.size() != commands ||
            r.replies[0].str() != a ||
            (commands == 2 && r.replies[1].str() != b)) {
          wrong.fetch_add(1);
        }
        if (i % 50 == 0) absl::SleepFor(absl::Microseconds(200));  // pace
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(conn->connects(), 1u);
  EXPECT_EQ(conn->outstanding(), 0u);
}

TEST_F(IoConnectionTest, AParkedConnectionLetsTheCallerDoItsOwnIo) {
  std::shared_ptr<Connection> conn = Connect();
  ASSERT_NE(conn, nullptr);
  ASSERT_OK(Send(*conn, {"PING"}).status);  // connects
  ASSERT_TRUE(AwaitParked(*conn));
  const uint64_t before = conn->direct_calls();
  for (int i = 0; i < 20; ++i) {
    const std::string v = absl::StrCat("v", i);
    Result r = Send(*conn, {"ECHO", v});
    ASSERT_OK(r.status);
    EXPECT_EQ(r.replies[0].str(), v);
  }
  // Nobody else used it, so it was free for every one of them.
  EXPECT_EQ(conn->direct_calls(), before + 20);
  EXPECT_TRUE(conn->parked());
  EXPECT_EQ(conn->connects(), 1u);
}

TEST_F(IoConnectionTest, WithoutDirectCallsEveryCallGoesThroughTheLoop) {
  ConnectionOptions o = OptionsFor(server_->url());
  o.direct_calls = false;
  std::shared_ptr<Connection> conn = Connect(o);
  ASSERT_NE(conn, nullptr);
  for (int i = 0; i < 5; ++i) {
    ASSERT_OK(Send(*conn, {"PING"}).status);
    absl::SleepFor(absl::Milliseconds(10));  // time to park, if it would
  }
  EXPECT_FALSE(conn->parked());
  EXPECT_EQ(conn->direct_calls(), 0u);
}

TEST_F(IoConnectionTest, AParkedConnectionNeverSendsACallWhoseDeadlinePassed) {
  std::shared_ptr<Connection> conn = Connect();
  ASSERT_NE(conn, nullptr);
  ASSERT_OK(Send(*conn, {"PING"}).status);
  ASSERT_TRUE(AwaitParked(*conn));
  for (bool direct : {true, false}) {
    Result r = Send(*conn, {"INCR", "never"},
                    Deadline::After(absl::ZeroDuration()), direct);
    EXPECT_EQ(r.status.code(), absl::StatusCode::kDeadlineExceeded) << r.status;
  }
  Result got = Send(*conn, {"GET", "never"});
  ASSERT_OK(got.status);
  EXPECT_TRUE(got.replies[0].is_nil());
  // Nothing was sent, so the connection is still parked.
  EXPECT_TRUE(AwaitParked(*conn));
}

TEST_F(IoConnectionTest, PipelinedRequestGetsEveryReplyInOrder) {
  std::shared_ptr<Connection> conn = Connect();
  ASSERT_NE(conn, nullptr);
  const absl::string_view binary("v\r\n\0x", 5);
  std::string wire;
  AppendCommand({"SET", "k", binary}, &wire);
  AppendCommand({"GET", "k"}, &wire);
  AppendCommand({"INCR", "k"}, &wire);
  Result r = Call(*conn, wire, 3, Deadline::Never());
  ASSERT_OK(r.status);
  ASSERT_EQ(r.replies.size(), 3u);
  EXPECT_EQ(r.replies[0].str(), "OK");
  EXPECT_EQ(r.replies[1].str(), binary);
  EXPECT_TRUE(r.replies[2].is_error());
}

TEST_F(IoConnectionTest, AServerThatIsDownFailsCallsAtOnce) {
  std::shared_ptr<Connection> conn = Connect();
  ASSERT_NE(conn, nullptr);
  ASSERT_OK(server_->Stop());
  for (int i = 0; i < 3; ++i) {
    Stopwatch watch;
    Result r = Send(*conn, {"PING"});
    EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable) << r.status;
    EXPECT_THAT(std::string(r.status.message()),
                HasSubstr(absl::StrCat("127.0.0.1:", server_->port())));
    EXPECT_LT(watch.Elapsed(), absl::Seconds(1));
  }
}

// Regression (SpinLockTest.CloseCancelsASpinningWaiter hung once under
// TSan): work posted once Stop() has begun would never run, yet it lived on
// in the stopped context with all it holds (an acquire machine whose
// waiter then waited for good). It is now let go of at once.
TEST(EventLoopTest, WorkPostedAfterStopIsLetGoOfAtOnce) {
  EventLoop loop;
  auto held = std::make_shared<int>(0);
  std::atomic<bool> ran{false};
  loop.Post([held, &ran] { ran = true; });
  loop.Stop();
  EXPECT_TRUE(ran.load());  // posted before Stop(): it ran
  ran = false;
  loop.Post([held, &ran] { ran = true; });
  EXPECT_EQ(held.use_count(), 1);  // destroyed, unrun
  EXPECT_FALSE(ran.load());
}

// Regression: a Post() racing with Stop() could read "not stopping", lose
// the CPU, and queue its work behind the stop handler once Stop() had begun:
// work that never ran, yet lived on (with all it holds) until the loop was
// destroyed. Once Stop() returns, every work item is run or let go of.
TEST(EventLoopTest, WorkPostedWhileStopRunsIsRunOrLetGoOfByItsEnd) {
  constexpr int kRounds = 50;  // without the fix, it failed by round 3
  for (int round = 0; round < kRounds; ++round) {
    EventLoop loop;
    auto held = std::make_shared<int>(0);
    std::atomic<bool> stopped{false};
    std::atomic<int> started{0};
    std::vector<std::thread> posters;
    for (int i = 0; i < 2; ++i) {
      posters.emplace_back([&] {
        started.fetch_add(1);
        while (!stopped.load()) loop.Post([held] {});
      });
    }
    while (started.load() < 2) std::this_thread::yield();
    loop.Stop();
    stopped = true;
    for (std::thread& t : posters) t.join();
    // The loop still exists: a work item queued behind the stop would still
    // hold its copy.
    ASSERT_EQ(held.use_count(), 1) << "round " << round;
  }
}

// The same for work posted on the loop thread: asio keeps what a handler
// posts in a queue of that thread until the handler returns
// (io_context(1)), so a stop handler posted from another thread meanwhile
// came first, and the work after it never ran.
TEST(EventLoopTest, WorkPostedByAHandlerWhileStopRunsStillRuns) {
  for (int round = 0; round < 5; ++round) {
    EventLoop loop;
    auto held = std::make_shared<int>(0);
    std::atomic<bool> ran{false};
    testing::Notification posted;
    loop.Post([&loop, &ran, &posted, held] {
      loop.Post([&ran, held] { ran = true; });  // before Stop() begins
      posted.Notify();
      // Time for Stop() to queue its stop handler while this one runs.
      absl::SleepFor(absl::Milliseconds(20));
    });
    posted.WaitForNotification();
    loop.Stop();
    EXPECT_TRUE(ran.load()) << "round " << round;
    ASSERT_EQ(held.use_count(), 1) << "round " << round;
  }
}

TEST(IoUnixSocketTest, AuthAndSelect) {
  RedisServerOptions so;
  so.unix_socket = true;
  so.requirepass = "s3cret";
  std::unique_ptr<RedisServer> server = MustStart(so);
  ASSERT_NE(server, nullptr);
  EventLoop loop;
  std::shared_ptr<Connection> conn =
      MustCreate(&loop, OptionsFor(absl::StrCat(server->unix_url(), "&db=3")));
  ASSERT_NE(conn, nullptr);
  ASSERT_OK(Send(*conn, {"SET", "where", "db3"}).status);
  absl::StatusOr<testing::RedisValue> v =
      server->Command({"EVAL",
                       "redis.call('SELECT', 3) return "
                       "redis.call('GET', 'where')",
                       "0"});
  ASSERT_OK(v);
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

TEST_F(IoConnectionTest, KeepConnectedReconnectsByItselfAndReportsIt) {
  ConnectionOptions o = OptionsFor(server_->url());
  o.keep_connected = true;
  std::shared_ptr<Connection> conn = Connect(o);
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
  ASSERT_OK(Send(*conn, {"PING"}).status);
  ASSERT_OK(server_->Command({"CLIENT", "KILL", "TYPE", "normal"}));
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
}

TEST_P(IoPathTest, AnAbandonedRequestDoesNotBreakTheConnection) {
  std::shared_ptr<Connection> conn = Connect();
  ASSERT_NE(conn, nullptr);
  ASSERT_OK(Send(*conn, {"PING"}).status);
  const uint64_t direct_before = conn->direct_calls();
  Stopwatch watch;
  Result slow = SendByPath(*conn, {"DEBUG", "SLEEP", "0.5"},
                           Deadline::After(absl::Milliseconds(50)));
  EXPECT_EQ(slow.status.code(), absl::StatusCode::kDeadlineExceeded)
      << slow.status;
  EXPECT_FALSE(slow.resendable);
  EXPECT_LT(watch.Elapsed(), absl::Milliseconds(450));
  // The late reply is discarded (by the loop, also after a direct call gave
  // up); the next request gets its own.
  Result echo = SendByPath(*conn, {"ECHO", "after"});
  ASSERT_OK(echo.status);
  EXPECT_EQ(echo.replies[0].str(), "after");
  EXPECT_EQ(conn->connects(), 1u);
  EXPECT_EQ(conn->direct_calls(), direct_before + (direct() ? 2 : 0));
}

TEST_P(IoPathTest, ASilentServerIsReplacedAfterTheCommandTimeout) {
  std::shared_ptr<Connection> conn = ConnectedThenPaused();
  ASSERT_NE(conn, nullptr);
  Stopwatch watch;
  Result r = SendByPath(*conn, {"PING"});
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable) << r.status;
  EXPECT_FALSE(r.resendable);  // it may still run
  EXPECT_LT(watch.Elapsed(), absl::Seconds(3));
  ASSERT_OK(server_->Resume());
  Result again = Send(*conn, {"PING"});
  EXPECT_OK(again.status);
  EXPECT_EQ(conn->connects(), 2u);
}

// A direct call sleeps in a blocking recv() bounded by SO_RCVTIMEO; a signal
// ends that recv() early (Linux never restarts it), and each new recv() would
// wait a whole command_timeout again. The stall must still be noticed
// command_timeout after the request, however often signals come.
TEST_P(IoPathTest, ASilentServerIsNoticedWhileSignalsKeepInterruptingTheWait) {
  struct sigaction handler {};
  handler.sa_handler = [](int) {};  // only interrupts
  sigemptyset(&handler.sa_mask);
  handler.sa_flags = SA_RESTART;  // recv() with a timeout returns EINTR anyway
  struct sigaction original {};
  ASSERT_EQ(sigaction(SIGURG, &handler, &original), 0);
  std::shared_ptr<Connection> conn = ConnectedThenPaused();
  ASSERT_NE(conn, nullptr);
  std::atomic<bool> done{false};
  const pthread_t caller = pthread_self();
  std::thread interrupter([&] {
    // Every 50 ms, for at most 20 s (a call that never notices the stall
    // fails the test instead of hanging it).
    for (int i = 0; i < 400 && !done.load(); ++i) {
      pthread_kill(caller, SIGURG);
      absl::SleepFor(absl::Milliseconds(50));  // the signals' pace
    }
  });
  Stopwatch watch;
  Result r = SendByPath(*conn, {"PING"});
  const absl::Duration took = watch.Elapsed();
  done = true;
  interrupter.join();
  ASSERT_OK(server_->Resume());
  sigaction(SIGURG, &original, nullptr);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable) << r.status;
  EXPECT_LT(took, absl::Seconds(5)) << "command_timeout is 300 ms";
}

TEST_P(IoPathTest, ARestartDropsWrittenRequestsAsResendable) {
  std::shared_ptr<Connection> conn = Connect();
  ASSERT_NE(conn, nullptr);
  ASSERT_OK(Send(*conn, {"PING"}).status);
  if (direct()) {
    ASSERT_TRUE(AwaitParked(*conn));
  }
  ASSERT_OK(server_->Restart());
  // The first request finds the old connection closed (resendable), or the
  // closed socket was noticed first and it went out on a new connection.
  Result r = Send(*conn, {"PING"}, Deadline::Never(), direct());
  if (!r.status.ok()) {
    EXPECT_TRUE(r.resendable) << r.status;
    r = Send(*conn, {"PING"});
  }
  EXPECT_OK(r.status);
  EXPECT_EQ(conn->connects(), 2u);
}

TEST_P(IoPathTest, AKilledIdleConnectionIsReplacedBeforeTheNextRequest) {
  std::shared_ptr<Connection> conn = Connect();
  ASSERT_NE(conn, nullptr);
  Result id = Send(*conn, {"CLIENT", "ID"});
  ASSERT_OK(id.status);
  ASSERT_TRUE(AwaitParked(*conn));  // nobody reads it now
  const std::string client_id = absl::StrCat(id.replies[0].integer());
  ASSERT_OK(server_->Command({"CLIENT", "KILL", "ID", client_id}));
  // Redis closed the socket before it answered CLIENT KILL: the next request
  // finds that out before it writes, and goes out on a new connection.
  Result r = Send(*conn, {"ECHO", "fresh"}, Deadline::Never(), direct());
  ASSERT_OK(r.status);
  EXPECT_EQ(r.replies[0].str(), "fresh");
  EXPECT_EQ(conn->connects(), 2u);
}

TEST_P(IoPathTest, CloseFailsWhatIsOutstandingAndLaterCalls) {
  std::shared_ptr<Connection> conn = Connect();
  ASSERT_NE(conn, nullptr);
  ASSERT_OK(Send(*conn, {"PING"}).status);
  if (direct()) {
    ASSERT_TRUE(AwaitParked(*conn));
  }
  const uint64_t direct_before = conn->direct_calls();
  Result slow;
  Stopwatch watch;
  std::thread waiter([&] {
    slow = Send(*conn, {"DEBUG", "SLEEP", "3"}, Deadline::Never(), direct());
  });
  // Closed while the request is out (a direct caller is inside its call).
  EXPECT_TRUE(testing::Eventually([&] { return conn->outstanding() > 0; }));
  EXPECT_EQ(conn->direct_calls(), direct_before + (direct() ? 1 : 0));
  conn->Close();
  waiter.join();
  EXPECT_EQ(slow.status.code(), absl::StatusCode::kFailedPrecondition)
      << slow.status;
  EXPECT_LT(watch.Elapsed(), absl::Milliseconds(2500));  // not the sleep
  EXPECT_EQ(Send(*conn, {"PING"}).status.code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace io
}  // namespace relock
