// The reentrant lock's contract on a real redis-server: reentrancy, owners,
// leases, errors.

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "relock/relock.h"
#include "tests/test_util.h"
#include "tests/testing/notification.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace {

using ::relock::testing::MustConnect;
using ::relock::testing::TestLockName;
using ::testing::HasSubstr;

class ReentrantLockTest : public testing::RedisClientTest {};

TEST_F(ReentrantLockTest, AcquireThenReleaseFreesTheKey) {
  Lock lock = client_->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire());
  EXPECT_EQ(*lock.IsLocked(), true);
  EXPECT_EQ(*lock.IsHeldByCurrentThread(), true);
  ASSERT_OK(lock.Release());
  EXPECT_EQ(*lock.IsLocked(), false);
  EXPECT_EQ(redis().Command({"EXISTS", lock.name()})->integer, 0);
}

TEST_F(ReentrantLockTest, NestedLockIncrementsHoldCount) {
  Lock lock = client_->GetLock(TestLockName());
  constexpr int kDepth = 25;
  for (int i = 1; i <= kDepth; ++i) {
    ASSERT_OK(lock.Acquire());
    EXPECT_EQ(*lock.HoldCount(), i);
  }
  for (int i = kDepth; i >= 1; --i) {
    EXPECT_EQ(*lock.IsLocked(), true) << "freed early at depth " << i;
    ASSERT_OK(lock.Release());
    EXPECT_EQ(*lock.HoldCount(), i - 1);
  }
  EXPECT_EQ(*lock.IsLocked(), false);
}

TEST_F(ReentrantLockTest, NestedCallChainDoesNotDeadlock) {
  // PlaceOrder() holds order:42 and calls Reserve(), which locks it again.
  Lock order = client_->GetLock(TestLockName("order:42"));
  int reserved = 0;
  auto reserve = [&] {
    std::lock_guard<Lock> guard(order);
    ++reserved;
    EXPECT_EQ(*order.HoldCount(), 2);
  };
  auto place_order = [&] {
    std::lock_guard<Lock> guard(order);
    reserve();
    EXPECT_EQ(*order.HoldCount(), 1);
  };
  place_order();
  EXPECT_EQ(reserved, 1);
  EXPECT_EQ(*order.IsLocked(), false);
}

TEST_F(ReentrantLockTest, AnotherThreadIsAnotherOwner) {
  Lock lock = client_->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire());
  absl::Status other_try, other_release;
  absl::StatusOr<bool> other_held;
  std::thread other([&] {
    other_try = lock.TryAcquire(absl::ZeroDuration());
    other_release = lock.Release();
    other_held = lock.IsHeldByCurrentThread();
  });
  other.join();
  EXPECT_EQ(other_try.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(other_release.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(*other_held, false);
  EXPECT_EQ(*lock.HoldCount(), 1) << "a non-owner release must not count down";
  ASSERT_OK(lock.Release());
}

TEST_F(ReentrantLockTest, TwoClientsInOneProcessAreDifferentOwners) {
  std::unique_ptr<Client> second = MustConnect(redis().url());
  Lock mine = client_->GetLock(TestLockName());
  Lock theirs = second->GetLock(TestLockName());
  ASSERT_OK(mine.Acquire());
  EXPECT_EQ(theirs.TryAcquire(absl::ZeroDuration()).code(),
            absl::StatusCode::kDeadlineExceeded);
  ASSERT_OK(mine.Release());
  EXPECT_OK(theirs.TryAcquire(absl::ZeroDuration()));
  EXPECT_OK(theirs.Release());
}

TEST_F(ReentrantLockTest, ReleaseByNonOwnerIsFailedPreconditionNamingTheLock) {
  Lock lock = client_->GetLock(TestLockName("never-held"));
  absl::Status s = lock.Release();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("never-held"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("not held by this thread"));
}

TEST_F(ReentrantLockTest, MoreReleasesThanAcquiresFailsAndLeavesItFree) {
  Lock lock = client_->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire());
  ASSERT_OK(lock.Acquire());
  EXPECT_OK(lock.Release());
  EXPECT_OK(lock.Release());
  EXPECT_EQ(lock.Release().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(*lock.IsLocked(), false);
}

TEST_F(ReentrantLockTest, DefaultLeaseIsTheWatchdogTimeout) {
  Lock lock = client_->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire());
  absl::StatusOr<absl::Duration> left = lock.RemainingLease();
  ASSERT_OK(left);
  EXPECT_GT(*left, absl::Seconds(25));
  EXPECT_LE(*left, absl::Seconds(30));
  ASSERT_OK(lock.Release());
  EXPECT_EQ(lock.RemainingLease().status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ReentrantLockTest, ExplicitLeaseExpiresAndReleaseSaysLeaseLost) {
  Lock lock = client_->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire(absl::Milliseconds(300)));
  ASSERT_OK(testing::WaitForKeyGone(redis(), lock.name()))
      << "lease did not expire";
  EXPECT_EQ(*lock.IsLocked(), false);
  absl::Status s = lock.Release();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("lease lost"));
  // Afterwards it is an ordinary non-owner release.
  EXPECT_EQ(lock.Release().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ReentrantLockTest, NestedReleaseKeepsAnExplicitLease) {
  Lock lock = client_->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire(absl::Seconds(10)));
  ASSERT_OK(lock.Acquire(absl::Seconds(10)));
  ASSERT_OK(lock.Release());
  absl::StatusOr<absl::Duration> left = lock.RemainingLease();
  ASSERT_OK(left);
  EXPECT_LE(*left, absl::Seconds(10)) << "release stretched an explicit lease";
  EXPECT_GT(*left, absl::Seconds(5));
  ASSERT_OK(lock.Release());
}

