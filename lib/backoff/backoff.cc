// The built-in backoff strategies and RetryWithBackoff (see
// include/relock/backoff.h).

#include "relock/backoff.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "lib/common/deadline.h"
#include "lib/common/random.h"

namespace relock {

BackoffStrategy::~BackoffStrategy() = default;

std::string BackoffStrategy::DebugString() const { return "BackoffStrategy"; }

namespace {

std::string RetriesString(int max_retries) {
  return max_retries == kUnlimitedRetries ? "unlimited"
                                          : absl::StrCat(max_retries);
}

// Whether `retry` is past the limit of `max_retries` retries.
bool GivesUp(int retry, int max_retries) {
  return max_retries != kUnlimitedRetries && retry >= max_retries;
}

absl::Status CheckDuration(absl::string_view factory, absl::string_view name,
                           absl::Duration d) {
  if (d < absl::ZeroDuration() || d == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        factory, ": ", name, " must be a finite, non-negative duration, got ",
        absl::FormatDuration(d)));
  }
  return absl::OkStatus();
}

absl::Status CheckJitter(absl::string_view factory, double jitter) {
  if (!(jitter >= 0.0 && jitter <= 1.0)) {  // also rejects NaN
    return absl::InvalidArgumentError(absl::StrCat(
        factory, ": jitter must be a fraction in [0, 1], got ", jitter));
  }
  return absl::OkStatus();
}

absl::Status CheckMaxRetries(absl::string_view factory, int max_retries) {
  if (max_retries < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        factory, ": max_retries must be >= 0 (or kUnlimitedRetries), got ",
        max_retries));
  }
  return absl::OkStatus();
}

class Stop final : public BackoffStrategy {
 public:
  absl::optional<absl::Duration> NextDelay(int /*retry*/) const override {
    return absl::nullopt;
  }
  std::string DebugString() const override { return "StopBackoff()"; }
};

// What a Constant waits: ConstantBackoff()'s arguments (ZeroBackoff():
// delay 0, no jitter).
struct ConstantSchedule {
  absl::Duration delay;
  int max_retries = 0;
  double jitter = 0;
};

class Constant final : public BackoffStrategy {
 public:
  Constant(absl::string_view name, const ConstantSchedule& schedule)
      : name_(name),
        delay_(schedule.delay),
        max_retries_(schedule.max_retries),
        jitter_(schedule.jitter) {}

  absl::optional<absl::Duration> NextDelay(int retry) const override {
    if (GivesUp(retry, max_retries_)) return absl::nullopt;
    return ApplyJitter(delay_, jitter_);
  }
  std::string DebugString() const override {
    if (name_ == "ZeroBackoff") {
      return absl::StrCat(name_, "(max_retries=", RetriesString(max_retries_),
                          ")");
    }
    return absl::StrCat(name_, "(delay=", absl::FormatDuration(delay_),
                        ", max_retries=", RetriesString(max_retries_),
                        ", jitter=", jitter_, ")");
  }

 private:
  const std::string name_;
  const absl::Duration delay_;
  const int max_retries_;
  const double jitter_;
};

class Exponential final : public BackoffStrategy {
 public:
  explicit Exponential(const ExponentialBackoffOptions& o) : o_(o) {}

  absl::optional<absl::Duration> NextDelay(int retry) const override {
    if (GivesUp(retry, o_.max_retries)) return absl::nullopt;
    return ApplyJitter(Base(std::max(retry, 0)), o_.jitter);
  }
  std::string DebugString() const override {
    return absl::StrCat(
        "ExponentialBackoff(initial=", absl::FormatDuration(o_.initial),
        ", factor=", o_.factor, ", maximum=", absl::FormatDuration(o_.maximum),
        ", jitter=", o_.jitter, ", max_retries=", RetriesString(o_.max_retries),
        ")");
  }

