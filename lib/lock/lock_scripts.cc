#include "lib/lock/lock_scripts.h"

#include <initializer_list>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/redis/errors.h"
#include "lua/acquire.lua.h"
#include "lua/counter_inspect.lua.h"
#include "lua/counter_lib.lua.h"
#include "lua/counter_set.lua.h"
#include "lua/fair_acquire.lua.h"
#include "lua/fair_force_release.lua.h"
#include "lua/fair_leave.lua.h"
#include "lua/fair_lib.lua.h"
#include "lua/fair_release.lua.h"
#include "lua/fair_release_all.lua.h"
#include "lua/force_release.lua.h"
#include "lua/inspect.lua.h"
#include "lua/latch_await.lua.h"
#include "lua/latch_count_down.lua.h"
#include "lua/lock_info.lua.h"
#include "lua/lock_lib.lua.h"
#include "lua/permit_acquire.lua.h"
#include "lua/permit_available.lua.h"
#include "lua/permit_lib.lua.h"
#include "lua/permit_release.lua.h"
#include "lua/permit_renew.lua.h"
#include "lua/permit_update.lua.h"
#include "lua/read_acquire.lua.h"
#include "lua/read_release.lua.h"
#include "lua/read_renew.lua.h"
#include "lua/release.lua.h"
#include "lua/release_all.lua.h"
#include "lua/renew.lua.h"
#include "lua/rw_force_release.lua.h"
#include "lua/rw_inspect.lua.h"
#include "lua/rw_lib.lua.h"
#include "lua/rw_release_all.lua.h"
#include "lua/semaphore_acquire.lua.h"
#include "lua/semaphore_add.lua.h"
#include "lua/semaphore_drain.lua.h"
#include "lua/semaphore_info.lua.h"
#include "lua/shape_lib.lua.h"
#include "lua/token.lua.h"
#include "lua/write_acquire.lua.h"
#include "lua/write_release.lua.h"

