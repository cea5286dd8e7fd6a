// relock/lock.h
//
// `relock::Lock`: a distributed, reentrant lock on Redis, in the style of
// Redisson's RLock; `relock::LockGuard`, its RAII guard; `relock::LockError`,
// the exception thrown by the std-style calls.
//
// How it works
// ------------
// A lock named N is a Redis hash at key N. Its single field is the owner,
// "<client-id>:<thread-number>", and the field's value is the owner's hold
// count; the key's TTL is the lease. Acquiring runs one Lua script: if the key
// is absent or the owner field exists, increment the count and set the lease;
// otherwise return the holder's remaining TTL. Releasing runs another: count
// down, and when the count reaches zero delete the key and publish "0" on the
// channel "redisson_lock__channel:{N}". This is Redisson's data model, so a
// Redisson client and relock exclude each other on the same name.
//
// A thread that finds the lock held subscribes (through the client's single
// pub/sub connection) to the lock's channel, re-checks the lock once the
// subscription is confirmed, and then sleeps until an unlock message, the
// holder's lease or its own deadline, whichever comes first. One unlock
// message wakes one waiting thread of each client. Nobody polls.
//
// Cost: an uncontended acquire is one round trip, a release another. An
// owner's re-entry (a thread's, or an explicit relock::Owner's, blocking or
// asynchronous) of a lock it holds with the watchdog lease costs none:
// while the hold's lease is known current (SafeUntil() ahead), the client
// counts the re-entry itself, and the matching release is counted down
// there too; only the outermost release goes to Redis. (Redis's hash then
// shows count 1 where Redisson's would show the depth: the one difference
// a Redisson peer could see; ownership and exclusion are the same.
// HoldCount() includes the local re-entries. An asynchronous call that
// re-enters or releases locally still completes on the event loop thread.
// Re-entries with an explicit lease or of a FencedLock go to Redis.) A
// waiter holds the lock about one pub/sub delivery plus one round trip
// after the holder's release.
//
// Owners and reentrancy
// ---------------------
// The owner is the calling *thread* of the *client*: two threads of one
// process are different owners, as are two clients in one process. Code
// whose work moves between threads passes an explicit relock::Owner instead
// (relock/owner.h; Acquire(owner), Release(owner), ...): the hold then
// belongs to that token, whichever thread calls. The owner may lock again
// any number of times; the lock is free after as many releases. A `Lock` object
// is a cheap, copyable handle (a name and the client); one object may be used
// by many threads at once, like a std::mutex shared by workers, and two handles
// with the same name are the same lock.
//
// States, as seen by the calling thread (or explicit owner) T:
//
// clang-format off
//   state         | lock()/Acquire    | try_lock()    | unlock()/Release
//   --------------+-------------------+---------------+--------------------
//   Free          | -> Held-by-T(1)   | true,         | FailedPrecondition
//                 |                   | Held-by-T(1)  |
//   Held-by-T(n)  | -> Held-by-T(n+1) | true, (n+1)   | n>1: n-1; 1: Free
//   Held-by-other | waits (notified)  | false         | FailedPrecondition
//   Lease-lost(n) | as Free/other     | as Free/other | Aborted ("lease
//   (T held it;   | (a fresh hold)    |               | lost"); n>1: n-1;
//   lease ran out |                   |               | 1: as Free/other
//   or key gone)  |                   |               |
// clang-format on
//
// A re-entry that goes to Redis (a fenced lock's, one with an explicit lease,
// or one whose lease is not known to be current) and finds the hold gone there
// before the client noticed is Aborted (NOTHELD) and writes nothing: taking the
// lock anew with a count of 1 would hide the loss, and an inner release would
// then free the lock while T believed it still held the outer level. The hold
// is marked lost and reported as any loss is (below: a kLockLost event, the
// OnLost callbacks), and T's later releases of the outer levels say Aborted. So
// for a release of an inner level that finds the hold gone, and for a re-entry
// that Redis counted while the client found the hold lost (on one server the
// level it added is given back). Once the client knows the hold lost
// (IsHeldByCurrentThread() is false), an acquire by T takes the lock anew, as
// Redisson's does: code that nests must stop its outer levels on the loss
// (OnLost), not only the inner one.
//
// Leases and the watchdog: `Acquire()` / `lock()` take a watchdog lease of
// `ClientOptions::lock_watchdog_timeout` (30 s by default), which the
// client's watchdog renews about every third of it (10 s) for as long as the
// lock is held, however long that is: registration happens before Acquire()
// returns, renewal stops just before the final Release() is sent (so no
// renewal can keep a released lock alive), and nested holds keep it renewed
// until the outermost release. Renewals of all locks of a client are batched
// (1000 locks per script call, all calls of a round pipelined).
// `Acquire(lease)` sets an explicit lease that is never renewed: the lock
// simply expires, and afterwards Release() says Aborted ("explicit lease ran
// out") for a minute, then FailedPrecondition; the client forgets the hold
// then, and Close() does not release or report it. Its end is sent + lease
// on this client's clock (no later than Redis's): from then on an acquire
// by T is a fresh hold, not a re-entry, even if Redis still has the old
// one (the fresh hold absorbs its count). A re-entry never shortens
// a hold: on a watchdog hold, a re-entry with an explicit lease only counts
// (the watchdog keeps renewing the hold); on an explicit hold, a re-entry
// with a lease keeps whichever lease ends later, and a re-entry without one
// turns it into a watchdog hold. A release that leaves holds refreshes a
// watchdog lease and leaves an explicit lease's TTL alone.
//
// Lost locks are reported, never hidden. When the watchdog finds the owner
// field gone (key deleted, FLUSHALL, restart without persistence, expired while
// Redis was paused) or cannot renew before the lease runs out (Redis down or
// paused: transient errors are retried until then; with ReplicaSync, renewals
// the replicas did not acknowledge count as not renewed), the lock is lost: a
// LockEventType::kLockLost event goes to ClientOptions::on_lock_event (on the
// client's event thread), `IsHeldByCurrentThread()` turns false, and
// `Release()` returns Aborted ("lease lost"). The watchdog renews each of its
// leases every third of it, and every one at once when a connection to Redis
// opens again after it failed, or when Sentinel or the cluster names another
// master (a restart or failover may have lost the locks): such a loss is
// reported a round trip after that (the pub/sub connection tries again at least
// once a second; at most one such round per half second). `SafeUntil()` tells
// the holder how long it may assume it still holds the lock. A hold the
// watchdog could not renew is reported lost when SafeUntil() ends, the drift
// allowance (1% of the lease + 2 ms; a Redlock's drift factor) before its lease
// ends in Redis, so that the holder can hear of it before another owner can
// take the lock, even while a renewal waits for a Redis cut off by the network
// (the report still travels through the event thread: a margin, not a promise).
// Should Redis still hold it then (a renewal was only slow), Release() may free
// it and return OK instead of Aborted: no other owner held it meanwhile.
// Release it either way: nothing else frees it before its lease ends.
//
// Threads, processes and permissions:
//   - A thread that exits while holding locks gives them up: the client stops
//     renewing them and sends LockEventType::kOwnerThreadExited for each; the
//     lock frees itself when its lease runs out (it is not released at once,
//     since the thread's work under it may be half done). The main thread's
//     exit ends the process instead: Close() or the leases handle its holds.
//   - fork(): the child is neither an owner nor a user of the parent's
//     clients. Every call on them in the child fails with FailedPrecondition,
//     and destroying them (or exit()) in the child releases nothing and
//     touches no socket; the parent keeps its locks. Connect a new client in
//     the child: its id is its own (ids are drawn from the kernel on each
//     Connect, never from a generator whose state fork() copied), so
//     children of one parent, and the parent's later clients, never share
//     an owner field.
//   - The library never raises SIGPIPE in its host process.
//   - Waiting needs SUBSCRIBE on the lock's channel and releasing needs
//     PUBLISH on it (see ClientOptions::url for ACL users), except for a
//     spin lock (Client::GetSpinLock()), whose waits re-check on a backoff
//     instead, and on a client with ClientOptions::pubsub false, where
//     every wait does so and a refused PUBLISH is no error. Without them the
//     calls say PermissionDenied naming the channel; a release whose publish
//     was refused did free the lock (its status says so), but other clients'
//     waiters were not woken and find it free only when they re-check.
//     ACL users also need the name's fair-lock queue keys
//     ("redisson_lock_queue:{N}", "redisson_lock_timeout:{N}"): a plain
//     acquire reads them (refused while a FairLock of the name has
//     waiters) and a freeing release wakes the queue's head; else
//     PermissionDenied.
//   - Names containing "{" use Redisson's naming for the channel
//     ("redisson_lock__channel:N", else "redisson_lock__channel:{N}"), so
//     Redisson clients wake relock waiters and the reverse.
//
// Correctness: a lease lock gives mutual exclusion as long as the holder is
// not paused longer than its lease and Redis keeps the key. A Redis failover
// with asynchronous replication, a restart without persistence, or a process
// pause can break it. ReplicaSync (relock/options.h) makes an acquire and
// every renewal wait until replicas received it (a renewal they did not
// acknowledge does not move SafeUntil()), which narrows the failover case
// only. Protect
// resources that must never see two writers with a fencing token as well
// (relock::FencedLock, relock/fenced_lock.h).
//
// Errors (absl::StatusCode):
//   InvalidArgument     empty or over-long name, lease not in [1 ms, 365 d],
//                       negative wait, invalid LockOptions (every call of
//                       such a handle); on a Redis Cluster, an acquire of a
//                       name with "{" but no usable hash tag ("a{b",
//                       "x{}y"), or with "}" and no "{" ("a}b"), whose
//                       companion keys and channels (Redisson's names) hash
//                       to other slots (every lock type; nothing is
//                       written).
//   DeadlineExceeded    TryAcquire's wait ran out while another owner held it.
//   FailedPrecondition  Release by a thread that does not hold the lock;
//                       any call after the client was closed or in a
//                       fork()ed child; a Release answered only after
//                       Close() released the hold itself (the message says
//                       so; relock/client.h); the key holds anything but a
//                       lock (a string, list, or a hash whose fields are
//                       not owner fields with hold counts, see "Lock shape"
//                       below; with or without a TTL): acquire, queries and
//                       ForceRelease never touch it. Also at once, without
//                       waiting: the name is another lock type's (one name
//                       is one lock type): a read-write lock's hash, or a
//                       FairLock's whose queue has waiters
//                       (relock/fair_lock.h). Any blocking call (one that
//                       waits for Redis: the acquires and releases,
//                       ForceRelease, the queries but SafeUntil) made on
//                       the client's event loop thread, i.e. in a callback
//                       of an asynchronous call: it fails at once instead
//                       of waiting for answers that only that thread can
//                       deliver. The local calls (SafeUntil, OnLost,
//                       name()) work there.
//   Aborted             Release of a hold whose lease had been lost or had
//                       run out (also when the key now holds another
//                       type); SafeUntil() once the lease may have ended;
//                       a re-entry that found the hold lost (NOTHELD, or
//                       lost as it ran; see States).
//   Unavailable         Redis unreachable, timed out or failing; retry later.
//                       Also: fewer replicas than ReplicaSync::replicas
//                       acknowledged the acquire (relock/options.h); it was
//                       undone and the message says how many did. Extend()
//                       likewise when they did not acknowledge the
//                       extension (SafeUntil() does not move).
//                       A command that timed out may still run when Redis
//                       wakes. After Unavailable from the outermost
//                       Release() the hold is abandoned: it is no longer
//                       renewed and frees at the end of its lease at the
//                       latest; retrying Release() frees it at once if the
//                       first attempt did not run. After Unavailable from
//                       Acquire() (or DeadlineExceeded because Redis did
//                       not answer in time) this thread does not hold the
//                       lock; should the lost request still run, the count
//                       it leaves is never renewed (it ends with its lease)
//                       and this thread's next acquire absorbs it.
//   Unauthenticated,    the server refused our credentials or commands
//   PermissionDenied    (PermissionDenied names the command or channel; an
//                       ACL that refuses a command inside a script, e.g.
//                       PEXPIRE, says so). A failed acquire leaves nothing
//                       at the key (no owner field without a lease).
//   ResourceExhausted   an acquire that Redis refused at maxmemory (policy
//                       noeviction): a free lock's, a re-entry's or a
//                       fenced lock's token may take memory. Redis checks
//                       only a script's first write, so some acquires are
//                       let through at maxmemory: a re-entry that first
//                       extends its lease, a fair acquire that first drops
//                       an overdue waiter or joins the queue. Releases,
//                       renewals, ForceRelease and Close() are never refused
//                       for memory (their scripts only delete, decrement or
//                       set TTLs first; see lua/lock_lib.lua).
//   Internal            Redis answered in a way relock does not expect: an
//                       error without a more specific code (e.g. a command
//                       the scripts use was renamed away: "Unknown Redis
//                       command"), or a reply of the wrong form. As above,
//                       a failed acquire leaves nothing behind.
//   Cancelled           the client was closed while this thread was waiting.
//
// Lock shape: a key counts as a lock only when it is a hash whose every
// field is an owner field "<client-id>:<thread-id>" with a positive hold
// count, the client id a UUID in text form (8-4-4-4-12 hex digits, as
// relock's and Redisson's are; ClientOptions::client_id must be one) and the
// thread id a decimal number. A user's hash with fields such as "x:1" or
// "job:42" is not a lock: acquires, queries and ForceRelease() fail with
// FailedPrecondition and never modify it.
//
// Unsupported: releasing from a thread other than the one that acquired (it
// is another owner and gets FailedPrecondition).
//
// Thread-safety: every method may be called from any thread at any time.

