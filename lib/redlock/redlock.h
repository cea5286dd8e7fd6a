// A Redlock client: the reentrant lock's algorithm (lib/lock/) over a
// QuorumBackend of N independent masters, with Redlock's policy (validity
// check, per-master timeout, retries with backoff). See
// include/relock/redlock.h for the contract.

#ifndef RELOCK_LIB_REDLOCK_REDLOCK_H_
#define RELOCK_LIB_REDLOCK_REDLOCK_H_

#include <memory>

#include "absl/status/statusor.h"
#include "lib/client/client_core.h"
#include "relock/redlock_options.h"

namespace relock {
namespace internal {

// Validates `options`, connects to every master (succeeding when a quorum
// answers; the others are retried in the background) and returns the core.
absl::StatusOr<std::shared_ptr<ClientCore>> ConnectRedlock(
    RedlockOptions options);

}  // namespace internal
}  // namespace relock

#endif  // RELOCK_LIB_REDLOCK_REDLOCK_H_
