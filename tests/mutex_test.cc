// relock::Mutex / CondVar (lib/common/mutex.h): the absl semantics the code
// relies on. In a normal build these test absl itself; under ThreadSanitizer
// they test the std-based shim that replaces it.

#include "lib/common/mutex.h"

#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/testing/notification.h"

namespace relock {
namespace {

TEST(MutexTest, AwaitWakesWhenAnotherThreadMakesTheConditionTrue) {
  Mutex mu;
  bool ready = false;  // guarded by mu
  std::thread t([&] {
    absl::SleepFor(absl::Milliseconds(20));
    MutexLock lock(&mu);
    ready = true;  // no explicit signal: releasing the mutex is enough
  });
  {
    MutexLock lock(&mu);
    mu.Await(absl::Condition(&ready));
    EXPECT_TRUE(ready);
  }
  t.join();
}

TEST(MutexTest, StateChangedBeforeAwaitWakesOtherAwaiters) {
  // A changes `a` and then awaits `b` without unlocking in between; B, which
  // awaits `a`, must still be woken (absl re-evaluates conditions whenever
  // the mutex is released, including by Await).
  Mutex mu;
  bool a = false, b = false, b_waiting = false;  // guarded by mu
  std::thread t([&] {
    MutexLock lock(&mu);
    b_waiting = true;
    mu.Await(absl::Condition(&a));
    b = true;
  });
  mu.Lock();
  mu.Await(absl::Condition(&b_waiting));
  a = true;
  EXPECT_TRUE(mu.AwaitWithTimeout(absl::Condition(&b), absl::Seconds(30)));
  mu.Unlock();
  t.join();
}

TEST(MutexTest, AwaitWithTimeoutReturnsTheConditionOnTimeout) {
  Mutex mu;
  bool never = false;
  MutexLock lock(&mu);
  const absl::Time start = absl::Now();
  EXPECT_FALSE(
      mu.AwaitWithTimeout(absl::Condition(&never), absl::Milliseconds(50)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(45));
  EXPECT_FALSE(
      mu.AwaitWithTimeout(absl::Condition(&never), absl::ZeroDuration()));
  EXPECT_FALSE(mu.AwaitWithTimeout(absl::Condition(&never), -absl::Seconds(1)));
  bool always = true;
  EXPECT_TRUE(
      mu.AwaitWithTimeout(absl::Condition(&always), absl::InfiniteDuration()));
}

TEST(MutexTest, CondVarSignalWakesAWaiter) {
  Mutex mu;
  CondVar cv;
  int value = 0;  // guarded by mu
  std::thread t([&] {
    absl::SleepFor(absl::Milliseconds(20));
    MutexLock lock(&mu);
    value = 1;
    cv.Signal();
  });
  {
    MutexLock lock(&mu);
    while (value == 0) cv.Wait(&mu);
  }
  t.join();
}

TEST(MutexTest, CondVarWaitWithTimeoutReportsTimeout) {
  Mutex mu;
  CondVar cv;
  MutexLock lock(&mu);
  EXPECT_TRUE(cv.WaitWithTimeout(&mu, absl::Milliseconds(20)));
}

TEST(MutexTest, CondVarWaitReleasesTheMutexForAwaiters) {
  Mutex mu;
  CondVar cv;
  bool flag = false, done = false;  // guarded by mu
  std::thread t([&] {
    MutexLock lock(&mu);
    flag = true;
    while (!done) cv.Wait(&mu);  // releasing here must wake the Await below
  });
  {
    MutexLock lock(&mu);
    mu.Await(absl::Condition(&flag));
    done = true;
    cv.SignalAll();
  }
  t.join();
}

TEST(MutexTest, ReleasableMutexLockReleasesEarly) {
  Mutex mu;
  ReleasableMutexLock lock(&mu);
  lock.Release();
  if (mu.TryLock()) {
    mu.Unlock();
  } else {
    ADD_FAILURE() << "the mutex is still held after Release()";
  }
}

TEST(MutexTest, ManyThreadsCountUnderTheMutex) {
  Mutex mu;
  int count = 0;  // guarded by mu
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      for (int j = 0; j < 1000; ++j) {
        MutexLock lock(&mu);
        ++count;
      }
    });
  }
  {
    MutexLock lock(&mu);
    auto all = [&] { return count == 4000; };
    mu.Await(absl::Condition(&all));
  }
  for (auto& t : threads) t.join();
}

TEST(NotificationTest, WaitersSeeTheNotification) {
  auto* n = new testing::Notification;
  EXPECT_FALSE(n->HasBeenNotified());
  EXPECT_FALSE(n->WaitForNotificationWithTimeout(absl::Milliseconds(10)));
  std::thread t([n] { n->Notify(); });
  n->WaitForNotification();
  EXPECT_TRUE(n->HasBeenNotified());
  t.join();
  delete n;
}

}  // namespace
}  // namespace relock