#ifndef RELOCK_LOCK_H_
#define RELOCK_LOCK_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <system_error>
#include <type_traits>

#include "absl/base/attributes.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "relock/future.h"
#include "relock/limits.h"
#include "relock/lock_kind.h"
#include "relock/options.h"
#include "relock/owner.h"

namespace relock {

// The callback of an asynchronous call (Lock::AcquireAsync & co.): runs
// once, with the call's result, on the client's event loop thread (or on the
// calling thread when the call fails at once). It must not block (blocking
// relock calls fail there with FailedPrecondition) and should not throw:
// what it throws is caught, logged at kError through ClientOptions::logger
// (std::cerr for an unbound handle or a negative wait) and dropped
// (relock/future.h).
using StatusCallback = std::function<void(absl::Status)>;

namespace internal {
class ClientCore;
// Converts a std::chrono duration to absl::Duration, saturating durations of
// more than a century (and duration::max()) to +-absl::InfiniteDuration(); a
// NaN is zero.
template <class Rep, class Period>
absl::Duration FromChronoSaturating(std::chrono::duration<Rep, Period> d) {
  constexpr double kCenturySeconds = 100.0 * 365 * 24 * 3600;
  const double seconds = std::chrono::duration<double>(d).count();
  if (seconds != seconds) return absl::ZeroDuration();  // NaN
  if (seconds >= kCenturySeconds) return absl::InfiniteDuration();
  if (seconds <= -kCenturySeconds) return -absl::InfiniteDuration();
  return absl::Nanoseconds(
      std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
}
// The time from now until `deadline` on its own clock, without overflow for
// any time point (time_point::min() and max() included): zero or less when
// it has passed.
template <class Clock, class Duration>
absl::Duration TimeUntilSaturating(
    const std::chrono::time_point<Clock, Duration>& deadline) {
  const auto now = Clock::now();
  if (deadline <= now) return absl::ZeroDuration();
  // deadline > now: the difference is positive; it overflows only when the
  // two are further apart than Rep can count, which is far beyond a century.
  const auto d = deadline.time_since_epoch();
  const auto n = now.time_since_epoch();
  using Common = typename std::common_type<decltype(d), decltype(n)>::type;
  const Common cd(d), cn(n);
  if (cn.count() < 0 &&
      cd.count() >
          std::numeric_limits<typename Common::rep>::max() + cn.count()) {
    return absl::InfiniteDuration();
  }
  return FromChronoSaturating(cd - cn);
}
}  // namespace internal

// Thrown by `Lock::lock()`, `try_lock*()` and `LockGuard` when the operation
// fails for a reason other than "held by another owner". It is a
// std::system_error (like std::mutex's failures) whose code approximates the
// status (e.g. Unavailable -> resource_unavailable_try_again) and which
// carries the exact `absl::Status`.
class LockError : public std::system_error {
 public:
  explicit LockError(absl::Status status);
  const absl::Status& status() const noexcept { return status_; }

