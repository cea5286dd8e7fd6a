// Pure logic: the backoff strategies of relock/backoff.h and
// RetryWithBackoff. No Redis.

#include "relock/backoff.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace {

using ::testing::HasSubstr;
using ::testing::Optional;

using Strategy = std::shared_ptr<const BackoffStrategy>;

// The strategy, or a failed expectation (and StopBackoff()) if it is an error.
Strategy Must(absl::StatusOr<Strategy> strategy) {
  EXPECT_OK(strategy);
  return strategy.ok() ? *std::move(strategy) : StopBackoff();
}

std::vector<absl::optional<absl::Duration>> Delays(const BackoffStrategy& s,
                                                   int n) {
  std::vector<absl::optional<absl::Duration>> out;
  for (int i = 0; i < n; ++i) out.push_back(s.NextDelay(i));
  return out;
}

absl::Duration Ms(int64_t n) { return absl::Milliseconds(n); }

// --- The strategies ---------------------------------------------------------

TEST(BackoffTest, StopNeverRetries) {
  Strategy s = StopBackoff();
  EXPECT_EQ(s->NextDelay(0), absl::nullopt);
  EXPECT_EQ(s->NextDelay(1), absl::nullopt);
  EXPECT_EQ(s->NextDelay(INT_MAX), absl::nullopt);
  EXPECT_EQ(s->DebugString(), "StopBackoff()");
}

TEST(BackoffTest, ZeroRetriesAtOnceUntilTheLimit) {
  Strategy s = Must(ZeroBackoff(3));
  EXPECT_EQ(Delays(*s, 5),
            (std::vector<absl::optional<absl::Duration>>{
                absl::ZeroDuration(), absl::ZeroDuration(),
                absl::ZeroDuration(), absl::nullopt, absl::nullopt}));
  EXPECT_EQ(s->DebugString(), "ZeroBackoff(max_retries=3)");
}

TEST(BackoffTest, ZeroIsUnlimitedByDefault) {
  Strategy s = Must(ZeroBackoff());
  EXPECT_THAT(s->NextDelay(0), Optional(absl::ZeroDuration()));
  EXPECT_THAT(s->NextDelay(1000000), Optional(absl::ZeroDuration()));
  EXPECT_THAT(s->NextDelay(INT_MAX), Optional(absl::ZeroDuration()));
  EXPECT_EQ(s->DebugString(), "ZeroBackoff(max_retries=unlimited)");
}

TEST(BackoffTest, ZeroMaxRetriesNeverRetries) {
  EXPECT_EQ(Must(ZeroBackoff(0))->NextDelay(0), absl::nullopt);
  EXPECT_EQ(Must(ConstantBackoff(Ms(5), 0))->NextDelay(0), absl::nullopt);
}

TEST(BackoffTest, ConstantWaitsTheSameDelay) {
  Strategy s = Must(ConstantBackoff(Ms(25), 4));
  EXPECT_EQ(Delays(*s, 6),
            (std::vector<absl::optional<absl::Duration>>{
                Ms(25), Ms(25), Ms(25), Ms(25), absl::nullopt, absl::nullopt}));
  EXPECT_EQ(s->DebugString(),
            "ConstantBackoff(delay=25ms, max_retries=4, jitter=0)");
  EXPECT_THAT(Must(ConstantBackoff(Ms(25)))->NextDelay(INT_MAX),
              Optional(Ms(25)));
}

ExponentialBackoffOptions NoJitter() {
  ExponentialBackoffOptions o;
  o.jitter = 0;
  return o;
}

TEST(BackoffTest, ExponentialDoublesUntilTheCap) {
  Strategy s = Must(ExponentialBackoff(NoJitter()));  // 10ms * 2^i, cap 1s
  EXPECT_EQ(Delays(*s, 10),
            (std::vector<absl::optional<absl::Duration>>{
                Ms(10), Ms(20), Ms(40), Ms(80), Ms(160), Ms(320), Ms(640),
                Ms(1000), Ms(1000), Ms(1000)}));
  EXPECT_EQ(s->DebugString(),
            "ExponentialBackoff(initial=10ms, factor=2, maximum=1s, jitter=0, "
            "max_retries=unlimited)");
}

