// Redlock over 5 masters against 1 master and against the raw round trip, in
// the same run, on private redis-servers started by the test fixture.
//
//   BM_RawRoundTrip              one raw EVALSHA round trip (hiredis) to one
//                                master: the unit (`rtt_us`).
//   BM_RawRoundTripToAll5        one raw EVALSHA to each of the 5 masters,
//                                one after another: what a sequential
//                                Redlock would pay per step (`x_rtt`).
//   BM_LockUnlock/single         relock::Lock Acquire + Release (1 server).
//   BM_LockUnlock/redlock1       RedlockLock Acquire + Release, 1 master.
//   BM_LockUnlock/redlock5       RedlockLock Acquire + Release, 5 masters.
//                                `x_2rtt` = time / (2 x rtt): requests to the
//                                5 masters go out in parallel, so this should
//                                stay near the 1-master figure, not 5 x it.
//   BM_RedlockHandOff/4          4 threads contend one Redlock on 5 masters:
//                                time from the holder's Release() call to the
//                                next thread's Acquire() returning; p50/p99.
//
//   build/benchmarks/redlock_benchmark
//   RELOCK_BENCH_SMOKE=1 build/benchmarks/redlock_benchmark
//   --benchmark_min_time=0.01

#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "benchmark/benchmark.h"
#include "lib/common/mutex.h"
#include "relock/relock.h"
#include "tests/testing/raw_connection.h"
#include "tests/testing/redis_server.h"