 private:
  absl::Status status_;
};

namespace internal {

[[noreturn]] void ThrowLockError(absl::Status status);

// The std TimedLockable surface and the Acquire/TryAcquire/Release
// overloads, shared by Lock and RedlockLock (CRTP). `Derived` provides, as
// private members befriending this class:
//   absl::Status AcquireFor(const Owner& owner, absl::Duration wait,
//                           absl::optional<absl::Duration> lease);
//   absl::Status ReleaseFor(const Owner& owner);
//   void AcquireAsyncFor(const Owner& owner, absl::Duration wait,
//                        absl::optional<absl::Duration> lease,
//                        std::function<void(absl::Status)> done);
//   void ReleaseAsyncFor(const Owner& owner,
//                        std::function<void(absl::Status)> done);
//   void ReportUnlockFailure(absl::Status status) noexcept;
template <class Derived>
class LockableBase {
 public:
  // --- std TimedLockable: works with std::lock_guard, std::unique_lock,
  // --- std::scoped_lock, std::lock and std::try_lock.

  // Blocks until this thread holds the lock (watchdog lease). Throws
  // LockError on any failure.
  void lock() {
    absl::Status s = Acquire();
    if (!s.ok()) ThrowLockError(std::move(s));
  }
  // One attempt: true if this thread now holds the lock, false if another
  // owner holds it. Throws LockError on other failures (e.g. Unavailable).
  bool try_lock() { return TryLockFor(absl::ZeroDuration()); }
  // Waits up to `timeout` (notified, not polling); a negative timeout is one
  // attempt, as for std::timed_mutex. Like try_lock otherwise.
  template <class Rep, class Period>
  bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout) {
    return TryLockFor(FromChronoSaturating(timeout));
  }
  // Waits until `deadline` of any clock (measured as the time left now).
  template <class Clock, class Duration>
  bool try_lock_until(
      const std::chrono::time_point<Clock, Duration>& deadline) {
    return TryLockFor(TimeUntilSaturating(deadline));
  }
  // Releases one hold. Never throws: a failure is reported as a
  // LockEventType::kUnlockFailed event to the client's on_lock_event.
  void unlock() noexcept {
    absl::Status s = self().ReleaseFor(Owner::ThisThread());
    if (!s.ok()) self().ReportUnlockFailure(std::move(s));
  }

