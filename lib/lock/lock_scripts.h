// The lock scripts (lua/*.lua) as a ScriptSet, shared by the single-node
// client and the Redlock client, and the readers of their results.

#ifndef RELOCK_LIB_LOCK_LOCK_SCRIPTS_H_
#define RELOCK_LIB_LOCK_LOCK_SCRIPTS_H_

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "lib/redis/reply.h"
#include "lib/redis/script.h"

namespace relock {
namespace internal {

// Indexes into LockScripts().
enum ScriptId : size_t {
  kAcquireScript,
  kReleaseScript,
  kReleaseAllScript,
  kForceReleaseScript,
  kRenewScript,
  kInspectScript,
  kTokenScript,
  kFairAcquireScript,
  kFairReleaseScript,
  kFairReleaseAllScript,
  kFairLeaveScript,
  kFairForceReleaseScript,
  kReadAcquireScript,
  kWriteAcquireScript,
  kReadReleaseScript,
  kWriteReleaseScript,
  kRwReleaseAllScript,
  kReadRenewScript,
  kRwInspectScript,
  kRwForceReleaseScript,
  kLockInfoScript,
  kSemaphoreAcquireScript,
  kSemaphoreAddScript,
  kSemaphoreDrainScript,
  kCounterSetScript,
  kCounterInspectScript,
  kLatchAwaitScript,
  kLatchCountDownScript,
  kPermitAcquireScript,
  kPermitReleaseScript,
  kPermitUpdateScript,
  kPermitRenewScript,
  kPermitAvailableScript,
  kSemaphoreInfoScript,
};

// The scripts, in ScriptId order, each with the helper files it uses
// prepended: lua/lock_lib.lua (publishing, release_one()), lua/shape_lib.lua
// (what a key holds: is_lock(), is_rwlock()), lua/fair_lib.lua (the fair
// lock's queue), lua/rw_lib.lua (the read-write lock's lease keys),
// lua/counter_lib.lua (a semaphore's or latch's count: count_at()),
// lua/permit_lib.lua (a permit-expirable semaphore's permits, after
// counter_lib).
std::vector<redis::ScriptSource> LockScripts();

// Whether a release script freed the lock but Redis refused to publish the
// unlock message (an UNPUBLISHED error reply).
bool IsUnpublished(const redis::Reply& reply);
// Whether `reply` is Redis's WRONGTYPE error: the script's key holds another
// type (overwritten since the hold was taken).
bool IsWrongType(const redis::Reply& reply);

// The status of a release that freed the lock without telling its waiters:
// PermissionDenied (or the code Redis' error maps to) saying exactly that.
absl::Status UnpublishedStatus(absl::string_view op, const redis::Reply& reply);

// The outcome of release_all for operation `op` ("release on close"): OK if
// the owner's hold was released, Aborted if the owner no longer held the
// lock (its lease was lost before), or the error.
absl::Status ReleaseAllResult(const redis::Reply& reply, absl::string_view op);

}  // namespace internal
}  // namespace relock

#endif  // RELOCK_LIB_LOCK_LOCK_SCRIPTS_H_
