// relock/options.h
//
// `relock::ClientOptions`: every setting of a `relock::Client`, with its
// default written next to it; `relock::LockOptions`, the settings of one
// lock handle that override the client's; and `relock::LockEvent`, the report a
// client sends to `ClientOptions::on_lock_event` when something happens to a
// lock that no caller is waiting to hear about (an `unlock()` that failed, a
// lock whose lease was lost).
//
// Durations are `absl::Duration`; every deadline derived from them is taken on
// the steady clock, so changes of the wall clock never shorten or stretch a
// wait or a lease.

#ifndef RELOCK_OPTIONS_H_
#define RELOCK_OPTIONS_H_

#include <chrono>
#include <functional>
#include <string>

#include "absl/base/log_severity.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "relock/backoff.h"

namespace relock {

// What happened to a lock, in a `LockEvent`.
enum class LockEventType {
  // `Lock::unlock()` (which never throws) could not release the lock. The
  // status says why: FailedPrecondition (this thread did not hold it),
  // Aborted (its lease had run out or it was force-released), Unavailable
  // (Redis unreachable; the lock stays held until its lease runs out).
  kUnlockFailed,
  // A lock held by this client is gone without having been released: its
  // lease ran out, the key was deleted, or Redis lost it; or no renewal
  // succeeded by the end of SafeUntil() (relock/lock.h). The holder must
  // assume another owner may now hold it.
  kLockLost,
  // The client was closed while one of its threads held this lock; the
  // client released it (status OK) or could not (status says why; the lock
  // then frees itself when its lease runs out). Not sent for a hold whose
  // final release answered while Close() waited for it (relock/client.h).
  kReleasedOnClose,
  // A thread exited while it held this lock (status Aborted, with the hold
  // count). Nobody can release the hold any more, so the client stops
  // renewing it and the lock frees itself when its lease runs out (at most
  // lock_watchdog_timeout, or its explicit lease). It is not released at
  // once: the thread's work under it may be half done. Not sent for the
  // process's main thread, whose exit ends the process.
  kOwnerThreadExited,
};

// Returns "unlock-failed", "lock-lost", "released-on-close" or
// "owner-thread-exited".
const char* LockEventTypeName(LockEventType type);

struct LockEvent {
  LockEventType type;
  std::string lock_name;
  absl::Status status;
  // The owner field of the hold concerned ("<client-id>:<thread-number>").
  std::string owner;
  // kLockLost: when the hold's SafeUntil() ended: its last acknowledged
  // renewal (or acquire) plus its lease, minus the drift margin, for a hold
  // that could not be kept alive; when the loss was found, for one found
  // earlier (the owner field gone). From then on SafeUntil() said the hold
  // was unsafe, however late this event is delivered (its thread may lag on
  // a loaded machine). The epoch (a default time_point) for other events.
  std::chrono::steady_clock::time_point safe_until{};
};

// TLS settings, used when `ClientOptions::url` is `rediss://...`. Files are
// PEM. The server's certificate is verified by default: its chain must lead
// to a CA in `ca_file` / `ca_dir` (or, when both are empty, the system's
// default trust store), and it must name `server_name` (or the URL's host: a
// DNS name, or an IP address in its subjectAltName). Connect() checks the
// paths first: each file must be a regular file it can read (never a FIFO,
// which would block it), `ca_dir` a directory; otherwise InvalidArgument
// naming the option and the path.
struct TlsOptions {
  // CA certificates that may sign the server's certificate (a PEM bundle).
  std::string ca_file;
  // A directory of CA certificates named by hash (`openssl rehash`).
  std::string ca_dir;
  // Client certificate (chain) and its private key, for servers that require
  // one (`tls-auth-clients yes`, mutual TLS). Both or neither.
  std::string cert_file;
  std::string key_file;
  // The name sent as SNI and checked against the server's certificate.
  // Empty (the default): the URL's host.
  std::string server_name;
  // Accept any server certificate, unverified: anyone on the path can then
  // read and change the traffic. For tests against throwaway servers only.
  bool dangerously_skip_verification = false;
};

// Settings for the sentinels of a `redis-sentinel://` (or
// `rediss-sentinel://`) URL. Setting any field with another scheme is
// InvalidArgument.
struct SentinelOptions {
  // The sentinels' own credentials. Unset (the default): the URL's user and
  // password, which then authenticate to the sentinels and the data nodes
  // alike (as Lettuce and Redisson do). Set it for sentinels with a password
  // of their own (`requirepass` in sentinel.conf), or to "" for sentinels
  // without one while the data nodes have one (no AUTH to the sentinels).
  absl::optional<std::string> password;
  // With `password`: `AUTH username password` (ACL) instead of
  // `AUTH password`.
  std::string username;
};

// How many replicas must acknowledge an acquire, and how long to wait for
// them (Redisson's checkLockSyncedSlaves / slavesSyncTimeout).
//
// With `replicas` > 0, every acquire attempt sends the acquire script and
// `WAIT <replicas> <timeout in ms>` together, in one round trip on one
// connection. When the script took the lock (a fresh hold or a re-entry) but
// fewer than `replicas` replicas acknowledged it within `timeout`, the
// acquire is undone (a fresh hold is deleted, a re-entry counted down by
// one) and the call fails with Unavailable, saying how many acknowledged; it
// is not retried, not even within TryAcquire's wait (a RedlockClient counts
// such a master as not acquired: see RedlockOptions::connection). A server
// whose `WAIT` fails (an ACL user without it) fails the acquire with that
// error; a fresh hold is undone too (a re-entry's extra count is cleared by the
// outermost release).
//
// What WAIT does and does not guarantee: it counts the replicas that
// received the write (the lock's owner field) before the reply; it does not
// make the write durable, and it does not make it survive every failover:
// replication stays asynchronous, a replica that acknowledged may be the one
// that is not promoted, and a promoted replica may not have persisted it.
// It narrows the window in which a failover loses a fresh acquisition; it
// does not close it (see the correctness notes in relock/lock.h).
//
// Costs: WAIT holds its connection for up to `timeout` + 100 ms (when the
// replicas are slow or gone), so other calls pipelined on that connection
// (other threads' calls: see ClientOptions::command_connections) wait too.
// Every attempt waits, including one that finds the lock held by another owner
// and one that re-checks after a wait, since the WAIT is sent with the
// script; one TryAcquire attempt may then take up to 200 ms + `timeout`
// (Redis answers a WAIT that times out on its next timer tick: up to 100 ms
// late at its default `hz` of 10, later at a lower one).
// Renewals (the watchdog's and Lock::Extend()) are acknowledged too: a hold
// remembers the ReplicaSync it was acquired with (the most that any acquire
// of it asked), every watchdog renewal batch is followed by one WAIT per
// node (per master on a cluster; one per batch, not per lock, so a round of
// many locks stays one round trip per node) and each Extend() by its own, in
// the same write on the same connection. Only a renewal that enough replicas
// acknowledged moves the hold's safe end (SafeUntil(), the watchdog's loss
// check, the kLockLost report): one they did not acknowledge ran on the
// master, but a failover may lose it, so the holder is not told it is safe
// for longer. While the replicas do not acknowledge, the watchdog retries as
// after any failed renewal and reports the lock lost when the safe end of
// the last acknowledged write (acquire or renewal) passes, though the master
// may still have it (Release() then frees it and returns OK); Extend()
// fails with Unavailable and leaves SafeUntil() as it was. Each renewal
// round may take up to `timeout` + 100 ms longer while the replicas lag.
// Releases send no WAIT, nor does an owner's re-entry of a watchdog hold
// counted without a round trip (relock/lock.h): it writes nothing, and the hold
// it re-enters was acknowledged. The client's ReplicaSync applies to a
// Semaphore's acquires too (permits taken without the acknowledgement are given
// back), not to its releases nor to a CountDownLatch (relock/semaphore.h,
// relock/count_down_latch.h).
struct ReplicaSync {
  // Replicas that must acknowledge each acquire and renewal. 0 (the
  // default): send no WAIT and do not wait. In [0, 64].
  int replicas = 0;
  // How long WAIT waits for them. At least 1 ms and less than
  // ClientOptions::command_timeout - 100 ms (else a WAIT that Redis answers
  // late would look like a silent server): InvalidArgument otherwise.
  absl::Duration timeout = absl::Seconds(1);
};

// How the clients of a Redis Cluster are told that a lock was released
// (ClientOptions::cluster_pubsub). Every client of one lock, relock or
// Redisson, must use the same kind: a classic PUBLISH does not reach a
// sharded subscriber, nor the reverse.
enum class ClusterPubSub {
  // Sharded pub/sub when the cluster has it (Redis >= 7, found by CLUSTER
  // SHARDS), else classic. What Redisson does by default
  // (shardedSubscriptionMode AUTO).
  kAuto,
  // Always sharded: waiters SSUBSCRIBE on the master of the lock's slot,
  // releases SPUBLISH. Connect() fails with FailedPrecondition on a cluster
  // without it (Redis < 7).
  kSharded,
  // Always classic: waiters SUBSCRIBE on the master of the lock's slot,
  // releases PUBLISH (which a cluster passes to every node). For peers that
  // only use classic pub/sub (Redisson with shardedSubscriptionMode OFF,
  // older clients). Costs cluster bus traffic on every release.
  kClassic,
};

struct ClientOptions {
  // Where Redis is:
  //   redis://[[user]:password@]host[:port][/db]   (port 6379, db 0 by default;
  //                                                  user and password are
  //                                                  percent-decoded; IPv6 as
  //                                                  [::1])
  //   rediss://[[user]:password@]host[:port][/db]  (TLS; see `tls`)
  //   unix:///path/to/redis.sock[?db=N]
  //   redis-cluster://[[user]:password@]h1[:p1][,h2[:p2]...]
  //                                               (Redis Cluster: any nodes
  //                                               as seeds, port 6379 by
  //                                               default; rediss-cluster://
  //                                               for TLS; only db 0)
  //   redis-sentinel://[[user]:password@]s1[:p1][,s2[:p2]...][/db]#name
  //                                               (the master that the
  //                                               sentinels at s1, s2, ...
  //                                               (port 26379 by default)
  //                                               monitor as `name`, and
  //                                               its db; rediss-sentinel://
  //                                               for TLS to all of them;
  //                                               `name` is percent-decoded)
  // A '#' in a password may stay unencoded (the credentials end at the last
  // '@'); a '?' must be percent-encoded (%3F).
  // A password without user authenticates with `AUTH password`; with a user,
  // `AUTH user password` (Redis 6 ACL); on a cluster, with every node; with
  // Sentinel, with the data nodes and (unless `sentinel` says otherwise) the
  // sentinels. A cluster URL to a server without cluster support is
  // FailedPrecondition. With Sentinel, Connect() is NotFound when the
  // sentinels that answer know no master of that name, and Unavailable when
  // none answers or the master they name cannot be used.
  //
  // After a Sentinel failover the client follows the new master (it listens
  // to every sentinel's +switch-master and asks them again on errors and
  // every 5 s): waiters re-check against it at once, and the watchdog's next
  // round keeps each held lock whose owner field reached the new master and
  // reports the others lost (kLockLost). Replication is asynchronous: an
  // acquisition the old master had not passed on is lost in a failover.
  std::string url = "redis://127.0.0.1:6379";

