// The count-down latch's calls (lib/lock/count_down_latch.h) over the
// counter pieces of lib/lock/counter.h.

#include "lib/lock/count_down_latch.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/lock/algorithm.h"
#include "lib/lock/attempt.h"
#include "lib/lock/counter.h"
#include "lib/lock/lock_scripts.h"
#include "relock/limits.h"

namespace relock {
namespace lock {

using counter_internal::CheckArguments;
using counter_internal::CountRange;

namespace {

// Redisson's CountDownLatchPubSub messages.
constexpr absl::string_view kZeroCountMessage = "0";
constexpr absl::string_view kNewCountMessage = "1";

StepTexts LatchWaitArgs(const AcquireOptions& /*options*/) { return {}; }

const counter_internal::CounterType kLatch{
    "count-down latch",
    "NOTALATCH",
    &LatchChannel,
    internal::kLatchAwaitScript,
    &LatchWaitArgs,
    kMaxCount,
    "the count did not reach zero within the wait",
    "choose a name without \"}\" (Redisson's latch channel puts braces "
    "around the whole name, so a hash tag in it cannot work)",
    /*give_back=*/nullptr,
    /*wait_is_read_only=*/true};

const counter_internal::CounterModel& LatchModel() {
  static const counter_internal::CounterModel* const kModel =
      new counter_internal::CounterModel(kLatch);
  return *kModel;
}

absl::Status CheckLatchName(LockEnv& env, absl::string_view op,
                            const std::string& name) {
  return CheckArguments(env, kLatch, op, name, "count", 0, CountRange{});
}

}  // namespace

std::string LatchChannel(absl::string_view name) {
  return absl::StrCat("redisson_countdownlatch__channel__{", name, "}");
}

absl::StatusOr<bool> TrySetCount(LockEnv& env, const std::string& name,
                                 int64_t count) {
  if (absl::Status s = CheckArguments(env, kLatch, "set count of", name,
                                      "count", count, CountRange{1, false});
      !s.ok()) {
    return s;
  }
  return counter_internal::TrySet(env, kLatch, name, count, kNewCountMessage);
}

absl::StatusOr<int64_t> CountDown(LockEnv& env, const std::string& name) {
  if (absl::Status s = CheckLatchName(env, "count down", name); !s.ok())
    return s;
  const Step step{
      internal::kLatchCountDownScript,
      {name, LatchChannel(name)},
      {counter_internal::PublishArg(env), std::string(kZeroCountMessage),
       counter_internal::RefusedArg(env)}};
  // Never resent: twice would count down twice (Redisson's is no-retry too).
  absl::StatusOr<redis::Reply> r = counter_internal::RunCounterStepHere(
      env, kLatch, "count down", name, step, backend::Resend::kNever);
  if (!r.ok()) return r.status();
  absl::StatusOr<int64_t> left =
      counter_internal::IntegerReply(*r, "count down");
  if (!left.ok()) {
    return algorithm_internal::Annotate(left.status(), "count down", name,
                                        kLatch.noun);
  }
  return left;
}

absl::StatusOr<int64_t> GetCount(LockEnv& env, const std::string& name) {
  if (absl::Status s = CheckLatchName(env, "query", name); !s.ok()) return s;
  return counter_internal::ReadCount(env, kLatch, name);
}

absl::Status AwaitZero(LockEnv& env, const std::string& name,
                       Deadline deadline) {
  if (absl::Status s = CheckLatchName(env, "await", name); !s.ok()) return s;
  return AwaitGrant(env, name, LatchModel(), AcquireOptions(), deadline,
                    GrantOp{"await", kLatch.noun});
}

void AwaitZeroAsync(LockEnv& env, std::shared_ptr<void> keep,
                    const std::string& name, Deadline deadline,
                    std::function<void(absl::Status)> done) {
  if (absl::Status s = CheckLatchName(env, "await", name); !s.ok())
    return done(s);
  AwaitGrantAsync(env, std::move(keep), name, LatchModel(), AcquireOptions(),
                  deadline, GrantOp{"await", kLatch.noun}, std::move(done));
}

}  // namespace lock
}  // namespace relock
