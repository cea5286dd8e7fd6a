// relock::Lock with the standard library's lock types, and LockGuard.

#include <chrono>
#include <mutex>
#include <system_error>
#include <thread>
#include <type_traits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "relock/relock.h"
#include "tests/test_util.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace compile_checks {

// Compile-time proof that every std::unique_lock constructor works with
// relock::Lock (as Folly proves for DistributedMutex). Instantiated, not run.
template <class Mutex>
void EveryUniqueLockConstructor(Mutex& m) {
  using namespace std::chrono_literals;
  std::unique_lock<Mutex> a(m);
  std::unique_lock<Mutex> b(m, std::defer_lock);
  std::unique_lock<Mutex> c(m, std::try_to_lock);
  std::unique_lock<Mutex> d(m, std::adopt_lock);
  std::unique_lock<Mutex> e(m, 10ms);
  std::unique_lock<Mutex> f(m, std::chrono::steady_clock::now() + 10ms);
  std::unique_lock<Mutex> g(m, std::chrono::system_clock::now() + 10ms);
  std::unique_lock<Mutex> h(std::move(a));
  std::unique_lock<Mutex> i;
  i = std::move(h);
}
template void EveryUniqueLockConstructor<Lock>(Lock&);

}  // namespace compile_checks

namespace {

using ::relock::testing::MustConnect;
using ::relock::testing::TestLockName;

static_assert(std::is_copy_constructible<Lock>::value, "a handle");
static_assert(std::is_nothrow_move_constructible<Lock>::value, "a handle");
static_assert(noexcept(std::declval<Lock&>().unlock()), "unlock never throws");
static_assert(!std::is_copy_constructible<LockGuard>::value, "a guard");
static_assert(!std::is_move_constructible<LockGuard>::value, "a guard");
static_assert(std::is_base_of<std::system_error, LockError>::value,
              "lock() fails like std::mutex::lock()");

class StdCompatTest : public testing::RedisClientTest {};

TEST_F(StdCompatTest, LockGuardHoldsForItsScope) {
  Lock lock = client_->GetLock(TestLockName());
  {
    std::lock_guard<Lock> guard(lock);
    EXPECT_EQ(*lock.HoldCount(), 1);
  }
  EXPECT_EQ(*lock.IsLocked(), false);
}

TEST_F(StdCompatTest, UniqueLockConstructorsBehave) {
  using namespace std::chrono_literals;
  Lock lock = client_->GetLock(TestLockName());
  {
    std::unique_lock<Lock> deferred(lock, std::defer_lock);
    EXPECT_FALSE(deferred.owns_lock());
    deferred.lock();
    EXPECT_TRUE(deferred.owns_lock());
    std::unique_lock<Lock> nested(lock, std::try_to_lock);
    EXPECT_TRUE(nested.owns_lock()) << "reentrant try_lock";
    EXPECT_EQ(*lock.HoldCount(), 2);
    std::unique_lock<Lock> timed(lock, 50ms);
    EXPECT_TRUE(timed.owns_lock());
    std::unique_lock<Lock> until(lock, std::chrono::steady_clock::now() + 50ms);
    EXPECT_TRUE(until.owns_lock());
    EXPECT_EQ(*lock.HoldCount(), 4);
  }
  EXPECT_EQ(*lock.IsLocked(), false);
  ASSERT_OK(lock.Acquire());
  {
    std::unique_lock<Lock> adopted(lock, std::adopt_lock);
    EXPECT_TRUE(adopted.owns_lock());
  }
  EXPECT_EQ(*lock.IsLocked(), false);
}

TEST_F(StdCompatTest, UniqueLockTryFailsWhileAnotherThreadHolds) {
  using namespace std::chrono_literals;
  Lock lock = client_->GetLock(TestLockName());
  std::lock_guard<Lock> held(lock);
  std::thread other([&] {
    std::unique_lock<Lock> tried(lock, std::try_to_lock);
    EXPECT_FALSE(tried.owns_lock());
    std::unique_lock<Lock> timed(lock, 100ms);
    EXPECT_FALSE(timed.owns_lock());
  });
  other.join();
}

TEST_F(StdCompatTest, ScopedLockAndStdLockTakeSeveralLocks) {
  Lock a = client_->GetLock(TestLockName("a"));
  Lock b = client_->GetLock(TestLockName("b"));
  {
    std::scoped_lock both(a, b);
    EXPECT_EQ(*a.HoldCount(), 1);
    EXPECT_EQ(*b.HoldCount(), 1);
  }
  EXPECT_EQ(*a.IsLocked(), false);
  EXPECT_EQ(*b.IsLocked(), false);
  std::lock(a, b);
  EXPECT_EQ(*a.HoldCount(), 1);
  EXPECT_EQ(*b.HoldCount(), 1);
  a.unlock();
  b.unlock();
  EXPECT_EQ(std::try_lock(a, b), -1);
  a.unlock();
  b.unlock();
  EXPECT_EQ(*a.IsLocked(), false);
}

TEST_F(StdCompatTest, StdLockAvoidsDeadlockBetweenTwoThreads) {
  Lock a = client_->GetLock(TestLockName("a"));
  Lock b = client_->GetLock(TestLockName("b"));
  auto worker = [&](bool ab) {
    for (int i = 0; i < 20; ++i) {
      if (ab) {
        std::scoped_lock both(a, b);
      } else {
        std::scoped_lock both(b, a);
      }
    }
  };
  std::thread t1(worker, true), t2(worker, false);
  t1.join();
  t2.join();
  EXPECT_EQ(*a.IsLocked(), false);
  EXPECT_EQ(*b.IsLocked(), false);
}

TEST_F(StdCompatTest, LockThrowsLockErrorCarryingTheStatus) {
  Lock lock = client_->GetLock(TestLockName());
  client_->Close();
  try {
    lock.lock();
    FAIL() << "lock() on a closed client did not throw";
  } catch (const LockError& e) {
    EXPECT_EQ(e.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(e.code(),
              std::make_error_code(std::errc::operation_not_permitted));
  }
  EXPECT_THROW(lock.try_lock(), std::system_error);
  EXPECT_THROW(client_->GetLock("").lock(), LockError);
}

TEST_F(StdCompatTest, UnlockWithoutLockNeverThrowsAndReportsAnEvent) {
  Lock lock = client_->GetLock(TestLockName());
  lock.unlock();
  LockEvent event;
  ASSERT_TRUE(
      events_.WaitFor(LockEventType::kUnlockFailed, absl::Seconds(1), &event));
  EXPECT_EQ(event.lock_name, lock.name());
  EXPECT_EQ(event.status.code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(StdCompatTest, RelockLockGuardThrowsOrReportsByChoice) {
  Lock lock = client_->GetLock(TestLockName());
  {
    LockGuard guard(lock);
    EXPECT_TRUE(guard.owns_lock());
    EXPECT_EQ(*lock.HoldCount(), 1);
  }
  EXPECT_EQ(*lock.IsLocked(), false);
  absl::Status status;
  {
    LockGuard guard(lock, &status);
    EXPECT_OK(status);
    EXPECT_TRUE(guard.owns_lock());
  }
  EXPECT_EQ(*lock.IsLocked(), false);
  Lock bad = client_->GetLock("");
  {
    LockGuard guard(bad, &status);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_FALSE(guard.owns_lock());
  }
  EXPECT_THROW(LockGuard guard(bad), LockError);
  EXPECT_TRUE(events_.events().empty()) << "no unlock of a guard that failed";
}

}  // namespace
}  // namespace relock
