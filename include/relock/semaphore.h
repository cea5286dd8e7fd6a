// relock/semaphore.h
//
// `relock::Semaphore`: a counting semaphore on Redis, shared by every thread
// and process that uses its name: at most as many holders as there are
// permits. Wire-compatible with Redisson's RSemaphore: Java and C++
// services take and give the same permits and wake each other's waiters.
//
//   relock::Semaphore slots = client->GetSemaphore("render:slots");
//   (void)slots.TrySetPermits(4);                 // once, by anyone
//   if (slots.Acquire().ok()) { ...; (void)slots.Release(); }
//
// Use a Semaphore to bound concurrency (N workers at a time); use a Lock
// for mutual exclusion (one holder, reentrant, leased, renewed) and a
// CountDownLatch (relock/count_down_latch.h) to wait for N events.
//
// Data model (Redisson's)
// -----------------------
// The semaphore named N is a Redis string at key N holding the number of
// available permits, a decimal integer (no key: no permits, and not set).
// Acquire(n) runs one script: if the count is at least n, decrement it by n;
// otherwise wait. Release(n) and AddPermits(n) add n and publish the new
// count on "redisson_sc:{N}" ("redisson_sc:N" when N contains "{"; either
// way in N's hash slot on a cluster), as TrySetPermits() publishes the count
// it set. A waiter subscribes (through the client's single pub/sub
// connection), re-checks once the subscription is confirmed, and then sleeps
// until a message: every message wakes every waiter of every client, each
// re-checks with its own n (no poll; a key without messages is re-checked
// every 30 s, and at its TTL's end if it has one). On a client with
// ClientOptions::pubsub false, nothing subscribes: its waiters re-check on
// ClientOptions::spin_backoff instead; its changes still publish, for every
// other client's waiters (a publish Redis refuses is then no error).
//
// Names: on a Redis Cluster, where a script's keys must share one hash
// slot, a name whose channel would be in another slot than the name is
// InvalidArgument for every call, and nothing is written: a name containing
// "}" without a non-empty hash tag before it ("jobs}a": the channel
// "redisson_sc:{jobs}a}" hashes "jobs"), or with an empty one ("a{}b").
// Redisson names the channel the same way (and fails there with
// CROSSSLOT). On a single server (or Sentinel) every name works.
//
// Replica acknowledgement: Acquire()/TryAcquire() send
// ClientOptions::replica_sync's WAIT with each attempt, as a lock's acquire
// does (relock/options.h, ReplicaSync); permits taken without enough replicas
// acknowledging are given back, and the call fails with Unavailable. A blocking
// call's first attempt waits for that give-back's answer; a waiter's re-check
// and an asynchronous call send it without waiting (their loop thread must not
// block), so should it be lost too (the connection dropped in between), those
// permits stay taken: give them back with Release() if you know they were.
// Release(), AddPermits(), TrySetPermits() and Drain() send no WAIT, as a
// lock's release sends none.
//
// States, for a call taking n permits (P = available permits):
//
// clang-format off
//   state          | Acquire(n)/TryAcquire | Release(n) | AddPermits(d)
//   ---------------+-----------------------+------------+--------------
//   not set        | waits (notified)      | P = n      | P = d
//   P >= n         | P -= n, OK            | P += n     | P += d
//   P < n          | waits (notified);     | P += n     | P += d
//                  | Try: DeadlineExceeded |            | (d may be < 0)
//                  | after `wait`          |            |
//   not a count    | FailedPrecondition, nothing changed at the key
// clang-format on
//
// No owner: a permit belongs to nobody. Any thread or process may release
// permits it never took (as with Redisson's and java.util.concurrent's), and
// releases beyond the initial count raise the count. A process that dies
// holding permits never gives them back (use PermitExpirableSemaphore for
// that, when it exists); Drain() and TrySetPermits() on a fresh name are the
// recovery tools.
//
// Costs: an uncontended Acquire() is one round trip, a Release() another; a
// waiter takes permits about one pub/sub delivery plus one round trip after
// the release that freed them. Many waiters of one semaphore all wake on
// every release (each message wakes all of them, as Redisson's do): fine for
// tens, costly for thousands.
//
// Defaults: Acquire() and Release() take or give 1 permit; Acquire() waits
// without limit. Bounds: every count and number of permits is in
// [-kMaxPermits, kMaxPermits] (relock/limits.h: 2^31 - 1, Java's
// Integer.MAX_VALUE: Redisson reads and passes permits as Java ints).
//
// Errors (absl::StatusCode):
//   InvalidArgument     an empty or over-long name; on a cluster, a name
//                       whose channel is in another slot (see Names);
//                       permits of Acquire, TryAcquire, Release not in
//                       [1, kMaxPermits]; TrySetPermits' not in
//                       [0, kMaxPermits]; AddPermits' 0 or not in
//                       [-kMaxPermits, kMaxPermits]; a negative wait.
//   OutOfRange          Release/AddPermits would take the count beyond
//                       +-kMaxPermits (nothing changed).
//   FailedPrecondition  the key holds anything but a permit count (a hash,
//                       a list, a string that is no integer): nothing is
//                       changed or deleted; the client is closed; a
//                       blocking call on the client's event loop thread; an
//                       unbound handle.
//   DeadlineExceeded    TryAcquire's wait ended with too few permits
//                       ("too few permits were available throughout the
//                       wait").
//   Unavailable         Redis unreachable, slow or failing. A call whose
//                       answer was lost (or came too late: a TryAcquire's
//                       attempt still under way when its wait ended) may
//                       or may not have happened, and none is resent,
//                       since twice would count twice: a
//                       Release or AddPermits may have added its permits,
//                       and an Acquire/TryAcquire (a waiter's re-check
//                       included) may have taken its permits, which are
//                       then nobody's (give them back with Release() or
//                       AddPermits() if you know they were taken). Unlike a
//                       lock's, a waiter does not ride out a restart. Also
//                       an acquire whose replicas did not acknowledge it
//                       (see Replica acknowledgement; its permits were
//                       given back).
//   PermissionDenied    an ACL user without the key, the scripts or the
//                       channel, or without WAIT under replica_sync (the
//                       permits that acquire took are given back); a
//                       Release/AddPermits/TrySetPermits whose
//                       publish was refused did change the count (the
//                       message says so), but other clients' waiters only
//                       find out when they re-check. (Not on a client
//                       without pub/sub: see Data model.)
//   Cancelled           the client was closed while the call waited (a
//                       re-check that Close() cut off while it was under
//                       way may have taken its permits: that is
//                       Unavailable, as above). Also an Acquire/TryAcquire
//                       granted as Close() ran: its caller could no longer
//                       release through this client, so the call gave the
//                       permits back (should that give-back fail:
//                       Unavailable, they may still be taken).
//
// Deliberate differences from Redisson's RSemaphore:
//   - Zero permits are InvalidArgument for Acquire/TryAcquire/Release
//     (Redisson returns at once); negative ones too (Redisson throws).
//   - Drain() keeps the key's TTL (Redisson's SET drops it).
//   - A key that holds something else is FailedPrecondition and left alone
//     (Redisson's scripts fail or overwrite it).
//   - A wait re-checks a key without a TTL every 30 s even without a
//     message (Redisson's blocking acquire never does).
//
// Thread-safety: a Semaphore is a cheap, copyable handle (a name and the
// client); every method may be called from any thread at any time.

