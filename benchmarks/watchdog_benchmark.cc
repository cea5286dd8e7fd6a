// The watchdog's renewal round for many held locks (issue: 100,000 watchdog
// locks), against renewing the same locks one round trip each, in the same
// run.
//
//   BM_WatchdogRound/N          one full renewal round of N held locks
//                               (Watchdog::RunRound(all)): wall time, CPU
//                               time of the renewing thread (`cpu_ms`),
//                               round trips per round (`round_trips`), locks
//                               renewed, client memory per held lock
//                               (`rss_bytes_per_lock`, RSS growth while
//                               acquiring them).
//   BM_OneRoundTripPerLock/N    the same N locks renewed with one EVALSHA
//                               round trip each (raw hiredis, one connection):
//                               what renewal costs without batching.
//                               `batched_fraction` = batched round wall time
//                               / this wall time.
//
// N is 100000 (5000 with RELOCK_BENCH_SMOKE=1). The client uses a 1 h
// watchdog lease so no background round runs during the measurement.
//
//   build/benchmarks/watchdog_benchmark
//   RELOCK_BENCH_SMOKE=1 build/benchmarks/watchdog_benchmark

#include <hiredis/hiredis.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "lib/api/client_access.h"
#include "lib/lock/owner.h"
#include "lua/renew.lua.h"
#include "relock/relock.h"
#include "tests/testing/notification.h"
#include "tests/testing/raw_connection.h"
#include "tests/testing/redis_server.h"