namespace relock {
namespace {

constexpr int kMasters = 5;

bool Smoke() {
  const char* smoke = std::getenv("RELOCK_BENCH_SMOKE");
  return smoke != nullptr && std::string(smoke) == "1";
}

struct World {
  std::vector<std::unique_ptr<testing::RedisServer>> servers;
  std::unique_ptr<Client> single;
  std::unique_ptr<RedlockClient> redlock1;
  std::unique_ptr<RedlockClient> redlock5;
  std::vector<testing::RawConnection> raw;  // one per server
  std::string sha;
  std::string error;
};

World& GetWorld() {
  static World* world = [] {
    auto* w = new World;
    std::vector<std::string> urls;
    for (int i = 0; i < kMasters; ++i) {
      absl::StatusOr<std::unique_ptr<testing::RedisServer>> s =
          testing::RedisServer::Start();
      if (!s.ok()) {
        w->error = s.status().ToString();
        return w;
      }
      urls.push_back((*s)->url());
      w->servers.push_back(*std::move(s));
    }
    ClientOptions single;
    single.url = urls[0];
    absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect(single);
    RedlockOptions one, five;
    one.urls = {urls[0]};
    five.urls = urls;
    absl::StatusOr<std::unique_ptr<RedlockClient>> r1 =
        RedlockClient::Connect(one);
    absl::StatusOr<std::unique_ptr<RedlockClient>> r5 =
        RedlockClient::Connect(five);
    if (!c.ok() || !r1.ok() || !r5.ok()) {
      w->error = "connect failed";
      return w;
    }
    w->single = *std::move(c);
    w->redlock1 = *std::move(r1);
    w->redlock5 = *std::move(r5);
    testing::RawConnectionOptions options;
    options.connect_timeout = absl::Seconds(5);
    options.suppress_sigpipe = false;  // the baseline pays for nothing else
    for (auto& s : w->servers) {
      absl::StatusOr<testing::RawConnection> conn =
          testing::RawConnection::Connect(s->port(), options);
      absl::StatusOr<testing::RedisValue> sha =
          conn.ok() ? conn->Command({"SCRIPT", "LOAD",
                                     "return redis.call('exists', KEYS[1])"})
                    : conn.status();
      if (!sha.ok() || !sha->is_string()) {
        w->error = absl::StrCat("raw connection: ", sha.status().ToString());
        return w;
      }
      w->sha = sha->str;
      w->raw.push_back(*std::move(conn));
    }
    return w;
  }();
  return *world;
}

bool RawEval(testing::RawConnection& conn, const std::string& sha) {
  redisReply* r = static_cast<redisReply*>(
      redisCommand(conn.get(), "EVALSHA %s 1 bench:raw", sha.c_str()));
  const bool ok = r != nullptr && r->type == REDIS_REPLY_INTEGER;
  if (r != nullptr) freeReplyObject(r);
  return ok;
}

double g_rtt_ns = 0;

void BM_RawRoundTrip(benchmark::State& state) {
  World& w = GetWorld();
  if (!w.error.empty()) return state.SkipWithError(w.error.c_str());
  const absl::Time start = absl::Now();
  for (auto _ : state) {
    if (!RawEval(w.raw[0], w.sha)) return state.SkipWithError("raw failed");
  }
  g_rtt_ns = absl::ToDoubleNanoseconds(absl::Now() - start) /
             static_cast<double>(state.iterations());
  state.counters["rtt_us"] = g_rtt_ns / 1e3;
}

void BM_RawRoundTripToAll5(benchmark::State& state) {
  World& w = GetWorld();
  if (!w.error.empty()) return state.SkipWithError(w.error.c_str());
  const absl::Time start = absl::Now();
  for (auto _ : state) {
    for (testing::RawConnection& conn : w.raw) {
      if (!RawEval(conn, w.sha)) return state.SkipWithError("raw failed");
    }
  }
  const double per = absl::ToDoubleNanoseconds(absl::Now() - start) /
                     static_cast<double>(state.iterations());
  if (g_rtt_ns > 0) state.counters["x_rtt"] = per / g_rtt_ns;
}

// Acquire + Release of one lock per iteration; `which`: 0 single-node,
// 1 Redlock on 1 master, 5 Redlock on 5 masters.
void BM_LockUnlock(benchmark::State& state) {
  World& w = GetWorld();
  if (!w.error.empty()) return state.SkipWithError(w.error.c_str());
  const int which = static_cast<int>(state.range(0));
  Lock single = w.single->GetLock("bench:single");
  RedlockLock red = (which == 1 ? w.redlock1 : w.redlock5)
                        ->GetLock(absl::StrCat("bench:redlock", which));
  const absl::Time start = absl::Now();
  for (auto _ : state) {
    absl::Status a = which == 0 ? single.Acquire() : red.Acquire();
    absl::Status r = which == 0 ? single.Release() : red.Release();
    if (!a.ok() || !r.ok()) return state.SkipWithError("lock failed");
  }
  const double per = absl::ToDoubleNanoseconds(absl::Now() - start) /
                     static_cast<double>(state.iterations());
  state.SetLabel(which == 0 ? "single-node Lock"
                            : absl::StrCat("Redlock, ", which, " master(s)"));
  if (g_rtt_ns > 0) state.counters["x_2rtt"] = per / (2 * g_rtt_ns);
}

void BM_RedlockHandOff(benchmark::State& state) {
  World& w = GetWorld();
  if (!w.error.empty()) return state.SkipWithError(w.error.c_str());
  const int threads = static_cast<int>(state.range(0));
  const int handoffs = Smoke() ? 20 : 200;
  std::vector<double> samples;
  for (auto _ : state) {
    RedlockLock lock = w.redlock5->GetLock("bench:handoff");
    std::atomic<int64_t> released_at{0};
    std::atomic<int> holder{-1}, done{0}, inside{0}, overlaps{0};
    std::atomic<bool> stalled{false};
    Mutex mu;
    std::vector<double> local;
    std::vector<std::thread> pool;
    const absl::Time start = absl::Now();
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        while (done.load() < handoffs && !stalled.load()) {
          if (!lock.TryAcquire(absl::Seconds(5)).ok()) {
            stalled = true;
            return;
          }
          const int64_t now = absl::GetCurrentTimeNanos();
          if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
          const int previous = holder.exchange(t);
          if (previous >= 0 && previous != t && released_at.load() > 0) {
            MutexLock l(&mu);
            local.push_back(static_cast<double>(now - released_at.load()));
            done.fetch_add(1);
          }
          // Let the others block in Acquire before handing off.
          absl::SleepFor(absl::Milliseconds(1));
          inside.fetch_sub(1);
          released_at = absl::GetCurrentTimeNanos();
          if (!lock.Release().ok()) {
            stalled = true;
            return;
          }
          // Do not re-acquire at once: wait until someone else holds it.
          while (holder.load() == t && done.load() < handoffs && !stalled) {
            absl::SleepFor(absl::Microseconds(50));
          }
        }
      });
    }
    for (std::thread& th : pool) th.join();
    state.SetIterationTime(absl::ToDoubleSeconds(absl::Now() - start));
    if (stalled || overlaps.load() > 0) {
      return state.SkipWithError(stalled ? "hand-off stalled" : "overlap");
    }
    samples.insert(samples.end(), local.begin(), local.end());
  }
  std::sort(samples.begin(), samples.end());
  if (samples.empty()) return;
  auto pct = [&](double p) {
    return samples[std::min(samples.size() - 1,
                            static_cast<size_t>(p * samples.size()))];
  };
  state.counters["handoffs"] = static_cast<double>(samples.size());
  state.counters["p50_us"] = pct(0.5) / 1e3;
  state.counters["p99_us"] = pct(0.99) / 1e3;
  if (g_rtt_ns > 0) state.counters["p50_x_rtt"] = pct(0.5) / g_rtt_ns;
}

BENCHMARK(BM_RawRoundTrip);
BENCHMARK(BM_RawRoundTripToAll5);
BENCHMARK(BM_LockUnlock)->Arg(0)->Arg(1)->Arg(5);
BENCHMARK(BM_RedlockHandOff)
    ->Arg(4)
    ->UseManualTime()
    ->Iterations(1)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace relock