  // --- Status API.

  // Blocks until this thread holds the lock, with the watchdog lease
  // (lock_watchdog_timeout).
  ABSL_MUST_USE_RESULT absl::Status Acquire() {
    return Acquire(Owner::ThisThread());
  }
  // Blocks until this thread holds the lock, with an explicit `lease` in
  // [kMinLease, kMaxLease] that is never renewed.
  ABSL_MUST_USE_RESULT absl::Status Acquire(absl::Duration lease) {
    return Acquire(Owner::ThisThread(), lease);
  }
  // Waits at most `wait` (>= 0; zero = one attempt; InfiniteDuration = no
  // limit). DeadlineExceeded if another owner held the lock throughout, or
  // if Redis did not answer before the wait ended. The wait bounds the whole
  // call, round trips included, except that one attempt may always take up
  // to 100 ms (or command_timeout, if shorter).
  ABSL_MUST_USE_RESULT absl::Status TryAcquire(absl::Duration wait) {
    return TryAcquireImpl(Owner::ThisThread(), wait, absl::nullopt);
  }
  ABSL_MUST_USE_RESULT absl::Status TryAcquire(absl::Duration wait,
                                               absl::Duration lease) {
    return TryAcquireImpl(Owner::ThisThread(), wait, lease);
  }
  // Releases one hold of the calling thread. FailedPrecondition if this
  // thread does not hold the lock; Aborted if it did but the lease was lost.
  ABSL_MUST_USE_RESULT absl::Status Release() {
    return self().ReleaseFor(Owner::ThisThread());
  }