TEST(BackoffTest, ExponentialWithFractionalFactor) {
  ExponentialBackoffOptions o = NoJitter();
  o.initial = Ms(100);
  o.factor = 1.5;
  o.maximum = Ms(400);
  Strategy s = Must(ExponentialBackoff(o));
  EXPECT_EQ(Delays(*s, 5), (std::vector<absl::optional<absl::Duration>>{
                               Ms(100), Ms(150), Ms(225),
                               absl::Microseconds(337500), Ms(400)}));
}

TEST(BackoffTest, ExponentialFactorOneIsConstant) {
  ExponentialBackoffOptions o = NoJitter();
  o.factor = 1.0;
  Strategy s = Must(ExponentialBackoff(o));
  EXPECT_THAT(s->NextDelay(0), Optional(Ms(10)));
  EXPECT_THAT(s->NextDelay(INT_MAX), Optional(Ms(10)));
}

TEST(BackoffTest, ExponentialHonoursMaxRetries) {
  ExponentialBackoffOptions o = NoJitter();
  o.max_retries = 2;
  Strategy s = Must(ExponentialBackoff(o));
  EXPECT_EQ(Delays(*s, 4), (std::vector<absl::optional<absl::Duration>>{
                               Ms(10), Ms(20), absl::nullopt, absl::nullopt}));
}

TEST(BackoffTest, ExponentialDoesNotOverflowOnHugeRetries) {
  Strategy s = Must(ExponentialBackoff(NoJitter()));
  EXPECT_THAT(s->NextDelay(63), Optional(absl::Seconds(1)));
  EXPECT_THAT(s->NextDelay(64), Optional(absl::Seconds(1)));
  EXPECT_THAT(s->NextDelay(1000), Optional(absl::Seconds(1)));
  EXPECT_THAT(s->NextDelay(INT_MAX), Optional(absl::Seconds(1)));

  // A huge cap and factor: the product overflows any integer and double.
  ExponentialBackoffOptions o = NoJitter();
  o.initial = absl::Hours(1000);
  o.factor = 1e300;
  o.maximum = absl::Hours(24 * 365 * 1000);
  Strategy big = Must(ExponentialBackoff(o));
  EXPECT_THAT(big->NextDelay(0), Optional(absl::Hours(1000)));
  EXPECT_THAT(big->NextDelay(1), Optional(o.maximum));
  EXPECT_THAT(big->NextDelay(INT_MAX), Optional(o.maximum));

  // With jitter the cap is still the upper bound.
  o.jitter = 1.0;
  Strategy jittered = Must(ExponentialBackoff(o));
  for (int retry : {1000, INT_MAX}) {
    absl::optional<absl::Duration> d = jittered->NextDelay(retry);
    ASSERT_TRUE(d.has_value());
    EXPECT_GE(*d, absl::ZeroDuration());
    EXPECT_LE(*d, o.maximum);
  }
}

TEST(BackoffTest, ExponentialFromZeroStaysZero) {
  ExponentialBackoffOptions o;
  o.initial = absl::ZeroDuration();
  Strategy s = Must(ExponentialBackoff(o));
  EXPECT_THAT(s->NextDelay(0), Optional(absl::ZeroDuration()));
  EXPECT_THAT(s->NextDelay(INT_MAX), Optional(absl::ZeroDuration()));
}

TEST(BackoffTest, NegativeRetryCountsAsZero) {
  EXPECT_THAT(Must(ExponentialBackoff(NoJitter()))->NextDelay(-5),
              Optional(Ms(10)));
  EXPECT_THAT(Must(ListBackoff({Ms(7), Ms(8)}))->NextDelay(INT_MIN),
              Optional(Ms(7)));
  EXPECT_THAT(Must(ZeroBackoff(1))->NextDelay(-1),
              Optional(absl::ZeroDuration()));
}

