// Deadlines on the steady clock.

#ifndef RELOCK_LIB_COMMON_DEADLINE_H_
#define RELOCK_LIB_COMMON_DEADLINE_H_

#include <algorithm>
#include <chrono>

#include "absl/time/time.h"

namespace relock {

using SteadyClock = std::chrono::steady_clock;

// A point on the steady clock, or "never". Durations of a century or more
// count as never, so no arithmetic overflows.
class Deadline {
 public:
  static Deadline Never() { return Deadline(SteadyClock::time_point::max()); }
  static Deadline After(absl::Duration d) {
    if (d >= absl::Hours(24 * 365 * 100)) return Never();
    if (d < absl::ZeroDuration()) d = absl::ZeroDuration();
    return Deadline(SteadyClock::now() + absl::ToChronoNanoseconds(d));
  }

  bool is_never() const { return t_ == SteadyClock::time_point::max(); }
  SteadyClock::time_point time() const { return t_; }
  bool Expired() const { return !is_never() && SteadyClock::now() >= t_; }
  // Time left (InfiniteDuration for never, zero once expired).
  absl::Duration Remaining() const {
    if (is_never()) return absl::InfiniteDuration();
    return std::max(absl::ZeroDuration(),
                    absl::FromChrono(t_ - SteadyClock::now()));
  }
  friend Deadline Earliest(Deadline a, Deadline b) {
    return a.t_ <= b.t_ ? a : b;
  }
  friend bool operator<(Deadline a, Deadline b) { return a.t_ < b.t_; }

 private:
  explicit Deadline(SteadyClock::time_point t) : t_(t) {}
  SteadyClock::time_point t_;
};

}  // namespace relock

#endif  // RELOCK_LIB_COMMON_DEADLINE_H_