  // --- The same for an explicit owner (relock/owner.h): the hold belongs to
  // --- `owner`, whichever thread makes the call. InvalidArgument for a
  // --- default-constructed Owner. One owner's calls on one lock must not
  // --- overlap (a thread's never do).
  ABSL_MUST_USE_RESULT absl::Status Acquire(const Owner& owner) {
    return self().AcquireFor(owner, absl::InfiniteDuration(), absl::nullopt);
  }
  ABSL_MUST_USE_RESULT absl::Status Acquire(const Owner& owner,
                                            absl::Duration lease) {
    return self().AcquireFor(owner, absl::InfiniteDuration(), lease);
  }
  ABSL_MUST_USE_RESULT absl::Status TryAcquire(const Owner& owner,
                                               absl::Duration wait) {
    return TryAcquireImpl(owner, wait, absl::nullopt);
  }
  ABSL_MUST_USE_RESULT absl::Status TryAcquire(const Owner& owner,
                                               absl::Duration wait,
                                               absl::Duration lease) {
    return TryAcquireImpl(owner, wait, lease);
  }
  // FailedPrecondition if `owner` does not hold the lock; Aborted if it did
  // but the lease was lost.
  ABSL_MUST_USE_RESULT absl::Status Release(const Owner& owner) {
    return self().ReleaseFor(owner);
  }

