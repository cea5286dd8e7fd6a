// relock/fenced_lock.h
//
// `relock::FencedLock`: a relock::Lock whose every acquisition also hands out
// a fencing token, a number that grows with each acquisition of the lock by
// anyone. Wire-compatible with Redisson's RFencedLock: Java and C++ services
// share the lock and its tokens.
//
// Why tokens
// ----------
// A lease lock can have two holders at once: a holder paused longer than its
// lease (a GC pause, swapping, SIGSTOP) still believes it holds the lock
// after another owner took it, and a failover can lose an acquisition (see
// relock/lock.h). The remedy is at the protected resource: every request
// carries the holder's token, and the resource remembers the largest token it
// has accepted and refuses a request with a smaller one. The paused holder's
// late write then fails cleanly instead of overwriting its successor's work:
//
//   absl::StatusOr<int64_t> token = lock.LockAndGetToken();
//   if (!token.ok()) ...;
//   storage.Write(key, value, *token);   // storage: reject if *token < max
//   lock.unlock();
//
// Data model (Redisson's)
// -----------------------
// The lock is the hash N, exactly as for relock::Lock (same owner fields,
// channel and watchdog), plus a counter at "redisson_lock_token:{N}"
// ("redisson_lock_token:N" when N contains "{"), in N's hash slot on a
// cluster. Every acquisition, a fresh hold or a re-entry, through
// LockAndGetToken() as well as through the inherited lock() / Acquire() /
// try_lock() (whose token is not returned), increments the counter in the
// same script that takes the lock, and the token is the new value: tokens
// start at 1 and strictly increase over all acquisitions of all owners,
// Redisson's included. Releases leave the counter alone, and it never
// expires (ForceRelease() leaves it too).
//
// States (as seen by the calling thread or explicit owner T; everything else
// as relock::Lock):
//
// clang-format off
//   call                  | Free or Held-by-T(n)  | Held-by-other
//   ----------------------+-----------------------+-----------------------
//   LockAndGetToken()     | held, token t+1       | waits (notified), then
//                         | (t: the last token)   | held, a larger token
//   TryLockAndGetToken(w) | held, token t+1       | waits up to w, then
//                         |                       | DeadlineExceeded
//   GetToken()            | t (0 if none yet), whoever holds the lock
// clang-format on
//
// What a token does not do: the resource must check it; the lock cannot.
// After a failover with asynchronous replication, the promoted replica's
// counter may lack the latest increments, so it can hand out again tokens
// that were handed out before: a resource that accepts only tokens larger
// than the largest it has seen then refuses the new holders (safe, though
// unavailable until the counter passes that value); one that accepts an
// equal token may accept two holders. ClientOptions::replica_sync narrows
// that window. A token is only as ordered as the counter on one Redis: a
// FencedLock has no Redlock form.
//
// The counter's valid range. Tokens are int64 values from 1 to 2^63 - 1,
// handed out exactly over the whole range (never rounded: an application
// may seed the counter from a clock, e.g. at 1.7e18). Before an
// acquisition, the counter must be absent or hold a decimal count in
// [0, 2^63 - 2]; anything else (a negative number such as someone's
// "SET ... -3", text, a key of another type, or 2^63 - 1, after which no
// larger token exists) is no valid counter: every acquisition through this
// FencedLock then fails with FailedPrecondition naming the counter and its
// value, and takes nothing: no hold, no increment (the counter keeps its
// value; the script's INCR of a negative one is undone by a DECR in the same
// script, which replicas and keyspace notifications see as two writes).
// Plain relock::Lock calls on the same name do not touch the counter and
// still work. Repair it (DEL it, or SET it to a count not below the largest
// token any resource has accepted) to go on.
//
// Errors: as relock::Lock (relock/lock.h), plus FailedPrecondition for an
// invalid counter (above). GetToken(): FailedPrecondition when the counter's
// key holds anything but a count in [0, 2^63 - 1] (it returns 2^63 - 1
// itself exactly), or when called on the client's event loop thread (a
// round trip: like every blocking call, refused in a callback of an
// asynchronous call).
//
// Thread-safety: as relock::Lock; a FencedLock is a cheap, copyable handle.