TEST(BackoffTest, ListWaitsEachDelayThenGivesUp) {
  Strategy s = Must(ListBackoff({Ms(5), Ms(50), absl::ZeroDuration(), Ms(2)}));
  EXPECT_EQ(Delays(*s, 6), (std::vector<absl::optional<absl::Duration>>{
                               Ms(5), Ms(50), absl::ZeroDuration(), Ms(2),
                               absl::nullopt, absl::nullopt}));
  EXPECT_EQ(s->NextDelay(INT_MAX), absl::nullopt);
  EXPECT_EQ(s->DebugString(), "ListBackoff({5ms, 50ms, 0, 2ms}, jitter=0)");
}

TEST(BackoffTest, EmptyListNeverRetries) {
  Strategy s = Must(ListBackoff({}));
  EXPECT_EQ(s->NextDelay(0), absl::nullopt);
}

// --- Jitter -----------------------------------------------------------------

// Draws many delays for retry `retry` and checks each is in [low, high].
void ExpectJitterWithin(const BackoffStrategy& s, int retry, absl::Duration low,
                        absl::Duration high) {
  constexpr int kSamples = 5000;
  absl::Duration min = absl::InfiniteDuration();
  absl::Duration max = -absl::InfiniteDuration();
  for (int i = 0; i < kSamples; ++i) {
    absl::optional<absl::Duration> d = s.NextDelay(retry);
    ASSERT_TRUE(d.has_value());
    min = std::min(min, *d);
    max = std::max(max, *d);
  }
  SCOPED_TRACE(s.DebugString());
  EXPECT_GE(min, absl::ZeroDuration());
  EXPECT_GE(min, low);
  EXPECT_LE(max, high);
  EXPECT_LT(min, max) << "all samples equal";
  // 5000 uniform samples cover most of the range.
  const absl::Duration width = high - low;
  EXPECT_LT(min, low + width / 10);
  EXPECT_GT(max, high - width / 10);
}

TEST(BackoffTest, ConstantJitterStaysWithinBounds) {
  // J(100ms) with j = 0.3 lies in (70ms, 100ms].
  ExpectJitterWithin(*Must(ConstantBackoff(Ms(100), kUnlimitedRetries, 0.3)), 0,
                     Ms(70), Ms(100));
}

TEST(BackoffTest, ExponentialJitterStaysWithinBounds) {
  // Defaults: jitter 0.2. Retry 2 is 40ms before jitter, the cap 1s.
  Strategy s = Must(ExponentialBackoff());
  ExpectJitterWithin(*s, 2, Ms(32), Ms(40));
  ExpectJitterWithin(*s, 1000, Ms(800), Ms(1000));
}

TEST(BackoffTest, FullJitterStaysWithinBounds) {
  ExponentialBackoffOptions o;
  o.jitter = 1.0;
  ExpectJitterWithin(*Must(ExponentialBackoff(o)), 3, absl::ZeroDuration(),
                     Ms(80));
  ExpectJitterWithin(*Must(ListBackoff({Ms(1), Ms(10)}, 1.0)), 1,
                     absl::ZeroDuration(), Ms(10));
}

TEST(BackoffTest, ApplyJitterEdgeCases) {
  EXPECT_EQ(ApplyJitter(Ms(10), 0.0), Ms(10));
  EXPECT_EQ(ApplyJitter(Ms(10), std::nan("")), Ms(10));
  EXPECT_EQ(ApplyJitter(Ms(10), -1.0), Ms(10));
  EXPECT_EQ(ApplyJitter(absl::ZeroDuration(), 1.0), absl::ZeroDuration());
  EXPECT_EQ(ApplyJitter(-Ms(10), 0.5), absl::ZeroDuration());
  EXPECT_EQ(ApplyJitter(absl::InfiniteDuration(), 0.5),
            absl::InfiniteDuration());
  for (int i = 0; i < 1000; ++i) {
    absl::Duration d = ApplyJitter(absl::Nanoseconds(1), 5.0);  // clamped to 1
    EXPECT_GE(d, absl::ZeroDuration());
    EXPECT_LE(d, absl::Nanoseconds(1));
  }
}

// --- Thread-safety ----------------------------------------------------------