  // --- Asynchronous calls, for event loops and coroutines: nothing blocks
  // --- the calling thread. They take an explicit owner (Owner::New(); a
  // --- thread owner is InvalidArgument, since the thread does not wait) and
  // --- complete a Future (relock/future.h) or call `done`, once, on the
  // --- client's event loop thread; a call that fails at once (bad input, a
  // --- closed client) completes on the calling thread before it returns.
  // --- Results as for the blocking calls; a wait is notified (the unlock
  // --- message), never polled; Close() ends pending ones with Cancelled.
  // --- Callbacks must not block (blocking relock calls fail there with
  // --- FailedPrecondition) and may start other asynchronous calls; what
  // --- they throw is caught and logged (StatusCallback above).
  Future<absl::Status> AcquireAsync(const Owner& owner) {
    return Promised(
        [&](StatusCallback done) { AcquireAsync(owner, std::move(done)); });
  }
  void AcquireAsync(const Owner& owner, StatusCallback done) {
    self().AcquireAsyncFor(owner, absl::InfiniteDuration(), absl::nullopt,
                           std::move(done));
  }
  void AcquireAsync(const Owner& owner, absl::Duration lease,
                    StatusCallback done) {
    self().AcquireAsyncFor(owner, absl::InfiniteDuration(), lease,
                           std::move(done));
  }
  // Waits at most `wait` (>= 0; zero = one attempt).
  Future<absl::Status> TryAcquireAsync(const Owner& owner,
                                       absl::Duration wait) {
    return Promised([&](StatusCallback done) {
      TryAcquireAsync(owner, wait, std::move(done));
    });
  }
  void TryAcquireAsync(const Owner& owner, absl::Duration wait,
                       StatusCallback done) {
    TryAcquireAsync(owner, wait, absl::nullopt, std::move(done));
  }
  void TryAcquireAsync(const Owner& owner, absl::Duration wait,
                       absl::optional<absl::Duration> lease,
                       StatusCallback done) {
    if (wait < absl::ZeroDuration()) {
      try {  // as relock calls every callback (relock/future.h)
        done(absl::InvalidArgumentError(
            "acquire: wait must not be negative, got " +
            absl::FormatDuration(wait)));
      } catch (...) {
        ReportCallbackException("the callback of an asynchronous call");
      }
      return;
    }
    self().AcquireAsyncFor(owner, wait, lease, std::move(done));
  }
  Future<absl::Status> ReleaseAsync(const Owner& owner) {
    return Promised(
        [&](StatusCallback done) { ReleaseAsync(owner, std::move(done)); });
  }
  void ReleaseAsync(const Owner& owner, StatusCallback done) {
    self().ReleaseAsyncFor(owner, std::move(done));
  }

 protected:
  LockableBase() = default;
  ~LockableBase() = default;

 private:
  Derived& self() { return static_cast<Derived&>(*this); }
  template <class Start>
  static Future<absl::Status> Promised(Start start) {
    internal::Promise<absl::Status> promise;
    start([promise](absl::Status s) { promise.Set(std::move(s)); });
    return promise.future();
  }
  absl::Status TryAcquireImpl(const Owner& owner, absl::Duration wait,
                              absl::optional<absl::Duration> lease) {
    if (wait < absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          "acquire: wait must not be negative, got " +
          absl::FormatDuration(wait));
    }
    return self().AcquireFor(owner, wait, lease);
  }
  bool TryLockFor(absl::Duration wait) {
    absl::Status s =
        TryAcquireImpl(Owner::ThisThread(),
                       std::max(wait, absl::ZeroDuration()), absl::nullopt);
    if (s.ok()) return true;
    if (s.code() == absl::StatusCode::kDeadlineExceeded) return false;
    ThrowLockError(std::move(s));
  }
};

}  // namespace internal

class Lock : public internal::LockableBase<Lock> {
 public:
  // A handle that refers to no client: every call fails with
  // FailedPrecondition (and lock() throws). Get real ones from
  // `Client::GetLock()`.
  Lock() = default;
  Lock(const Lock&) = default;
  Lock& operator=(const Lock&) = default;
  Lock(Lock&&) noexcept = default;
  Lock& operator=(Lock&&) noexcept = default;
  ~Lock() = default;

  // The lock's name: its Redis key.
  const std::string& name() const { return name_; }

