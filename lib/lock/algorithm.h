// The lock algorithm of every lock type (the operations behind relock::Lock
// and its kin; a type's scripts are its LockModel). See include/relock/lock.h
// for the contract.
//
// Implemented, a file a job, in lib/lock/: acquire.cc (with attempts.cc:
// an acquire's plan and the steps of its attempts; acquire_machine.cc: its
// attempts and waits on the event loop), release.cc (and
// ForceRelease), holds.cc (Extend, loss callbacks, SafeUntil, renewal and
// close batches), queries.cc; attempt.cc (attempt.h: what they share: an
// attempt's judgement, the undo, Send()) holds ValidateName and
// ValidateReplicaSync. Each step is written once for the blocking and the
// asynchronous calls; time comes from LockEnv::clock(), so the algorithm
// runs on a fake backend and clock in tests (tests/engine_test.cc).

#ifndef RELOCK_LIB_LOCK_ALGORITHM_H_
#define RELOCK_LIB_LOCK_ALGORITHM_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "lib/backend/backend.h"
#include "lib/common/deadline.h"
#include "lib/lock/lock_env.h"
#include "lib/lock/lock_model.h"
#include "lib/lock/owner.h"
#include "lib/watchdog/watchdog.h"
#include "relock/options.h"

namespace relock {
namespace lock {

// InvalidArgument for an empty or over-long name.
absl::Status ValidateName(const std::string& name);

// InvalidArgument, naming the field ("replica_sync.replicas ..."), unless
// `sync` suits a client whose command_timeout is `command_timeout`.
absl::Status ValidateReplicaSync(const ReplicaSync& sync,
                                 absl::Duration command_timeout);

// InvalidArgument, naming the retry, unless `backoff` (may be null: the
// default) suits a spin wait (ClientOptions::spin_backoff): each of its
// first kSpinBackoffProbes delays, until it gives up, is finite and not
// negative, and not all of them are zero (a wait that never pauses would
// send its re-checks back to back).
inline constexpr int kSpinBackoffProbes = 32;
absl::Status ValidateSpinBackoff(const BackoffStrategy* backoff);

// An acquire's outcome: its status and, for a fenced acquire that succeeded,
// the fencing token (else -1).
using AcquireDone = std::function<void(absl::Status, int64_t token)>;

// The algorithms below run on any backend: a call goes to every node, and
// the answers are counted against the backend's quorum (one node: quorum 1).
// IsLocked, HoldCount, RemainingLease and ForceRelease ask the first node
// only (the single-node Lock API).

// Acquires `name` for `by` (a thread or an explicit owner), waiting (by
// notification) until `deadline`. `lease`: explicit lease, or nullopt for
// the watchdog lease. One owner's calls on one lock must not overlap. A
// fenced acquire that succeeds sets `*token` (if given) to its token.
absl::Status Acquire(LockEnv& env, const std::string& name, const OwnerId& by,
                     absl::optional<absl::Duration> lease, Deadline deadline,
                     const AcquireOptions& options, int64_t* token = nullptr);
// `kind`: the handle's lock type (a hold's own type takes precedence).
absl::Status Release(LockEnv& env, const std::string& name, const OwnerId& by,
                     LockKind kind = LockKind::kReentrant);

// Acquire() and Release() without blocking, for an explicit owner (a thread
// owner is InvalidArgument): `done` runs once, on the client's event loop
// thread, or on the calling thread before the call returns when it fails at
// once (bad input, a closed client). `keep` (the client) is held until then.
void AcquireAsync(LockEnv& env, std::shared_ptr<void> keep,
                  const std::string& name, const OwnerId& by,
                  absl::optional<absl::Duration> lease, Deadline deadline,
                  const AcquireOptions& options, AcquireDone done);
void ReleaseAsync(LockEnv& env, std::shared_ptr<void> keep,
                  const std::string& name, const OwnerId& by, LockKind kind,
                  std::function<void(absl::Status)> done);
// Waits (notified, as Acquire() does: the same attempts, confirmed
// subscription, outage ride-out, deadline and Cancelled on Close()) until
// `model`'s acquire step grants at `name`, for a synchronizer whose grant no
// owner holds: a semaphore's permits (options.permits), a count-down
// latch's zero (lib/lock/semaphore.h). No hold is registered, no queue is
// left, no lock metric is counted. `op` names the call in messages.
// Unimplemented on several masters.
struct GrantOp {
  absl::string_view op;    // "acquire"
  absl::string_view noun;  // "semaphore"
};
// `granted_at` (may be null): on success, when the winning attempt was sent.
absl::Status AwaitGrant(LockEnv& env, const std::string& name,
                        const LockModel& model, const AcquireOptions& options,
                        Deadline deadline, const GrantOp& op,
                        SteadyClock::time_point* granted_at = nullptr);
// AwaitGrant() without blocking: `done` runs once, on the client's event
// loop thread (or on the calling thread when it fails at once). `keep` (the
// client) is held until then.
void AwaitGrantAsync(LockEnv& env, std::shared_ptr<void> keep,
                     const std::string& name, const LockModel& model,
                     const AcquireOptions& options, Deadline deadline,
                     const GrantOp& op, std::function<void(absl::Status)> done);
// The same, telling `done` when the winning attempt was sent (on success).
void AwaitGrantAsync(
    LockEnv& env, std::shared_ptr<void> keep, const std::string& name,
    const LockModel& model, const AcquireOptions& options, Deadline deadline,
    const GrantOp& op,
    std::function<void(absl::Status, SteadyClock::time_point granted_at)> done);
// Sets `by`'s hold of `name` to a new explicit lease on a quorum of nodes
// (Redlock's Extend); the watchdog stops renewing it.
absl::Status Extend(LockEnv& env, const std::string& name, const OwnerId& by,
                    absl::Duration lease);
absl::StatusOr<bool> ForceRelease(LockEnv& env, const std::string& name,
                                  LockKind kind = LockKind::kReentrant);
// A loss callback of the registry (watchdog::LossFn) that calls `fn` with
// the kLockLost LockEvent of `owner`'s hold of `name`.
watchdog::LossFn LossCallback(const std::string& name, const OwnerField& owner,
                              std::function<void(const LockEvent&)> fn);
// Registers `fn` for `by`'s current hold of `name` (see Lock::OnLost()):
// FailedPrecondition if it holds none, Aborted if the hold ended,
// InvalidArgument for an empty `fn`.
absl::Status OnLost(LockEnv& env, const std::string& name, const OwnerId& by,
                    std::function<void(const LockEvent&)> fn);
// Until when `by` may assume it holds `name` (see Lock::SafeUntil()).
absl::StatusOr<SteadyClock::time_point> SafeUntil(LockEnv& env,
                                                  const std::string& name,
                                                  const OwnerId& by);

// The queries ask with `kind`'s inspect script (see LockModel::Inspect).
absl::StatusOr<bool> IsLocked(LockEnv& env, const std::string& name,
                              LockKind kind = LockKind::kReentrant);
// How many times `by` holds `name`, as Redis counts (plus the re-entries
// counted locally).
absl::StatusOr<int64_t> HoldCount(LockEnv& env, const std::string& name,
                                  const OwnerId& by,
                                  LockKind kind = LockKind::kReentrant);
absl::StatusOr<absl::Duration> RemainingLease(
    LockEnv& env, const std::string& name,
    LockKind kind = LockKind::kReentrant);
// The last fencing token handed out for `name` (0 if none yet).
absl::StatusOr<int64_t> LastToken(LockEnv& env, const std::string& name);

// Renews `items` with the watchdog lease: up to kRenewKeysPerCall locks of
// one Backend::KeyGroup() per script call, all sent together to every node
// (one round trip; on a cluster, one per master). Per item: renewed on a
// quorum, owner field gone on more than N - quorum, or undecided (with the
// error that left it so).
inline constexpr size_t kRenewKeysPerCall = 1000;
watchdog::RenewResult RenewHolds(LockEnv& env,
                                 const std::vector<RenewItem>& items,
                                 std::atomic<uint64_t>* round_trips);

// Releases `held` (a closing client's holds) in one round within `deadline`:
// per hold, OK, Aborted if its lease was already lost, or the error.
std::vector<absl::Status> ReleaseHolds(
    LockEnv& env, const std::vector<std::pair<HoldRegistry::Key, Hold>>& held,
    Deadline deadline);

}  // namespace lock
}  // namespace relock

#endif  // RELOCK_LIB_LOCK_ALGORITHM_H_