TEST(BackoffTest, ConcurrentNextDelayIsThreadSafe) {
  ExponentialBackoffOptions o;
  o.jitter = 1.0;
  const std::vector<Strategy> strategies = {
      Must(ExponentialBackoff(o)),
      Must(ConstantBackoff(Ms(3), kUnlimitedRetries, 0.5)),
      Must(ListBackoff({Ms(1), Ms(2), Ms(3)}, 0.5)), Must(ZeroBackoff(10))};
  constexpr int kThreads = 8;
  constexpr int kCalls = 20000;
  std::atomic<int> bad{0};
  std::vector<absl::Duration> firsts(kThreads);  // one slot per thread
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        const Strategy& s = strategies[(i + t) % strategies.size()];
        const int retry = i % 40;
        absl::optional<absl::Duration> d = s->NextDelay(retry);
        if (s == strategies[0]) {
          const absl::Duration cap =
              std::min(Ms(10) * std::pow(2.0, retry), absl::Seconds(1));
          if (!d.has_value() || *d < absl::ZeroDuration() || *d > cap) ++bad;
          if (retry == 10 && d.has_value()) firsts[t] = *d;
        } else if (d.has_value() && (*d < absl::ZeroDuration() || *d > Ms(3))) {
          ++bad;
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  // Each thread has its own generator: not every thread drew the same value.
  EXPECT_NE(std::count(firsts.begin(), firsts.end(), firsts[0]), kThreads);
}

// --- Validation -------------------------------------------------------------

void ExpectInvalid(const absl::StatusOr<Strategy>& result,
                   const std::string& parameter) {
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument)
      << result.status();
  EXPECT_THAT(std::string(result.status().message()), HasSubstr(parameter));
}

TEST(BackoffTest, InvalidParametersAreInvalidArgument) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();

  ExpectInvalid(ZeroBackoff(-1), "max_retries");

  ExpectInvalid(ConstantBackoff(-Ms(1)), "delay");
  ExpectInvalid(ConstantBackoff(absl::InfiniteDuration()), "delay");
  ExpectInvalid(ConstantBackoff(-absl::InfiniteDuration()), "delay");
  ExpectInvalid(ConstantBackoff(Ms(1), -2), "max_retries");
  ExpectInvalid(ConstantBackoff(Ms(1), 3, -0.1), "jitter");
  ExpectInvalid(ConstantBackoff(Ms(1), 3, 1.5), "jitter");
  ExpectInvalid(ConstantBackoff(Ms(1), 3, nan), "jitter");

  auto exponential = [](auto mutate) {
    ExponentialBackoffOptions o;
    mutate(o);
    return ExponentialBackoff(o);
  };
  using O = ExponentialBackoffOptions;
  ExpectInvalid(exponential([](O& o) { o.initial = -Ms(1); }), "initial");
  ExpectInvalid(exponential([](O& o) { o.initial = absl::InfiniteDuration(); }),
                "initial");
  ExpectInvalid(exponential([](O& o) { o.maximum = -Ms(1); }), "maximum");
  ExpectInvalid(exponential([](O& o) { o.maximum = absl::InfiniteDuration(); }),
                "maximum");
  ExpectInvalid(exponential([](O& o) { o.maximum = Ms(5); }), "maximum");
  ExpectInvalid(exponential([](O& o) { o.factor = 0.5; }), "factor");
  ExpectInvalid(exponential([](O& o) { o.factor = 0; }), "factor");
  ExpectInvalid(exponential([](O& o) { o.factor = -2; }), "factor");
  ExpectInvalid(exponential([=](O& o) { o.factor = nan; }), "factor");
  ExpectInvalid(exponential([=](O& o) { o.factor = inf; }), "factor");
  ExpectInvalid(exponential([](O& o) { o.jitter = -0.01; }), "jitter");
  ExpectInvalid(exponential([](O& o) { o.jitter = 1.01; }), "jitter");
  ExpectInvalid(exponential([=](O& o) { o.jitter = nan; }), "jitter");
  ExpectInvalid(exponential([](O& o) { o.max_retries = -1; }), "max_retries");

  ExpectInvalid(ListBackoff({Ms(1), Ms(2), -Ms(3)}), "delays[2]");
  ExpectInvalid(ListBackoff({absl::InfiniteDuration()}), "delays[0]");
  ExpectInvalid(ListBackoff({Ms(1)}, 2.0), "jitter");
  ExpectInvalid(ListBackoff({Ms(1)}, nan), "jitter");

  ExpectInvalid(FunctionBackoff(nullptr), "fn");
}

