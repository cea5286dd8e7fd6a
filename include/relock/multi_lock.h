// relock/multi_lock.h
//
// `relock::MultiLock`: several locks taken as one, all or nothing, in the
// style of Redisson's RedissonMultiLock. The locks may belong to different
// clients and backends (single servers, clusters, Sentinel, Redlock):
//
//   relock::MultiLock both(orders->GetLock("order:42"),
//                          stock->GetLock("sku:7"));
//   std::lock_guard<relock::MultiLock> guard(both);   // both, or throws
//
// How it works
// ------------
// Acquiring takes the locks one after the other in one global order (by name,
// then by the servers the lock lives on), whatever order they were given in,
// waiting for each (notified, as Lock does) within one deadline for the whole
// call. Since every MultiLock, in every process, takes its locks in that same
// order, two MultiLocks over overlapping sets cannot deadlock: one of them
// always holds the first contended lock. If a lock cannot be taken (the
// deadline passes while another owner holds it, or its Redis fails), the locks
// already taken by this call are released, in reverse order, before the call
// returns its error: nothing the call knows it took stays held. (A lock whose
// acquire Redis did not answer in time, a server paused or stalled, may still
// be taken when Redis wakes: as for a single lock, relock/lock.h, Unavailable,
// that count is never renewed and ends with its lease.) Releasing releases
// every lock (all of them are tried even if one fails) and reports the first
// failure.
//
// States, as seen by the calling thread (or explicit owner) T:
//
// clang-format off
//   state            | lock()/Acquire         | TryAcquire(wait)
//   -----------------+------------------------+--------------------------
//   all free         | all Held-by-T          | all Held-by-T
//   some held by     | waits for each in      | DeadlineExceeded after
//   other owners     | order, then all held   | wait; none taken
//   a Redis failing  | its error (Unavailable | the same; none taken
//                    | ...); none taken       |
// clang-format on
//
// Each component is a reentrant lock of its own: T may also hold some of them
// alone, and a MultiLock over them re-enters those (releasing the MultiLock
// leaves T's other holds). A lock listed twice (from one client) is taken twice
// (a re-entry) and released twice. Leases, the watchdog and loss reports are
// the components' own (each lock's client reports a lost component).
//
// Errors: InvalidArgument for a MultiLock without locks (every call) and a
// negative wait; FailedPrecondition, before anything is taken, for a set that
// holds one lock (the same name on the same servers) as two lock types: the
// read and the write lock of one ReadWriteLock (taken in the order added, the
// set would be an upgrade, which fails, or a downgrade, which succeeds: take
// the write lock alone, its owner may read too), or a Lock and a FairLock of
// one name; and for a set that holds one lock through two clients of the same
// servers (each client is another owner: the set would wait for itself);
// otherwise the failing component's status, with its lock's name (and for the
// blocking calls on the event loop thread of a component's client,
// FailedPrecondition). The asynchronous calls' callbacks follow relock/lock.h's
// rules (StatusCallback). unlock() never throws: a failed release of a
// component becomes a kUnlockFailed LockEvent on that lock's client.
//
// Cost: N locks take N acquire round trips one after the other, and N
// release round trips to release (one after the other for Release() and
// unlock(), sent together for ReleaseAsync()). Taking them in parallel would
// need the deadlock-freedom of a retry-and-backoff loop instead of an
// order, and waiting locks would then wake each other in vain.
//
// Thread-safety: a MultiLock is a copyable set of handles; one object may
// be used by many threads at once.

#ifndef RELOCK_MULTI_LOCK_H_
#define RELOCK_MULTI_LOCK_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "relock/lock.h"
#include "relock/owner.h"
#include "relock/redlock.h"

namespace relock {

namespace internal {
struct MultiLockPart;  // one lock of the set, whatever its kind
}  // namespace internal

class MultiLock : public internal::LockableBase<MultiLock> {
 public:
  // An empty set: every call fails with InvalidArgument until locks are
  // added.
  MultiLock() = default;
  // The given locks (Lock, FencedLock, RedlockLock, in any order and mix).
  template <class... Locks>
  explicit MultiLock(const Locks&... locks) {
    (Add(locks), ...);
  }
  explicit MultiLock(const std::vector<Lock>& locks) {
    for (const Lock& lock : locks) Add(lock);
  }

  // Adds a lock to the set. Not while the set is held.
  MultiLock& Add(const Lock& lock);
  MultiLock& Add(const RedlockLock& lock);

  // The locks' names, in the order they are taken.
  std::vector<std::string> names() const;
  size_t size() const;

  // Releases every lock of the calling thread; never throws. A component
  // whose release fails is reported as a kUnlockFailed LockEvent on its own
  // client (the others are still released).
  void unlock() noexcept;

  // lock(), try_lock(), try_lock_for(), try_lock_until(), unlock(),
  // Acquire(), Acquire(lease), TryAcquire(wait), TryAcquire(wait, lease),
  // Release(), each with an explicit relock::Owner too, and the
  // asynchronous calls (AcquireAsync, TryAcquireAsync, ReleaseAsync): as
  // relock::Lock (internal::LockableBase in relock/lock.h), for all the
  // locks at once. An explicit `lease` applies to each lock; `wait` bounds
  // the whole call.

 private:
  friend class internal::LockableBase<MultiLock>;
  template <class L>
  void AddLock(const L& handle);  // Lock or RedlockLock
  void Insert(internal::MultiLockPart part);
  absl::Status AcquireFor(const Owner& owner, absl::Duration wait,
                          absl::optional<absl::Duration> lease);
  absl::Status ReleaseFor(const Owner& owner);
  void AcquireAsyncFor(const Owner& owner, absl::Duration wait,
                       absl::optional<absl::Duration> lease,
                       std::function<void(absl::Status)> done);
  void ReleaseAsyncFor(const Owner& owner,
                       std::function<void(absl::Status)> done);
  // Releases parts [0, n) of `owner` in reverse order: the first failure
  // (or OK); with `report`, each failure also goes to its lock's client.
  absl::Status ReleaseFirst(const Owner& owner, size_t n, bool report);

  // Sorted by their global order; shared by copies (Add() copies on write).
  std::shared_ptr<const std::vector<internal::MultiLockPart>> parts_;
};

}  // namespace relock

#endif  // RELOCK_MULTI_LOCK_H_
