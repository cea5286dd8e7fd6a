// relock/count_down_latch.h
//
// `relock::CountDownLatch`: a count-down latch on Redis, shared by every
// thread and process that uses its name: waiters block until the count
// reaches zero, then all of them go. Wire-compatible with Redisson's
// RCountDownLatch: Java and C++ services count down and wait on the same
// latch.
//
//   relock::CountDownLatch ready = client->GetCountDownLatch("deploy:42");
//   (void)ready.TrySetCount(3);                   // once, by anyone
//   ... each of 3 workers: (void)ready.CountDown();
//   ... anyone: if (ready.Await(absl::Minutes(5)).ok()) { all 3 are done }
//
// Data model (Redisson's)
// -----------------------
// The latch named N is a Redis string at key N holding the count, a
// decimal integer; no key means count 0: open. TrySetCount(n) sets it when
// there is none and publishes "1" (Redisson's new-count message);
// CountDown() decrements it, and the one that takes it to zero deletes the
// key and publishes "0" on "redisson_countdownlatch__channel__{N}". A
// waiter subscribes (through the client's single pub/sub connection),
// re-checks the count once the subscription is confirmed, and sleeps until
// a message: every message wakes every waiter of every client (each
// re-checks), so all of them go at zero, however many wait in one process
// (but see "reusable" below).
// No poll: a key without messages is re-checked every 30 s, and at its
// TTL's end if it has one. On a client with ClientOptions::pubsub false,
// nothing subscribes: its waiters re-check on ClientOptions::spin_backoff
// instead; its TrySetCount() and CountDown() still publish, for every other
// client's waiters (a publish Redis refuses is then no error).
//
// Names: the channel is Redisson's, braces around the whole name. On a
// Redis Cluster, where a script's keys must share one hash slot, a name
// containing "}" (so any name with a hash tag, "deploy:{42}") would put the
// channel in another slot than the name: every call on such a name is
// InvalidArgument there, and nothing is written. On a single server (or
// Sentinel) every name works.
//
// Replica acknowledgement: no call sends ClientOptions::replica_sync's WAIT.
// Await() writes nothing; TrySetCount() and CountDown() are a latch's
// releases, and a lock's releases send none either (relock/options.h,
// ReplicaSync).
//
// States:
//
// clang-format off
//   state          | TrySetCount(n) | CountDown()        | Await(t)
//   ---------------+----------------+--------------------+------------------
//   open (no key)  | count = n,     | OK (stays open)    | OK at once
//                  | true           |                    |
//   count c > 1    | false          | c - 1              | waits (notified);
//                  |                |                    | DeadlineExceeded
//                  |                |                    | after t
//   count 1        | false          | -> open, wakes all | as above
//   not a count    | FailedPrecondition, nothing changed at the key
// clang-format on
//
// A latch is reusable: once open (the key is gone), TrySetCount() arms it
// again. A waiter goes when its re-check finds the count at zero: one armed
// again before a woken waiter re-checks (about a round trip after the last
// CountDown()) keeps that waiter waiting for the new count, as Redisson's
// waiters do. Re-arm only once the waiters of the last round are through.
// Nobody owns a count: any caller may count down.
//
// Costs: CountDown() and TrySetCount() are one round trip each; a waiter
// goes about one pub/sub delivery plus one round trip after the last
// CountDown().
//
// Errors (absl::StatusCode):
//   InvalidArgument     an empty or over-long name; on a cluster, a name
//                       containing "}" (see Names); TrySetCount's count
//                       not in [1, kMaxCount] (relock/limits.h: 2^53 - 1,
//                       the largest integer Lua counts exactly; Redisson's
//                       counts are Java longs); a negative timeout.
//   FailedPrecondition  the key holds anything but a count (a hash, a list,
//                       a string that is no integer): nothing is changed or
//                       deleted; the client is closed; a blocking call on
//                       the client's event loop thread; an unbound handle.
//   DeadlineExceeded    Await's timeout ended before the count reached 0
//                       ("the count did not reach zero within the wait").
//   Unavailable         Redis unreachable, slow or failing. A CountDown()
//                       whose answer was lost may or may not have happened
//                       (it is never resent: twice would count twice). A
//                       waiter rides out a restart or failover as a lock's
//                       does (relock/lock.h).
//   PermissionDenied    an ACL user without the key, the scripts or the
//                       channel; a CountDown()/TrySetCount() whose publish
//                       was refused did change the count (the message says
//                       so), but other clients' waiters only find out when
//                       they re-check. (Not on a client without pub/sub:
//                       see Data model.)
//   Cancelled           the client was closed while the call waited.
//
// Deliberate differences from Redisson's RCountDownLatch:
//   - TrySetCount(0) is InvalidArgument (Redisson stores a "0" that a
//     later countDown deletes).
//   - CountDown() of an open latch changes nothing (Redisson's DECR makes a
//     -1 that it deletes at once: the same end state).
//   - On a cluster, names containing "}" are InvalidArgument (Redisson's
//     scripts fail there with CROSSSLOT).
//   - A key that holds something else is FailedPrecondition and left alone.
//   - Every waiter wakes at zero, the asynchronous ones too (Redisson's
//     issue #5349 woke one async waiter).
//
// Thread-safety: a CountDownLatch is a cheap, copyable handle (a name and
// the client); every method may be called from any thread at any time.

#ifndef RELOCK_COUNT_DOWN_LATCH_H_
#define RELOCK_COUNT_DOWN_LATCH_H_

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

class CountDownLatch {
 public:
  // A handle that refers to no client: every call fails with
  // FailedPrecondition. Get real ones from `Client::GetCountDownLatch()`.
  CountDownLatch() = default;

  // The latch's name: its Redis key.
  const std::string& name() const { return name_; }

  // Sets the count to `count` (>= 1) if the latch is open (its key does not
  // exist). True if it set it, false if a count was there (unchanged).
  ABSL_MUST_USE_RESULT absl::StatusOr<bool> TrySetCount(int64_t count);
  // Counts down by one; at zero the latch opens and every waiter of every
  // client wakes. OK on an open latch too (nothing changes).
  ABSL_MUST_USE_RESULT absl::Status CountDown();
  // The count now (0 when open). Stale at once.
  ABSL_MUST_USE_RESULT absl::StatusOr<int64_t> GetCount() const;
  // Waits at most `timeout` (>= 0; zero = one look, which may take up to
  // 100 ms; InfiniteDuration = no limit) for the count to reach zero
  // (notified, not polling). DeadlineExceeded if it did not.
  ABSL_MUST_USE_RESULT absl::Status Await(absl::Duration timeout);

  // Await() without blocking: completes the Future (relock/future.h) or
  // calls `done`, once, on the client's event loop thread (on the calling
  // thread, before it returns, when the call fails at once). Close() ends a
  // pending one with Cancelled. Callbacks must not block and should not
  // throw (what they throw is caught and logged).
  Future<absl::Status> AwaitAsync(absl::Duration timeout);
  void AwaitAsync(absl::Duration timeout,
                  std::function<void(absl::Status)> done);

 private:
  friend class Client;
  CountDownLatch(std::shared_ptr<internal::ClientCore> core, std::string name)
      : core_(std::move(core)), name_(std::move(name)) {}

  std::shared_ptr<internal::ClientCore> core_;
  std::string name_;
};

}  // namespace relock

#endif  // RELOCK_COUNT_DOWN_LATCH_H_
