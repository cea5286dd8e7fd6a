// The asynchronous calls (Lock::AcquireAsync, TryAcquireAsync, ReleaseAsync)
// on a real redis-server: completion on the loop thread, a waiter woken by
// the unlock notification, a thousand concurrent acquires from a handful of
// threads, owner tokens across threads, Close() cancelling pending waits,
// and the misuses that must fail instead of deadlocking.

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "relock/relock.h"
#include "tests/test_util.h"
#include "tests/testing/notification.h"

namespace relock {
namespace {

using ::relock::testing::MustConnect;
using ::relock::testing::Stopwatch;
using ::relock::testing::TestLockName;

constexpr absl::Duration kLong = absl::Seconds(30);  // a result that must come

class AsyncTest : public testing::RedisClientTest {
 protected:
  // Waits for `f` (generously) and returns its value.
  static absl::Status Await(Future<absl::Status> f) {
    if (!f.WaitFor(kLong))
      return absl::DeadlineExceededError("test: no result");
    return f.Get();
  }
};

TEST_F(AsyncTest, AFreeLockIsAcquiredAndReleased) {
  Lock lock = client_->GetLock(TestLockName());
  const Owner task = Owner::New();
  ASSERT_TRUE(Await(lock.AcquireAsync(task)).ok());
  EXPECT_EQ(*lock.HoldCount(task), 1);
  ASSERT_TRUE(Await(lock.AcquireAsync(task)).ok());  // re-entry
  EXPECT_EQ(*lock.HoldCount(task), 2);
  ASSERT_TRUE(Await(lock.ReleaseAsync(task)).ok());
  ASSERT_TRUE(Await(lock.ReleaseAsync(task)).ok());
  EXPECT_EQ(*lock.IsLocked(), false);
  EXPECT_EQ(Await(lock.ReleaseAsync(task)).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(AsyncTest, CallbacksRunOnTheClientsLoopThreadNotTheCaller) {
  Lock lock = client_->GetLock(TestLockName());
  const Owner task = Owner::New();
  std::atomic<bool> on_caller{true};
  testing::Notification done;
  const std::thread::id caller = std::this_thread::get_id();
  lock.AcquireAsync(task, [&](absl::Status s) {
    EXPECT_TRUE(s.ok()) << s;
    on_caller = std::this_thread::get_id() == caller;
    done.Notify();
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(kLong));
  EXPECT_FALSE(on_caller.load());
  ASSERT_TRUE(lock.Release(task).ok());
}

TEST_F(AsyncTest, AnAsyncWaiterIsWokenByTheUnlockNotification) {
  Lock lock = client_->GetLock(TestLockName());
  // The holder's explicit lease is a minute: only the unlock message can
  // end the wait in time.
  ASSERT_TRUE(lock.Acquire(absl::Seconds(60)).ok());
  const Owner task = Owner::New();
  Future<absl::Status> waiting = lock.TryAcquireAsync(task, absl::Seconds(50));
  EXPECT_FALSE(waiting.WaitFor(absl::Milliseconds(200)));  // held
  Stopwatch watch;
  ASSERT_TRUE(lock.Release().ok());
  ASSERT_TRUE(Await(waiting).ok());
  EXPECT_LT(watch.Elapsed(), absl::Seconds(20));
  EXPECT_EQ(*lock.HoldCount(task), 1);
  ASSERT_TRUE(Await(lock.ReleaseAsync(task)).ok());
}

TEST_F(AsyncTest, AWaitThatRunsOutIsDeadlineExceeded) {
  Lock lock = client_->GetLock(TestLockName());
  ASSERT_TRUE(lock.Acquire(absl::Seconds(60)).ok());
  Stopwatch watch;
  absl::Status s =
      Await(lock.TryAcquireAsync(Owner::New(), absl::Milliseconds(300)));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_GE(watch.Elapsed(), absl::Milliseconds(290));
  ASSERT_TRUE(lock.Release().ok());
}

// A thousand acquires in flight at once on one client, started from four
// threads, on ten locks: every one completes, and no two holders of a lock
// overlap. A holder keeps its lock across a round trip (it re-enters), then
// releases twice, all from its callbacks: while it holds, no other task's
// acquire of that lock may complete.
TEST_F(AsyncTest, AThousandConcurrentAcquiresFromAHandfulOfThreads) {
  constexpr int kLocks = 10;
  constexpr int kTasks = 1000;
  constexpr int kThreads = 4;
  std::vector<Lock> locks;
  for (int i = 0; i < kLocks; ++i) {
    locks.push_back(client_->GetLock(TestLockName(absl::StrCat(i))));
  }
  // Per lock, the task holding it (0: none). Callbacks all run on the
  // loop thread; atomics keep the test thread's final reads simple.
  std::vector<std::atomic<uint64_t>> holder(kLocks);
  std::atomic<int> overlaps{0}, failures{0}, finished{0};
  testing::Notification all_finished;
  auto finish = [&] {
    if (finished.fetch_add(1) + 1 == kTasks) all_finished.Notify();
  };
  auto start = [&](int t) {
    Lock& lock = locks[t % kLocks];
    std::atomic<uint64_t>& held_by = holder[t % kLocks];
    const Owner task = Owner::New();
    lock.AcquireAsync(task, [&, task](absl::Status s) {
      if (!s.ok()) {
        failures.fetch_add(1);
        return finish();
      }
      if (held_by.exchange(task.number()) != 0) overlaps.fetch_add(1);
      lock.AcquireAsync(task, [&, task](absl::Status again) {
        if (!again.ok()) failures.fetch_add(1);
        if (held_by.exchange(0) != task.number()) overlaps.fetch_add(1);
        lock.ReleaseAsync(task, [&, task](absl::Status r1) {
          if (!r1.ok()) failures.fetch_add(1);
          lock.ReleaseAsync(task, [&](absl::Status r2) {
            if (!r2.ok()) failures.fetch_add(1);
            finish();
          });
        });
      });
    });
  };
  std::vector<std::thread> threads;
  for (int k = 0; k < kThreads; ++k) {
    threads.emplace_back([&, k] {
      for (int t = k; t < kTasks; t += kThreads) start(t);
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_TRUE(all_finished.WaitForNotificationWithTimeout(absl::Seconds(120)))
      << finished.load() << " of " << kTasks << " done";
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(failures.load(), 0);
  for (Lock& lock : locks) EXPECT_EQ(*lock.IsLocked(), false);
}

TEST_F(AsyncTest, ATokenAcquiredAsynchronouslyIsReleasedOnAnyThread) {
  Lock lock = client_->GetLock(TestLockName());
  const Owner task = Owner::New();
  ASSERT_TRUE(Await(lock.AcquireAsync(task)).ok());
  std::thread([&] { EXPECT_TRUE(lock.Release(task).ok()); }).join();
  EXPECT_EQ(*lock.IsLocked(), false);
}

TEST_F(AsyncTest, CloseCancelsPendingWaits) {
  std::unique_ptr<Client> other = MustConnect(redis().url());
  ASSERT_NE(other, nullptr);
  Lock held = other->GetLock(TestLockName());
  ASSERT_TRUE(held.Acquire(absl::Seconds(60)).ok());
  Lock lock = client_->GetLock(held.name());
  std::vector<Future<absl::Status>> waits;
  for (int i = 0; i < 5; ++i) waits.push_back(lock.AcquireAsync(Owner::New()));
  EXPECT_FALSE(waits[0].WaitFor(absl::Milliseconds(200)));
  Stopwatch watch;
  client_->Close();
  for (Future<absl::Status>& w : waits) {
    absl::Status s = Await(w);
    EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  }
  EXPECT_LT(watch.Elapsed(), absl::Seconds(10));
  ASSERT_TRUE(held.Release().ok());
}

TEST_F(AsyncTest, AThreadOwnerIsRefusedAtOnce) {
  Lock lock = client_->GetLock(TestLockName());
  Future<absl::Status> f = lock.AcquireAsync(Owner::ThisThread());
  ASSERT_TRUE(f.Ready());  // on the calling thread, before returning
  EXPECT_EQ(f.Get().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lock.AcquireAsync(Owner()).Get().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lock.TryAcquireAsync(Owner::New(), absl::Seconds(-1)).Get().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*lock.IsLocked(), false);
}

TEST_F(AsyncTest, ABlockingCallInACallbackFailsInsteadOfDeadlocking) {
  Lock lock = client_->GetLock(TestLockName());
  const Owner task = Owner::New();
  Future<absl::Status> nested;
  testing::Notification done;
  absl::Status inner;
  lock.AcquireAsync(task, [&](absl::Status s) {
    EXPECT_TRUE(s.ok()) << s;
    inner = lock.Release(task);  // blocking, on the loop thread
    done.Notify();
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(kLong));
  EXPECT_EQ(inner.code(), absl::StatusCode::kFailedPrecondition) << inner;
  ASSERT_TRUE(lock.Release(task).ok());
}

}  // namespace
}  // namespace relock
