// relock/fair_lock.h
//
// `relock::FairLock`: a relock::Lock that goes to its waiters in the order
// they arrived, across every thread and process (first come, first served).
// Wire-compatible with Redisson's RFairLock: Java and C++ services share the
// lock and one queue.
//
//   relock::FairLock lock = client->GetFairLock("jobs:nightly");
//   std::lock_guard<relock::FairLock> guard(lock);   // or Acquire()/Release()
//
// Data model (Redisson's)
// -----------------------
// The lock is the hash N, as for relock::Lock (same owner fields, leases,
// watchdog, re-entry and loss reports). Beside it:
//   "redisson_lock_queue:{N}"    a list: the waiting owners, in arrival order
//   "redisson_lock_timeout:{N}"  a sorted set: each waiter's deadline (Unix
//                                milliseconds)
// ("...:N" instead of "...:{N}" when N contains "{"; either way in N's hash
// slot on a cluster). A waiter's channel is its own,
// "redisson_lock__channel:{N}:<owner>", and a release publishes the unlock
// message on the channel of the waiter at the head of the queue only: one
// release wakes exactly one waiter, in whichever process it waits (no herd).
//
// Order: an owner that finds the lock held (or free but promised to an
// earlier waiter) joins the tail of the queue; the lock is taken only by the
// waiter at the head, or by anyone when the queue is empty. Re-entry by the
// holder never queues. try_lock() and TryAcquire(0) make one attempt that
// does not join the queue (they fail while others wait, even on a free lock).
//
// Waiters that die: a waiter's deadline is the time its turn is expected
// (the deadline of the waiter ahead of it, or the holder's lease end, when it
// joined) plus the queue wait (FairLockOptions::queue_wait, 5 minutes by
// default, Redisson's threadWaitTime); each time a waiter takes the lock, the
// deadlines behind it move one queue wait earlier. A waiter still at the head
// after its deadline is presumed dead and dropped by the next script that
// runs on the lock, so a crashed waiter holds up those behind it until its
// deadline at the latest: at most (its expected wait when it joined) +
// queue_wait. The waiter behind it re-checks by then on its own. The same
// rule applies to a live waiter whose turn is overdue because the holders
// ahead held the lock far longer than their leases suggested: it is dropped
// and joins again at the tail when it next re-checks (within 30 s), losing
// its place (Redisson's behaviour too). Choose a queue_wait longer than the
// usual hold; every client of one lock should use the same one.
//
// A waiter that gives up (TryAcquire's wait runs out, the client closes, an
// error) leaves the queue at once, and those behind it move up; if the lock
// was free and it was next in line, the new head waiter is woken. (The call
// waits at most 100 ms for Redis to confirm; should the leave not land, Redis
// unreachable or the client closing, its deadline removes it as above.) A
// waiter that dropped stale waiters ahead of a free lock wakes the new head.
//
// Clocks: deadlines are taken from the Redis server's clock (TIME), in the
// scripts; Redisson's clients use their own clocks. In a mixed deployment,
// keep the hosts' clocks synchronized (NTP): skew shifts when Redisson's
// waiters are presumed dead.
//
// States, as seen by the calling thread or explicit owner T (everything else
// as relock::Lock):
//
// clang-format off
//   state             | lock()/Acquire          | try_lock(), TryAcquire(0)
//   ------------------+-------------------------+--------------------------
//   Free, no queue    | -> Held-by-T(1)         | true, Held-by-T(1)
//   Free, T at head   | -> Held-by-T(1)         | true, Held-by-T(1)
//   Free, others      | joins the queue, waits  | false (not queued)
//   queued before T   | its turn (notified)     |
//   Held-by-T(n)      | -> Held-by-T(n+1)       | true, (n+1)
//   Held-by-other     | joins the queue, waits  | false (not queued)
//                     | its turn (notified)     |
// clang-format on
//
// Cost: as relock::Lock when uncontended (one round trip each way). A waiter
// subscribes to its own channel (one SUBSCRIBE per wait, not per lock), and
// re-checks without a message only at the holder's lease end, at the
// deadline of the waiter ahead, and at least every 30 s.
//
// Topologies: a single Redis, Sentinel and Redis Cluster (sharded pub/sub as
// for relock::Lock), Redis 6.0.6 or later (the scripts use LPOS). There is no
// Redlock form.
//
// One name is one lock type. A FairLock's waiters listen on channels of
// their own, which a plain lock's release does not publish on in Redisson,
// and a plain lock's waiters on one a fair release does not publish on; so
// mixing a FairLock and a relock::Lock (or FencedLock) of one name loses
// wake-ups. What the scripts can see is refused with FailedPrecondition
// (NOTALOCK), at once and with nothing written:
//   - a Lock's (or FencedLock's) acquire of N while N's queue has a waiter in
//     time (a re-entry of a plain hold excepted): it would take the lock past
//     the queue;
//   - a FairLock's acquire of N while N is a read-write lock (or anything but
//     a lock), and a ReadWriteLock's while N is a fair (or plain) lock.
// What they cannot see: a held fair lock with nobody queued is the same hash
// as a held plain lock (Redisson's model has no marker). So a FairLock that
// finds N held by a plain lock queues; relock's plain release also wakes the
// next waiter of N's fair queue still in time (Redisson's does not: the
// waiter then re-checks at the holder's lease end, within 30 s). A waiter in
// time counts wherever it queues: one that died at the head (its deadline
// passed, and no fair lock's call dropped it yet) hides nobody behind it.
// And a plain lock's waiter of N held
// by a FairLock with nobody queued is not woken by the fair release: it
// re-checks at the holder's lease end (or is refused, as above, once a fair
// waiter queued). Use one type per name.
//
// Errors: as relock::Lock (relock/lock.h); also InvalidArgument for a
// queue_wait outside [1 ms, 365 d] (every call of the handle),
// FailedPrecondition (WRONGTYPE) when the queue's keys hold something else,
// and FailedPrecondition (NOTALOCK) for the mixes above.
//
// Thread-safety: as relock::Lock; a FairLock is a cheap, copyable handle.

#ifndef RELOCK_FAIR_LOCK_H_
#define RELOCK_FAIR_LOCK_H_

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "relock/lock.h"
#include "relock/options.h"

namespace relock {

// Settings of one fair lock handle (Client::GetFairLock(name, options)):
// LockOptions, and the queue wait.
struct FairLockOptions : LockOptions {
  // How long past its expected turn a waiter keeps its place in the queue
  // (Redisson's threadWaitTime; see the banner). In [1 ms, 365 d].
  absl::Duration queue_wait = absl::Minutes(5);
};

class FairLock : public Lock {
 public:
  // A handle that refers to no client: every call fails with
  // FailedPrecondition. Get real ones from `Client::GetFairLock()`.
  FairLock() { kind_ = LockKind::kFair; }

  // Everything else is relock::Lock's: lock(), try_lock*(), unlock(),
  // Acquire(), TryAcquire(), Release(), the asynchronous calls, the queries
  // and ForceRelease() (which frees the lock and wakes the head waiter; the
  // queue stays).

 private:
  friend class Client;
  FairLock(std::shared_ptr<internal::ClientCore> core, std::string name,
           const FairLockOptions& options);
};

}  // namespace relock

#endif  // RELOCK_FAIR_LOCK_H_