  // Certificates and verification for a `rediss://` (or `rediss-cluster://`)
  // URL. Setting any field with another scheme is InvalidArgument (a TLS
  // setting that would be silently ignored).
  TlsOptions tls;

  // The sentinels' credentials, for a `redis-sentinel://` URL.
  SentinelOptions sentinel;

  // Pub/sub on a Redis Cluster (see ClusterPubSub): kAuto (the default) is
  // sharded on Redis >= 7. Any other value with a URL that is not
  // `redis-cluster://` or `rediss-cluster://` is InvalidArgument.
  ClusterPubSub cluster_pubsub = ClusterPubSub::kAuto;

  // Upper bound on establishing one connection (TCP/unix connect plus AUTH and
  // SELECT). Must be positive and at most kMaxTimeout (relock/limits.h: a
  // year).
  absl::Duration connect_timeout = absl::Seconds(2);

  // Upper bound on one Redis command round trip. A command that takes longer
  // fails with Unavailable and its connection is replaced. Must be positive
  // and at most kMaxTimeout (relock/limits.h: a year).
  absl::Duration command_timeout = absl::Seconds(2);

  // Connections the client keeps for commands (the pub/sub connection is
  // extra). Every thread shares them: requests from all threads are written
  // together (pipelined) on the client's event loop, so one is enough for
  // most servers; calls are spread over several round robin. Opened when
  // first needed, reopened after a failure. Between 1 and 64.
  int command_connections = 1;