TEST(BackoffTest, ValidBoundaryParametersAreAccepted) {
  EXPECT_OK(ZeroBackoff(0));
  EXPECT_OK(ConstantBackoff(absl::ZeroDuration(), 0, 1.0));
  ExponentialBackoffOptions o;
  o.initial = o.maximum = Ms(3);
  o.factor = 1.0;
  o.jitter = 0.0;
  o.max_retries = 0;
  EXPECT_OK(ExponentialBackoff(o));
  EXPECT_OK(ListBackoff({absl::ZeroDuration()}, 1.0));
}

// --- User-supplied strategies -----------------------------------------------

TEST(BackoffTest, FunctionBackoffCallsTheFunction) {
  Strategy s =
      Must(FunctionBackoff([](int retry) -> absl::optional<absl::Duration> {
        if (retry >= 3) return absl::nullopt;
        return Ms(retry * 7);
      }));
  EXPECT_EQ(Delays(*s, 4), (std::vector<absl::optional<absl::Duration>>{
                               Ms(0), Ms(7), Ms(14), absl::nullopt}));
  EXPECT_THAT(s->NextDelay(-3), Optional(Ms(0)));
  EXPECT_EQ(s->DebugString(), "FunctionBackoff(...)");
}

TEST(BackoffTest, FunctionBackoffClampsNegativeAndStopsOnInfinite) {
  Strategy s = Must(FunctionBackoff([](int retry) {
    return absl::make_optional(retry == 0 ? -Ms(5) : absl::InfiniteDuration());
  }));
  EXPECT_THAT(s->NextDelay(0), Optional(absl::ZeroDuration()));
  EXPECT_EQ(s->NextDelay(1), absl::nullopt);
}

// A subclass, as a user would write one: Fibonacci delays in milliseconds.
class FibonacciBackoff : public BackoffStrategy {
 public:
  absl::optional<absl::Duration> NextDelay(int retry) const override {
    if (retry >= 6) return absl::nullopt;
    int a = 1, b = 1;
    for (int i = 0; i < retry; ++i) b = std::exchange(a, a + b);
    return Ms(a);
  }
};

TEST(BackoffTest, SubclassesWork) {
  FibonacciBackoff fib;
  EXPECT_EQ(Delays(fib, 7),
            (std::vector<absl::optional<absl::Duration>>{
                Ms(1), Ms(2), Ms(3), Ms(5), Ms(8), Ms(13), absl::nullopt}));
  EXPECT_EQ(fib.DebugString(), "BackoffStrategy");
  int calls = 0;
  absl::Status s = RetryWithBackoff(fib, absl::Seconds(10), [&] {
    ++calls;
    return absl::UnavailableError("down");
  });
  EXPECT_EQ(s, absl::UnavailableError("down"));
  EXPECT_EQ(calls, 7);
}

// --- RetryWithBackoff -------------------------------------------------------

absl::Duration Since(std::chrono::steady_clock::time_point start) {
  return absl::FromChrono(std::chrono::steady_clock::now() - start);
}

TEST(BackoffTest, RetrySucceedsOnTheThirdAttempt) {
  int calls = 0;
  absl::Status s =
      RetryWithBackoff(*Must(ConstantBackoff(Ms(1))), absl::Seconds(10), [&] {
        return ++calls < 3 ? absl::UnavailableError("not yet")
                           : absl::OkStatus();
      });
  EXPECT_OK(s);
  EXPECT_EQ(calls, 3);
}

TEST(BackoffTest, RetryStopsOnNonRetryableError) {
  int calls = 0;
  absl::Status s = RetryWithBackoff(
      *Must(ZeroBackoff()), absl::Seconds(10),
      [&] {
        return ++calls < 2 ? absl::AbortedError("conflict")
                           : absl::PermissionDeniedError("no");
      },
      [](const absl::Status& st) { return absl::IsAborted(st); });
  EXPECT_EQ(s, absl::PermissionDeniedError("no"));
  EXPECT_EQ(calls, 2);
}

