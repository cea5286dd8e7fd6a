// relock/client.h
//
// `relock::Client`: a connection to one Redis server (or a proxy that looks
// like one) and the home of the locks taken through it. Create one per process
// (or per Redis deployment) with `Client::Connect()` and share it; get lock
// handles from `GetLock()`.
//
// A client owns:
//   - one event loop thread, which owns every socket of the client;
//   - its command connection(s) (ClientOptions::command_connections, 1 by
//     default), shared by every thread: requests from all threads are
//     written together (pipelined) and answered in order, so a client used
//     by hundreds of threads still has one; a connection the server dropped
//     is reopened and the call resent on it when resending is harmless;
//   - one pub/sub connection on the same event loop, which carries the unlock
//     notifications that wake waiting threads;
//   - its identity, a random UUID, which with the thread number forms the
//     owner field of every lock it takes;
//   - its info record in Redis (host, pid, start time), which lock
//     inspection shows beside its holds (ClientOptions::publish_client_info).
//
// States:
//
//   state   | GetLock        | lock calls              | Close() / destructor
//   --------+----------------+-------------------------+---------------------------
//   Open    | handle         | work                    | -> Closed (see below)
//   Closed  | handle         | FailedPrecondition      | no-op
//
// Closing (explicitly or by destroying the client): new calls fail with
// FailedPrecondition; threads waiting for a lock return Cancelled (lock()
// throws LockError); every lock still held by a thread of this client is
// released on Redis, all in one pipelined round under one deadline
// (connect_timeout + command_timeout, however many locks), and a
// LockEventType::kReleasedOnClose event is sent for each; if Redis is paused or
// unreachable the event carries the error and the lock frees itself when its
// lease runs out. A final release already under way (another thread's
// Release(), a ReleaseAsync()) is first given up to command_timeout to get its
// answer, which its caller gets as usual (OK, or Aborted when the lease had
// been lost); Close() then neither releases nor reports that hold. One still
// unanswered after that, or whose outcome stayed unknown (Unavailable to its
// caller), is released in Close()'s round and reported; if it was already free,
// the event's Aborted says that its own release may have freed it. A release
// whose answer comes after Close()'s round released its hold (an inner one too)
// gets FailedPrecondition, "the client was closed while this release was under
// way" (the event has the outcome). A lock, permit or semaphore's permits
// granted to a call as Close() runs are released (or given back) by that call,
// which returns Cancelled; Close() gives the acquire calls in flight and those
// releases up to command_timeout to end before it closes the connections (a
// call still waiting for Redis's answer then fails with Unavailable: it may
// still have taken the lock, until its lease ends, or the permits, for good for
// a plain semaphore; so does a give-back still unanswered). Close() returns
// within about 2 x command_timeout + connect_timeout in all (a renewal round or
// releases in flight, the release round), plus one command_timeout for deleting
// the client's info record (ClientOptions::publish_client_info) when Redis
// accepted it but is now slow, and one for the acquire calls in flight and
// their give-backs.
// Holds whose explicit lease already ran out are neither released nor
// reported. Lock handles may outlive the client; they then fail with
// FailedPrecondition. The client may be closed or destroyed from inside its
// own on_lock_event callback.
//
// Closing on the event loop thread (in a callback of an asynchronous call,
// of this client or of any other relock client): Close() and the
// destructor cannot wait there for the release round's answers, which only
// that thread reads (or would stall the other client's loop meanwhile), so
// they do not wait. Close() marks
// the client closed (new calls fail with FailedPrecondition at once) and
// returns; a thread of its own then closes as above once the callback has
// returned to the loop: waits end with Cancelled, every held lock is
// released (kReleasedOnClose events, on that thread), the info record is
// deleted, the client's threads end. The client's resources live until then
// even if it was destroyed. So the releases come after Close() returns
// there: code that must know them done waits for the kReleasedOnClose
// events (not in the callback); a process that exits first leaves its
// locks to free themselves at the end of their leases (and should not
// exit while that thread may still run: it uses the logger and the
// on_lock_event callback). Should no thread be startable (the process's
// thread limit), Close() closes on the loop thread itself: its releases
// then time out, and the locks free at their lease ends.
//
// Blocking calls (Ping, InspectLock, InspectSemaphore, ListLocks, and the
// lock handles' acquires, releases and queries) made on the client's event
// loop thread fail at once with FailedPrecondition: they would wait for
// answers only that thread can deliver. The same on the event loop thread of
// any other relock client, whose every call (and renewal) they would stall.
// Metrics(), id() and the GetLock family are local and work there. Callbacks
// given to the client (on_lock_event, the logger, loss callbacks, the
// asynchronous calls' callbacks) should not throw; what they throw is caught,
// logged at kError and dropped (relock/options.h).
//
// fork(): in a child process the parent's clients are inert (every call is
// FailedPrecondition; destroying them releases nothing). See relock/lock.h.
//
// Thread-safety: all methods are thread-safe.

