// relock/redlock_options.h
//
// `relock::RedlockOptions`: every setting of a `relock::RedlockClient`
// (relock/redlock.h), with its default written next to it.

#ifndef RELOCK_REDLOCK_OPTIONS_H_
#define RELOCK_REDLOCK_OPTIONS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "relock/backoff.h"
#include "relock/options.h"

namespace relock {

struct RedlockOptions {
  // The N independent masters (redis:// or unix:// URLs, as
  // ClientOptions::url). Typically 3 or 5; 1 to 15 accepted.
  std::vector<std::string> urls;

  // Per-master connection settings and lock defaults: connect_timeout,
  // command_timeout, lock_watchdog_timeout (the lease when none is
  // given), client_id, on_lock_event, replica_sync (applied on each master:
  // a master whose replicas did not acknowledge an acquire in time counts
  // as not acquired there, and is undone; the WAIT's timeout + 100 ms adds
  // to each attempt's per-master timeout). `connection.url` is ignored.
  ClientOptions connection;

  // Clock drift allowance, as a fraction of the lease (redsync: 0.01).
  // In [0, 0.5).
  double drift_factor = 0.01;

  // Per-master timeout of each request, as a fraction of the lease
  // (redsync: 0.05), at least 2 ms and at most connection.command_timeout.
  // In (0, 1].
  double timeout_factor = 0.01;

  // Most attempts per call that fail for lack of a quorum of *answers*
  // (masters unavailable or too slow, validity used up). Waiting for another
  // owner does not count. At least 1.
  int tries = 3;

  // Delay between such attempts. Null = ExponentialBackoff() (10 ms doubling
  // to 1 s, 20% jitter).
  std::shared_ptr<const BackoffStrategy> retry_backoff;

  // Makes the client-id part of owner fields (redsync's genValue); called
  // once at Connect. Null = connection.client_id, or a random UUID. The
  // result must be a UUID in its text form (8-4-4-4-12 hex digits, as
  // ClientOptions::client_id), else Connect fails with InvalidArgument: an
  // owner field of any other form does not count as a lock (relock and
  // Redisson clients would take it for someone else's hash).
  std::function<std::string()> owner_id_generator;

  // Finish an attempt as soon as its outcome is certain (a quorum acquired,
  // or a quorum can no longer be reached) instead of waiting for every
  // master up to the per-master timeout; masters not awaited get their
  // connection replaced. (redsync: WithFailFast.)
  bool fail_fast = false;

  // Send requests to the masters in random order each time, so no master
  // is always asked first. (redsync: WithShufflePools.)
  bool shuffle_masters = false;
};

}  // namespace relock

#endif  // RELOCK_REDLOCK_OPTIONS_H_