namespace relock {
namespace internal {
namespace {

constexpr absl::string_view kUnpublished = "UNPUBLISHED ";

// The line of a script with fast paths after which its general path begins
// (see WithHelpers()).
constexpr absl::string_view kHelpersLine = "\n-- @helpers\n";

// `script` with the helper files `libs`. A script without a "-- @helpers"
// line gets them prepended. A script with one has fast paths before it,
// which answer the common calls with no helper defined: what follows the line
// becomes, with the helpers in front, the body of a function the script
// calls only when no fast path answered. A call that a fast path answers
// then makes no Lua closure (each `local function` is one, made on every
// call that reaches it), and the script's main function keeps few registers
// (Lua clears all of them on every call). Built once per script; the
// ScriptSources point into the strings.
const std::string* WithHelpers(absl::string_view script,
                               std::initializer_list<absl::string_view> libs) {
  std::string helpers;
  for (absl::string_view lib : libs) absl::StrAppend(&helpers, lib);
  const size_t at = script.find(kHelpersLine);
  if (at == absl::string_view::npos) {
    return new std::string(absl::StrCat(helpers, script));
  }
  const size_t split = at + kHelpersLine.size();
  return new std::string(absl::StrCat(
      script.substr(0, split), "local function general_path()\n", helpers,
      script.substr(split), "\nend\nreturn general_path()\n"));
}

}  // namespace

std::vector<redis::ScriptSource> LockScripts() {
  // Built once; the ScriptSources point into these strings.
  static const std::string* const kAcquire =
      WithHelpers(lua::kAcquire, {lua::kShapeLib});
  static const std::string* const kRelease =
      WithHelpers(lua::kRelease, {lua::kLockLib});
  static const std::string* const kReleaseAll =
      WithHelpers(lua::kReleaseAll, {lua::kLockLib});
  static const std::string* const kForceRelease =
      WithHelpers(lua::kForceRelease, {lua::kLockLib, lua::kShapeLib});
  static const std::string* const kInspect =
      WithHelpers(lua::kInspect, {lua::kShapeLib});
  // The fair lock's, with lock_lib and fair_lib.
  static const std::string* const kFairAcquire = WithHelpers(
      lua::kFairAcquire, {lua::kLockLib, lua::kShapeLib, lua::kFairLib});
  static const std::string* const kFairRelease =
      WithHelpers(lua::kFairRelease, {lua::kLockLib, lua::kFairLib});
  static const std::string* const kFairReleaseAll =
      WithHelpers(lua::kFairReleaseAll, {lua::kLockLib, lua::kFairLib});
  static const std::string* const kFairLeave =
      WithHelpers(lua::kFairLeave, {lua::kLockLib, lua::kFairLib});
  static const std::string* const kFairForceRelease = WithHelpers(
      lua::kFairForceRelease, {lua::kLockLib, lua::kShapeLib, lua::kFairLib});
  // The read-write lock's, with rw_lib (and lock_lib where they publish).
  static const std::string* const kReadAcquire =
      WithHelpers(lua::kReadAcquire, {lua::kShapeLib, lua::kRwLib});
  static const std::string* const kWriteAcquire =
      WithHelpers(lua::kWriteAcquire, {lua::kShapeLib});
  static const std::string* const kReadRelease =
      WithHelpers(lua::kReadRelease, {lua::kLockLib, lua::kRwLib});
  static const std::string* const kWriteRelease =
      WithHelpers(lua::kWriteRelease, {lua::kLockLib, lua::kRwLib});
  static const std::string* const kRwReleaseAll =
      WithHelpers(lua::kRwReleaseAll, {lua::kLockLib, lua::kRwLib});
  static const std::string* const kReadRenew =
      WithHelpers(lua::kReadRenew, {lua::kRwLib});
  static const std::string* const kRwInspect =
      WithHelpers(lua::kRwInspect, {lua::kShapeLib});
  static const std::string* const kRwForceRelease =
      WithHelpers(lua::kRwForceRelease, {lua::kLockLib, lua::kShapeLib});
  // Inspection reads both shapes.
  static const std::string* const kLockInfo =
      WithHelpers(lua::kLockInfo, {lua::kShapeLib});
  // The semaphore's and the count-down latch's, with counter_lib.
  static const std::string* const kSemaphoreAcquire =
      WithHelpers(lua::kSemaphoreAcquire, {lua::kCounterLib});
  static const std::string* const kSemaphoreAdd =
      WithHelpers(lua::kSemaphoreAdd, {lua::kCounterLib});
  static const std::string* const kSemaphoreDrain =
      WithHelpers(lua::kSemaphoreDrain, {lua::kCounterLib});
  static const std::string* const kCounterSet =
      WithHelpers(lua::kCounterSet, {lua::kCounterLib});
  static const std::string* const kCounterInspect =
      WithHelpers(lua::kCounterInspect, {lua::kCounterLib});
  static const std::string* const kLatchAwait =
      WithHelpers(lua::kLatchAwait, {lua::kCounterLib});
  static const std::string* const kLatchCountDown =
      WithHelpers(lua::kLatchCountDown, {lua::kCounterLib});
  // The permit-expirable semaphore's, with counter_lib and permit_lib.
  static const std::string* const kPermitAcquire =
      WithHelpers(lua::kPermitAcquire, {lua::kCounterLib, lua::kPermitLib});
  static const std::string* const kPermitRelease =
      WithHelpers(lua::kPermitRelease, {lua::kCounterLib, lua::kPermitLib});
  static const std::string* const kPermitUpdate =
      WithHelpers(lua::kPermitUpdate, {lua::kCounterLib, lua::kPermitLib});
  static const std::string* const kPermitRenew =
      WithHelpers(lua::kPermitRenew, {lua::kCounterLib, lua::kPermitLib});
  static const std::string* const kPermitAvailable =
      WithHelpers(lua::kPermitAvailable, {lua::kCounterLib, lua::kPermitLib});
  // Inspection of either semaphore.
  static const std::string* const kSemaphoreInfo =
      WithHelpers(lua::kSemaphoreInfo, {lua::kCounterLib, lua::kPermitLib});
  // Order matches ScriptId.
  return {
      {"acquire", *kAcquire},
      {"release", *kRelease},
      {"release_all", *kReleaseAll},
      {"force_release", *kForceRelease},
      {"renew", lua::kRenew},
      {"inspect", *kInspect},
      {"token", lua::kToken},
      {"fair_acquire", *kFairAcquire},
      {"fair_release", *kFairRelease},
      {"fair_release_all", *kFairReleaseAll},
      {"fair_leave", *kFairLeave},
      {"fair_force_release", *kFairForceRelease},
      {"read_acquire", *kReadAcquire},
      {"write_acquire", *kWriteAcquire},
      {"read_release", *kReadRelease},
      {"write_release", *kWriteRelease},
      {"rw_release_all", *kRwReleaseAll},
      {"read_renew", *kReadRenew},
      {"rw_inspect", *kRwInspect},
      {"rw_force_release", *kRwForceRelease},
      {"lock_info", *kLockInfo},
      {"semaphore_acquire", *kSemaphoreAcquire},
      {"semaphore_add", *kSemaphoreAdd},
      {"semaphore_drain", *kSemaphoreDrain},
      {"counter_set", *kCounterSet},
      {"counter_inspect", *kCounterInspect},
      {"latch_await", *kLatchAwait},
      {"latch_count_down", *kLatchCountDown},
      {"permit_acquire", *kPermitAcquire},
      {"permit_release", *kPermitRelease},
      {"permit_update", *kPermitUpdate},
      {"permit_renew", *kPermitRenew},
      {"permit_available", *kPermitAvailable},
      {"semaphore_info", *kSemaphoreInfo},
  };
}

bool IsUnpublished(const redis::Reply& reply) {
  return reply.is_error() && absl::StartsWith(reply.str(), kUnpublished);
}

bool IsWrongType(const redis::Reply& reply) {
  // Redis 7 passes a script's error on as it is; Redis 6 wraps it ("ERR
  // Error running script (...): @user_script:19: WRONGTYPE ...").
  return reply.is_error() && (absl::StartsWith(reply.str(), "WRONGTYPE") ||
                              absl::StrContains(reply.str(), ": WRONGTYPE "));
}

absl::Status UnpublishedStatus(absl::string_view op,
                               const redis::Reply& reply) {
  const absl::string_view why = reply.str().substr(kUnpublished.size());
  const absl::Status mapped = redis::ErrorReplyToStatus("PUBLISH", why);
  return absl::Status(
      mapped.code(),
      absl::StrCat(op,
                   ": the lock was released (its key is deleted), but "
                   "Redis refused to publish the unlock message, so "
                   "waiters in other clients were not woken and find "
                   "the lock free only when their wait re-checks: ",
                   mapped.message()));
}

absl::Status ReleaseAllResult(const redis::Reply& reply, absl::string_view op) {
  if (IsUnpublished(reply)) return UnpublishedStatus(op, reply);
  if (reply.is_error()) return redis::ErrorReplyToStatus(op, reply.str());
  if (!reply.is_integer()) {
    return absl::InternalError(
        absl::StrCat(op, ": unexpected reply ", reply.view().Describe()));
  }
  if (reply.integer() == 0) {
    return absl::AbortedError(absl::StrCat(
        op, ": the lock's lease had already been lost before the release"));
  }
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace relock
