// One thread that runs timed callbacks from a TimerWheel.
//
// Schedule and Cancel are O(1) and safe from any thread, including from a
// callback. The thread sleeps until the wheel's next wakeup (not a fixed
// tick) and runs due callbacks in deadline order, outside its mutex; a
// callback must be short (hand long work to another thread). Deadlines are on
// the steady clock, rounded up to whole milliseconds so nothing fires early.
//
// Shutdown() drops pending timers, waits for a callback that is running
// (unless called from that callback) and joins the thread; it never
// deadlocks with a running callback because callbacks run without the lock.
//
// The Clock seam (lib/common/clock.h) lets tests drive time by hand
// (FakeClock + Poke()). Code
// built on a TimerThread takes its time from the same clock (clock()), so
// one FakeClock drives it all: the hold registry's lease timers and the
// watchdog's rounds.

#ifndef RELOCK_LIB_TIMER_TIMER_THREAD_H_
#define RELOCK_LIB_TIMER_TIMER_THREAD_H_

#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "lib/common/clock.h"
#include "lib/common/deadline.h"
#include "lib/common/mutex.h"
#include "lib/timer/timer_wheel.h"

namespace relock {
namespace timer {

class TimerThread {
 public:
  // `clock` must outlive this TimerThread.
  explicit TimerThread(const Clock* clock = RealClock());
  ~TimerThread();
  TimerThread(const TimerThread&) = delete;
  TimerThread& operator=(const TimerThread&) = delete;

  // Returns 0 (and drops `callback`) after Shutdown().
  TimerId ScheduleAt(SteadyClock::time_point when, TimerCallback callback);
  TimerId ScheduleAfter(absl::Duration delay, TimerCallback callback);
  // True if the timer was pending and now never runs; false if it already
  // ran, is running, or was cancelled.
  bool Cancel(TimerId id);

  void Shutdown();
  // Makes the thread re-read the clock now (for FakeClock).
  void Poke();

  size_t pending() const;
  // The clock every deadline is on (the constructor's `clock`).
  const Clock* clock() const { return clock_; }

 private:
  void Run();
  Tick TickAt(SteadyClock::time_point t, bool round_up) const;

  const Clock* const clock_;
  const SteadyClock::time_point epoch_;
  mutable Mutex mu_;
  TimerWheel wheel_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool poked_ ABSL_GUARDED_BY(mu_) = false;
  Mutex join_mu_;
  std::thread thread_ ABSL_GUARDED_BY(join_mu_);
};

}  // namespace timer
}  // namespace relock

#endif  // RELOCK_LIB_TIMER_TIMER_THREAD_H_