  // --- Acquiring and releasing (inherited from internal::LockableBase, so
  // --- that Lock and RedlockLock share one std surface):
  //
  // void lock();
  //   Blocks until this thread holds the lock, with the watchdog lease.
  //   Throws LockError on any failure (Unavailable, PermissionDenied,
  //   FailedPrecondition, Cancelled by Close()).
  // bool try_lock();
  //   One attempt: true if this thread now holds it, false if another owner
  //   does. Throws LockError on other failures.
  // bool try_lock_for(std::chrono::duration);
  // bool try_lock_until(std::chrono::time_point of any clock);
  //   Waits (notified) up to the duration / until the time point; a negative
  //   duration or a past time point is one attempt. Saturates: duration::max()
  //   and time_point::max() wait without limit, time_point::min() is one
  //   attempt. Like try_lock() otherwise.
  // void unlock() noexcept;
  //   Releases one hold; a failure becomes a kUnlockFailed LockEvent.
  // absl::Status Acquire();
  // absl::Status Acquire(absl::Duration lease);
  //   Blocks until held: with the watchdog lease, or an explicit `lease` in
  //   [kMinLease, kMaxLease] that is never renewed.
  // absl::Status TryAcquire(absl::Duration wait);
  // absl::Status TryAcquire(absl::Duration wait, absl::Duration lease);
  //   Waits at most `wait` (>= 0; zero = one attempt, which may take up to
  //   100 ms; InfiniteDuration = no limit), round trips included.
  //   DeadlineExceeded if another owner held it throughout or Redis did not
  //   answer in time. A connection the server dropped (restart, CLIENT KILL,
  //   idle timeout) is replaced and the attempt resent within the wait; a
  //   Redis that refuses connections fails the call at once (Unavailable).
  //   Once waiting (the lock was found held), a call rides out a Redis
  //   that goes away and comes back (restart, failover): it re-checks on a
  //   backoff (10 ms doubling to 1 s, less up to a fifth) for up to
  //   connect_timeout + command_timeout of outage (plus 20 s on Sentinel and
  //   Cluster, for a failover), within the wait, then fails Unavailable.
  // absl::Status Release();
  //   Releases one hold of the calling thread. FailedPrecondition if this
  //   thread does not hold the lock; Aborted if it did but the lease was
  //   lost (or OK after a loss report, if Redis still held it: see the
  //   top of this file).
  // Acquire(owner), Acquire(owner, lease), TryAcquire(owner, wait),
  // TryAcquire(owner, wait, lease), Release(owner):
  //   The same for an explicit relock::Owner (relock/owner.h) instead of the
  //   calling thread.
  // Frees the lock whoever holds it and wakes its waiters. Returns true if it
  // was held. For administration and recovery; the holder is not told.
  // FailedPrecondition, and nothing deleted, when the key holds anything but
  // a lock (see "Lock shape" above: a hash whose fields are not all owner
  // fields "<uuid>:<thread-id>" with counts is a user's, not a lock).
  ABSL_MUST_USE_RESULT absl::StatusOr<bool> ForceRelease();

  // --- Queries (one round trip each, so FailedPrecondition on the event
  // --- loop thread; the answer may be stale at once).

  // Whether any owner holds the lock.
  ABSL_MUST_USE_RESULT absl::StatusOr<bool> IsLocked() const;
  // Whether the calling thread holds the lock.
  ABSL_MUST_USE_RESULT absl::StatusOr<bool> IsHeldByCurrentThread() const;
  // Whether `owner` holds the lock.
  ABSL_MUST_USE_RESULT absl::StatusOr<bool> IsHeldBy(const Owner& owner) const;
  // How many times the calling thread holds the lock (0 if not at all):
  // Redis's count plus the re-entries counted locally (see "Cost" above).
  ABSL_MUST_USE_RESULT absl::StatusOr<int64_t> HoldCount() const;
  // How many times `owner` holds the lock (0 if not at all).
  ABSL_MUST_USE_RESULT absl::StatusOr<int64_t> HoldCount(
      const Owner& owner) const;
  // The lease left to the current holder, whoever it is; NotFound if the lock
  // is free; InfiniteDuration if the key has no TTL (set by hand).
  ABSL_MUST_USE_RESULT absl::StatusOr<absl::Duration> RemainingLease() const;

  // Until when (steady clock) the calling thread may safely assume it holds
  // the lock: the send time of the last acknowledged acquire or renewal plus
  // the lease, minus a drift allowance of 1% of the lease + 2 ms. Local, no
  // round trip (so it works on the event loop thread too). FailedPrecondition
  // if this thread does not hold it; Aborted if its lease was lost. Check it
  // before an action that must not overlap with another holder (or better, use
  // a fencing token).
  ABSL_MUST_USE_RESULT absl::StatusOr<std::chrono::steady_clock::time_point>
  SafeUntil() const;
  // The same for `owner`.
  ABSL_MUST_USE_RESULT absl::StatusOr<std::chrono::steady_clock::time_point>
  SafeUntil(const Owner& owner) const;