  // Replica acknowledgement of every acquire and of the renewals of what it
  // took (see ReplicaSync), unless a
  // lock's LockOptions say otherwise. Default: none. On a cluster, the
  // replicas of the slot's master; with Sentinel, of the current master. A
  // RedlockClient (RedlockOptions::connection) applies it on each master: a
  // master whose replicas did not acknowledge counts as not acquired.
  ReplicaSync replica_sync;

  // Lease of a lock acquired without an explicit lease (Redisson's
  // lockWatchdogTimeout). The watchdog renews such leases about every third
  // of it while they are held and reports a lock lost when it cannot.
  // Between 30 ms and 365 days.
  absl::Duration lock_watchdog_timeout = absl::Seconds(30);

  // Identifies this client in lock owner fields ("<client_id>:<thread>").
  // Empty (the default) means a fresh random UUID; set it only to reproduce a
  // known identity. Must be a UUID in its text form, 8-4-4-4-12 hex digits
  // of either case (e.g. "123e4567-e89b-42d3-a456-426614174000"; any
  // version), else Connect() fails with InvalidArgument: a hash counts as a
  // lock only when its owner fields have that form ("Lock shape" in
  // relock/lock.h), so an id of another form would make this client's own
  // locks look like user data.
  std::string client_id;

  // Receives `LockEvent`s: kUnlockFailed on the thread calling `unlock()`,
  // kReleasedOnClose on the thread closing the client, kLockLost and
  // kOwnerThreadExited on the client's event thread (one at a time, in
  // order; a slow callback delays later events but never the watchdog).
  // Should not throw: what it throws is caught, logged at kError through
  // `logger` and dropped (the thread goes on; unlock() stays noexcept). The
  // callback may close or destroy the client (e.g. shut down
  // when a lock is lost); the event thread then finishes the queued events
  // and exits on its own. Empty (the default) writes one line per event to
  // `logger` (whose default writes it to stderr).
  std::function<void(const LockEvent&)> on_lock_event;

