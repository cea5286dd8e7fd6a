// relock/backoff.h
//
// Backoff strategies: how long to wait before each retry of a failed
// operation, and when to give up. relock uses them for its own retry loops
// (the Redlock acquire loop, reconnects to Redis); they are public so that
// applications can drive their own retry loops with the same, tested logic.
//
//   `relock::BackoffStrategy`    the interface: NextDelay(retry) -> delay or
//                                "give up".
//   `relock::StopBackoff()` ...  factories for the built-in strategies.
//   `relock::ApplyJitter()`      the jitter formula, for custom strategies.
//   `relock::RetryWithBackoff()` a complete retry loop with an overall
//                                timeout.
//
// The strategies, by the delay before retry i (i = 0 is the first retry,
// made after the first failed try) and when each gives up:
//
//   factory                   | delay before retry i        | gives up
//   --------------------------+-----------------------------+-----------------
//   StopBackoff()             | -                           | at once
//   ZeroBackoff(n)            | 0                           | at i == n
//   ConstantBackoff(d, n, j)  | J(d)                        | at i == n
//   ExponentialBackoff(o)     | J(min(initial * factor^i,   | at i ==
//                             |       maximum))             |   max_retries
//   ListBackoff({d0, ...}, j) | J(d_i)                      | after the list
//   FunctionBackoff(f)        | f(i), negative -> 0         | when f(i) is
//                             |                             |   nullopt or
//                             |                             |   infinite
//
// (initial, factor, maximum, max_retries: the fields of o.)
// n = kUnlimitedRetries (the default) never gives up. J() is jitter: with a
// jitter fraction j in [0, 1] and u drawn uniformly from [0, 1),
//
//   J(x) = x * (1 - j * u),   so   x * (1 - j) <= J(x) <= x.
//
// Jitter only ever shortens a delay: the documented delay (and the
// exponential maximum) stays a hard upper bound, and no delay is negative.
// j = 0 gives exact delays; j = 1 is "full jitter" (uniform in [0, x]), which
// spreads contending clients best. Randomness comes from a thread-local
// absl::BitGen (never rand()).
//
// Ownership and thread-safety: factories return
// `std::shared_ptr<const BackoffStrategy>`. Strategies are immutable after
// construction; `NextDelay()` is const and may be called from any number of
// threads at once, so one strategy can be shared by every retry loop of a
// program (and copied into options structs cheaply). A strategy keeps no
// per-loop state: the caller counts its retries and passes the count in.
//
// Errors: factories validate their parameters and return InvalidArgument,
// naming the parameter, for negative or infinite durations, a factor below 1,
// a jitter outside [0, 1], NaN, a maximum below the initial delay, a negative
// retry limit or an empty function. They never crash on bad input.
//
// Example: a retry loop of one's own.
//
//   relock::ExponentialBackoffOptions options;
//   options.initial = absl::Milliseconds(50);
//   absl::StatusOr<std::shared_ptr<const relock::BackoffStrategy>> backoff =
//       relock::ExponentialBackoff(options);
//   if (!backoff.ok()) return backoff.status();
//   for (int retry = 0;; ++retry) {
//     absl::Status s = Connect();
//     if (s.ok() || !absl::IsUnavailable(s)) return s;
//     absl::optional<absl::Duration> delay = (*backoff)->NextDelay(retry);
//     if (!delay.has_value()) return s;
//     absl::SleepFor(*delay);
//   }
//
// or simply
//
//   absl::Status s = relock::RetryWithBackoff(**backoff, absl::Seconds(5),
//                                             [&] { return Connect(); });

#ifndef RELOCK_BACKOFF_H_
#define RELOCK_BACKOFF_H_

#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"

namespace relock {

// As a `max_retries`: never give up. (A retry count is an int, so no loop can
// exceed it anyway.)
inline constexpr int kUnlimitedRetries = std::numeric_limits<int>::max();

// The interface of every strategy. Implement it for a strategy of your own;
// `FunctionBackoff()` wraps a function instead.
//
// Contract for implementations: `NextDelay()` is const, thread-safe and
// depends only on `retry` (and randomness), never on earlier calls; it
// returns a finite, non-negative delay or nullopt. (`RetryWithBackoff()`
// nevertheless treats a negative delay as zero and an infinite one as "give
// up".)
class BackoffStrategy {
 public:
  BackoffStrategy(const BackoffStrategy&) = delete;
  BackoffStrategy& operator=(const BackoffStrategy&) = delete;
  virtual ~BackoffStrategy();

  // The delay before retry number `retry`: 0 for the first retry (after the
  // first failed try), 1 for the second, and so on; a negative `retry` counts
  // as 0. nullopt means "give up: do not retry again".
  virtual absl::optional<absl::Duration> NextDelay(int retry) const = 0;

  // A one-line description with every parameter, e.g.
  // "ExponentialBackoff(initial=10ms, factor=2, maximum=1s, jitter=0.2,
  // max_retries=unlimited)". The default returns "BackoffStrategy".
  virtual std::string DebugString() const;