TEST(BackoffTest, RetryByDefaultRetriesOnlyUnavailable) {
  int calls = 0;
  absl::Status s =
      RetryWithBackoff(*Must(ZeroBackoff()), absl::Seconds(10), [&] {
        ++calls;
        return calls < 3 ? absl::UnavailableError("down")
                         : absl::FailedPreconditionError("closed");
      });
  EXPECT_EQ(s, absl::FailedPreconditionError("closed"));
  EXPECT_EQ(calls, 3);
}

TEST(BackoffTest, RetryReturnsTheLastErrorWhenTheStrategyGivesUp) {
  int calls = 0;
  absl::Status s = RetryWithBackoff(
      *Must(ListBackoff({Ms(1), Ms(1)})), absl::Seconds(10),
      [&] { return absl::UnavailableError(absl::StrCat("try ", ++calls)); });
  EXPECT_EQ(s, absl::UnavailableError("try 3"));
  EXPECT_EQ(calls, 3);
}

TEST(BackoffTest, RetryRespectsTheOverallTimeout) {
  int calls = 0;
  const auto start = std::chrono::steady_clock::now();
  absl::Status s =
      RetryWithBackoff(*Must(ConstantBackoff(Ms(20))), Ms(200), [&] {
        ++calls;
        return absl::UnavailableError("down");
      });
  const absl::Duration elapsed = Since(start);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("UNAVAILABLE: down"));
  // It kept trying until less than one delay was left (the sleeps may take
  // far longer on a loaded machine, so no count of tries is certain but the
  // most that fit), and stopped then, not a whole timeout later.
  EXPECT_GE(elapsed, Ms(200 - 20));
  EXPECT_LT(elapsed, Ms(200) + absl::Seconds(10));
  EXPECT_GE(calls, 2);
  EXPECT_LE(calls, 11);  // one try, then at most one per 20 ms delay
  EXPECT_GE(elapsed, Ms(20) * (calls - 1));
}

TEST(BackoffTest, RetryGivesUpAtOnceWhenTheNextDelayPassesTheTimeout) {
  int calls = 0;
  const auto start = std::chrono::steady_clock::now();
  absl::Status s =
      RetryWithBackoff(*Must(ConstantBackoff(absl::Seconds(10))), Ms(200), [&] {
        ++calls;
        return absl::UnavailableError("down");
      });
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_LT(Since(start), Ms(100));
  EXPECT_EQ(calls, 1);
}

TEST(BackoffTest, RetryWithStopBackoffMakesExactlyOneAttempt) {
  int calls = 0;
  absl::Status s = RetryWithBackoff(*StopBackoff(), absl::Seconds(10), [&] {
    ++calls;
    return absl::UnavailableError("down");
  });
  EXPECT_EQ(s, absl::UnavailableError("down"));
  EXPECT_EQ(calls, 1);
}

TEST(BackoffTest, RetryWithZeroTimeoutMakesOneAttempt) {
  int calls = 0;
  absl::Status s =
      RetryWithBackoff(*Must(ZeroBackoff()), absl::ZeroDuration(), [&] {
        ++calls;
        return absl::UnavailableError("down");
      });
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_EQ(calls, 1);
}

TEST(BackoffTest, RetryWithInfiniteTimeoutRunsUntilTheStrategyGivesUp) {
  int calls = 0;
  absl::Status s =
      RetryWithBackoff(*Must(ZeroBackoff(1000)), absl::InfiniteDuration(), [&] {
        ++calls;
        return absl::UnavailableError("down");
      });
  EXPECT_EQ(s, absl::UnavailableError("down"));
  EXPECT_EQ(calls, 1001);
}

TEST(BackoffTest, RetryRejectsBadArguments) {
  int calls = 0;
  auto attempt = [&] {
    ++calls;
    return absl::OkStatus();
  };
  absl::Status s = RetryWithBackoff(*StopBackoff(), -Ms(1), attempt);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("overall_timeout"));
  s = RetryWithBackoff(*StopBackoff(), Ms(1), nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("attempt"));
  EXPECT_EQ(calls, 0);
}

}  // namespace
}  // namespace relock
