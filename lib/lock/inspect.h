// Lock inspection for operators (relock::Client::InspectLock / ListLocks,
// the `relock status` and `relock list` commands): a lock's shape read in one
// script (lua/lock_info.lua), its waiters from PUBSUB on the master of its
// channel, and each holder's client info record.
//
// Costs: InspectLock is one script call, one PUBSUB NUMSUB (and one PUBSUB
// SHARDNUMSUB), and one HGETALL per distinct holder client, each a round
// trip. ListLocks is SCAN (MATCH pattern, TYPE hash, COUNT 1000) on every
// master, then InspectLock per hash found: meant for a person looking, not
// for a loop in a server.

#ifndef RELOCK_LIB_LOCK_INSPECT_H_
#define RELOCK_LIB_LOCK_INSPECT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/lock/lock_env.h"
#include "relock/lock_info.h"

namespace relock {
namespace lock {

// "relock:client:<client_id>": where a client publishes its info record
// (lib/client/client_info.h).
std::string ClientInfoKey(absl::string_view client_id);

// The lock at `name` (see relock::Client::InspectLock for the errors).
absl::StatusOr<LockInfo> InspectLock(LockEnv& env, absl::string_view name);

// The permits InspectSemaphore() lists at the most.
inline constexpr int64_t kMaxListedPermits = 1000;

// The semaphore at `name` (see relock::Client::InspectSemaphore).
absl::StatusOr<SemaphoreInfo> InspectSemaphore(LockEnv& env,
                                               absl::string_view name);

// Every lock whose name matches the glob `pattern`, sorted by name (see
// relock::Client::ListLocks).
absl::StatusOr<std::vector<LockInfo>> ListLocks(LockEnv& env,
                                                absl::string_view pattern);

}  // namespace lock
}  // namespace relock

#endif  // RELOCK_LIB_LOCK_INSPECT_H_
