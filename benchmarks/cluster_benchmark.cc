// Throughput on one master against a Redis Cluster of 3 masters, in the same
// run: 32 threads of one client, each Acquire() + Release() of its own lock
// (watchdog lease), back to back (the W3 workload of BM_OwnKeyLockUnlock).
//
//   BM_OwnKeyPairs/1/threads:32   a standalone redis-server
//   BM_OwnKeyPairs/3/threads:32   a 3-master cluster (no replicas), the locks
//                                 spread over its slots
//
// Counters (thread 0 reports for all): items_per_second (pairs/s over the
// wall time), p50_us / p99_us of a pair, client_cpu_us_per_pair (this
// process's CPU time, which is the client's: the servers are processes of
// their own, over the pairs), and on the cluster run `ratio_to_one_master`
// (its pairs/s over the 1-master run's, when that ran first in the process).
//
// Both servers run on this machine, so on a 2-core VM the cluster's three
// redis-server processes and the client share the same two cores that one
// redis-server and the client share in the 1-master run: the figure shows
// the client's routing costs more than the cluster's added capacity, which
// needs cores (or machines) for its masters.
//
//   build-release/benchmarks/cluster_benchmark
//   build-release/benchmarks/cluster_benchmark --benchmark_min_time=0.01
//     (CI's smoke run: keeps it working; its numbers mean nothing)

#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "lib/common/mutex.h"
#include "relock/relock.h"
#include "tests/testing/redis_cluster.h"
#include "tests/testing/redis_server.h"

namespace relock {
namespace {

int64_t NowNs(clockid_t clock = CLOCK_MONOTONIC) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// A server (1 master) or a cluster (3 masters) and a client of it.
struct Target {
  std::unique_ptr<testing::RedisServer> server;
  std::unique_ptr<testing::RedisCluster> cluster;
  std::unique_ptr<Client> client;
  absl::Status status;
};

Target MakeTarget(int masters) {
  Target t;
  std::string url;
  if (masters == 1) {
    absl::StatusOr<std::unique_ptr<testing::RedisServer>> server =
        testing::RedisServer::Start();
    if (!server.ok()) {
      t.status = server.status();
      return t;
    }
    t.server = *std::move(server);
    url = t.server->url();
  } else {
    testing::RedisClusterOptions options;
    options.masters = masters;
    options.replicas_per_master = 0;
    absl::StatusOr<std::unique_ptr<testing::RedisCluster>> cluster =
        testing::RedisCluster::Start(options);
    if (!cluster.ok()) {
      t.status = cluster.status();
      return t;
    }
    t.cluster = *std::move(cluster);
    url = t.cluster->url();
  }
  ClientOptions options;
  options.url = url;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  if (!client.ok()) {
    t.status = client.status();
    return t;
  }
  t.client = *std::move(client);
  return t;
}

// The target of `masters` masters, made on first use and kept until exit
// (statics made after the fixture's own, so destroyed before them: the
// client closes before its servers stop). Null after SkipWithError.
Target* TargetOrSkip(benchmark::State& state, int masters) {
  Target* t = nullptr;
  if (masters == 1) {
    static Target one = MakeTarget(1);
    t = &one;
  } else {
    static Target three = MakeTarget(3);
    t = &three;
  }
  if (!t->status.ok()) {
    state.SkipWithError(absl::StrCat("setup: ", t->status.ToString()).c_str());
    return nullptr;
  }
  return t;
}

double Percentile(std::vector<int64_t>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t i =
      std::min(sorted.size() - 1, static_cast<size_t>(p * sorted.size()));
  return static_cast<double>(sorted[i]);
}

// Pairs/s of the last 1-master run (0 = none yet).
std::atomic<double> g_one_master_pairs_per_s{0};

struct Run {
  Mutex mu;
  int reported ABSL_GUARDED_BY(mu) = 0;
  std::vector<int64_t> samples ABSL_GUARDED_BY(mu);
};

void BM_OwnKeyPairs(benchmark::State& state) {
  const int masters = static_cast<int>(state.range(0));
  Target* target = TargetOrSkip(state, masters);
  if (target == nullptr) return;
  static Run run;
  if (state.thread_index() == 0) {
    MutexLock l(&run.mu);
    run.reported = 0;
    run.samples.clear();
  }
  Lock lock = target->client->GetLock(absl::StrCat(
      "relock-bench:cluster:", masters, ":", state.thread_index()));
  std::vector<int64_t> samples;
  samples.reserve(4096);
  absl::Status error;
  // The loop's start is a barrier: thread 0's clocks cover every pair.
  const int64_t start = NowNs();
  const int64_t cpu_start = NowNs(CLOCK_PROCESS_CPUTIME_ID);
  for (auto _ : state) {
    const int64_t pair_start = NowNs();
    error = lock.Acquire();
    if (error.ok()) error = lock.Release();
    if (!error.ok()) break;
    samples.push_back(NowNs() - pair_start);
  }
  if (!error.ok()) state.SkipWithError(error.ToString().c_str());
  MutexLock l(&run.mu);
  run.samples.insert(run.samples.end(), samples.begin(), samples.end());
  ++run.reported;
  if (state.thread_index() != 0) return;
  auto all = [&]() ABSL_SHARED_LOCKS_REQUIRED(run.mu) {
    return run.reported == state.threads();
  };
  run.mu.Await(absl::Condition(&all));
  const double elapsed_ns = static_cast<double>(NowNs() - start);
  const double cpu_ns =
      static_cast<double>(NowNs(CLOCK_PROCESS_CPUTIME_ID) - cpu_start);
  if (run.samples.empty()) return;
  std::sort(run.samples.begin(), run.samples.end());
  const double pairs = static_cast<double>(run.samples.size());
  const double pairs_per_s = pairs * 1e9 / elapsed_ns;
  state.counters["items_per_second"] = pairs_per_s;
  state.counters["p50_us"] = Percentile(run.samples, 0.50) / 1e3;
  state.counters["p99_us"] = Percentile(run.samples, 0.99) / 1e3;
  state.counters["client_cpu_us_per_pair"] = cpu_ns / pairs / 1e3;
  if (masters == 1) {
    g_one_master_pairs_per_s = pairs_per_s;
  } else if (const double one = g_one_master_pairs_per_s.load(); one > 0) {
    state.counters["ratio_to_one_master"] = pairs_per_s / one;
  }
}
BENCHMARK(BM_OwnKeyPairs)
    ->Arg(1)
    ->Arg(3)
    ->Threads(32)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace relock
