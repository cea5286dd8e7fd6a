// The lock scripts (lua/*.lua) as a ScriptSet, shared by the single-node
// client and the Redlock client.

#ifndef RELOCK_LIB_LOCK_LOCK_SCRIPTS_H_
#define RELOCK_LIB_LOCK_LOCK_SCRIPTS_H_

#include <cstddef>
#include <vector>

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
};

std::vector<redis::ScriptSource> LockScripts();

}  // namespace internal
}  // namespace relock

#endif  // RELOCK_LIB_LOCK_LOCK_SCRIPTS_H_