#ifndef RELOCK_CLIENT_H_
#define RELOCK_CLIENT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "relock/count_down_latch.h"
#include "relock/fair_lock.h"
#include "relock/fenced_lock.h"
#include "relock/lock.h"
#include "relock/lock_info.h"
#include "relock/metrics.h"
#include "relock/options.h"
#include "relock/permit_expirable_semaphore.h"
#include "relock/read_write_lock.h"
#include "relock/semaphore.h"

namespace relock {

namespace internal {
struct ClientAccess;
}  // namespace internal

class Client {
 public:
  // Connects to Redis: opens one command connection (AUTH, SELECT), checks
  // that the server takes writes (ROLE) and that the user may run what
  // relock needs, loads the lock scripts and opens the pub/sub connection.
  // Each error's message names the part, the address and the Redis error:
  //
  //   code                when
  //   InvalidArgument     bad options; a malformed URL (the port, db,
  //                       percent-escape, query parameter or list address
  //                       that is wrong); a TLS file that is missing,
  //                       unreadable or not a regular file, a ca_dir that is
  //                       not a directory; a db the server does not have
  //   Unavailable         Redis unreachable or silent within
  //                       connect_timeout; something else than Redis at the
  //                       address (an HTTP server); no usable cluster seed,
  //                       sentinel or master (each named with its reason)
  //   Unauthenticated     wrong password or user; a TLS certificate check
  //                       that failed, on either side
  //   PermissionDenied    the user may not run SCRIPT LOAD, EVALSHA or EVAL
  //   FailedPrecondition  a replica ("is a replica of h:p") or a
  //                       Sentinel at a redis:// URL; TLS on one side only
  //                       (rediss:// to a plaintext port, a TLS answer to
  //                       redis://); redis-cluster:// to a server without
  //                       cluster support; ClusterPubSub::kSharded on
  //                       Redis < 7
  //   NotFound            Sentinel: the sentinels know no such master
  //   Internal            an answer relock does not understand
  //
  // A check whose own command the server refuses (ROLE denied or renamed,
  // as some managed services do) is skipped, not failed.
  ABSL_MUST_USE_RESULT static absl::StatusOr<std::unique_ptr<Client>> Connect(
      ClientOptions options = {});

  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  // Closes the client (see the banner).
  ~Client();

  // A handle for the lock named `name` (its Redis key). Cheap; no I/O. An
  // invalid name (empty, longer than kMaxLockNameSize) yields a handle whose
  // calls fail with InvalidArgument.
  Lock GetLock(absl::string_view name);
  // The same, with settings of its own (LockOptions; unset fields are the
  // client's). Invalid values yield a handle whose calls fail with
  // InvalidArgument. Two handles of one name with different options are
  // still the same lock; the options only say how this handle acquires it.
  Lock GetLock(absl::string_view name, const LockOptions& options);
  // A fenced lock (relock/fenced_lock.h): the same lock as GetLock(name),
  // whose every acquisition also hands out a fencing token (Redisson's
  // RFencedLock). Cheap; no I/O.
  FencedLock GetFencedLock(absl::string_view name);
  FencedLock GetFencedLock(absl::string_view name, const LockOptions& options);
  // A fair lock (relock/fair_lock.h): the same lock as GetLock(name), taken
  // by its waiters in arrival order (Redisson's RFairLock). Cheap; no I/O.
  // Invalid options yield a handle whose calls fail with InvalidArgument.
  FairLock GetFairLock(absl::string_view name);
  FairLock GetFairLock(absl::string_view name, const FairLockOptions& options);
  // A read-write lock (relock/read_write_lock.h) on `name` (Redisson's
  // RReadWriteLock; not the same lock as GetLock(name)): ReadLock() is
  // shared, WriteLock() exclusive. Cheap; no I/O. `options` apply to both.
  ReadWriteLock GetReadWriteLock(absl::string_view name);
  ReadWriteLock GetReadWriteLock(absl::string_view name,
                                 const LockOptions& options);
  // A spin lock on `name`: the same lock as GetLock(name) (Redisson's
  // RSpinLock: the reentrant lock's data model, so it excludes and is
  // excluded by GetLock(name), Redisson's RLock and RSpinLock of the name),
  // whose waiting calls do not subscribe: they re-check on
  // ClientOptions::spin_backoff (1 ms doubling to 128 ms by default), for
  // servers that refuse SUBSCRIBE. It takes over up to one backoff delay
  // after the release, and costs a script call per re-check. Everything
  // else is relock::Lock's (relock/lock.h): re-entry, leases, watchdog,
  // loss reports, the std Lockable surface, the asynchronous calls.
  // Deliberate difference from Redisson's RSpinLock: its release still
  // PUBLISHes the unlock message (Redisson's spin unlock does not), so that
  // waiters of GetLock(name) wake at once. Cheap; no I/O.
  Lock GetSpinLock(absl::string_view name);
  // A counting semaphore (relock/semaphore.h) on `name` (Redisson's
  // RSemaphore: a string key holding the permits; not a lock). Cheap; no
  // I/O. An invalid name yields a handle whose calls fail with
  // InvalidArgument.
  Semaphore GetSemaphore(absl::string_view name);
  // A semaphore whose permits are handed out by id and end at their lease
  // end (relock/permit_expirable_semaphore.h; Redisson's
  // RPermitExpirableSemaphore). Cheap; no round trip.
  PermitExpirableSemaphore GetPermitExpirableSemaphore(absl::string_view name);
  // A count-down latch (relock/count_down_latch.h) on `name` (Redisson's
  // RCountDownLatch: a string key holding the count). Cheap; no I/O. An
  // invalid name yields a handle whose calls fail with InvalidArgument.
  CountDownLatch GetCountDownLatch(absl::string_view name);

