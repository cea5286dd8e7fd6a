// relock::Mutex, MutexLock, ReleasableMutexLock and CondVar: the mutex types
// every internal relock class (and the tests) use. Use them instead of
// absl::Mutex & co.; keep using absl::Condition, ABSL_GUARDED_BY and friends.
//
// In a normal build they ARE the Abseil types (plain aliases, zero cost).
//
// Under ThreadSanitizer they are a small shim over std::mutex and
// std::condition_variable. Why: Debian's libabsl (20220623) is not built
// with -fsanitize=thread, so TSan cannot see the synchronization absl::Mutex
// performs inside the uninstrumented shared library and reports false races
// on every ABSL_GUARDED_BY member. libstdc++'s std::mutex and
// std::condition_variable call pthread_* functions, which TSan intercepts.
//
// The shim implements only the subset of the absl API relock uses, with
// absl's semantics:
//
//   Mutex::Lock / Unlock / TryLock / AssertHeld (AssertHeld checks nothing).
//   Mutex::Await(cond)                 Blocks, with the mutex released, until
//                                      cond is true; returns with it held.
//   Mutex::AwaitWithTimeout(cond, d)   Likewise for at most d; returns
//                                      cond's value on return.
//   CondVar::Wait(mu) / WaitWithTimeout(mu, d) (true = timed out) /
//            Signal / SignalAll        May wake spuriously, as absl's may.
//   MutexLock, ReleasableMutexLock     RAII; neither copyable nor movable.
//
// absl re-evaluates Await conditions whenever the mutex is released, so
// conditions need not be paired with explicit signals. The shim does the
// same: every Unlock (and every Await/CondVar wait, which release the mutex
// too) wakes all threads blocked in Await while any are blocked; they
// re-evaluate their conditions under the mutex. That is a thundering herd,
// acceptable for a test-only build. Waiters are woken before the mutex is
// released, so a Mutex may be destroyed as soon as a waiter returns.
//
// Not supported under the shim: reader locks, LockWhen, absl::kConstInit
// (std::condition_variable has no constexpr constructor: use a function-local
// static instead of an ABSL_CONST_INIT global), deadlock detection.
//
// This header is internal (lib/); public headers in include/relock/ must not
// include it.

#ifndef RELOCK_LIB_COMMON_MUTEX_H_
#define RELOCK_LIB_COMMON_MUTEX_H_

#if defined(__SANITIZE_THREAD__)
#define RELOCK_MUTEX_SHIM 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RELOCK_MUTEX_SHIM 1
#endif
#endif

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"  // absl::Condition; the aliases
#include "absl/time/time.h"

#ifdef RELOCK_MUTEX_SHIM
#include <chrono>
#include <condition_variable>
#include <mutex>
#endif

namespace relock {

#ifndef RELOCK_MUTEX_SHIM

using Mutex = absl::Mutex;
using MutexLock = absl::MutexLock;
using ReleasableMutexLock = absl::ReleasableMutexLock;
using CondVar = absl::CondVar;

#else  // RELOCK_MUTEX_SHIM

class CondVar;

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) {
    return mu_.try_lock();
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    WakeAwaiters();
    mu_.unlock();
  }
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

  // The mutex must be held.
  void Await(const absl::Condition& cond) {
    if (cond.Eval()) return;
    std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
    WakeAwaiters();  // the caller may have changed state since Lock()
    ++awaiters_;
    do {
      changed_.wait(lock);
    } while (!cond.Eval());
    --awaiters_;
    lock.release();
  }

  // The mutex must be held.
  bool AwaitWithTimeout(const absl::Condition& cond, absl::Duration timeout) {
    if (cond.Eval()) return true;
    if (IsForever(timeout)) {
      Await(cond);
      return true;
    }
    const auto deadline = DeadlineAfter(timeout);
    std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
    WakeAwaiters();
    ++awaiters_;
    bool result;
    while (!(result = cond.Eval())) {
      if (changed_.wait_until(lock, deadline) == std::cv_status::timeout) {
        result = cond.Eval();
        break;
      }
    }
    --awaiters_;
    lock.release();
    return result;
  }

 private:
  friend class CondVar;

  static bool IsForever(absl::Duration d) {
    return d >= absl::Hours(24 * 365 * 100);
  }
  static std::chrono::steady_clock::time_point DeadlineAfter(absl::Duration d) {
    if (d < absl::ZeroDuration()) d = absl::ZeroDuration();
    return std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(d);
  }

  // Called with mu_ held, just before it is released.
  void WakeAwaiters() {
    if (awaiters_ > 0) changed_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable changed_;  // signalled when the mutex is released
  int awaiters_ = 0;                 // threads in Await*; guarded by mu_
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
  }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

class ABSL_SCOPED_LOCKABLE ReleasableMutexLock {
 public:
  explicit ReleasableMutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu)
      : mu_(mu) {
    mu_->Lock();
  }
  ~ReleasableMutexLock() ABSL_UNLOCK_FUNCTION() {
    if (mu_ != nullptr) mu_->Unlock();
  }
  void Release() ABSL_UNLOCK_FUNCTION() {
    mu_->Unlock();
    mu_ = nullptr;
  }
  ReleasableMutexLock(const ReleasableMutexLock&) = delete;
  ReleasableMutexLock& operator=(const ReleasableMutexLock&) = delete;

 private:
  Mutex* mu_;
};

class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  // `mu` must be held; it is released while waiting.
  void Wait(Mutex* mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    mu->WakeAwaiters();
    cv_.wait(lock);
    lock.release();
  }
  // Returns true if the timeout expired (absl's convention).
  bool WaitWithTimeout(Mutex* mu, absl::Duration timeout) {
    if (Mutex::IsForever(timeout)) {
      Wait(mu);
      return false;
    }
    const auto deadline = Mutex::DeadlineAfter(timeout);
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    mu->WakeAwaiters();
    const bool timed_out =
        cv_.wait_until(lock, deadline) == std::cv_status::timeout;
    lock.release();
    return timed_out;
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

#endif  // RELOCK_MUTEX_SHIM

}  // namespace relock

#endif  // RELOCK_LIB_COMMON_MUTEX_H_
