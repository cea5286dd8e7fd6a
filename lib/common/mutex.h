// relock::Mutex, MutexLock, ReleasableMutexLock and CondVar: the mutex types
// every internal relock class (and the tests) use. Use them instead of
// absl::Mutex & co.; keep using absl::Condition, ABSL_GUARDED_BY and friends.
//
// They are a small implementation over std::mutex and std::condition_variable
// with absl's semantics, not absl::Mutex itself, for two reasons:
//   - Speed. Debian's libabsl (20220623) is a debug build: its Mutex runs
//     deadlock detection on every Lock(), under one process-wide lock (about
//     50 ns uncontended against std::mutex's 10, and a point where all of a
//     server's threads meet). These mutexes sit on every lock call's path.
//   - ThreadSanitizer. That libabsl is not built with -fsanitize=thread, so
//     TSan cannot see the synchronization absl::Mutex performs and reports
//     false races on every ABSL_GUARDED_BY member. libstdc++'s std::mutex and
//     std::condition_variable call pthread_* functions, which TSan intercepts.
//
// The API is the subset of absl's that relock uses, with absl's semantics:
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
// As with absl, Await conditions need no explicit signal: whoever releases
// the mutex (Unlock, or a thread starting to wait) evaluates the conditions
// of the threads blocked in Await and wakes only those whose condition now
// holds. So a condition must only read state the mutex guards, and a Mutex
// nobody awaits costs one std::mutex. Waiters are woken before the mutex is
// released, so a Mutex may be destroyed as soon as a waiter returns.
//
// Not supported: reader locks, LockWhen, absl::kConstInit (use a
// function-local static instead of an ABSL_CONST_INIT global), deadlock
// detection.
//
// This header is internal (lib/); public headers in include/relock/ must not
// include it.

#ifndef RELOCK_LIB_COMMON_MUTEX_H_
#define RELOCK_LIB_COMMON_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"  // absl::Condition; the aliases
#include "absl/time/time.h"

namespace relock {

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
    if (awaiters_ != nullptr) WakeReady();
    mu_.unlock();
  }
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

  // The mutex must be held.
  void Await(const absl::Condition& cond) { AwaitUntil(cond, nullptr); }

  // The mutex must be held.
  bool AwaitWithTimeout(const absl::Condition& cond, absl::Duration timeout) {
    if (IsForever(timeout)) return AwaitUntil(cond, nullptr);
    const auto deadline = DeadlineAfter(timeout);
    return AwaitUntil(cond, &deadline);
  }

 private:
  friend class CondVar;
  using TimePoint = std::chrono::steady_clock::time_point;

  // A thread blocked in Await*, on the stack of its AwaitUntil.
  struct Awaiter {
    explicit Awaiter(const absl::Condition* c) : cond(c) {}
    const absl::Condition* const cond;
    bool woken = false;  // its condition held when last evaluated
    std::condition_variable cv;
    Awaiter* next = nullptr;
  };

  static bool IsForever(absl::Duration d) {
    return d >= absl::Hours(24 * 365 * 100);
  }
  static TimePoint DeadlineAfter(absl::Duration d) {
    if (d < absl::ZeroDuration()) d = absl::ZeroDuration();
    return std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(d);
  }

  // With mu_ held, just before it is released: wakes the awaiters whose
  // condition now holds.
  void WakeReady() {
    for (Awaiter* a = awaiters_; a != nullptr; a = a->next) {
      if (!a->woken && a->cond->Eval()) {
        a->woken = true;
        a->cv.notify_one();
      }
    }
  }

  // With mu_ held; returns with it held, and cond's value.
  bool AwaitUntil(const absl::Condition& cond, const TimePoint* deadline) {
    if (cond.Eval()) return true;
    Awaiter self(&cond);
    self.next = awaiters_;
    awaiters_ = &self;
    std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
    bool result = false;
    while (true) {
      // The caller may have changed state since Lock(): others' conditions
      // are due before the mutex is released.
      WakeReady();
      if (deadline == nullptr) {
        self.cv.wait(lock, [&self] { return self.woken; });
      } else if (!self.cv.wait_until(lock, *deadline,
                                     [&self] { return self.woken; })) {
        result = cond.Eval();
        break;
      }
      if ((result = cond.Eval())) break;
      self.woken = false;  // someone made it false again before we ran
    }
    Awaiter** link = &awaiters_;
    while (*link != &self) link = &(*link)->next;
    *link = self.next;
    lock.release();
    return result;
  }

  std::mutex mu_;
  Awaiter* awaiters_ = nullptr;  // guarded by mu_
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
    if (mu->awaiters_ != nullptr) mu->WakeReady();
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
    if (mu->awaiters_ != nullptr) mu->WakeReady();
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

}  // namespace relock

#endif  // RELOCK_LIB_COMMON_MUTEX_H_