 private:
  // min(initial * factor^retry, maximum), without overflow: the comparison
  // happens in double, where factor^retry may become +inf but never wraps.
  absl::Duration Base(int retry) const {
    if (o_.initial == absl::ZeroDuration() || retry == 0) return o_.initial;
    const double scale = std::pow(o_.factor, static_cast<double>(retry));
    const double ns = absl::ToDoubleNanoseconds(o_.initial) * scale;
    if (!(ns < absl::ToDoubleNanoseconds(o_.maximum))) return o_.maximum;
    return std::min(o_.initial * scale, o_.maximum);
  }

  const ExponentialBackoffOptions o_;
};

class List final : public BackoffStrategy {
 public:
  List(std::vector<absl::Duration> delays, double jitter)
      : delays_(std::move(delays)), jitter_(jitter) {}

  absl::optional<absl::Duration> NextDelay(int retry) const override {
    const size_t i = static_cast<size_t>(std::max(retry, 0));
    if (i >= delays_.size()) return absl::nullopt;
    return ApplyJitter(delays_[i], jitter_);
  }
  std::string DebugString() const override {
    std::string out = "ListBackoff({";
    for (size_t i = 0; i < delays_.size(); ++i) {
      absl::StrAppend(&out, i == 0 ? "" : ", ",
                      absl::FormatDuration(delays_[i]));
    }
    absl::StrAppend(&out, "}, jitter=", jitter_, ")");
    return out;
  }

 private:
  const std::vector<absl::Duration> delays_;
  const double jitter_;
};

class Function final : public BackoffStrategy {
 public:
  explicit Function(std::function<absl::optional<absl::Duration>(int)> fn)
      : fn_(std::move(fn)) {}

  absl::optional<absl::Duration> NextDelay(int retry) const override {
    absl::optional<absl::Duration> d = fn_(std::max(retry, 0));
    if (!d.has_value() || *d == absl::InfiniteDuration()) return absl::nullopt;
    return std::max(*d, absl::ZeroDuration());
  }
  std::string DebugString() const override { return "FunctionBackoff(...)"; }

 private:
  const std::function<absl::optional<absl::Duration>(int)> fn_;
};

}  // namespace

absl::Duration ApplyJitter(absl::Duration base, double jitter) {
  if (base <= absl::ZeroDuration()) return absl::ZeroDuration();
  if (base == absl::InfiniteDuration()) return base;
  if (!(jitter > 0.0)) return base;  // also NaN
  jitter = std::min(jitter, 1.0);
  const double u =
      absl::Uniform(absl::IntervalClosedOpen, ThreadBitGen(), 0.0, 1.0);
  const absl::Duration d = base * (1.0 - jitter * u);
  return std::clamp(d, absl::ZeroDuration(), base);
}

std::shared_ptr<const BackoffStrategy> StopBackoff() {
  static const std::shared_ptr<const BackoffStrategy> stop =
      std::make_shared<Stop>();
  return stop;
}

absl::StatusOr<std::shared_ptr<const BackoffStrategy>> ZeroBackoff(
    int max_retries) {
  if (absl::Status s = CheckMaxRetries("ZeroBackoff", max_retries); !s.ok()) {
    return s;
  }
  ConstantSchedule zero;
  zero.delay = absl::ZeroDuration();
  zero.max_retries = max_retries;
  return std::make_shared<Constant>("ZeroBackoff", zero);
}

absl::StatusOr<std::shared_ptr<const BackoffStrategy>> ConstantBackoff(
    absl::Duration delay, int max_retries, double jitter) {
  constexpr absl::string_view kName = "ConstantBackoff";
  for (absl::Status s :
       {CheckDuration(kName, "delay", delay),
        CheckMaxRetries(kName, max_retries), CheckJitter(kName, jitter)}) {
    if (!s.ok()) return s;
  }
  ConstantSchedule schedule;
  schedule.delay = delay;
  schedule.max_retries = max_retries;
  schedule.jitter = jitter;
  return std::make_shared<Constant>(kName, schedule);
}

