// The queries (lib/lock/algorithm.h): IsLocked(), HoldCount(),
// RemainingLease() and LastToken(), each asked of the first node only.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "lib/backend/backend.h"
#include "lib/lock/algorithm.h"
#include "lib/lock/attempt.h"
#include "lib/lock/lock_env.h"
#include "lib/lock/lock_model.h"
#include "lib/lock/lock_scripts.h"
#include "lib/lock/owner.h"
#include "lib/redis/reply.h"

namespace relock {
namespace lock {

using algorithm_internal::Annotate;
using algorithm_internal::Inspection;
using algorithm_internal::ParseInspection;
using algorithm_internal::RunOnFirstNode;
using algorithm_internal::Unexpected;

namespace {

using backend::Resend;

absl::StatusOr<Inspection> Inspect(LockEnv& env, const LockModel& model,
                                   const std::string& name,
                                   const OwnerField& owner) {
  absl::StatusOr<redis::Reply> r = RunOnFirstNode(
      env, model.Inspect(LockName(name), owner), Resend::kIfDropped);
  if (!r.ok()) return r.status();
  return ParseInspection(*r);
}

}  // namespace

absl::StatusOr<bool> IsLocked(LockEnv& env, const std::string& name,
                              LockKind kind) {
  if (absl::Status s = env.CheckBlockingCall(); !s.ok()) {
    return Annotate(s, "query", name);
  }
  absl::StatusOr<Inspection> what =
      Inspect(env, ModelOf(kind), name, OwnerField::None());
  if (!what.ok()) return Annotate(what.status(), "query", name);
  return what->held;
}

absl::StatusOr<int64_t> HoldCount(LockEnv& env, const std::string& name,
                                  const OwnerId& by, LockKind kind) {
  if (absl::Status s = env.CheckBlockingCall(); !s.ok()) {
    return Annotate(s, "query", name);
  }
  absl::StatusOr<Inspection> what =
      Inspect(env, ModelOf(kind), name, OwnerField(env.id(), by.number));
  if (!what.ok()) return Annotate(what.status(), "query", name);
  // Redis's count, plus the re-entries counted locally.
  const absl::optional<HoldFacts> held = env.holds().FindFacts(name, by.number);
  if (what->count > 0 && held.has_value() && !held->ended()) {
    return what->count + held->local;
  }
  return what->count;
}

absl::StatusOr<absl::Duration> RemainingLease(LockEnv& env,
                                              const std::string& name,
                                              LockKind kind) {
  if (absl::Status s = env.CheckBlockingCall(); !s.ok()) {
    return Annotate(s, "query", name);
  }
  absl::StatusOr<Inspection> what =
      Inspect(env, ModelOf(kind), name, OwnerField::None());
  if (!what.ok()) return Annotate(what.status(), "query", name);
  if (!what->held) {
    return absl::NotFoundError(
        absl::StrCat("lock ", QuoteName(name), " is not held"));
  }
  if (what->pttl_ms < 0) return absl::InfiniteDuration();
  return absl::Milliseconds(what->pttl_ms);
}

absl::StatusOr<int64_t> LastToken(LockEnv& env, const std::string& name) {
  if (absl::Status s = env.CheckBlockingCall(); !s.ok()) {
    return Annotate(s, "query", name);
  }
  absl::StatusOr<redis::Reply> r =
      RunOnFirstNode(env, Step{internal::kTokenScript, {TokenKey(name)}, {}},
                     Resend::kIfDropped);
  if (!r.ok()) return Annotate(r.status(), "query", name);
  // 0 (no token yet) as an integer, else the counter's exact string.
  int64_t token = 0;
  if (r->is_integer()) return r->integer();
  if (!r->view().is_string() || !absl::SimpleAtoi(r->str(), &token) ||
      token < 0) {
    return Annotate(Unexpected(*r, "token script"), "query", name);
  }
  return token;
}

}  // namespace lock
}  // namespace relock
