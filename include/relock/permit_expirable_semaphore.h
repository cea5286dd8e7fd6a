// relock/permit_expirable_semaphore.h
//
// `relock::PermitExpirableSemaphore`: a counting semaphore on Redis whose
// permits are handed out by id and each ends at its lease end, so that a
// process that dies holding one gives it back. Wire-compatible with
// Redisson's RPermitExpirableSemaphore (its sources as of 2024, 3.2x/3.3x:
// permit ids are 16 bytes on the wire, 32 hex digits in the API).
//
//   relock::PermitExpirableSemaphore slots =
//       client->GetPermitExpirableSemaphore("render:slots");
//   (void)slots.TrySetPermits(4);                  // once, by anyone
//   absl::StatusOr<std::string> id = slots.Acquire(absl::Seconds(30));
//   if (id.ok()) { ...; (void)slots.Release(*id); }
//
// Use it instead of a Semaphore (relock/semaphore.h) when holders may die:
// a Semaphore's permits belong to nobody and never come back by
// themselves.
//
// Data model (Redisson's)
// -----------------------
// The semaphore N is the string N holding the available permits (as a
// Semaphore's) and the sorted set "{N}:timeout" ("N:timeout" when N
// contains "{"; either way in N's cluster slot) of the permits out: member
// the id's 16 bytes, score the epoch millisecond its lease ends
// (922337203685477: Redisson's "no lease"). Every acquire, lease update
// and query first gives the expired permits back to N and publishes the new
// count on "redisson_sc:{N}"; a release publishes too. A waiter is woken by
// those messages and re-checks at the earliest lease end of the permits out
// (no poll); without pub/sub (ClientOptions::pubsub false) it re-checks on
// ClientOptions::spin_backoff.
//
// Leases: Acquire(lease) with a finite lease in [kMinLease, kMaxLease]
// (relock/limits.h): the permit returns at its end unless released or
// updated. Acquire() and Acquire(absl::InfiniteDuration()): the watchdog
// mode, the lease is ClientOptions::lock_watchdog_timeout and the client's
// watchdog renews it as it renews locks, for as long as the client lives and
// the permit is not released; a permit the watchdog finds gone (expired,
// removed) is reported as a lock loss is: a LockEvent kLockLost to
// ClientOptions::on_lock_event, lock_name N, owner the permit id. Close()
// gives back the permits the client still holds (kReleasedOnClose events),
// as it releases locks.
//
// Names and cluster slots: as for Semaphore; a name whose channel or
// "{N}:timeout" key would be in another slot ("jobs}a") is InvalidArgument
// on a cluster, and nothing is written. Replica acknowledgement: as for
// Semaphore's acquire (ClientOptions::replica_sync); a permit taken without
// enough acknowledgements is given back before Unavailable, and a watchdog
// permit's renewals are followed by the same WAIT, as a lock's are.
// UpdateLeaseTime() sends no WAIT (as Release() sends none): a failover
// right after it may bring back the lease it replaced.
//
// States, for one permit id:
//
// clang-format off
//   state           | Release(id)          | UpdateLeaseTime(id, l)
//   ----------------+----------------------+-----------------------
//   out, leased     | given back, OK       | lease = l from now, OK
//   out, lease over | given back, Aborted  | reclaimed, NotFound
//   (not reclaimed) |                      |
//   not out         | NotFound, no change  | NotFound, no change
//   N not a count   | FailedPrecondition, nothing changed
// clang-format on
//
// Acquire: a permit when N > 0 (after reclaiming); else it waits (notified);
// TryAcquire: DeadlineExceeded after `wait`. N absent counts 0.
//
// Errors (absl::StatusCode):
//   InvalidArgument     an empty or over-long name, or one in the wrong
//                       cluster slot (see above); TrySetPermits' permits not
//                       in [0, kMaxPermits]; a lease not in [kMinLease,
//                       kMaxLease] (nor InfiniteDuration for an acquire); a
//                       negative wait; a permit id that is not 2 to 64
//                       lower-case hex digits (ids are lower case, as
//                       Redisson's are: an upper-case copy is refused).
//   NotFound            Release/UpdateLeaseTime of an id that is not out.
//   Aborted             Release of a permit whose lease had run out (it is
//                       given back all the same).
//   FailedPrecondition  N holds anything but a count, or "{N}:timeout"
//                       anything but a sorted set (nothing is changed or
//                       deleted); the client is closed; a blocking call on
//                       the event loop thread; an unbound handle. Also a
//                       Release answered only after Close() gave the permit
//                       back itself (the message says so; relock/client.h).
//   DeadlineExceeded    TryAcquire's wait ended without a permit.
//   Unavailable         Redis unreachable, slow or failing; an acquire whose
//                       answer was lost (or came after its wait ended) may
//                       have taken a permit, which then returns at its
//                       lease end (at most the watchdog's lease in
//                       watchdog mode). So may a re-check that Close() cut
//                       off while it was under way.
//   PermissionDenied    ACL refusals, as for Semaphore (a refused WAIT:
//                       the permit it took is given back).
//   Cancelled           the client was closed while the call waited.
//
// Defaults: Acquire() waits without limit with the watchdog's lease.
//
// Deliberate differences from Redisson's RPermitExpirableSemaphore:
//   - Lease ends are scored on the Redis server's clock (TIME), not on each
//     client's wall clock; Redisson's clients score on theirs, so mixed use
//     assumes the clocks agree (as Redisson's own clients must).
//   - No acquire without a lease: relock's "no lease" is the watchdog mode
//     (a renewed finite lease); Redisson's never-expiring permits are
//     honoured (never reclaimed) but never created.
//   - One permit per call (Redisson also takes several at once).
//   - Release of an unknown id is NotFound and of an expired one Aborted
//     (Redisson throws IllegalArgumentException for both); a reclaim gives
//     back every expired permit at once (Redisson's acquire only as many as
//     it asks for).
//   - A key of another kind is FailedPrecondition and left alone.
//   - Close() gives back the permits the client holds.
//
// Thread-safety: a cheap, copyable handle (a name and the client); every
// method may be called from any thread. A permit is not tied to a thread:
// any thread or process may release any id (as with Redisson).