absl::StatusOr<std::shared_ptr<const BackoffStrategy>> ExponentialBackoff(
    const ExponentialBackoffOptions& options) {
  constexpr absl::string_view kName = "ExponentialBackoff";
  for (absl::Status s : {CheckDuration(kName, "initial", options.initial),
                         CheckDuration(kName, "maximum", options.maximum),
                         CheckJitter(kName, options.jitter),
                         CheckMaxRetries(kName, options.max_retries)}) {
    if (!s.ok()) return s;
  }
  if (!(options.factor >= 1.0 && std::isfinite(options.factor))) {
    return absl::InvalidArgumentError(absl::StrCat(
        kName, ": factor must be a finite number >= 1, got ", options.factor));
  }
  if (options.maximum < options.initial) {
    return absl::InvalidArgumentError(absl::StrCat(
        kName, ": maximum (", absl::FormatDuration(options.maximum),
        ") must not be less than initial (",
        absl::FormatDuration(options.initial), ")"));
  }
  return std::make_shared<Exponential>(options);
}

absl::StatusOr<std::shared_ptr<const BackoffStrategy>> ListBackoff(
    std::vector<absl::Duration> delays, double jitter) {
  constexpr absl::string_view kName = "ListBackoff";
  for (size_t i = 0; i < delays.size(); ++i) {
    if (absl::Status s =
            CheckDuration(kName, absl::StrCat("delays[", i, "]"), delays[i]);
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = CheckJitter(kName, jitter); !s.ok()) return s;
  return std::make_shared<List>(std::move(delays), jitter);
}

absl::StatusOr<std::shared_ptr<const BackoffStrategy>> FunctionBackoff(
    std::function<absl::optional<absl::Duration>(int retry)> fn) {
  if (!fn) {
    return absl::InvalidArgumentError("FunctionBackoff: fn must not be empty");
  }
  return std::make_shared<Function>(std::move(fn));
}

absl::Status RetryWithBackoff(
    const BackoffStrategy& strategy, absl::Duration overall_timeout,
    const std::function<absl::Status()>& attempt,
    const std::function<bool(const absl::Status&)>& retryable) {
  if (overall_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("RetryWithBackoff: overall_timeout must not be negative, "
                     "got ",
                     absl::FormatDuration(overall_timeout)));
  }
  if (!attempt) {
    return absl::InvalidArgumentError(
        "RetryWithBackoff: attempt must not be empty");
  }
  const SteadyClock::time_point start = SteadyClock::now();
  const Deadline deadline = Deadline::After(overall_timeout);
  for (int64_t attempts = 1;; ++attempts) {
    absl::Status status = attempt();
    if (status.ok()) return status;
    if (!(retryable ? retryable(status) : absl::IsUnavailable(status))) {
      return status;
    }
    // Retry number `attempts - 1` comes next; saturate for NextDelay's int.
    const int retry =
        static_cast<int>(std::min<int64_t>(attempts - 1, INT_MAX));
    const absl::optional<absl::Duration> next = strategy.NextDelay(retry);
    if (!next.has_value() || *next == absl::InfiniteDuration()) return status;
    const absl::Duration delay = std::max(*next, absl::ZeroDuration());
    if (!deadline.is_never() && deadline.Remaining() <= delay) {
      return absl::DeadlineExceededError(absl::StrCat(
          "RetryWithBackoff: overall timeout of ",
          absl::FormatDuration(overall_timeout), " would pass before attempt ",
          attempts + 1, " (", attempts, " attempts in ",
          absl::FormatDuration(absl::FromChrono(SteadyClock::now() - start)),
          ", next delay ", absl::FormatDuration(delay),
          "); last error: ", status.ToString()));
    }
    if (delay > absl::ZeroDuration()) absl::SleepFor(delay);
  }
}

}  // namespace relock