#ifndef RELOCK_SEMAPHORE_H_
#define RELOCK_SEMAPHORE_H_

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

class Semaphore {
 public:
  // A handle that refers to no client: every call fails with
  // FailedPrecondition. Get real ones from `Client::GetSemaphore()`.
  Semaphore() = default;

  // The semaphore's name: its Redis key.
  const std::string& name() const { return name_; }

  // Sets the available permits to `permits` (>= 0) if the semaphore has
  // none set yet (its key does not exist), and wakes the waiters. True if it
  // set them, false if a count was there already (unchanged).
  ABSL_MUST_USE_RESULT absl::StatusOr<bool> TrySetPermits(int64_t permits);
  // Adds `permits` (not 0) to the available permits, creating the count
  // when there is none; a negative number takes permits away, and the count
  // may go below zero (Acquire then waits for it to come back). Wakes the
  // waiters.
  ABSL_MUST_USE_RESULT absl::Status AddPermits(int64_t permits);

  // Blocks until `permits` (>= 1) were taken. Waits without limit (notified,
  // not polling); Cancelled by Close().
  ABSL_MUST_USE_RESULT absl::Status Acquire(int64_t permits = 1);
  // Waits at most `wait` (>= 0; zero = one attempt, which may take up to
  // 100 ms; InfiniteDuration = no limit) for `permits`. DeadlineExceeded if
  // there were too few throughout.
  ABSL_MUST_USE_RESULT absl::Status TryAcquire(int64_t permits,
                                               absl::Duration wait);
  // Gives back `permits` (>= 1) and wakes the waiters. Any caller may
  // release (see "No owner" above).
  ABSL_MUST_USE_RESULT absl::Status Release(int64_t permits = 1);
  // The permits available now (0 when none were set; may be negative after
  // AddPermits with a negative number). Stale at once.
  ABSL_MUST_USE_RESULT absl::StatusOr<int64_t> AvailablePermits() const;
  // Takes every available permit; how many it took (0 when none were set,
  // which stays so; a negative count is reset to 0 and returned).
  ABSL_MUST_USE_RESULT absl::StatusOr<int64_t> Drain();

  // --- Asynchronous calls: nothing blocks the calling thread. They complete
  // --- a Future (relock/future.h) or call `done`, once, on the client's
  // --- event loop thread; a call that fails at once (bad input, a closed
  // --- client) completes on the calling thread before it returns. Results as
  // --- for the blocking calls; a wait is notified, never polled; Close()
  // --- ends pending ones with Cancelled. Callbacks must not block and
  // --- should not throw (what they throw is caught and logged).
  Future<absl::Status> AcquireAsync(int64_t permits = 1);
  void AcquireAsync(int64_t permits, std::function<void(absl::Status)> done);
  Future<absl::Status> TryAcquireAsync(int64_t permits, absl::Duration wait);
  void TryAcquireAsync(int64_t permits, absl::Duration wait,
                       std::function<void(absl::Status)> done);
  Future<absl::Status> ReleaseAsync(int64_t permits = 1);
  void ReleaseAsync(int64_t permits, std::function<void(absl::Status)> done);

 private:
  friend class Client;
  Semaphore(std::shared_ptr<internal::ClientCore> core, std::string name)
      : core_(std::move(core)), name_(std::move(name)) {}
  void AcquireAsyncFor(int64_t permits, absl::Duration wait,
                       std::function<void(absl::Status)> done);

  std::shared_ptr<internal::ClientCore> core_;
  std::string name_;
};

}  // namespace relock

#endif  // RELOCK_SEMAPHORE_H_
