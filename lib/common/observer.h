// What a client tells its operator: its counters (relock/metrics.h) and its
// log messages (ClientOptions::logger). One Observer per client, shared by
// every layer that records (the lock algorithms, the watchdog's rounds, the
// connections), so recording needs no call back up the layers; and the one
// event the client's top acts on, a connection opened again (on_reconnect),
// which it hands down as a callback.

#ifndef RELOCK_LIB_COMMON_OBSERVER_H_
#define RELOCK_LIB_COMMON_OBSERVER_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "absl/base/log_severity.h"
#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "lib/common/mutex.h"
#include "relock/metrics.h"

namespace relock {

// A counter; relaxed: counts need no order with anything else.
class Counter {
 public:
  void Add(uint64_t n = 1) { v_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t Get() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

// A gauge that goes up and down.
class Gauge {
 public:
  void Add(int64_t n) { v_.fetch_add(n, std::memory_order_relaxed); }
  int64_t Get() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> v_{0};
};

// WaitTimeBuckets()'s bounds.
inline constexpr std::array<double, 14> kWaitTimeBounds = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60};

// Durations in kWaitTimeBounds's buckets.
class WaitHistogram {
 public:
  void Observe(absl::Duration d) {
    const double seconds = absl::ToDoubleSeconds(d);
    size_t i = 0;
    while (i < kWaitTimeBounds.size() && seconds > kWaitTimeBounds[i]) ++i;
    buckets_[i].Add();
    sum_ns_.Add(static_cast<uint64_t>(absl::ToInt64Nanoseconds(d)));
  }
  HistogramSnapshot Snapshot() const {
    HistogramSnapshot s;
    s.upper_bounds.assign(kWaitTimeBounds.begin(), kWaitTimeBounds.end());
    // count is the buckets' sum, so that it always equals the +Inf bucket
    // (an Observe() between the reads would make them differ).
    for (const Counter& b : buckets_) {
      s.counts.push_back(b.Get());
      s.count += s.counts.back();
    }
    s.sum = absl::Nanoseconds(sum_ns_.Get());
    return s;
  }

 private:
  std::array<Counter, kWaitTimeBounds.size() + 1> buckets_;
  Counter sum_ns_;
};

// A client's counters (see relock/metrics.h for what each counts).
struct Metrics {
  Counter acquisitions;
  Counter reentries;
  Counter local_reentries;
  Counter acquire_timeouts;
  Counter acquire_failures;
  Counter waits;
  Counter handoffs;
  Counter releases;
  Counter unlock_failures;
  Counter renew_rounds;
  Counter renew_round_trips;
  Counter renew_failures;
  Counter locks_lost;
  Counter reconnects;
  Gauge pending_requests;
  WaitHistogram wait_time;

  // Everything but held_locks, which the hold registry knows.
  ClientMetrics Snapshot() const {
    ClientMetrics m;
    m.acquisitions = acquisitions.Get();
    m.reentries = reentries.Get();
    m.local_reentries = local_reentries.Get();
    m.acquire_timeouts = acquire_timeouts.Get();
    m.acquire_failures = acquire_failures.Get();
    m.waits = waits.Get();
    m.handoffs = handoffs.Get();
    m.releases = releases.Get();
    m.unlock_failures = unlock_failures.Get();
    m.renew_rounds = renew_rounds.Get();
    m.renew_round_trips = renew_round_trips.Get();
    m.renew_failures = renew_failures.Get();
    m.locks_lost = locks_lost.Get();
    m.reconnects = reconnects.Get();
    m.pending_requests = pending_requests.Get();
    m.wait_time = wait_time.Snapshot();
    return m;
  }
};

// ClientOptions::logger's type.
using LogFn = std::function<void(absl::LogSeverity, absl::string_view)>;

// A callback that may be set or cleared while other threads run it: Set()
// returns only once no call of the previous one is under way. Unset: Run()
// does nothing.
class Hook {
 public:
  void Set(std::function<void()> fn) {
    MutexLock lock(&mu_);
    fn_ = std::move(fn);
  }
  void Run() const {
    MutexLock lock(&mu_);
    if (fn_) fn_();
  }

 private:
  mutable Mutex mu_;
  std::function<void()> fn_ ABSL_GUARDED_BY(mu_);
};

struct Observer {
  Metrics metrics;
  // Run each time a connection opens again after it failed (on its loop
  // thread), and when a routed backend finds a slot's master changed: the
  // server may have restarted or failed over, losing locks. The client
  // renews every watchdog lease then, so that a loss is reported now rather
  // than at its next renewal. Must not block.
  Hook on_reconnect;
  // Never empty (the default writes to stderr); must not call into the
  // client, and may run on any of its threads.
  LogFn log;

  void Log(absl::LogSeverity severity, absl::string_view message) const {
    if (log) log(severity, message);
  }
};

}  // namespace relock

#endif  // RELOCK_LIB_COMMON_OBSERVER_H_
