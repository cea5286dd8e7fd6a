// relock/redlock.h
//
// `relock::RedlockClient` and `relock::RedlockLock`: a reentrant lock held on
// a majority of N independent Redis masters (the Redlock algorithm of
// redis.io, as in redsync), for deployments that must survive the loss of a
// minority of masters.
//
// How it works
// ------------
// Every master stores the lock exactly as the single-node relock::Lock does
// (a hash at the lock's key; field "<client-id>:<thread>" = hold count; TTL =
// lease), so the lock is reentrant on every master, which redsync's is not.
// It is the single-node lock's algorithm run over all N masters: an attempt
// sends the acquire script to every master at once through the client's
// event loop (answers counted as they arrive), so it costs about one round
// trip of the slowest master, not N; each master gets at most the
// per-master timeout. The attempt succeeds when a quorum
// (N/2 + 1) acquired and the remaining validity is positive:
//
//   validity = lease - elapsed - (drift_factor * lease + 2 ms)
//
// on the steady clock, elapsed measured from before the first request.
// Otherwise the attempt releases the lock on every master that granted it.
// When the quorum failed because another owner holds the lock, the thread
// waits by notification: it subscribes to the lock's unlock channel on every
// master (any quorum of confirmed subscriptions suffices: two quorums always
// share a master, so the holder's release is seen), re-checks, and sleeps
// until an unlock message, the holder's lease end or its own deadline. When
// the quorum failed because masters did not answer (errors, timeouts) or the
// validity ran out, the attempt is retried after `retry_backoff`'s delay, at
// most `tries` attempts per call, then the call fails with a status that
// names every master and what it said.
//
// Releasing runs the release script on every master; it succeeds when a
// majority released. Without an explicit lease the lease is
// `connection.lock_watchdog_timeout` and the client's watchdog extends it on
// every master about every third of it, in batches; the lock is lost (a
// kLockLost event, Aborted from Release) when a majority no longer has it or
// no majority renewal succeeds before the validity ends. Extend() renews an
// explicit lease by hand.
//
// States, as seen by the calling thread T (as relock::Lock, with "held" =
// held on a quorum of masters):
//
// clang-format off
//   state         | lock()/Acquire    | try_lock()    | unlock()/Release
//   --------------+-------------------+---------------+--------------------
//   Free          | -> Held-by-T(1)   | true          | FailedPrecondition
//   Held-by-T(n)  | -> Held-by-T(n+1) | true, (n+1)   | n>1: n-1; 1: Free
//   Held-by-other | waits (notified)  | false         | FailedPrecondition
//   Lease-lost    | as Free/other     | as Free/other | Aborted, then as
//                 |                   |               | Free/other
// clang-format on
//
// Safety caveats (read before relying on it)
// ------------------------------------------
// - Clocks: validity assumes that time passes at about the same rate on this
//   host and on every master (bounded drift, drift_factor), not that clocks
//   agree; a master whose clock jumps forward expires keys early.
// - Restarts: a master that restarts without persistence (or with fsync less
//   often than every write) forgets the locks it granted, and another owner
//   can then win a quorum that overlaps yours. Run masters with
//   `appendonly yes` + `appendfsync always`, or keep a restarted master out
//   of service for longer than the longest lease (delayed restart).
// - Pauses: like any lease lock, a holder paused (GC, SIGSTOP, swap) past its
//   validity may still act on the resource. Check ValidUntil() before acting,
//   and use fencing tokens where the resource can check them.
//
// Errors: as relock::Lock, plus Unavailable when no quorum of masters could
// be reached within `tries` attempts (the message lists each master's
// answer: acquired, held by another owner, unavailable and why) and
// DeadlineExceeded when the wait ended while another owner held a quorum.
//
// Thread-safety: all methods may be called from any thread.

#ifndef RELOCK_REDLOCK_H_
#define RELOCK_REDLOCK_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "relock/backoff.h"
#include "relock/lock.h"
#include "relock/metrics.h"
#include "relock/options.h"
#include "relock/redlock_options.h"