  // This client's identity in lock owner fields.
  const std::string& id() const;

  // One PING round trip on the command connection. FailedPrecondition when
  // closed or on the client's event loop thread (see the banner).
  ABSL_MUST_USE_RESULT absl::Status Ping();

  // What the client has done so far (relock/metrics.h): counters since
  // Connect(), gauges as of now. Local, no round trip; works after Close()
  // too. For a Prometheus page: PrometheusText(client->Metrics()).
  ClientMetrics Metrics() const;

  // --- Inspection, for operators and tools (relock/lock_info.h; the
  // `relock` command). Read-only; the answers may be stale at once. Not
  // for deciding who holds a lock in code: use the lock handles for that.

  // The lock named `name` as Redis holds it now: free, a lock (plain,
  // fenced or fair) or a read-write lock; its holders with their hold
  // counts and (where they publish one) their client's host, pid and start
  // time; the remaining lease; the waiters; the fair queue's length.
  // A few round trips (one script, PUBSUB, one HGETALL per holder client).
  // Errors: InvalidArgument (empty or over-long name); FailedPrecondition
  // when the key holds anything but a lock (the message names its type),
  // or the client is closed; Unavailable / DeadlineExceeded (Redis
  // unreachable or slow); PermissionDenied (an ACL user without the
  // commands); FailedPrecondition on the client's event loop thread (see
  // the banner). A holder client's record that cannot be read is left out.
  ABSL_MUST_USE_RESULT absl::StatusOr<LockInfo> InspectLock(
      absl::string_view name);
  // The semaphore named `name` as Redis holds it now (relock/lock_info.h):
  // a Semaphore's or a PermitExpirableSemaphore's count, the permits out of
  // the latter with their lease ends (read-only: expired ones are shown,
  // not given back), and the waiting clients. One script and PUBSUB
  // NUMSUB/SHARDNUMSUB. Errors: InvalidArgument (a bad name, or on a
  // cluster one whose companion keys are in another slot);
  // FailedPrecondition when the name holds anything but a count or
  // "{N}:timeout" anything but a sorted set (the message names it), or the
  // client is closed, or on the event loop thread; Unavailable /
  // DeadlineExceeded; PermissionDenied.
  ABSL_MUST_USE_RESULT absl::StatusOr<SemaphoreInfo> InspectSemaphore(
      absl::string_view name);
  // Every held lock whose name matches the glob `pattern` (SCAN MATCH syntax:
  // "*", "order:*", "job:[0-9]*"), sorted by name, each as InspectLock() gives
  // it. SCAN (TYPE hash, COUNT 1000) runs on every master (each master of a
  // cluster); hashes that are not locks (a client info record among them; a
  // count beyond 2^63 - 1), keys the ACL user may not read, and locks released
  // during the listing are left out. Costs a round trip per 1000 keys of each
  // master plus InspectLock() per hash found: for a person looking, not for a
  // loop. Errors: InvalidArgument (empty pattern), FailedPrecondition (closed,
  // or on the event loop thread), Unavailable / DeadlineExceeded,
  // PermissionDenied; a cluster whose masters changed during the scan may give
  // Unavailable or NotFound (call again). Requires Redis >= 6 (SCAN TYPE).
  ABSL_MUST_USE_RESULT absl::StatusOr<std::vector<LockInfo>> ListLocks(
      absl::string_view pattern = "*");

  // Closes the client (see the banner; on the event loop thread it returns
  // before the releases). Idempotent.
  void Close();

 private:
  friend struct internal::ClientAccess;
  explicit Client(std::shared_ptr<internal::ClientCore> core);
  std::shared_ptr<internal::ClientCore> core_;
};

}  // namespace relock

#endif  // RELOCK_CLIENT_H_
