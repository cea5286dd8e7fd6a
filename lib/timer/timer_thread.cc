#include "lib/timer/timer_thread.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace relock {
namespace timer {
namespace {

// Longest single sleep: bounds the effect of wall-clock jumps on absl's timed
// waits, and how long a FakeClock-driven thread waits without a Poke().
constexpr absl::Duration kMaxSleep = absl::Seconds(1);

}  // namespace

TimerThread::TimerThread(const Clock* clock)
    : clock_(clock), epoch_(clock->Now()), wheel_(0) {
  MutexLock lock(&join_mu_);
  thread_ = std::thread([this] { Run(); });
}

TimerThread::~TimerThread() { Shutdown(); }

Tick TimerThread::TickAt(SteadyClock::time_point t, bool round_up) const {
  if (t <= epoch_) return 0;
  const auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(t - epoch_).count();
  constexpr int64_t kNsPerTick = int64_t{1000} * 1000;
  return round_up ? (ns + kNsPerTick - 1) / kNsPerTick : ns / kNsPerTick;
}

TimerId TimerThread::ScheduleAt(SteadyClock::time_point when,
                                TimerCallback callback) {
  const Tick tick = TickAt(when, /*round_up=*/true);
  MutexLock lock(&mu_);
  if (stop_) return 0;
  const absl::optional<Tick> before = wheel_.NextWakeup();
  TimerId id = wheel_.Schedule(tick, std::move(callback));
  // Wake the thread only when this timer is now the earliest.
  if (!before.has_value() || tick < *before) poked_ = true;
  return id;
}

TimerId TimerThread::ScheduleAfter(absl::Duration delay,
                                   TimerCallback callback) {
  delay = std::clamp(delay, absl::ZeroDuration(), absl::Hours(24 * 365 * 10));
  return ScheduleAt(clock_->Now() + absl::ToChronoNanoseconds(delay),
                    std::move(callback));
}

bool TimerThread::Cancel(TimerId id) {
  MutexLock lock(&mu_);
  return wheel_.Cancel(id);
}

void TimerThread::Poke() {
  MutexLock lock(&mu_);
  poked_ = true;
}

size_t TimerThread::pending() const {
  MutexLock lock(&mu_);
  return wheel_.size();
}

void TimerThread::Shutdown() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  MutexLock lock(&join_mu_);
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) {
    thread_.join();
  }
}

void TimerThread::Run() {
  std::vector<TimerCallback> due;
  bool stopping = false;
  while (!stopping) {
    {
      MutexLock lock(&mu_);
      while (true) {
        if (stop_) {
          // Pending timers are dropped; their callbacks are destroyed below,
          // outside the mutex.
          wheel_.Clear(&due);
          stopping = true;
          break;
        }
        wheel_.Advance(TickAt(clock_->Now(), /*round_up=*/false), &due);
        if (!due.empty()) break;
        absl::Duration sleep = kMaxSleep;
        if (absl::optional<Tick> next = wheel_.NextWakeup()) {
          const SteadyClock::time_point at =
              epoch_ + std::chrono::milliseconds(*next);
          sleep = std::min(sleep, absl::FromChrono(at - clock_->Now()) +
                                      absl::Microseconds(50));
        }
        poked_ = false;
        if (sleep > absl::ZeroDuration()) {
          auto woken = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
            return poked_ || stop_;
          };
          mu_.AwaitWithTimeout(absl::Condition(&woken), sleep);
        }
      }
    }
    if (!stopping) {
      for (TimerCallback& callback : due) callback();
    }
    due.clear();
  }
}

}  // namespace timer
}  // namespace relock