namespace relock {

namespace internal {
class ClientCore;
}  // namespace internal

// RedlockOptions, every setting of a RedlockClient: relock/redlock_options.h.

class RedlockLock;

class RedlockClient {
 public:
  // Connects to every master. Succeeds when a quorum of them is reachable
  // (the others are retried in the background and join when they come
  // back); InvalidArgument for bad options, or for one server named twice
  // (the same host and port, or socket path, whatever the db; aliases such
  // as "localhost" and "127.0.0.1" are not found); otherwise the first
  // failure of the unreachable ones. A master that answers but cannot
  // serve fails Connect, as with Client::Connect, since that is
  // configuration, not an outage: a replica (FailedPrecondition), refused
  // credentials (Unauthenticated), an ACL user without SCRIPT LOAD,
  // EVALSHA or EVAL (PermissionDenied). A master that was unreachable at
  // Connect is not checked when it joins: should it be a replica by then,
  // or refuse the scripts, it fails every call (Unavailable: READONLY;
  // PermissionDenied), which counts against the quorum.
  ABSL_MUST_USE_RESULT static absl::StatusOr<std::unique_ptr<RedlockClient>>
  Connect(RedlockOptions options);

  RedlockClient(const RedlockClient&) = delete;
  RedlockClient& operator=(const RedlockClient&) = delete;
  // Closes, as relock::Client (waiters Cancelled, held locks released on
  // every reachable master and reported as kReleasedOnClose; on the client's
  // event loop thread it returns at once and a thread of its own does that
  // once the callback has returned).
  ~RedlockClient();

  RedlockLock GetLock(absl::string_view name);
  const std::string& id() const;
  // N/2 + 1.
  int quorum() const;
  // Counters and gauges over all masters (relock/metrics.h; see
  // Client::Metrics()).
  ClientMetrics Metrics() const;
  void Close();

 private:
  explicit RedlockClient(std::shared_ptr<internal::ClientCore> core);
  std::shared_ptr<internal::ClientCore> core_;
};

class RedlockLock : public internal::LockableBase<RedlockLock> {
 public:
  RedlockLock() = default;  // unbound: every call FailedPrecondition
  RedlockLock(const RedlockLock&) = default;
  RedlockLock& operator=(const RedlockLock&) = default;
  RedlockLock(RedlockLock&&) noexcept = default;
  RedlockLock& operator=(RedlockLock&&) noexcept = default;
  ~RedlockLock() = default;

  const std::string& name() const { return name_; }

  // lock(), try_lock(), try_lock_for(), try_lock_until(), unlock(),
  // Acquire(), Acquire(lease), TryAcquire(wait), TryAcquire(wait, lease),
  // Release(), the same with an explicit relock::Owner, and the
  // asynchronous calls (AcquireAsync, TryAcquireAsync, ReleaseAsync): as
  // relock::Lock (internal::LockableBase in lock.h).

  // Sets the calling thread's hold to a fresh `lease` on every master (a
  // quorum must confirm within the new validity). FailedPrecondition on the
  // client's event loop thread (as every blocking call), or if this
  // thread does not hold it; Aborted if it was lost. A watchdog hold becomes
  // an explicit-lease hold.
  ABSL_MUST_USE_RESULT absl::Status Extend(absl::Duration lease);

  // Until when (steady clock) the calling thread's hold is valid: the start
  // of the last successful acquire/extension (or watchdog renewal) plus the
  // lease minus the drift allowance. Local, no round trip.
  // FailedPrecondition if not held; Aborted if lost or if that time has
  // passed (never a past time as OK).
  ABSL_MUST_USE_RESULT absl::StatusOr<std::chrono::steady_clock::time_point>
  ValidUntil() const;

  // How many times the calling thread holds it, by this client's count (no
  // round trip; 0 if not held or lost).
  int64_t LocalHoldCount() const;

 private:
  friend class RedlockClient;
  friend class MultiLock;
  friend class internal::LockableBase<RedlockLock>;
  RedlockLock(std::shared_ptr<internal::ClientCore> core, std::string name);
  absl::Status AcquireFor(const Owner& owner, absl::Duration wait,
                          absl::optional<absl::Duration> lease);
  absl::Status ReleaseFor(const Owner& owner);
  void AcquireAsyncFor(const Owner& owner, absl::Duration wait,
                       absl::optional<absl::Duration> lease,
                       std::function<void(absl::Status)> done);
  void ReleaseAsyncFor(const Owner& owner,
                       std::function<void(absl::Status)> done);
  void ReportUnlockFailure(absl::Status status) noexcept;

  std::shared_ptr<internal::ClientCore> core_;
  std::string name_;
};

}  // namespace relock

#endif  // RELOCK_REDLOCK_H_
