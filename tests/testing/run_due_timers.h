// RunDueTimers(): for tests on a FakeClock, a barrier on a
// timer::TimerThread. After the test advances the clock, it returns once the
// timer thread has run every callback due at the new time, and the callbacks
// those schedule due by then (the hold registry chains two: lease end, then
// retention end; the watchdog's round schedules the next).
//
// Each barrier is a timer due at once; it runs in a later batch than the
// barrier before it, and the second one's batch is the first sure to have
// read the clock after the caller advanced it. So the third barrier finds
// that batch run, and the fourth what it scheduled.

#ifndef RELOCK_TESTS_TESTING_RUN_DUE_TIMERS_H_
#define RELOCK_TESTS_TESTING_RUN_DUE_TIMERS_H_

#include <memory>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "lib/common/clock.h"
#include "lib/timer/timer_thread.h"
#include "tests/testing/notification.h"

namespace relock {
namespace testing {

inline void RunDueTimers(timer::TimerThread& timers) {
  for (int i = 0; i < 4; ++i) {
    auto ran = std::make_shared<Notification>();
    timers.ScheduleAt(SteadyClock::time_point(), [ran] { ran->Notify(); });
    // A bound for a hung timer thread, not a timing assertion.
    ASSERT_TRUE(ran->WaitForNotificationWithTimeout(absl::Seconds(60)))
        << "the timer thread ran no barrier";
  }
}

}  // namespace testing
}  // namespace relock

#endif  // RELOCK_TESTS_TESTING_RUN_DUE_TIMERS_H_
