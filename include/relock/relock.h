// relock/relock.h
//
// The umbrella header: include it to get the whole public API.
//
//   relock/options.h  ClientOptions (every default documented), LockEvent.
//   relock/client.h   Client: connects to Redis, hands out locks.
//   relock/lock.h     Lock (reentrant, TimedLockable), LockGuard, LockError.
//   relock/fair_lock.h
//                     FairLock: a Lock taken by its waiters in arrival
//                     order (Redisson's RFairLock).
//   relock/fenced_lock.h
//                     FencedLock: a Lock whose acquisitions hand out fencing
//                     tokens (Redisson's RFencedLock).
//   relock/read_write_lock.h
//                     ReadWriteLock: a shared ReadLock() and an exclusive
//                     WriteLock() on one name (Redisson's RReadWriteLock).
//   relock/multi_lock.h
//                     MultiLock: several locks taken as one, all or
//                     nothing, in a deadlock-free order.
//   relock/count_down_latch.h
//                     CountDownLatch: waiters go when the count reaches
//                     zero (Redisson's RCountDownLatch).
//   relock/permit_expirable_semaphore.h
//                     PermitExpirableSemaphore: permits by id that end at
//                     their lease end (Redisson's RPermitExpirableSemaphore).
//   relock/semaphore.h
//                     Semaphore: a counting semaphore, at most N holders
//                     (Redisson's RSemaphore).
//   relock/owner.h    Owner: an explicit owner token for code whose work
//                     moves between threads.
//   relock/future.h   Future: the result of an asynchronous call.
//   relock/redlock.h  RedlockClient, RedlockLock: the lock on a quorum of N
//                     independent masters.
//   relock/backoff.h  Retry delay strategies and RetryWithBackoff.
//
// The vocabulary those share (the library's own code below the API uses only
// these; scripts/check-layers.sh enforces it):
//
//   relock/options.h, relock/redlock_options.h
//                     ClientOptions, LockOptions, LockEvent; RedlockOptions.
//   relock/limits.h   kMaxLockNameSize, kMinLease, kMaxLease, kMaxCount,
//                     kMaxPermits.
//   relock/lock_kind.h
//                     LockKind: the lock types of the family.
//   relock/metrics.h, relock/lock_info.h, relock/backoff.h, relock/version.h
//                     What a client reports; retry delays; kVersionString.
//
// Quick start:
//
//   relock::ClientOptions options;
//   options.url = "redis://127.0.0.1:6379";
//   auto client = relock::Client::Connect(options);
//   if (!client.ok()) { ... client.status() ... }
//   relock::Lock lock = (*client)->GetLock("order:42");
//   {
//     std::lock_guard<relock::Lock> guard(lock);  // or lock.Acquire()
//     ...                                         // reentrant: may lock again
//   }

#ifndef RELOCK_RELOCK_H_
#define RELOCK_RELOCK_H_

#include "relock/backoff.h"
#include "relock/client.h"
#include "relock/count_down_latch.h"
#include "relock/fair_lock.h"
#include "relock/fenced_lock.h"
#include "relock/future.h"
#include "relock/limits.h"
#include "relock/lock.h"
#include "relock/lock_info.h"
#include "relock/lock_kind.h"
#include "relock/metrics.h"
#include "relock/multi_lock.h"
#include "relock/options.h"
#include "relock/owner.h"
#include "relock/permit_expirable_semaphore.h"
#include "relock/read_write_lock.h"
#include "relock/redlock.h"
#include "relock/redlock_options.h"
#include "relock/semaphore.h"
#include "relock/version.h"

#endif  // RELOCK_RELOCK_H_