 protected:
  BackoffStrategy() = default;
};

// Never retries: NextDelay() is always nullopt. Cannot fail.
std::shared_ptr<const BackoffStrategy> StopBackoff();

// Retries at once (delay zero), for the first `max_retries` retries.
// InvalidArgument if `max_retries` < 0.
ABSL_MUST_USE_RESULT absl::StatusOr<std::shared_ptr<const BackoffStrategy>>
ZeroBackoff(int max_retries = kUnlimitedRetries);

// Waits `delay` (jittered by `jitter`) before each of the first `max_retries`
// retries. InvalidArgument unless `delay` is finite and >= 0, `max_retries`
// >= 0 and `jitter` is in [0, 1].
ABSL_MUST_USE_RESULT absl::StatusOr<std::shared_ptr<const BackoffStrategy>>
ConstantBackoff(absl::Duration delay, int max_retries = kUnlimitedRetries,
                double jitter = 0.0);

struct ExponentialBackoffOptions {
  // The delay before the first retry, before jitter. Finite and >= 0.
  absl::Duration initial = absl::Milliseconds(10);
  // Each retry waits `factor` times longer than the one before, until
  // `maximum`. Finite and >= 1 (1 makes a constant backoff).
  double factor = 2.0;
  // The cap on every delay, before jitter (so also after it). Finite and
  // >= `initial`.
  absl::Duration maximum = absl::Seconds(1);
  // The jitter fraction j in [0, 1] (see the top of this file): each delay x
  // becomes x * (1 - j * u), u uniform in [0, 1).
  double jitter = 0.2;
  // How many retries before giving up; >= 0. 0 means never retry.
  int max_retries = kUnlimitedRetries;
};

// Waits min(initial * factor^retry, maximum), jittered, before each of the
// first `max_retries` retries. Computed in floating point and clamped, so it
// never overflows: retry 1000 or INT_MAX simply waits `maximum`.
// InvalidArgument naming the first invalid field of `options`.
ABSL_MUST_USE_RESULT absl::StatusOr<std::shared_ptr<const BackoffStrategy>>
ExponentialBackoff(const ExponentialBackoffOptions& options = {});

// Waits `delays[i]` (jittered by `jitter`) before retry i and gives up after
// the last one; an empty list never retries (like StopBackoff()).
// InvalidArgument naming the first bad element ("delays[3]") unless every
// delay is finite and >= 0, or if `jitter` is not in [0, 1].
ABSL_MUST_USE_RESULT absl::StatusOr<std::shared_ptr<const BackoffStrategy>>
ListBackoff(std::vector<absl::Duration> delays, double jitter = 0.0);

// A strategy computed by `fn(retry)`: nullopt (or an infinite delay) gives
// up, a negative delay counts as zero. `fn` is called concurrently when the
// strategy is shared between threads, so it must be thread-safe; it must not
// throw. InvalidArgument if `fn` is empty.
ABSL_MUST_USE_RESULT absl::StatusOr<std::shared_ptr<const BackoffStrategy>>
FunctionBackoff(std::function<absl::optional<absl::Duration>(int retry)> fn);

// J(x) from the top of this file: `base * (1 - jitter * u)`, u uniform in
// [0, 1), drawn from a thread-local absl::BitGen. Thread-safe. For use by
// custom strategies. The result is in [0, base] (0 for a negative `base`; an
// infinite `base` is returned unchanged). `jitter` is clamped to [0, 1], NaN
// counting as 0.
absl::Duration ApplyJitter(absl::Duration base, double jitter);

// Runs `attempt` until it succeeds, fails with an error `retryable` rejects,
// `strategy` gives up, or the next retry could not start before
// `overall_timeout` has passed (measured on the steady clock from the call).
// Sleeps `strategy.NextDelay(retry)` between attempts, on the calling thread.
//
//   Returns                 when
//   ------------------------+--------------------------------------------------
//   OK                      an attempt succeeded.
//   that attempt's error    an attempt failed with an error `retryable`
//                           rejects, or the strategy gave up after it.
//   DeadlineExceeded        the next retry would have started at or after the
//                           deadline; the message holds the number of attempts
//                           and the last error. Returned at once: it never
//                           sleeps past the deadline.
//   InvalidArgument         `overall_timeout` is negative or `attempt` is
//                           empty; nothing was attempted.
//
// The first attempt always runs, so `overall_timeout` zero means one attempt;
// absl::InfiniteDuration() means no time limit. An empty `retryable` (the
// default) retries Unavailable only, the status code that means "try the same
// call again". `attempt` and `retryable` run on the calling thread; exceptions
// from them propagate.
ABSL_MUST_USE_RESULT absl::Status RetryWithBackoff(
    const BackoffStrategy& strategy, absl::Duration overall_timeout,
    const std::function<absl::Status()>& attempt,
    const std::function<bool(const absl::Status&)>& retryable = nullptr);

}  // namespace relock

#endif  // RELOCK_BACKOFF_H_