// Regression: a re-entry whose key had vanished (FLUSHALL, a restart without
// persistence, a lease that ran out) made the key anew, first without a TTL
// (a lock that never expires), later with count 1, which hid the loss: the
// caller's inner release then freed the lock while it believed it held the
// outer level. Now the re-entry finds the hold lost (Aborted), writes
// nothing, and the hold is forgotten.
TEST_F(ReentrantLockTest, ReentryAfterTheKeyVanishedIsALostHold) {
  std::unique_ptr<Client> client = MustConnect(
      redis().url(),
      [this](ClientOptions& o) { o.on_lock_event = events_.Callback(); });
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  Lock lock = client->GetLock(name);
  ASSERT_OK(lock.Acquire(absl::Seconds(30)));
  ASSERT_OK(redis().FlushAll());
  absl::Status s = lock.Acquire(absl::Seconds(30));  // a re-entry by count
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_THAT(s.message(), HasSubstr("NOTHELD"));
  EXPECT_EQ(redis().Command({"EXISTS", name})->integer, 0);
  // Reported as any loss is, and the outer level's release says so.
  LockEvent lost;
  ASSERT_TRUE(
      events_.WaitFor(LockEventType::kLockLost, absl::Seconds(20), &lost));
  EXPECT_EQ(lost.lock_name, name);
  EXPECT_EQ(lock.Release().code(), absl::StatusCode::kAborted);
  // Another owner may take it meanwhile; this one's next acquire is fresh.
  ASSERT_OK(lock.Acquire(absl::Seconds(30)));
  EXPECT_EQ(lock.HoldCount().value_or(-1), 1);
  ASSERT_OK(lock.Release());
  EXPECT_EQ(redis().Command({"EXISTS", name})->integer, 0);
}

// The same for a fenced lock, whose re-entries always go to Redis: a
// re-entry after another owner took and freed the lock gets no new token.
TEST_F(ReentrantLockTest, FencedReentryAfterTheHoldWasLostGetsNoToken) {
  const std::string name = TestLockName();
  FencedLock lock = client_->GetFencedLock(name);
  absl::StatusOr<int64_t> first = lock.LockAndGetToken();
  ASSERT_OK(first);
  ASSERT_OK(redis().Command({"DEL", name}));
  std::unique_ptr<Client> other = MustConnect(redis().url());
  ASSERT_NE(other, nullptr);
  FencedLock theirs = other->GetFencedLock(name);
  absl::StatusOr<int64_t> second = theirs.LockAndGetToken();
  ASSERT_OK(second);
  EXPECT_GT(*second, *first);
  ASSERT_OK(theirs.Release());
  absl::StatusOr<int64_t> again = lock.LockAndGetToken();  // a re-entry
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAborted)
      << again.status();
  EXPECT_EQ(redis().Command({"EXISTS", name})->integer, 0);
  EXPECT_EQ(lock.Release().code(), absl::StatusCode::kAborted);
}

// A thread's re-entries of its watchdog hold are counted in the client:
// the nested chain of depth 5 (5 acquires, 5 releases) costs one acquire
// and one release round trip, and HoldCount() still says how deep it is.
TEST_F(ReentrantLockTest, NestedReentryCostsNoRoundTrips) {
  Lock lock = client_->GetLock(TestLockName());
  ASSERT_OK(redis().Command({"CONFIG", "RESETSTAT"}));
  for (int depth = 1; depth <= 5; ++depth) ASSERT_OK(lock.Acquire());
  EXPECT_EQ(testing::Calls(redis(), "evalsha"), 1);
  EXPECT_EQ(redis().Command({"HVALS", lock.name()})->elements[0].str, "1");
  EXPECT_EQ(lock.HoldCount().value_or(-1), 5);  // a query: one more script
  const int64_t before = testing::Calls(redis(), "evalsha");
  for (int depth = 5; depth >= 2; --depth) {
    ASSERT_OK(lock.Release());
    EXPECT_EQ(redis().Command({"EXISTS", lock.name()})->integer, 1);
  }
  EXPECT_EQ(testing::Calls(redis(), "evalsha"), before);
  ASSERT_OK(lock.Release());  // the outermost: freed in Redis
  EXPECT_EQ(redis().Command({"EXISTS", lock.name()})->integer, 0);
  EXPECT_EQ(testing::Calls(redis(), "evalsha"), before + 1);
  EXPECT_EQ(lock.Release().code(), absl::StatusCode::kFailedPrecondition);
}