#ifndef RELOCK_PERMIT_EXPIRABLE_SEMAPHORE_H_
#define RELOCK_PERMIT_EXPIRABLE_SEMAPHORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "relock/future.h"

namespace relock {

namespace internal {
class ClientCore;
}  // namespace internal

class PermitExpirableSemaphore {
 public:
  // A handle that refers to no client: every call fails with
  // FailedPrecondition. Get real ones from
  // `Client::GetPermitExpirableSemaphore()`.
  PermitExpirableSemaphore() = default;

  // The semaphore's name: the Redis key of its count.
  const std::string& name() const { return name_; }

  // Sets the available permits to `permits` (>= 0) if none are set yet,
  // and wakes the waiters. True if it set them.
  ABSL_MUST_USE_RESULT absl::StatusOr<bool> TrySetPermits(int64_t permits);

  // Blocks until a permit was taken; its id. `lease`: how long it lasts
  // unless released; InfiniteDuration (and the overload without one): the
  // watchdog mode (see Leases above).
  ABSL_MUST_USE_RESULT absl::StatusOr<std::string> Acquire();
  ABSL_MUST_USE_RESULT absl::StatusOr<std::string> Acquire(
      absl::Duration lease);
  // Waits at most `wait` (>= 0; zero = one attempt) for a permit;
  // DeadlineExceeded if none came.
  ABSL_MUST_USE_RESULT absl::StatusOr<std::string> TryAcquire(
      absl::Duration wait);
  ABSL_MUST_USE_RESULT absl::StatusOr<std::string> TryAcquire(
      absl::Duration wait, absl::Duration lease);
  // Gives permit `permit_id` back and wakes the waiters (see States). After
  // any error (Unavailable: it may have run) this client no longer renews
  // the permit: it returns at its lease end at the latest, and retrying
  // Release() gives it back at once if the first attempt did not run.
  ABSL_MUST_USE_RESULT absl::Status Release(const std::string& permit_id);
  // Sets the lease of permit `permit_id` to `lease` (finite) from now; the
  // watchdog stops renewing it. (A renewal round already collected when the
  // call is made may still reach Redis after it; renewals only raise a
  // lease, so a shorter `lease` may then end up to lock_watchdog_timeout
  // from that round instead. Call it again after a round interval to be
  // sure of a shorter one.)
  ABSL_MUST_USE_RESULT absl::Status UpdateLeaseTime(
      const std::string& permit_id, absl::Duration lease);
  // The permits available now, after giving back the expired ones (0 when
  // none were set). Stale at once.
  ABSL_MUST_USE_RESULT absl::StatusOr<int64_t> AvailablePermits();

  // --- Asynchronous calls, as Semaphore's: a Future (relock/future.h) or
  // --- `done`, once, on the client's event loop thread (on the calling
  // --- thread when they fail at once); Close() ends a wait with Cancelled.
  Future<absl::StatusOr<std::string>> AcquireAsync(
      absl::Duration lease = absl::InfiniteDuration());
  void AcquireAsync(absl::Duration lease,
                    std::function<void(absl::StatusOr<std::string>)> done);
  Future<absl::StatusOr<std::string>> TryAcquireAsync(
      absl::Duration wait, absl::Duration lease = absl::InfiniteDuration());
  void TryAcquireAsync(absl::Duration wait, absl::Duration lease,
                       std::function<void(absl::StatusOr<std::string>)> done);
  Future<absl::Status> ReleaseAsync(const std::string& permit_id);
  void ReleaseAsync(const std::string& permit_id,
                    std::function<void(absl::Status)> done);

 private:
  friend class Client;
  PermitExpirableSemaphore(std::shared_ptr<internal::ClientCore> core,
                           std::string name)
      : core_(std::move(core)), name_(std::move(name)) {}

  std::shared_ptr<internal::ClientCore> core_;
  std::string name_;
};

}  // namespace relock

#endif  // RELOCK_PERMIT_EXPIRABLE_SEMAPHORE_H_