  // Receives the client's log messages, one line each without a trailing
  // newline, so that a server can route them into its own logging (with
  // Abseil >= 20230125: `ABSL_LOG(LEVEL(severity)) << message`). Messages:
  //   kError    a lock lost (the LockEvent line, when on_lock_event is empty)
  //   kWarning  the other LockEvents (when on_lock_event is empty); a
  //             connection to a node lost with requests in flight (once
  //             per loss, with why)
  //   kInfo     an idle connection lost (e.g. closed by the server's
  //             `timeout`); a lost connection open again; a Sentinel
  //             failover followed
  // It may run on any of the client's threads (the event loop's, the event
  // thread, a caller's), concurrently; it must be quick and must not call
  // into the client. It should not throw: what it throws is written to
  // stderr with the line and dropped. Empty (the default): messages of
  // severity kWarning and above are written to stderr as "relock: <message>"
  // (kInfo is dropped).
  std::function<void(absl::LogSeverity severity, absl::string_view message)>
      logger;

  // Publish this client's info record, so that lock inspection
  // (Client::InspectLock, `relock status`) can say which host and process
  // hold a lock: the hash "relock:client:<client_id>" with the fields host,
  // pid, started (unix ms) and version, a TTL of 30 s, written at Connect()
  // and every 10 s (one round trip, in the background) and deleted by
  // Close(). Writing it never fails Connect() or a lock call (an ACL user
  // that may not write the key simply has no record). true (the default):
  // publish; false: no record, no writes. Not used by RedlockClient.
  bool publish_client_info = true;

  // Whether the server has pub/sub. true (the default): waiting calls are
  // woken by the release's message (they SUBSCRIBE to the name's channel;
  // without that right they fail with PermissionDenied). false, for servers
  // that refuse SUBSCRIBE (some managed services and proxies; Redisson's
  // RSpinLock exists for them): nothing subscribes, and every waiting call
  // (every lock type's, Semaphore's, CountDownLatch's) re-checks on
  // spin_backoff instead, as a spin lock does (Client::GetSpinLock()): it
  // takes over up to one backoff delay after the release and costs one
  // script call per re-check. Releases of locks and every change of a
  // semaphore or latch still PUBLISH, so the waiters of clients that listen
  // (Redisson's, which never re-check on their own; relock's with pubsub
  // true) are woken by this client's changes too; a PUBLISH that Redis
  // refuses is no error on such a client. Clients with and without pub/sub
  // may share every name.
  bool pubsub = true;
  // How a waiting call that is not woken by messages re-checks (a spin
  // lock's; every waiting call with pubsub false): the strategy's
  // NextDelay(i) before re-check i + 1, from the first that found the lock
  // held (or the permits short); one that gives up (nullopt) ends the wait
  // with DeadlineExceeded. null (the default): 1 ms doubling to 128 ms, each
  // less up to a fifth (ExponentialBackoff with initial 1ms, factor 2,
  // maximum 128ms, jitter 0.2; Redisson's RSpinLock default, with jitter).
  // Connect() refuses (InvalidArgument) a strategy whose first 32 delays,
  // until it gives up, include a negative or infinite one, or are all zero
  // (a wait that never pauses would send its re-checks back to back).
  std::shared_ptr<const BackoffStrategy> spin_backoff;
};

// Settings of one lock handle (Client::GetLock(name, options)); every unset
// field is the client's.
struct LockOptions {
  // Replica acknowledgement of this lock's acquires. Unset (the default):
  // ClientOptions::replica_sync. The same ranges apply (timeout less than
  // the client's command_timeout - 100 ms); a handle with invalid values
  // fails every call with InvalidArgument.
  absl::optional<ReplicaSync> replica_sync;

  // Called when a hold taken through this handle is lost: once per hold, on
  // the client's event thread (after the client-wide on_lock_event event),
  // with the LockEvent (type kLockLost). Registered for the hold when this
  // handle takes it from zero (a re-entry through another handle does not
  // add it); Lock::OnLost() registers one for a hold taken otherwise.
  // Should not throw (what it throws is caught, logged at kError through
  // ClientOptions::logger and dropped); may close the client. See
  // Lock::OnLost() for when a hold counts as lost and what the callback may
  // capture. Empty (the default): none.
  std::function<void(const LockEvent&)> on_lost;
};

}  // namespace relock

#endif  // RELOCK_OPTIONS_H_
