#include "lib/lock/lock_scripts.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/redis/errors.h"
#include "lua/acquire.lua.h"
#include "lua/fair_acquire.lua.h"
#include "lua/fair_force_release.lua.h"
#include "lua/fair_leave.lua.h"
#include "lua/fair_lib.lua.h"
#include "lua/fair_release.lua.h"
#include "lua/fair_release_all.lua.h"
#include "lua/force_release.lua.h"
#include "lua/inspect.lua.h"
#include "lua/lock_info.lua.h"
#include "lua/lock_lib.lua.h"
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
#include "lua/shape_lib.lua.h"
#include "lua/token.lua.h"
#include "lua/write_acquire.lua.h"
#include "lua/write_release.lua.h"

namespace relock {
namespace internal {
namespace {

constexpr absl::string_view kUnpublished = "UNPUBLISHED ";

}  // namespace

std::vector<redis::ScriptSource> LockScripts() {
  // Built once; the ScriptSources point into these strings.
  static const std::string* const kAcquire =
      new std::string(absl::StrCat(lua::kShapeLib, lua::kAcquire));
  static const std::string* const kRelease =
      new std::string(absl::StrCat(lua::kLockLib, lua::kRelease));
  static const std::string* const kReleaseAll =
      new std::string(absl::StrCat(lua::kLockLib, lua::kReleaseAll));
  static const std::string* const kForceRelease = new std::string(
      absl::StrCat(lua::kLockLib, lua::kShapeLib, lua::kForceRelease));
  static const std::string* const kInspect =
      new std::string(absl::StrCat(lua::kShapeLib, lua::kInspect));
  // The fair lock's, with lock_lib and fair_lib.
  static const std::string* const kFairAcquire = new std::string(absl::StrCat(
      lua::kLockLib, lua::kShapeLib, lua::kFairLib, lua::kFairAcquire));
  static const std::string* const kFairRelease = new std::string(
      absl::StrCat(lua::kLockLib, lua::kFairLib, lua::kFairRelease));
  static const std::string* const kFairReleaseAll = new std::string(
      absl::StrCat(lua::kLockLib, lua::kFairLib, lua::kFairReleaseAll));
  static const std::string* const kFairLeave = new std::string(
      absl::StrCat(lua::kLockLib, lua::kFairLib, lua::kFairLeave));
  static const std::string* const kFairForceRelease =
      new std::string(absl::StrCat(lua::kLockLib, lua::kShapeLib, lua::kFairLib,
                                   lua::kFairForceRelease));
  // The read-write lock's, with rw_lib (and lock_lib where they publish).
  static const std::string* const kReadAcquire = new std::string(
      absl::StrCat(lua::kShapeLib, lua::kRwLib, lua::kReadAcquire));
  static const std::string* const kWriteAcquire =
      new std::string(absl::StrCat(lua::kShapeLib, lua::kWriteAcquire));
  static const std::string* const kReadRelease = new std::string(
      absl::StrCat(lua::kLockLib, lua::kRwLib, lua::kReadRelease));
  static const std::string* const kWriteRelease = new std::string(
      absl::StrCat(lua::kLockLib, lua::kRwLib, lua::kWriteRelease));
  static const std::string* const kRwReleaseAll = new std::string(
      absl::StrCat(lua::kLockLib, lua::kRwLib, lua::kRwReleaseAll));
  static const std::string* const kReadRenew =
      new std::string(absl::StrCat(lua::kRwLib, lua::kReadRenew));
  static const std::string* const kRwInspect =
      new std::string(absl::StrCat(lua::kShapeLib, lua::kRwInspect));
  static const std::string* const kRwForceRelease = new std::string(
      absl::StrCat(lua::kLockLib, lua::kShapeLib, lua::kRwForceRelease));
  // Inspection reads both shapes.
  static const std::string* const kLockInfo =
      new std::string(absl::StrCat(lua::kShapeLib, lua::kLockInfo));
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
  };
}

bool IsUnpublished(const redis::Reply& reply) {
  return reply.is_error() && absl::StartsWith(reply.str(), kUnpublished);
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
