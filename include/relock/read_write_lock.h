// relock/read_write_lock.h
//
// `relock::ReadWriteLock`: a pair of locks on one name, shared for readers
// and exclusive for a writer, across every thread and process. Wire-
// compatible with Redisson's RReadWriteLock: Java and C++ services share it.
//
//   relock::ReadWriteLock rw = client->GetReadWriteLock("catalog");
//   {
//     std::lock_guard<relock::Lock> read(rw.ReadLock());   // many at once
//   }
//   {
//     std::lock_guard<relock::Lock> write(rw.WriteLock()); // one, alone
//   }
//   // Or std::shared_lock / std::unique_lock on the ReadWriteLock itself
//   // (SharedTimedLockable, like std::shared_timed_mutex):
//   std::shared_lock<relock::ReadWriteLock> reading(rw);
//
// ReadLock() and WriteLock() are each a relock::Lock (relock/lock.h): the
// same calls (lock(), try_lock_for(), Acquire(), TryAcquire(), Release(),
// the asynchronous calls with an explicit Owner, the queries, SafeUntil()),
// the same leases (the watchdog's, or an explicit one), re-entry, loss
// reports and errors.
//
// Data model (Redisson's)
// -----------------------
// One hash N:
//   "mode"                     "read" or "write"
//   "<client-id>:<thread>"     a reader's read hold count
//   "<client-id>:<thread>:write"  the writer's write hold count
// Each read hold i of a reader also has a lease of its own, the key
// "{N}:<client-id>:<thread>:rwlock_timeout:<i>" ("N:..." when N contains
// "{"; either way in N's hash slot on a cluster); in read mode the hash lives
// as long as the longest of them, so a reader that dies holds the lock only
// until its own lease ends. Releases announce on "redisson_rwlock:{N}": a
// write release publishes "1", which wakes every waiter (readers may all
// enter); a read release that frees the lock publishes "0", which wakes one
// waiter per client (the next writer). Unlike Redisson, a write release that
// leaves the writer's own read holds (a downgrade) also publishes "1", since
// other readers may now enter.
//
// Rules
// -----
// - Readers share: a read acquire succeeds while the lock is free or in read
//   mode, whoever else reads.
// - A writer is alone: a write acquire succeeds only on a free lock (or as a
//   re-entry by the writer).
// - Downgrade: the writer may take the read lock too (in write mode); when
//   it then releases the write lock, the lock stays read-locked by it and
//   other readers may join.
// - No upgrade: an owner that holds the read lock and asks for the write
//   lock gets FailedPrecondition at once (it would wait for itself; Redisson
//   hangs there). Release the read lock first.
// - Both locks are reentrant per owner; the holds of one owner are counted
//   separately for reading and writing.
// - One name is one lock type: an acquire by a relock::Lock, FencedLock or
//   FairLock of N while N is a read-write lock fails with FailedPrecondition
//   (NOTALOCK) at once, whoever holds it, and so does a read or write
//   acquire while N is a plain or fair lock, or while N is free but its
//   fair lock's queue has a waiter in time (the types' waiters listen on
//   different channels: mixed, they would miss each other's releases). An
//   owner that holds N as one type gets FailedPrecondition from the other
//   before anything is sent. A MultiLock (relock/multi_lock.h) may not hold
//   both the read and the write lock of one ReadWriteLock.
//
// Leases: every hold has its lease as for relock::Lock. The read and write
// holds of one lock share the hash's TTL (a read hold's own lease is its
// lease key), so after a downgrade, renewals of the writer's watchdog read
// hold also keep an explicit write lease alive in Redis past its end (the
// client still treats the write hold as ended then: SafeUntil() and
// Release() say so), as in Redisson.
//
// Sharing a lock with Redisson readers: Redisson's read-lock renewal sets
// the hash's TTL and every reader's lease key (relock's too) to its own
// lockWatchdogTimeout, and it may shorten them. A relock reader whose lease
// is longer (an explicit one, or a longer lock_watchdog_timeout) may then
// lose its hold in Redis before its lease ends: SafeUntil() cannot know,
// and a writer may enter. Redisson's own explicit-lease readers share the
// flaw. Where Redisson readers share a read-write lock, give relock's
// readers the watchdog lease with lock_watchdog_timeout no longer than
// Redisson's.
//
// Writer starvation: writers CAN starve. The read lock is granted in read
// mode whoever waits, so a stream of readers whose holds overlap keeps the
// lock in read mode and a waiting writer waits until the readers pause (as
// in Redisson; there is no writer preference). tests/read_write_lock_test.cc
// (WritersStarveWhileReadsOverlap) shows it: a writer waiting 3 s gets
// nothing while two readers hand the read lock to each other, and gets the
// lock promptly once they stop. Where writers must get through, bound the
// readers' holds or pause them (for example with a FairLock in front).
//
// States, as seen by owner T (a thread or an explicit Owner):
//
// clang-format off
//   state                 | ReadLock() acquire  | WriteLock() acquire
//   ----------------------+---------------------+-------------------------
//   Free                  | -> Read-by-T(1)     | -> Write-by-T(1)
//   Read by others        | -> shared, T too    | waits (notified)
//   Read by T (n)         | -> Read-by-T(n+1)   | FailedPrecondition
//   Write by other        | waits (notified)    | waits (notified)
//   Write by T (n)        | -> T reads too      | -> Write-by-T(n+1)
//                         |    (downgrade)      |
// clang-format on
//
// Releases: ReadLock().Release() counts T's read holds down; WriteLock()'s
// its write holds. The lock is free once no reader and no writer holds it.
//
// Cost: as relock::Lock; a read hold also writes its lease key (one more
// SET in the same script). The watchdog renews read holds in batches with
// their lease keys and write holds like a plain lock's.
//
// Topologies: a single Redis, Sentinel and Redis Cluster (sharded pub/sub as
// for relock::Lock). There is no Redlock form (Unimplemented).
//
// Errors: as relock::Lock (relock/lock.h); also FailedPrecondition for an
// upgrade (above), and FailedPrecondition (NOTALOCK) when N holds anything
// but a read-write lock (a plain or fair lock of that name included). (As
// Redisson does, a read acquire judges a hash by its "mode" field alone: it
// joins any hash whose "mode" is "read", and the last reader's release
// deletes it. Do not give a read-write lock the name of a hash of your own.)
// ForceRelease() on ReadLock() frees the lock only in read mode, on WriteLock()
// only in write mode (Redisson's forceUnlock()).
//
// Thread-safety: a ReadWriteLock is a cheap, copyable handle; use it from
// any thread.

