// The one clock that relock's timing runs on, injectable for tests.
//
// Everything that measures or waits for time below the API takes it from a
// Clock: deadlines (lib/common/deadline.h), the timer thread and its wheel,
// the hold registry and the watchdog, and the lock algorithm's attempt
// timing, validity and retry pauses (LockEnv::clock()). A client runs on
// RealClock(), the steady clock. Tests of logic that is about time run on a
// FakeClock: it moves only when told to (Advance), or when code sleeps on it
// (SleepUntil moves it to the wake-up time at once), so a test of a retry
// schedule or a lease runs in simulated time and finishes in milliseconds.
//
//   clock         Now()                    SleepUntil(t)
//   RealClock()   std::chrono::steady_     sleeps the calling thread
//                 clock::now()             until t
//   FakeClock     starts at the epoch;     moves Now() to t (if later)
//                 moves by Advance(d)      and returns at once
//
// I/O waits (sockets, futexes, condition variables) always wait on the real
// clock: a FakeClock serves code whose I/O is faked too (a fake Backend).

#ifndef RELOCK_LIB_COMMON_CLOCK_H_
#define RELOCK_LIB_COMMON_CLOCK_H_

#include <chrono>

#include "absl/base/thread_annotations.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "lib/common/mutex.h"

namespace relock {

using SteadyClock = std::chrono::steady_clock;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual SteadyClock::time_point Now() const = 0;
  // Returns at `t` (at once if it has passed).
  virtual void SleepUntil(SteadyClock::time_point t) const = 0;
  void SleepFor(absl::Duration d) const {
    if (d <= absl::ZeroDuration()) return;
    SleepUntil(Now() + absl::ToChronoNanoseconds(d));
  }
};

namespace clock_internal {
class SteadyRealClock final : public Clock {
 public:
  SteadyClock::time_point Now() const override { return SteadyClock::now(); }
  void SleepUntil(SteadyClock::time_point t) const override {
    const SteadyClock::time_point now = SteadyClock::now();
    if (t > now) absl::SleepFor(absl::FromChrono(t - now));
  }
};
}  // namespace clock_internal

// The real steady clock; lives for the whole process.
inline const Clock* RealClock() {
  static const clock_internal::SteadyRealClock* const kClock =
      new clock_internal::SteadyRealClock;
  return kClock;
}

// A clock that moves only when told to, or when code sleeps on it.
// Thread-safe.
class FakeClock final : public Clock {
 public:
  SteadyClock::time_point Now() const override {
    MutexLock lock(&mu_);
    return now_;
  }
  // Moves the clock to `t` if that is later (a sleeper's wake-up).
  void SleepUntil(SteadyClock::time_point t) const override {
    MutexLock lock(&mu_);
    if (t > now_) now_ = t;
  }
  void Advance(absl::Duration d) {
    MutexLock lock(&mu_);
    now_ += absl::ToChronoNanoseconds(d);
  }

 private:
  mutable Mutex mu_;
  // Mutable: a sleeper moves the clock through the const Clock interface.
  mutable SteadyClock::time_point now_ ABSL_GUARDED_BY(mu_){};
};

}  // namespace relock

#endif  // RELOCK_LIB_COMMON_CLOCK_H_
