// relock/metrics.h
//
// `relock::ClientMetrics`: what a client has done since it connected, as a
// snapshot (`Client::Metrics()`, `RedlockClient::Metrics()`), and
// `relock::PrometheusText()`, the same in Prometheus's text exposition format
// for a server's own /metrics page (the library runs no HTTP server).
//
// Counters only grow; a snapshot is a consistent reading of each counter but
// not of all of them at one instant (a count read while a call finishes may
// be one ahead of another). Recording costs a few relaxed atomic additions
// per call, and takes no lock.
//
// What counts, per call on any lock type of the client (plain, fenced, fair,
// read-write, a MultiLock's parts, a Redlock's locks):
//
//   counter            | counts
//   -------------------+-------------------------------------------------
//   acquisitions       | acquires that succeeded (re-entries included)
//   reentries          | of those, re-entries of a hold the owner had
//   local_reentries    | of those, counted without a round trip
//   acquire_timeouts   | acquires that failed with DeadlineExceeded: the
//                      | lock stayed held (try_lock() returning false), or
//                      | Redis did not answer within the wait
//   acquire_failures   | acquires that failed otherwise (a bad lease
//                      | included; not calls refused before that: an
//                      | unbound handle, a bad name or owner)
//   waits              | acquires that found the lock held and waited
//   handoffs           | of those, waits that ended with the lock
//   releases           | releases that succeeded (one hold each; not
//                      | what Close() releases)
//   unlock_failures    | releases that failed (any error)
//   renew_rounds       | watchdog renewal rounds that sent renewals
//   renew_round_trips  | round trips those rounds took
//   renew_failures     | rounds in which some renewal got no answer
//   locks_lost         | holds reported lost to on_lock_event
//                      | (kLockLost; not explicit leases that ran out)
//   reconnects         | connections opened again after they failed
//
// Gauges: `pending_requests` (requests submitted to Redis and not answered
// yet, queued or written, connection handshakes and pub/sub included) and
// `held_locks` (holds the client renews or tracks now). Histogram: `wait_time`,
// how long each acquire that waited waited (from its call to its outcome,
// success or not).

#ifndef RELOCK_METRICS_H_
#define RELOCK_METRICS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"

namespace relock {

// A histogram of durations with fixed bucket bounds.
struct HistogramSnapshot {
  // The buckets' upper bounds, in seconds, ascending. counts[i] observations
  // were <= upper_bounds[i] (and above the bound before it);
  // counts.back() (one more than the bounds) were above the last bound.
  std::vector<double> upper_bounds;
  std::vector<uint64_t> counts;
  uint64_t count = 0;  // observations in all
  absl::Duration sum;  // their sum
};

// The bucket bounds of ClientMetrics::wait_time, in seconds: 1 ms to 60 s.
const std::vector<double>& WaitTimeBuckets();

struct ClientMetrics {
  // See the table at the top of this file.
  uint64_t acquisitions = 0;
  uint64_t reentries = 0;
  uint64_t local_reentries = 0;
  uint64_t acquire_timeouts = 0;
  uint64_t acquire_failures = 0;
  uint64_t waits = 0;
  uint64_t handoffs = 0;
  uint64_t releases = 0;
  uint64_t unlock_failures = 0;
  uint64_t renew_rounds = 0;
  uint64_t renew_round_trips = 0;
  uint64_t renew_failures = 0;
  uint64_t locks_lost = 0;
  uint64_t reconnects = 0;
  int64_t pending_requests = 0;
  int64_t held_locks = 0;
  HistogramSnapshot wait_time;
};

// `metrics` in Prometheus text exposition format (version 0.0.4): one
// `# HELP` and `# TYPE` line per metric, then its samples, every name
// prefixed `relock_` (counters end in `_total`; the histogram is
// `relock_wait_seconds` with `_bucket{le="..."}`, `_sum` and `_count`).
// `labels` (name, value) are added to every sample, e.g. {{"client",
// "orders"}}; names must be valid Prometheus label names other than "le"
// (not checked), values are escaped.
std::string PrometheusText(
    const ClientMetrics& metrics,
    const std::vector<std::pair<std::string, std::string>>& labels = {});

}  // namespace relock

#endif  // RELOCK_METRICS_H_