#ifndef RELOCK_READ_WRITE_LOCK_H_
#define RELOCK_READ_WRITE_LOCK_H_

#include <chrono>
#include <memory>
#include <string>

#include "relock/lock.h"
#include "relock/options.h"

namespace relock {

class ReadWriteLock {
 public:
  // A handle that refers to no client: every call fails with
  // FailedPrecondition. Get real ones from `Client::GetReadWriteLock()`.
  ReadWriteLock();

  // The shared lock and the exclusive lock (each a relock::Lock; copy them
  // freely, they refer to the same lock).
  Lock& ReadLock() { return read_; }
  const Lock& ReadLock() const { return read_; }
  Lock& WriteLock() { return write_; }
  const Lock& WriteLock() const { return write_; }

  const std::string& name() const { return read_.name(); }

  // --- SharedTimedLockable (std::unique_lock, std::shared_lock,
  // std::lock_guard): the exclusive calls take the write lock, the _shared
  // calls the read lock, for the calling thread (failures throw LockError as
  // Lock's; unlock calls never throw).
  void lock() { write_.lock(); }
  bool try_lock() { return write_.try_lock(); }
  template <class Rep, class Period>
  bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout) {
    return write_.try_lock_for(timeout);
  }
  template <class Clock, class Duration>
  bool try_lock_until(
      const std::chrono::time_point<Clock, Duration>& deadline) {
    return write_.try_lock_until(deadline);
  }
  void unlock() noexcept { write_.unlock(); }

  void lock_shared() { read_.lock(); }
  bool try_lock_shared() { return read_.try_lock(); }
  template <class Rep, class Period>
  bool try_lock_shared_for(const std::chrono::duration<Rep, Period>& timeout) {
    return read_.try_lock_for(timeout);
  }
  template <class Clock, class Duration>
  bool try_lock_shared_until(
      const std::chrono::time_point<Clock, Duration>& deadline) {
    return read_.try_lock_until(deadline);
  }
  void unlock_shared() noexcept { read_.unlock(); }

 private:
  friend class Client;
  ReadWriteLock(std::shared_ptr<internal::ClientCore> core, std::string name,
                const LockOptions& options);

  Lock read_;
  Lock write_;
};

}  // namespace relock

#endif  // RELOCK_READ_WRITE_LOCK_H_