#ifndef RELOCK_FENCED_LOCK_H_
#define RELOCK_FENCED_LOCK_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/attributes.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "relock/future.h"
#include "relock/lock.h"
#include "relock/options.h"
#include "relock/owner.h"

namespace relock {

// The callback of an asynchronous token acquire: the token, or the error.
// Runs as relock::StatusCallback (relock/lock.h): on the event loop thread,
// must not block; what it throws is caught, logged and dropped.
using TokenCallback = std::function<void(absl::StatusOr<int64_t>)>;

class FencedLock : public Lock {
 public:
  // A handle that refers to no client: every call fails with
  // FailedPrecondition. Get real ones from `Client::GetFencedLock()`.
  FencedLock() = default;

  // --- Acquiring with the token. Waits, leases and errors as the Lock
  // --- calls of the same shape (Acquire, TryAcquire): a watchdog lease
  // --- unless `lease` is given; a `wait` of zero is one attempt.

  // Blocks until the calling thread holds the lock; this acquisition's
  // token.
  ABSL_MUST_USE_RESULT absl::StatusOr<int64_t> LockAndGetToken();
  ABSL_MUST_USE_RESULT absl::StatusOr<int64_t> LockAndGetToken(
      absl::Duration lease);
  // Waits at most `wait` (>= 0); DeadlineExceeded if another owner held the
  // lock throughout.
  ABSL_MUST_USE_RESULT absl::StatusOr<int64_t> TryLockAndGetToken(
      absl::Duration wait);
  ABSL_MUST_USE_RESULT absl::StatusOr<int64_t> TryLockAndGetToken(
      absl::Duration wait, absl::Duration lease);

  // The same for an explicit relock::Owner (relock/owner.h).
  ABSL_MUST_USE_RESULT absl::StatusOr<int64_t> LockAndGetToken(
      const Owner& owner);
  ABSL_MUST_USE_RESULT absl::StatusOr<int64_t> LockAndGetToken(
      const Owner& owner, absl::Duration lease);
  ABSL_MUST_USE_RESULT absl::StatusOr<int64_t> TryLockAndGetToken(
      const Owner& owner, absl::Duration wait);
  ABSL_MUST_USE_RESULT absl::StatusOr<int64_t> TryLockAndGetToken(
      const Owner& owner, absl::Duration wait, absl::Duration lease);

  // Asynchronously, for an explicit owner (Owner::New()), as
  // Lock::AcquireAsync / TryAcquireAsync: completes on the client's event
  // loop thread (or at once on the calling thread for bad input or a closed
  // client). Release with ReleaseAsync(owner) or Release(owner).
  Future<absl::StatusOr<int64_t>> LockAndGetTokenAsync(const Owner& owner);
  void LockAndGetTokenAsync(const Owner& owner, TokenCallback done);
  Future<absl::StatusOr<int64_t>> TryLockAndGetTokenAsync(const Owner& owner,
                                                          absl::Duration wait);
  void TryLockAndGetTokenAsync(const Owner& owner, absl::Duration wait,
                               TokenCallback done);

  // The last token handed out for this lock, by anyone (0 if none yet). One
  // round trip; the answer may be stale at once.
  ABSL_MUST_USE_RESULT absl::StatusOr<int64_t> GetToken() const;

 private:
  friend class Client;
  FencedLock(std::shared_ptr<internal::ClientCore> core, std::string name,
             LockOptions options);
  absl::StatusOr<int64_t> AcquireWithToken(
      const Owner& owner, absl::Duration wait,
      absl::optional<absl::Duration> lease);
  void AcquireWithTokenAsync(const Owner& owner, absl::Duration wait,
                             TokenCallback done);
};

}  // namespace relock

#endif  // RELOCK_FENCED_LOCK_H_