// A hold re-entered locally is still reported lost when its key goes: the
// release of the local re-entry says Aborted, not OK. (An acquire then takes
// the lock anew, lock.h's "Lease-lost" row: the loss was reported.)
TEST_F(ReentrantLockTest, ALostHoldIsLostForItsLocalReentriesToo) {
  std::unique_ptr<Client> client =
      MustConnect(redis().url(), [this](ClientOptions& o) {
        o.lock_watchdog_timeout = absl::Milliseconds(900);
        o.on_lock_event = events_.Callback();
      });
  ASSERT_NE(client, nullptr);
  Lock lock = client->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire());
  ASSERT_OK(lock.Acquire());  // local
  ASSERT_OK(redis().Command({"DEL", lock.name()}));
  LockEvent lost;
  ASSERT_TRUE(
      events_.WaitFor(LockEventType::kLockLost, absl::Seconds(20), &lost));
  EXPECT_EQ(lost.lock_name, lock.name());
  EXPECT_EQ(lock.Release().code(), absl::StatusCode::kAborted);
  // A new acquisition starts afresh, in Redis.
  ASSERT_OK(lock.Acquire());
  EXPECT_EQ(lock.HoldCount().value_or(-1), 1);
  EXPECT_OK(lock.Release());
}

// An inner release that finds the hold gone in Redis (a re-entry with an
// explicit lease counts there) reports the loss as the watchdog would: a
// kLockLost event, the OnLost callback, the metric; the outer level's
// release says Aborted too. (It forgot the hold: no report, and the outer
// release said "not held".)
TEST_F(ReentrantLockTest, AnInnerReleaseThatFindsTheHoldGoneReportsTheLoss) {
  std::unique_ptr<Client> client = MustConnect(
      redis().url(),
      [this](ClientOptions& o) { o.on_lock_event = events_.Callback(); });
  ASSERT_NE(client, nullptr);
  Lock lock = client->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire());
  testing::Notification told;
  ASSERT_OK(lock.OnLost([&](const LockEvent&) { told.Notify(); }));
  ASSERT_OK(lock.Acquire(absl::Minutes(1)));  // counted in Redis
  ASSERT_OK(redis().Command({"DEL", lock.name()}));
  EXPECT_EQ(lock.Release().code(), absl::StatusCode::kAborted);  // inner
  LockEvent lost;
  ASSERT_TRUE(
      events_.WaitFor(LockEventType::kLockLost, absl::Seconds(20), &lost));
  EXPECT_EQ(lost.lock_name, lock.name());
  EXPECT_THAT(std::string(lost.status.message()), HasSubstr("inner level"));
  EXPECT_TRUE(told.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_EQ(client->Metrics().locks_lost, 1u);
  EXPECT_EQ(lock.Release().code(), absl::StatusCode::kAborted);  // outer
}

// An explicit owner re-enters its watchdog hold locally too; a re-entry
// with an explicit lease goes to Redis as before.
TEST_F(ReentrantLockTest, ExplicitLeasesReenterInRedisOwnersLocally) {
  Lock lock = client_->GetLock(TestLockName());
  const Owner owner = Owner::New();
  ASSERT_OK(lock.Acquire(owner));
  ASSERT_OK(lock.Acquire(owner));
  EXPECT_EQ(redis().Command({"HVALS", lock.name()})->elements[0].str, "1");
  EXPECT_EQ(lock.HoldCount(owner).value_or(-1), 2);
  ASSERT_OK(lock.Acquire(owner, absl::Seconds(5)));
  EXPECT_EQ(redis().Command({"HVALS", lock.name()})->elements[0].str, "2");
  EXPECT_EQ(lock.HoldCount(owner).value_or(-1), 3);
  for (int i = 0; i < 3; ++i) ASSERT_OK(lock.Release(owner));
  EXPECT_EQ(redis().Command({"EXISTS", lock.name()})->integer, 0);
}

TEST_F(ReentrantLockTest, ForceReleaseFreesAnotherOwnersLock) {
  Lock lock = client_->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire());
  absl::StatusOr<bool> freed;
  std::thread admin([&] { freed = lock.ForceRelease(); });
  admin.join();
  ASSERT_OK(freed);
  EXPECT_TRUE(*freed);
  EXPECT_EQ(*lock.IsLocked(), false);
  EXPECT_EQ(*lock.ForceRelease(), false);
  EXPECT_EQ(lock.Release().code(), absl::StatusCode::kAborted);
}

TEST_F(ReentrantLockTest, MutualExclusionAcrossThreadsSharingOneHandle) {
  Lock lock = client_->GetLock(TestLockName());
  constexpr int kThreads = 8;
  constexpr int kIterations = 60;
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  int counter = 0;  // deliberately unsynchronized except by the lock
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kIterations; ++i) {
        std::lock_guard<Lock> guard(lock);
        if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
        int read = counter;
        std::this_thread::yield();
        counter = read + 1;
        inside.fetch_sub(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(counter, kThreads * kIterations);
  EXPECT_EQ(*lock.IsLocked(), false);
}

}  // namespace
}  // namespace relock