  // --- Loss callbacks (local, no round trip).

  // Registers `callback` for the calling thread's current hold of this lock.
  // It runs at most once, on the client's event thread, with a kLockLost
  // LockEvent, if the hold ends without being released:
  //   - a watchdog hold: the watchdog found its owner field gone (deleted,
  //     force-released, lost in a failover), or could not renew it before
  //     its lease ran out; the client-wide on_lock_event gets the same
  //     event first;
  //   - an explicit-lease hold: its lease ran out before its final release
  //     (status DeadlineExceeded); this one is not sent to on_lock_event,
  //     since letting an explicit lease run out may be the plan.
  // It never runs for a hold whose release succeeded (by Release(), unlock()
  // or Close()), nor for one dropped because its thread exited; when the
  // lease ends while the final release is under way, the release's answer
  // (OK or Aborted) tells instead. It runs on another thread: it may still
  // be running, or not have run yet, when a Release() that returned Aborted
  // returns, so it must not refer to anything the holder may destroy by
  // then (capture by value or shared_ptr). Callbacks run in the order
  // registered, after LockOptions::on_lost; they should not throw (what one
  // throws is caught, logged at kError through ClientOptions::logger and
  // dropped; the next callback still runs) and may close the client. A hold's
  // callbacks end with the hold: a new hold (after the last release) starts
  // with none. Use it to stop work that must not go on unprotected, e.g. by
  // cancelling a request or setting a flag that the work checks.
  //
  // Errors: FailedPrecondition if the thread does not hold the lock (or the
  // client is closed); Aborted if its hold was lost or its lease ran out
  // already (the callback is not registered: act at once); InvalidArgument
  // for an empty callback.
  ABSL_MUST_USE_RESULT absl::Status OnLost(
      std::function<void(const LockEvent&)> callback);
  // The same for `owner`'s hold.
  ABSL_MUST_USE_RESULT absl::Status OnLost(
      const Owner& owner, std::function<void(const LockEvent&)> callback);

 private:
  friend class Client;
  friend class FairLock;
  friend class FencedLock;
  friend class MultiLock;
  friend class ReadWriteLock;
  friend class internal::LockableBase<Lock>;
  Lock(std::shared_ptr<internal::ClientCore> core, std::string name,
       LockOptions options);
  absl::Status AcquireFor(const Owner& owner, absl::Duration wait,
                          absl::optional<absl::Duration> lease);
  absl::Status ReleaseFor(const Owner& owner);
  void AcquireAsyncFor(const Owner& owner, absl::Duration wait,
                       absl::optional<absl::Duration> lease,
                       std::function<void(absl::Status)> done);
  void ReleaseAsyncFor(const Owner& owner,
                       std::function<void(absl::Status)> done);
  void ReportUnlockFailure(absl::Status status) noexcept;
  absl::Status CheckUsable() const;

  std::shared_ptr<internal::ClientCore> core_;
  std::string name_;
  LockOptions options_;
  // A FencedLock's handle (relock/fenced_lock.h): every acquire also takes a
  // fencing token.
  bool fenced_ = false;
  // The lock type (relock/lock_kind.h): kReentrant for a plain or fenced
  // lock, kFair for a FairLock (relock/fair_lock.h), kRead and kWrite for a
  // ReadWriteLock's read and write locks (relock/read_write_lock.h).
  LockKind kind_ = LockKind::kReentrant;
  // A FairLock's queue wait.
  absl::Duration queue_wait_ = absl::Minutes(5);
  // A spin lock's handle (Client::GetSpinLock()): its waits re-check on
  // ClientOptions::spin_backoff instead of listening for messages.
  bool spin_ = false;
};

// RAII guard: acquires in the constructor, releases in the destructor. Neither
// copyable nor movable. Use std::unique_lock for a movable, deferrable owner.
class LockGuard {
 public:
  // Acquires with the watchdog lease; throws LockError on failure.
  explicit LockGuard(Lock& lock);
  // Acquires with the watchdog lease; never throws. On failure `*status`
  // holds the error and the guard owns nothing (check owns_lock()).
  LockGuard(Lock& lock, absl::Status* status);
  LockGuard(const LockGuard&) = delete;
  LockGuard& operator=(const LockGuard&) = delete;
  // Releases (as Lock::unlock(): never throws, failures become events).
  ~LockGuard();

  bool owns_lock() const { return owns_; }

 private:
  Lock& lock_;
  bool owns_ = false;
};

}  // namespace relock

#endif  // RELOCK_LOCK_H_
