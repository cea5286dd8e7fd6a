// relock::Mutex / CondVar (lib/common/mutex.h): the absl semantics the code
// relies on, as relock's std-based implementation provides them.

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
    absl::SleepFor(absl::Milliseconds(20));  // on purpose: Await() waits first
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

TEST(MutexTest, EachAwaiterWakesWhenItsOwnConditionHolds) {
  // Three awaiters on one mutex, each for its own value; the values come in
  // an order that takes awaiters off the middle and the ends of the list.
  Mutex mu;
  int value = 0;          // guarded by mu
  int waiting = 0;        // guarded by mu
  std::vector<int> woke;  // guarded by mu
  std::vector<std::thread> threads;
  for (int want = 1; want <= 3; ++want) {
    threads.emplace_back([&, want] {
      MutexLock lock(&mu);
      ++waiting;
      auto mine = [&value, want] { return value == want; };
      mu.Await(absl::Condition(&mine));
      woke.push_back(want);
    });
  }
  mu.Lock();
  auto all_waiting = [&waiting] { return waiting == 3; };
  mu.Await(absl::Condition(&all_waiting));
  for (int v : {2, 1, 3}) {
    value = v;
    auto acknowledged = [&woke, v] {
      return !woke.empty() && woke.back() == v;
    };
    if (!mu.AwaitWithTimeout(absl::Condition(&acknowledged),
                             absl::Seconds(30))) {
      ADD_FAILURE() << "the awaiter of " << v << " did not wake";
      break;
    }
  }
  EXPECT_EQ(woke, (std::vector<int>{2, 1, 3}));
  mu.Unlock();
  for (std::thread& t : threads) t.join();
}

TEST(MutexTest, AnAwaiterWhoseConditionIsFalseAgainWaitsOn) {
  // The condition holds when the mutex is released but is false again when
  // the awaiter runs: Await returns only with its condition true.
  Mutex mu;
  int value = 0;                       // guarded by mu
  bool waiting = false, done = false;  // guarded by mu
  std::thread t([&] {
    MutexLock lock(&mu);
    waiting = true;
    auto two = [&value] { return value == 2; };
    mu.Await(absl::Condition(&two));
    EXPECT_EQ(value, 2);
    done = true;
  });
  {
    MutexLock lock(&mu);
    mu.Await(absl::Condition(&waiting));
  }
  for (int i = 0; i < 200; ++i) {
    mu.Lock();
    value = 2;  // true at this unlock: the awaiter is woken...
    mu.Unlock();
    mu.Lock();
    value = i % 2;  // ...and false again, unless it ran in between
    const bool finished = done;
    mu.Unlock();
    if (finished) break;
  }
  {
    MutexLock lock(&mu);
    if (!done) value = 2;
    EXPECT_TRUE(mu.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(30)));
  }
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
    absl::SleepFor(absl::Milliseconds(20));  // on purpose: Wait() waits first
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
