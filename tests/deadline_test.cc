// Every blocking call returns within its deadline plus a small margin while
// Redis is paused (SIGSTOP), busy (DEBUG SLEEP) or down: lock acquisition with
// and without a wait, release, queries and client creation. (Renewal under a
// paused Redis: watchdog_test.cc, RedisPausedPastTheLeaseIsReportedLost.)

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "relock/relock.h"
#include "tests/test_util.h"
#include "tests/testing/eventually.h"
#include "tests/testing/raw_connection.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace {

using ::relock::testing::Eventually;
using ::relock::testing::LockChannel;
using ::relock::testing::MustConnect;
using ::relock::testing::RawConnection;
using ::relock::testing::RawConnectionOptions;
using ::relock::testing::RedisServer;
using ::relock::testing::Stopwatch;
using ::relock::testing::Subscribers;
using ::relock::testing::TestLockName;

// A loaded 2-core CI machine can be late by this much.
constexpr absl::Duration kMargin = absl::Milliseconds(700);
constexpr absl::Duration kCommandTimeout = absl::Seconds(1);
constexpr absl::Duration kConnectTimeout = absl::Milliseconds(500);

class DeadlineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<RedisServer>> server = RedisServer::Start();
    ASSERT_OK(server);
    server_ = *std::move(server);
    client_ = MustConnect(server_->url(), [](ClientOptions& o) {
      o.command_timeout = kCommandTimeout;
      o.connect_timeout = kConnectTimeout;
    });
    ASSERT_NE(client_, nullptr);
    holder_ = MustConnect(server_->url());
    ASSERT_NE(holder_, nullptr);
  }
  void TearDown() override {
    if (server_ != nullptr && server_->running()) {
      EXPECT_OK(server_->Resume());
    }
  }
  std::unique_ptr<RedisServer> server_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<Client> holder_;
};

// Runs `call` and returns how long it took.
template <class F>
absl::Duration Timed(F call) {
  Stopwatch watch;
  call();
  return watch.Elapsed();
}

TEST_F(DeadlineTest, TryAcquireKeepsItsWaitWhileRedisIsPaused) {
  Lock lock = client_->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire());  // warm the pool
  ASSERT_OK(lock.Release());
  ASSERT_OK(server_->Pause());
  for (absl::Duration wait : {absl::ZeroDuration(), absl::Milliseconds(300)}) {
    absl::Status s;
    absl::Duration took = Timed([&] { s = lock.TryAcquire(wait); });
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    // One attempt may take 100 ms even with a zero wait.
    EXPECT_LT(took, std::max(wait, absl::Milliseconds(100)) + kMargin)
        << "wait " << wait << ": " << s;
  }
}

TEST_F(DeadlineTest, UnboundedCallsFailWithinTheCommandTimeoutWhilePaused) {
  Lock lock = client_->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire());
  ASSERT_OK(server_->Pause());
  absl::Status s;
  EXPECT_LT(Timed([&] { s = lock.Release(); }), kCommandTimeout + kMargin);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  std::thread other([&] {
    absl::Status acquired;
    EXPECT_LT(Timed([&] { acquired = lock.Acquire(); }),
              kCommandTimeout + kMargin);
    EXPECT_EQ(acquired.code(), absl::StatusCode::kUnavailable) << acquired;
  });
  other.join();
  absl::StatusOr<bool> locked;
  EXPECT_LT(Timed([&] { locked = lock.IsLocked(); }),
            kCommandTimeout + kMargin);
  EXPECT_EQ(locked.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(Timed([&] { s = client_->Ping(); }), kCommandTimeout + kMargin);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
}

TEST_F(DeadlineTest, WaitingForAHeldLockKeepsItsWaitWhenRedisPausesMidWait) {
  ASSERT_OK(holder_->GetLock(TestLockName()).Acquire());
  Lock lock = client_->GetLock(TestLockName());
  absl::Status s;
  std::atomic<bool> returned{false};
  std::thread pauser([&] {
    // Mid-wait: once the waiter listens for the unlock message (or, on a
    // machine too slow for that, once its wait is over).
    EXPECT_TRUE(Eventually([&] {
      return returned.load() ||
             Subscribers(*server_, LockChannel(lock.name())).value_or(0) == 1;
    }));
    EXPECT_OK(server_->Pause());
  });
  absl::Duration took =
      Timed([&] { s = lock.TryAcquire(absl::Milliseconds(600)); });
  returned = true;
  pauser.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_LT(took, absl::Milliseconds(600) + kMargin);
}

TEST_F(DeadlineTest, TryAcquireKeepsItsWaitWhileRedisIsBusy) {
  Lock lock = client_->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire());
  ASSERT_OK(lock.Release());
  std::thread sleeper([&] {
    // Blocks the whole server for 2 s.
    EXPECT_OK(server_->Command({"DEBUG", "SLEEP", "2"}));
  });
  // Once the server sleeps, a PING goes unanswered (250 ms: far longer than
  // a round trip on a loaded machine, far shorter than the sleep).
  RawConnectionOptions probe;
  probe.command_timeout = absl::Milliseconds(250);
  EXPECT_TRUE(Eventually([&] {
    absl::StatusOr<RawConnection> c =
        RawConnection::Connect(server_->port(), probe);
    return c.ok() && !c->Command({"PING"}).ok();
  })) << "the server never went busy";
  absl::Status s;
  absl::Duration took =
      Timed([&] { s = lock.TryAcquire(absl::Milliseconds(300)); });
  sleeper.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_LT(took, absl::Milliseconds(300) + kMargin);
  // Afterwards everything works again (the timed-out connection was replaced).
  EXPECT_OK(lock.TryAcquire(absl::Seconds(5)));
  EXPECT_OK(lock.Release());
}

TEST_F(DeadlineTest, ConnectToAPausedServerFailsWithinItsTimeouts) {
  ASSERT_OK(server_->Pause());
  ClientOptions options;
  options.url = server_->url();
  options.connect_timeout = kConnectTimeout;
  options.command_timeout = kCommandTimeout;
  absl::StatusOr<std::unique_ptr<Client>> client;
  absl::Duration took = Timed([&] { client = Client::Connect(options); });
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable)
      << client.status();
  EXPECT_LT(took, kConnectTimeout + kCommandTimeout + kMargin);
}

TEST_F(DeadlineTest, CallsFailFastWhenRedisIsDown) {
  Lock lock = client_->GetLock(TestLockName());
  ASSERT_OK(server_->Stop());
  absl::Status s;
  EXPECT_LT(Timed([&] { s = lock.TryAcquire(absl::Seconds(10)); }),
            kConnectTimeout + kMargin);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_LT(Timed([&] { s = lock.Acquire(); }), kConnectTimeout + kMargin);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
}

}  // namespace
}  // namespace relock
