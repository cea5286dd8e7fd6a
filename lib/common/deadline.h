// Deadlines on a Clock (lib/common/clock.h): the steady clock unless a test
// gives a fake one.

#ifndef RELOCK_LIB_COMMON_DEADLINE_H_
#define RELOCK_LIB_COMMON_DEADLINE_H_

#include <algorithm>
#include <chrono>

#include "absl/time/time.h"
#include "lib/common/clock.h"

namespace relock {

// A point on a clock, or "never". Durations of a century or more count as
// never, so no arithmetic overflows. A deadline remembers its clock:
// Expired() and Remaining() read that clock. (time() is the point itself:
// waits on real primitives use it, and are on the real clock.)
class Deadline {
 public:
  static Deadline Never() {
    return Deadline(SteadyClock::time_point::max(), RealClock());
  }
  static Deadline After(absl::Duration d, const Clock* clock = RealClock()) {
    if (d >= absl::Hours(24 * 365 * 100)) return Never();
    if (d < absl::ZeroDuration()) d = absl::ZeroDuration();
    return Deadline(clock->Now() + absl::ToChronoNanoseconds(d), clock);
  }
  // `t` on `clock`.
  static Deadline At(SteadyClock::time_point t,
                     const Clock* clock = RealClock()) {
    return Deadline(t, clock);
  }

  bool is_never() const { return t_ == SteadyClock::time_point::max(); }
  SteadyClock::time_point time() const { return t_; }
  const Clock* clock() const { return clock_; }
  bool Expired() const { return !is_never() && clock_->Now() >= t_; }
  // Time left (InfiniteDuration for never, zero once expired).
  absl::Duration Remaining() const {
    if (is_never()) return absl::InfiniteDuration();
    return std::max(absl::ZeroDuration(), absl::FromChrono(t_ - clock_->Now()));
  }
  friend Deadline Earliest(Deadline a, Deadline b) {
    return a.t_ <= b.t_ ? a : b;
  }
  friend bool operator<(Deadline a, Deadline b) { return a.t_ < b.t_; }

 private:
  Deadline(SteadyClock::time_point t, const Clock* clock)
      : t_(t), clock_(clock) {}
  SteadyClock::time_point t_;
  const Clock* clock_;
};

}  // namespace relock

#endif  // RELOCK_LIB_COMMON_DEADLINE_H_
