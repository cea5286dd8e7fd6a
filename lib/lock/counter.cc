// The counter synchronizers' shared pieces (lib/lock/counter.h).

#include "lib/lock/counter.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/common/deadline.h"
#include "lib/lock/algorithm.h"
#include "lib/lock/attempt.h"
#include "lib/redis/errors.h"

namespace relock {
namespace lock {
namespace counter_internal {

using algorithm_internal::Annotate;
using algorithm_internal::Inspection;
using algorithm_internal::ParseInspection;

namespace {

constexpr absl::string_view kUnpublishedPrefix = "UNPUBLISHED ";

// The status of error reply `r` to `op` on `type`.
absl::Status ErrorOf(const CounterType& type, const redis::Reply& r) {
  if (absl::StartsWith(r.str(), kUnpublishedPrefix)) {
    const absl::Status why = redis::ErrorReplyToStatus(
        "PUBLISH", r.str().substr(kUnpublishedPrefix.size()));
    return absl::Status(
        why.code(),
        absl::StrCat("the ", type.noun,
                     "'s count was changed, but Redis refused to publish "
                     "the change on its channel, so waiters in other "
                     "clients were not woken (they find it when their wait "
                     "re-checks): ",
                     why.message()));
  }
  return redis::ErrorReplyToStatus(type.noun, r.str());
}

}  // namespace

Step CounterModel::Acquire(LockName name, const OwnerField& /*owner*/,
                           Lease /*lease*/, bool /*fresh*/, bool /*queue*/,
                           const AcquireOptions& options,
                           absl::string_view /*publish*/) const {
  return Step{
      type_.wait_script, {std::string(name.key())}, type_.wait_args(options)};
}

Step CounterModel::Release(LockName name, const OwnerField& owner,
                           Lease /*lease*/, absl::string_view /*publish*/,
                           bool /*last*/) const {
  return Inspect(name, owner);
}

Step CounterModel::ReleaseAll(LockName name, const OwnerField& owner,
                              absl::string_view /*publish*/) const {
  return Inspect(name, owner);
}

Step CounterModel::ForceRelease(LockName name,
                                absl::string_view /*publish*/) const {
  return Inspect(name, OwnerField::None());
}

Step CounterModel::Undo(LockName name, const OwnerField& owner, bool /*fresh*/,
                        const AcquireOptions& options,
                        absl::string_view publish) const {
  if (type_.give_back == nullptr) return Inspect(name, owner);
  return type_.give_back(name, options, publish);
}

std::string CounterModel::WaitChannel(LockName name,
                                      const OwnerField& /*owner*/) const {
  return type_.channel(name.key());
}

Step CounterModel::Inspect(LockName name, const OwnerField& /*owner*/) const {
  return Step{internal::kCounterInspectScript,
              {std::string(name.key())},
              {std::string(type_.wrong_code)}};
}

absl::Status CheckArguments(LockEnv& env, const CounterType& type,
                            absl::string_view op, const std::string& name,
                            absl::string_view what, int64_t n,
                            CountRange range) {
  if (absl::Status s = ValidateName(name); !s.ok()) {
    return Annotate(s, op, name, type.noun);
  }
  std::string channel = type.channel(name);
  absl::string_view what_key = "channel";
  const int group = env.backend().KeyGroup(name);
  if (type.companion != nullptr && group == env.backend().KeyGroup(channel)) {
    channel = type.companion(name);  // the channel is fine: check this one
    what_key = "companion key";
  }
  if (group != env.backend().KeyGroup(channel)) {
    return Annotate(
        absl::InvalidArgumentError(absl::StrCat(
            "on a Redis Cluster the name's ", what_key, " \"",
            absl::CHexEscape(channel),
            "\" (Redisson's name for it) is in another hash slot than the "
            "name, and a script's keys must share one: ",
            type.slot_hint)),
        op, name, type.noun);
  }
  const int64_t lowest = std::max(range.min, -type.max);
  if (n < lowest || n > type.max || (n == 0 && !range.zero_ok)) {
    return Annotate(absl::InvalidArgumentError(absl::StrCat(
                        what, " must be in [", lowest, ", ", type.max, "]",
                        range.zero_ok ? "" : " and not 0", ", got ", n)),
                    op, name, type.noun);
  }
  return absl::OkStatus();
}

void RunCounterStep(LockEnv& env, const CounterType& type, absl::string_view op,
                    const std::string& name, const Step& step,
                    backend::Resend resend, bool here,
                    std::function<void(absl::StatusOr<redis::Reply>)> then) {
  if (absl::Status s = here ? env.CheckBlockingCall() : env.CheckOpen();
      !s.ok()) {
    return then(Annotate(s, op, name, type.noun));
  }
  algorithm_internal::Send(
      env, step, Deadline::After(env.policy().command_timeout, &env.clock()),
      resend, here,
      [&type, op = std::string(op), name,
       then = std::move(then)](std::vector<backend::Answer> answers) {
        absl::StatusOr<redis::Reply> r = std::move(answers[0].reply);
        if (r.ok() && r->is_error()) r = ErrorOf(type, *r);
        if (absl::IsDeadlineExceeded(r.status())) {
          // The call's own bound (no caller's wait) ran out: Redis was slow.
          r = absl::UnavailableError(r.status().message());
        }
        if (!r.ok()) return then(Annotate(r.status(), op, name, type.noun));
        then(std::move(r));
      });
}

absl::StatusOr<redis::Reply> RunCounterStepHere(
    LockEnv& env, const CounterType& type, absl::string_view op,
    const std::string& name, const Step& step, backend::Resend resend) {
  absl::StatusOr<redis::Reply> out = absl::UnknownError("no answer");
  RunCounterStep(
      env, type, op, name, step, resend, /*here=*/true,
      [&out](absl::StatusOr<redis::Reply> r) { out = std::move(r); });
  return out;
}

std::string PublishArg(LockEnv& env) {
  return std::string(env.backend().publish_command());
}

std::string RefusedArg(LockEnv& env) {
  return env.policy().notified ? "report" : "ignore";
}

absl::StatusOr<int64_t> IntegerReply(const redis::Reply& r,
                                     absl::string_view op) {
  int64_t n = 0;  // (a count may come as its text)
  if (r.view().ToInt64(&n)) return n;
  return algorithm_internal::Unexpected(r, op);
}

absl::StatusOr<bool> TrySet(LockEnv& env, const CounterType& type,
                            const std::string& name, int64_t count,
                            absl::string_view message) {
  const Step step{internal::kCounterSetScript,
                  {name, type.channel(name)},
                  {absl::StrCat(count), PublishArg(env), std::string(message),
                   std::string(type.wrong_code), RefusedArg(env)}};
  absl::StatusOr<redis::Reply> r =
      RunCounterStepHere(env, type, "set", name, step, backend::Resend::kNever);
  if (!r.ok()) return r.status();
  absl::StatusOr<int64_t> set = IntegerReply(*r, "set");
  if (!set.ok()) return Annotate(set.status(), "set", name, type.noun);
  return *set == 1;
}

absl::StatusOr<int64_t> ReadCount(LockEnv& env, const CounterType& type,
                                  const std::string& name) {
  const Step step =
      CounterModel(type).Inspect(LockName(name), OwnerField::None());
  absl::StatusOr<redis::Reply> r = RunCounterStepHere(
      env, type, "query", name, step, backend::Resend::kIfDropped);
  if (!r.ok()) return r.status();
  absl::StatusOr<Inspection> what = ParseInspection(*r);
  if (!what.ok()) return Annotate(what.status(), "query", name, type.noun);
  return what->count;
}

}  // namespace counter_internal
}  // namespace lock
}  // namespace relock
