// The semaphore's calls (lib/lock/semaphore.h) over the counter pieces of
// lib/lock/counter.h.

#include "lib/lock/semaphore.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/lock/algorithm.h"
#include "lib/lock/attempt.h"
#include "lib/lock/counter.h"
#include "lib/lock/lock_scripts.h"
#include "lib/lock/owner.h"
#include "relock/limits.h"

namespace relock {
namespace lock {

using algorithm_internal::Annotate;
using counter_internal::CheckArguments;
using counter_internal::CounterModel;
using counter_internal::CounterType;
using counter_internal::CountRange;
using counter_internal::IntegerReply;
using counter_internal::RunCounterStep;
using counter_internal::RunCounterStepHere;

namespace {

StepTexts SemaphoreWaitArgs(const AcquireOptions& options) {
  return {absl::StrCat(options.permits)};
}

// lua/semaphore_add.lua's step, adding `permits`; `refused`: RefusedArg().
Step AddStep(absl::string_view name, int64_t permits, absl::string_view publish,
             absl::string_view refused) {
  return Step{internal::kSemaphoreAddScript,
              {std::string(name), SemaphoreChannel(name)},
              {absl::StrCat(permits), std::string(publish),
               absl::StrCat(kMaxPermits), std::string(refused)}};
}

// Gives back the permits of an acquire its replicas did not acknowledge
// (its answer is not read: a refused publish is no matter).
Step GiveBack(LockName name, const AcquireOptions& options,
              absl::string_view publish) {
  return AddStep(name.key(), options.permits, publish, "ignore");
}

const CounterType kSemaphore{
    "semaphore",
    "NOTASEMAPHORE",
    &SemaphoreChannel,
    internal::kSemaphoreAcquireScript,
    &SemaphoreWaitArgs,
    kMaxPermits,
    "too few permits were available throughout the wait",
    "choose a name without \"}\", or one with a non-empty hash tag "
    "(\"jobs:{42}\")",
    &GiveBack};

const CounterModel& SemaphoreModel() {
  static const CounterModel* const kModel = new CounterModel(kSemaphore);
  return *kModel;
}

// The acquire's checks and options: the permits, and the client's replica
// acknowledgement (ClientOptions::replica_sync), as a lock's acquire has.
absl::Status CheckAcquire(LockEnv& env, const std::string& name,
                          int64_t permits, AcquireOptions* options) {
  options->permits = permits;
  options->replica_sync = env.policy().replica_sync;
  return CheckArguments(env, kSemaphore, "acquire", name, "permits", permits,
                        CountRange{1, false});
}

// A release's or an addition's step.
Step AddStep(LockEnv& env, const std::string& name, int64_t permits) {
  return AddStep(name, permits, counter_internal::PublishArg(env),
                 counter_internal::RefusedArg(env));
}

// What semaphore_add's answer `r` means for `op`.
absl::Status AddResult(const absl::StatusOr<redis::Reply>& r,
                       absl::string_view op, const std::string& name) {
  if (!r.ok()) return r.status();
  return Annotate(IntegerReply(*r, op).status(), op, name, kSemaphore.noun);
}

// What a grant that came while the client closed ends with, given the
// answer of its give-back: Cancelled if the permits went back, else
// Unavailable (they may still be taken).
absl::Status AfterGiveBack(const std::string& name,
                           const std::vector<backend::Answer>& answers) {
  const absl::StatusOr<redis::Reply>& r = answers[0].reply;
  if (r.ok() && r->is_integer()) {
    return Annotate(
        absl::CancelledError("the client was closed as the permits were taken; "
                             "they were given back"),
        "acquire", name, kSemaphore.noun);
  }
  return Annotate(
      absl::UnavailableError(absl::StrCat(
          "the client was closed as the permits were taken, and giving them "
          "back failed (",
          r.ok() ? r->str() : r.status().message(),
          "): they may still be taken")),
      "acquire", name, kSemaphore.noun);
}

// A grant that came while Close() ran: its caller can no longer give the
// permits back through this client (every call is FailedPrecondition), and
// Close() gives back no plain semaphore's permits (they have no owner), so
// they go back here (`here`: blocking on this thread), as a lock's acquire
// that Close() overtook releases its hold (acquire.cc, RegisterHold()).
void GiveBackOnClose(LockEnv& env, const std::string& name, int64_t permits,
                     bool here, std::function<void(absl::Status)> done) {
  // A refused publish is no failure here: the count went back.
  algorithm_internal::SendGiveBack(
      env, AddStep(name, permits, counter_internal::PublishArg(env), "ignore"),
      Deadline::After(env.confirm_timeout(), &env.clock()), here,
      [name,
       done = std::move(done)](const std::vector<backend::Answer>& answers) {
        done(AfterGiveBack(name, answers));
      });
}

}  // namespace

std::string SemaphoreChannel(absl::string_view name) {
  return PrefixName("redisson_sc", name);
}

absl::Status AcquirePermits(LockEnv& env, const std::string& name,
                            int64_t permits, Deadline deadline) {
  const algorithm_internal::InFlight in_flight(env);
  AcquireOptions options;
  if (absl::Status s = CheckAcquire(env, name, permits, &options); !s.ok()) {
    return s;
  }
  absl::Status s = AwaitGrant(env, name, SemaphoreModel(), options, deadline,
                              GrantOp{"acquire", kSemaphore.noun});
  if (s.ok() && env.closed()) {
    GiveBackOnClose(
        env, name, permits, /*here=*/true,
        [&s](absl::Status given_back) { s = std::move(given_back); });
  }
  return s;
}

void AcquirePermitsAsync(LockEnv& env, std::shared_ptr<void> keep,
                         const std::string& name, int64_t permits,
                         Deadline deadline,
                         std::function<void(absl::Status)> done) {
  env.holds().BeginInFlight();  // (see InFlight; ended before `done` runs)
  AcquireOptions options;
  if (absl::Status s = CheckAcquire(env, name, permits, &options); !s.ok()) {
    env.holds().EndInFlight();
    return done(s);
  }
  // (`keep` twice: the wait holds one, the give-back's answer the other.)
  std::shared_ptr<void> also = keep;
  AwaitGrantAsync(env, std::move(keep), name, SemaphoreModel(), options,
                  deadline, GrantOp{"acquire", kSemaphore.noun},
                  [&env, keep = std::move(also), name, permits,
                   done = std::move(done)](absl::Status s) mutable {
                    if (!s.ok() || !env.closed()) {
                      env.holds().EndInFlight();
                      return done(std::move(s));
                    }
                    GiveBackOnClose(env, name, permits, /*here=*/false,
                                    [keep, done = std::move(done)](
                                        absl::Status given_back) {
                                      done(std::move(given_back));
                                    });
                    env.holds().EndInFlight();  // (the give-back counts)
                  });
}

absl::Status ReleasePermits(LockEnv& env, const std::string& name,
                            int64_t permits, bool add) {
  const absl::string_view op = add ? "add permits to" : "release";
  if (absl::Status s =
          CheckArguments(env, kSemaphore, op, name, "permits", permits,
                         CountRange{add ? -kMaxPermits : 1, false});
      !s.ok()) {
    return s;
  }
  return AddResult(
      RunCounterStepHere(env, kSemaphore, op, name, AddStep(env, name, permits),
                         backend::Resend::kNever),
      op, name);
}

void ReleasePermitsAsync(LockEnv& env, std::shared_ptr<void> keep,
                         const std::string& name, int64_t permits,
                         std::function<void(absl::Status)> done) {
  if (absl::Status s = CheckArguments(env, kSemaphore, "release", name,
                                      "permits", permits, CountRange{1, false});
      !s.ok()) {
    return done(s);
  }
  RunCounterStep(env, kSemaphore, "release", name, AddStep(env, name, permits),
                 backend::Resend::kNever, /*here=*/false,
                 [keep = std::move(keep), name,
                  done = std::move(done)](absl::StatusOr<redis::Reply> r) {
                   done(AddResult(r, "release", name));
                 });
}

absl::StatusOr<bool> TrySetPermits(LockEnv& env, const std::string& name,
                                   int64_t permits) {
  if (absl::Status s = CheckArguments(env, kSemaphore, "set permits of", name,
                                      "permits", permits, CountRange{});
      !s.ok()) {
    return s;
  }
  // Redisson publishes the permits set.
  return counter_internal::TrySet(env, kSemaphore, name, permits,
                                  absl::StrCat(permits));
}

absl::StatusOr<int64_t> AvailablePermits(LockEnv& env,
                                         const std::string& name) {
  if (absl::Status s = CheckArguments(env, kSemaphore, "query", name, "permits",
                                      0, CountRange{});
      !s.ok()) {
    return s;
  }
  return counter_internal::ReadCount(env, kSemaphore, name);
}

absl::StatusOr<int64_t> DrainPermits(LockEnv& env, const std::string& name) {
  if (absl::Status s = CheckArguments(env, kSemaphore, "drain", name, "permits",
                                      0, CountRange{});
      !s.ok()) {
    return s;
  }
  const Step step{internal::kSemaphoreDrainScript, {name}, {}};
  absl::StatusOr<redis::Reply> r = RunCounterStepHere(
      env, kSemaphore, "drain", name, step, backend::Resend::kNever);
  if (!r.ok()) return r.status();
  absl::StatusOr<int64_t> drained = IntegerReply(*r, "drain");
  if (!drained.ok()) {
    return Annotate(drained.status(), "drain", name, kSemaphore.noun);
  }
  return drained;
}

}  // namespace lock
}  // namespace relock