namespace relock {
namespace {

bool Smoke() {
  const char* smoke = std::getenv("RELOCK_BENCH_SMOKE");
  return smoke != nullptr && std::string(smoke) == "1";
}

size_t LockCount() { return Smoke() ? 5000 : 100000; }

long RssBytes() {
  long pages_total = 0, pages_resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  if (std::fscanf(f, "%ld %ld", &pages_total, &pages_resident) != 2) {
    pages_resident = 0;
  }
  std::fclose(f);
  return pages_resident * sysconf(_SC_PAGESIZE);
}

// Threads that acquire the locks, in parallel: N / kAcquiringThreads round
// trips each.
constexpr int kAcquiringThreads = 8;

// A private redis-server with N watchdog locks held by one client.
struct World {
  std::unique_ptr<testing::RedisServer> server;
  std::unique_ptr<Client> client;
  std::vector<Lock> locks;
  // The owner field of each acquiring thread: lock i's is owners[i %
  // kAcquiringThreads] (one string per thread, not per lock, so that the
  // benchmark's own copies stay out of the per-lock memory it measures).
  std::vector<std::string> owners;
  const std::string& owner_of(size_t i) const {
    return owners[i % owners.size()];
  }
  double rss_bytes_per_lock = 0;
  std::string error;
  // Never notified: the acquiring threads wait on it for the rest of the
  // process, since a thread that exits gives up its locks
  // (kOwnerThreadExited).
  testing::Notification never;
};

World& GetWorld() {
  static World* world = [] {
    auto* w = new World;
    absl::StatusOr<std::unique_ptr<testing::RedisServer>> server =
        testing::RedisServer::Start();
    if (!server.ok()) {
      w->error = server.status().ToString();
      return w;
    }
    w->server = *std::move(server);
    ClientOptions options;
    options.url = w->server->url();
    options.lock_watchdog_timeout = absl::Hours(1);
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
    if (!client.ok()) {
      w->error = client.status().ToString();
      return w;
    }
    w->client = *std::move(client);
    const size_t n = LockCount();
    for (size_t i = 0; i < n; ++i) {
      w->locks.push_back(w->client->GetLock(absl::StrCat("bench-wd:", i)));
    }
    w->owners.resize(kAcquiringThreads);
    const long rss_before = RssBytes();
    std::atomic<int> failures{0};
    std::vector<std::unique_ptr<testing::Notification>> acquired;
    for (int t = 0; t < kAcquiringThreads; ++t) {
      acquired.push_back(std::make_unique<testing::Notification>());
      std::thread([w, t, n, &failures, done = acquired.back().get()] {
        w->owners[t] = std::string(
            lock::OwnerField(w->client->id(), lock::CurrentThreadNumber())
                .wire());
        for (size_t i = t; i < n; i += kAcquiringThreads) {
          if (!w->locks[i].Acquire().ok()) failures.fetch_add(1);
        }
        done->Notify();
        w->never.WaitForNotification();
      }).detach();
    }
    for (const auto& done : acquired) done->WaitForNotification();
    if (failures.load() > 0) {
      w->error = absl::StrCat(failures.load(), " acquisitions failed");
    }
    w->rss_bytes_per_lock =
        static_cast<double>(RssBytes() - rss_before) / static_cast<double>(n);
    return w;
  }();
  return *world;
}

double g_batched_wall_s = 0;

void BM_WatchdogRound(benchmark::State& state) {
  World& w = GetWorld();
  if (!w.error.empty()) {
    state.SkipWithError(w.error.c_str());
    return;
  }
  internal::ClientCore& core = internal::ClientAccess::Core(*w.client);
  double wall_s = 0, cpu_s = 0;
  uint64_t trips = 0, renewed = 0, rounds = 0;
  for (auto _ : state) {
    const uint64_t trips_before = core.renew_round_trips();
    watchdog::RoundStats s = core.watchdog().RunRound(/*all=*/true);
    if (s.failed || s.renewed != w.locks.size()) {
      state.SkipWithError("renewal round failed or renewed too few");
      return;
    }
    trips += core.renew_round_trips() - trips_before;
    renewed += s.renewed;
    wall_s += absl::ToDoubleSeconds(s.wall);
    cpu_s += absl::ToDoubleSeconds(s.cpu);
    ++rounds;
    state.SetIterationTime(absl::ToDoubleSeconds(s.wall));
  }
  g_batched_wall_s = wall_s / static_cast<double>(rounds);
  state.counters["locks"] = static_cast<double>(w.locks.size());
  state.counters["wall_ms"] = 1e3 * g_batched_wall_s;
  state.counters["cpu_ms"] = 1e3 * cpu_s / static_cast<double>(rounds);
  state.counters["round_trips"] =
      static_cast<double>(trips) / static_cast<double>(rounds);
  state.counters["renewed"] =
      static_cast<double>(renewed) / static_cast<double>(rounds);
  state.counters["rss_bytes_per_lock"] = w.rss_bytes_per_lock;
}

void BM_OneRoundTripPerLock(benchmark::State& state) {
  World& w = GetWorld();
  if (!w.error.empty()) {
    state.SkipWithError(w.error.c_str());
    return;
  }
  testing::RawConnectionOptions options;
  options.connect_timeout = absl::Seconds(5);
  options.suppress_sigpipe = false;  // the baseline pays for nothing else
  absl::StatusOr<testing::RawConnection> conn =
      testing::RawConnection::Connect(w.server->port(), options);
  if (!conn.ok()) {
    state.SkipWithError("connect failed");
    return;
  }
  redisContext* ctx = conn->get();
  absl::StatusOr<testing::RedisValue> loaded =
      conn->Command({"SCRIPT", "LOAD", lua::kRenew});
  const std::string sha = loaded.ok() ? loaded->str : "";
  const std::string lease_ms = "3600000";
  double wall_s = 0;
  uint64_t rounds = 0;
  for (auto _ : state) {
    const absl::Time start = absl::Now();
    for (size_t i = 0; i < w.locks.size(); ++i) {
      const std::string& name = w.locks[i].name();
      testing::RawReply r(static_cast<redisReply*>(redisCommand(
          ctx, "EVALSHA %b 1 %b %b %b", sha.data(), sha.size(), name.data(),
          name.size(), lease_ms.data(), lease_ms.size(), w.owner_of(i).data(),
          w.owner_of(i).size())));
      if (r == nullptr || r->type != REDIS_REPLY_ARRAY ||
          r->element[0]->integer != 1) {
        state.SkipWithError("renew failed");
        return;
      }
    }
    const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
    wall_s += elapsed;
    ++rounds;
    state.SetIterationTime(elapsed);
  }
  const double per_round = wall_s / static_cast<double>(rounds);
  state.counters["locks"] = static_cast<double>(w.locks.size());
  state.counters["wall_ms"] = 1e3 * per_round;
  state.counters["round_trips"] = static_cast<double>(w.locks.size());
  if (g_batched_wall_s > 0) {
    state.counters["batched_fraction"] = g_batched_wall_s / per_round;
  }
}

BENCHMARK(BM_WatchdogRound)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);
BENCHMARK(BM_OneRoundTripPerLock)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

}  // namespace
}  // namespace relock
