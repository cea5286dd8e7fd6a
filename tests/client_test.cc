// Client lifecycle: identity, Ping, Close releasing held locks and reporting
// them, lock handles that outlive their client.

#include <memory>
#include <set>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "relock/relock.h"
#include "tests/test_util.h"
#include "tests/testing/notification.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace {

using ::relock::testing::EventLog;
using ::relock::testing::MustConnect;
using ::relock::testing::TestLockName;
using ::testing::HasSubstr;

class ClientTest : public testing::RedisTest {};

TEST_F(ClientTest, EachClientHasItsOwnIdUnlessOneIsGiven) {
  std::unique_ptr<Client> a = MustConnect(redis().url());
  std::unique_ptr<Client> b = MustConnect(redis().url());
  EXPECT_NE(a->id(), b->id());
  std::unique_ptr<Client> fixed =
      MustConnect(redis().url(), [](ClientOptions& o) {
        o.client_id = "0b1111ed-0000-4000-8000-000000000007";
      });
  EXPECT_EQ(fixed->id(), "0b1111ed-0000-4000-8000-000000000007");
  EXPECT_OK(a->Ping());
}

TEST_F(ClientTest, CloseReleasesHeldLocksAndReportsEach) {
  EventLog events;
  std::unique_ptr<Client> client = MustConnect(
      redis().url(),
      [&](ClientOptions& o) { o.on_lock_event = events.Callback(); });
  Lock a = client->GetLock(TestLockName("a"));
  Lock b = client->GetLock(TestLockName("b"));
  ASSERT_OK(a.Acquire());
  ASSERT_OK(a.Acquire());  // nested: released whole
  // Another thread holds b while the client closes (a thread that exits
  // holding a lock gives it up instead: ThreadExitStopsRenewal...).
  testing::Notification b_held, closed;
  std::thread other([&] {
    EXPECT_OK(b.Acquire(absl::Seconds(60)));
    b_held.Notify();
    closed.WaitForNotification();
  });
  b_held.WaitForNotification();
  ASSERT_EQ(redis().Command({"EXISTS", a.name(), b.name()})->integer, 2);

  std::unique_ptr<Client> watcher = MustConnect(redis().url());
  absl::Status waited;
  std::thread waiter([&] {
    waited = watcher->GetLock(a.name()).TryAcquire(absl::Seconds(20));
  });
  EXPECT_OK(testing::WaitUntilWaiting(redis(), testing::LockChannel(a.name()),
                                      *watcher));
  client->Close();
  closed.Notify();
  other.join();
  waiter.join();
  EXPECT_OK(waited) << "close must wake other clients' waiters: " << waited;
  EXPECT_EQ(redis().Command({"EXISTS", b.name()})->integer, 0);
  std::set<std::string> released;
  for (const LockEvent& e : events.events()) {
    EXPECT_EQ(e.type, LockEventType::kReleasedOnClose);
    EXPECT_OK(e.status);
    released.insert(e.lock_name);
  }
  EXPECT_EQ(released, (std::set<std::string>{a.name(), b.name()}));
}

TEST_F(ClientTest, HandlesOutliveTheirClientAndFailCleanly) {
  std::unique_ptr<Client> client = MustConnect(redis().url());
  Lock lock = client->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire());
  client.reset();  // destroy with the lock held
  EXPECT_EQ(redis().Command({"EXISTS", lock.name()})->integer, 0)
      << "destroying the client must release what it held";
  absl::Status s = lock.Acquire();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("closed"));
  EXPECT_EQ(lock.Release().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(lock.IsLocked().status().code(),
            absl::StatusCode::kFailedPrecondition);
  lock.unlock();  // no throw, no crash
}

TEST_F(ClientTest, CloseIsIdempotentAndPingFailsAfterIt) {
  std::unique_ptr<Client> client = MustConnect(redis().url());
  client->Close();
  client->Close();
  EXPECT_EQ(client->Ping().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ClientTest, CloseWhileRedisIsDownReportsTheFailureAndReturns) {
  absl::StatusOr<std::unique_ptr<testing::RedisServer>> server =
      testing::RedisServer::Start();
  ASSERT_OK(server);
  EventLog events;
  std::unique_ptr<Client> client =
      MustConnect((*server)->url(), [&](ClientOptions& o) {
        o.on_lock_event = events.Callback();
        o.connect_timeout = absl::Milliseconds(300);
        o.command_timeout = absl::Milliseconds(300);
      });
  ASSERT_OK(client->GetLock(TestLockName()).Acquire());
  ASSERT_TRUE((*server)->Stop().ok());
  testing::Stopwatch watch;
  client.reset();
  EXPECT_LT(watch.Elapsed(), absl::Seconds(5));
  LockEvent event;
  ASSERT_TRUE(events.WaitFor(LockEventType::kReleasedOnClose, absl::Seconds(1),
                             &event));
  EXPECT_EQ(event.status.code(), absl::StatusCode::kUnavailable);
}

// Close() while a final release of another owner is in flight: Close()
// waits for its answer (up to command_timeout) rather than release that hold
// a second time. The release gets its own answer (OK), and there is no
// released-on-close event for it; before, Close()'s release round found the
// lock gone and reported its lease lost. A lock still held is released and
// reported as ever.
TEST_F(ClientTest, CloseWaitsForAReleaseUnderWayAndLeavesItItsAnswer) {
  EventLog events;
  std::unique_ptr<Client> client =
      MustConnect(redis().url(), [&](ClientOptions& o) {
        o.on_lock_event = events.Callback();
        o.command_timeout = absl::Seconds(20);  // how long Close() may wait
      });
  Lock releasing = client->GetLock(TestLockName() + ":releasing");
  Lock held = client->GetLock(TestLockName() + ":held");
  const Owner owner = Owner::New();
  ASSERT_OK(releasing.Acquire(owner));
  ASSERT_OK(held.Acquire());
  ASSERT_OK(redis().Pause());
  Future<absl::Status> released = releasing.ReleaseAsync(owner);
  std::thread closer([&] { client->Close(); });
  // Time for Close() to reach its release round had it not waited (a
  // sleep: Redis stays paused while it passes).
  absl::SleepFor(absl::Milliseconds(300));
  ASSERT_OK(redis().Resume());
  closer.join();
  ASSERT_TRUE(released.WaitFor(absl::Seconds(60)));
  EXPECT_OK(released.Get());
  EXPECT_EQ(redis().Command({"EXISTS", releasing.name(), held.name()})->integer,
            0);
  ASSERT_EQ(events.events().size(), 1u);
  EXPECT_EQ(events.events()[0].type, LockEventType::kReleasedOnClose);
  EXPECT_EQ(events.events()[0].lock_name, held.name());
  EXPECT_OK(events.events()[0].status);
}

}  // namespace
}  // namespace relock
