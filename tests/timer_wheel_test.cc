// Pure logic: the hierarchical timer wheel, checked against a simple model,
// and the timer thread driven by a fake clock.

#include "lib/timer/timer_wheel.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "lib/timer/timer_thread.h"
#include "tests/testing/notification.h"

namespace relock {
namespace timer {
namespace {

void RunAll(std::vector<TimerCallback>& due) {
  for (auto& cb : due) cb();
  due.clear();
}

TEST(TimerWheelTest, FiresAtTheDeadlineNotBefore) {
  TimerWheel wheel(0);
  std::vector<int> fired;
  wheel.Schedule(10, [&] { fired.push_back(10); });
  wheel.Schedule(3, [&] { fired.push_back(3); });
  std::vector<TimerCallback> due;
  wheel.Advance(2, &due);
  EXPECT_TRUE(due.empty());
  EXPECT_EQ(wheel.NextWakeup(), Tick{3});
  wheel.Advance(9, &due);
  RunAll(due);
  EXPECT_EQ(fired, std::vector<int>{3});
  EXPECT_EQ(wheel.NextWakeup(), Tick{10});
  wheel.Advance(10, &due);
  RunAll(due);
  EXPECT_EQ(fired, (std::vector<int>{3, 10}));
  EXPECT_EQ(wheel.size(), 0u);
  EXPECT_FALSE(wheel.NextWakeup().has_value());
}

TEST(TimerWheelTest, PastDeadlinesFireOnTheNextAdvance) {
  TimerWheel wheel(1000);
  int fired = 0;
  wheel.Schedule(5, [&] { ++fired; });
  EXPECT_EQ(wheel.NextWakeup(), Tick{1000});
  std::vector<TimerCallback> due;
  wheel.Advance(1000, &due);
  RunAll(due);
  EXPECT_EQ(fired, 1);
}

TEST(TimerWheelTest, CancelIsFinal) {
  TimerWheel wheel(0);
  int fired = 0;
  TimerId a = wheel.Schedule(100000, [&] { ++fired; });  // level 2
  TimerId b = wheel.Schedule(7, [&] { ++fired; });
  EXPECT_TRUE(wheel.Cancel(a));
  EXPECT_FALSE(wheel.Cancel(a));
  std::vector<TimerCallback> due;
  wheel.Advance(200000, &due);
  RunAll(due);
  EXPECT_EQ(fired, 1);
  EXPECT_FALSE(wheel.Cancel(b)) << "already fired";
  EXPECT_FALSE(wheel.Cancel(12345));
}

TEST(TimerWheelTest, NextWakeupNeverOvershootsAndSkipsEmptyStretches) {
  TimerWheel wheel(0);
  wheel.Schedule(70000, [] {});  // level 2: one cascade point, then exact
  absl::optional<Tick> next = wheel.NextWakeup();
  ASSERT_TRUE(next.has_value());
  EXPECT_LE(*next, 70000);
  EXPECT_GE(*next, 65536) << "woke for an empty stretch";
  std::vector<TimerCallback> due;
  int wakeups = 0;
  while (wheel.size() > 0) {
    wheel.Advance(*wheel.NextWakeup(), &due);
    ++wakeups;
  }
  EXPECT_EQ(due.size(), 1u);
  EXPECT_LE(wakeups, 3) << "the thread would tick instead of sleeping";
  EXPECT_EQ(wheel.now(), 70000);
}

// Random schedules, cancels and advances across every level and beyond the
// top level, against a model that fires everything with deadline <= now.
TEST(TimerWheelTest, MatchesAModelUnderRandomOperations) {
  std::mt19937_64 rng(20261121);
  for (int round = 0; round < 20; ++round) {
    const Tick start = static_cast<Tick>(rng() % (Tick{1} << 40));
    TimerWheel wheel(start);
    std::map<TimerId, Tick> model;  // pending id -> deadline
    Tick now = start;
    for (int op = 0; op < 3000; ++op) {
      const int kind = static_cast<int>(rng() % 10);
      if (kind < 5) {
        static const Tick kSpans[] = {10, 300, 70000, Tick{1} << 25,
                                      Tick{1} << 34};
        const Tick span = kSpans[rng() % 5];
        const Tick deadline =
            now - 5 + static_cast<Tick>(rng() % static_cast<uint64_t>(span));
        model[wheel.Schedule(deadline, [] {})] = deadline;
      } else if (kind < 7 && !model.empty()) {
        auto it = model.begin();
        std::advance(it, rng() % model.size());
        EXPECT_TRUE(wheel.Cancel(it->first));
        model.erase(it);
      } else {
        static const Tick kSteps[] = {1,    17,    255,          256,
                                      5000, 70000, Tick{1} << 24};
        now += kSteps[rng() % 7];
        absl::optional<Tick> wake = wheel.NextWakeup();
        Tick earliest = std::numeric_limits<Tick>::max();
        for (auto& [id, d] : model) earliest = std::min(earliest, d);
        if (!model.empty()) {
          ASSERT_TRUE(wake.has_value());
          EXPECT_LE(*wake, std::max(earliest, wheel.now()))
              << "NextWakeup() later than the earliest deadline";
        } else {
          EXPECT_FALSE(wake.has_value());
        }
        std::vector<TimerCallback> due;
        wheel.Advance(now, &due);
        size_t expected = 0;
        for (auto it = model.begin(); it != model.end();) {
          if (it->second <= now) {
            ++expected;
            it = model.erase(it);
          } else {
            ++it;
          }
        }
        EXPECT_EQ(due.size(), expected) << "round " << round << " op " << op;
        EXPECT_EQ(wheel.size(), model.size());
      }
    }
  }
}

TEST(TimerWheelTest, FiresInDeadlineOrderAcrossLevels) {
  TimerWheel wheel(123);
  std::vector<Tick> order;
  std::mt19937 rng(7);
  std::vector<Tick> deadlines;
  for (int i = 0; i < 500; ++i) {
    Tick d = 124 + static_cast<Tick>(rng() % 2000000);
    deadlines.push_back(d);
    wheel.Schedule(d, [&order, d] { order.push_back(d); });
  }
  std::vector<TimerCallback> due;
  wheel.Advance(3000000, &due);
  for (auto& cb : due) cb();
  std::sort(deadlines.begin(), deadlines.end());
  EXPECT_EQ(order, deadlines);
}

TEST(TimerThreadTest, FakeClockDrivesTheThread) {
  FakeClock clock;
  TimerThread thread(&clock);
  relock::testing::Notification fired;
  thread.ScheduleAfter(absl::Seconds(10), [&] { fired.Notify(); });
  thread.Poke();
  EXPECT_FALSE(fired.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
  clock.Advance(absl::Milliseconds(9999));
  thread.Poke();
  EXPECT_FALSE(fired.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
  clock.Advance(absl::Milliseconds(1));
  thread.Poke();
  EXPECT_TRUE(fired.WaitForNotificationWithTimeout(absl::Seconds(10)));
}

TEST(TimerThreadTest, RealClockFiresCancelsAndReschedulesFromCallbacks) {
  TimerThread thread;
  std::atomic<int> fired{0};
  relock::testing::Notification chained;
  TimerId cancelled = thread.ScheduleAfter(absl::Milliseconds(30),
                                           [&] { fired.fetch_add(100); });
  thread.ScheduleAfter(absl::Milliseconds(20), [&] {
    fired.fetch_add(1);
    // Schedule and cancel from inside a callback.
    thread.ScheduleAfter(absl::Milliseconds(10), [&] { chained.Notify(); });
  });
  EXPECT_TRUE(thread.Cancel(cancelled));
  EXPECT_TRUE(chained.WaitForNotificationWithTimeout(absl::Seconds(10)));
  // Time passes on purpose: past the cancelled timer's time, which must not
  // fire.
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(fired.load(), 1);
  EXPECT_EQ(thread.pending(), 0u);
}

TEST(TimerThreadTest, ShutdownWaitsForARunningCallbackWithoutDeadlock) {
  TimerThread thread;
  relock::testing::Notification started;
  std::atomic<bool> finished{false};
  thread.ScheduleAfter(absl::ZeroDuration(), [&] {
    started.Notify();
    absl::SleepFor(absl::Milliseconds(200));  // still running at Shutdown()
    finished = true;
  });
  int dropped_ran = 0;
  thread.ScheduleAfter(absl::Hours(1), [&] { ++dropped_ran; });
  ASSERT_TRUE(started.WaitForNotificationWithTimeout(absl::Seconds(10)));
  thread.Shutdown();
  EXPECT_TRUE(finished.load());
  EXPECT_EQ(dropped_ran, 0);
  EXPECT_EQ(thread.ScheduleAfter(absl::Milliseconds(1), [] {}), TimerId{0});
}

TEST(TimerThreadTest, ShutdownFromInsideACallbackReturns) {
  auto thread = std::make_unique<TimerThread>();
  relock::testing::Notification done;
  thread->ScheduleAfter(absl::Milliseconds(1), [&] {
    thread->Shutdown();  // must not join itself
    done.Notify();
  });
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  thread.reset();
}

}  // namespace
}  // namespace timer
}  // namespace relock
