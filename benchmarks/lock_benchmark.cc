// Benchmarks of relock's locks, reported as ratios against a raw Redis round
// trip measured in the same run (STYLE.md point 9, DESIGN.md "Performance
// model").
//
//   BM_RawEvalshaRoundTrip      the baseline: raw hiredis EVALSHA of a one-read
//                               script on one connection. Sets the RTT that
//                               the ratio_vs_* counters divide by (`rtt_us`).
//   BM_RawPipelinedEvalsha      the server's pipelined rate, like
//                               `redis-benchmark -c 32 -P 16`: 32 raw
//                               connections on distinct keys, pipelines of 16
//                               EVALSHAs of relock's own acquire and release
//                               scripts. items_per_second = scripts/s, which
//                               BM_OwnKeyLockUnlock's `ratio_to_pipelined`
//                               divides by.
//   BM_UncontendedLockUnlock    Acquire() + Release(), one thread, one key.
//                               Floor: 2 RTT (`ratio_vs_2rtt`).
//   BM_UncontendedReadWriteLockUnlock/0|1
//                               the same on a ReadWriteLock's read lock (0)
//                               and write lock (1).
//   BM_NestedChainDepth5        5 re-entrant Acquire()s + 5 Release()s.
//                               Floor: 10 RTT (`ratio_vs_10rtt`).
//                               Both also run as many raw round trips in the
//                               same loop, timed apart, and report the ratio
//                               to those as `paired_ratio` (robust against
//                               the RTT drifting during the run), and the
//                               same again with relock's own acquire and
//                               release scripts, sent raw with the same
//                               arguments in the same order, as
//                               `same_script_ratio` (the client's overhead
//                               alone: those scripts do more work in Redis
//                               than the one-read baseline script).
//   BM_RawNotifyHandOff         the hand-off baseline: raw hiredis release
//                               script that PUBLISHes, a thread blocked on a
//                               SUBSCRIBEd connection wakes and runs an
//                               acquire-like script. Same counters as below.
//   BM_HandOffLatency/T         T threads of one client contend one key; each
//                               sample is the time from the holder's call to
//                               Release() to the next (other) thread's
//                               Acquire returning. Waiters are blocked inside
//                               Acquire, woken by the unlock notification.
//                               Time column = mean hand-off; counters p50_us,
//                               p99_us, max_us, p50_ratio_vs_rtt and
//                               p50_ratio_vs_raw (vs BM_RawNotifyHandOff).
//                               Every hand-off starts from idle threads (the
//                               holder keeps the lock >= 1 ms), so it pays
//                               the OS's wake-up latencies, which a warm RTT
//                               does not: compare it with the raw hand-off.
//   BM_UncontendedSemaphoreAcquireRelease/0|1
//                               Acquire() + Release() of one permit, one
//                               thread: a Semaphore (0) and a
//                               PermitExpirableSemaphore in watchdog mode
//                               (1, the permit `relock run --permits`
//                               holds). Floor: 2 RTT (`ratio_vs_2rtt`,
//                               `paired_ratio` as above; no
//                               same_script_ratio).
//   BM_SemaphoreHandOffLatency/K/T
//                               BM_HandOffLatency's rounds on one permit of a
//                               Semaphore (K=0) or a PermitExpirableSemaphore
//                               (K=1): a holder releases, a blocked waiter
//                               wakes (the semaphore's channel message) and
//                               takes it. Same counters, and
//                               `p50_ratio_vs_lock`: against
//                               BM_HandOffLatency/T's p50 in the same run.
//   BM_ThroughputDistinctLocks  N threads, each its own key: lock+unlock
//                               pairs/s (`pairs_per_s`) and that rate times
//                               2 RTT (`x_serial_conn`: 1.0 = one connection
//                               doing pairs back to back).
//   BM_OwnKeyLockUnlock         32 threads of one client, each Acquire() +
//                               Release() on its own key (watchdog lease):
//                               pairs/s over the wall time (items_per_second),
//                               p50_us and p99_us of a pair,
//                               `ratio_to_pipelined` (2 scripts per pair over
//                               BM_RawPipelinedEvalsha's rate; only when that
//                               ran in the same process) and `connections`
//                               (the client's connections to Redis, counted
//                               with CLIENT LIST).
//   BM_AsyncOwnKeyLoops         32 asynchronous AcquireAsync() +
//                               ReleaseAsync() chains, each on its own key
//                               and relock::Owner, from 4 threads of one
//                               client: same counters as BM_OwnKeyLockUnlock
//                               (pairs/s as items_per_second, p50_us, p99_us,
//                               ratio_to_pipelined).
//   BM_ConnectionsUnder400Threads
//                               a fresh client, 400 threads at once, a few
//                               pairs each on own keys: the client's
//                               `connections` afterwards, `failed_calls`
//                               (expected 0 while Redis is healthy; the label
//                               shows the first failure) and `lock_events`.
//                               Reported, not asserted.
//
// Environment:
//   RELOCK_BENCH_URL=redis://[[user]:password@]host[:port][/db] or
//       unix:///path[?db=N]: use that server instead of a private one started
//       with the test fixture (relock::testing::RedisServer). Keys are
//       prefixed with "relock-bench:<pid>:" so runs do not collide.
//   RELOCK_BENCH_SMOKE=1: fewer hand-offs and fewer pairs per thread in
//       BM_ConnectionsUnder400Threads (for CI; pair it with
//       --benchmark_min_time=0.01).
//
// Run from a Release build, e.g.
//   build/benchmarks/lock_benchmark
//   RELOCK_BENCH_SMOKE=1 build/benchmarks/lock_benchmark
//   --benchmark_min_time=0.01

#include <hiredis/hiredis.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "benchmark/benchmark.h"
#include "benchmarks/bench_util.h"
#include "lib/common/mutex.h"
#include "lib/lock/fair_lock.h"
#include "lib/lock/lock_model.h"
#include "lib/lock/lock_scripts.h"
#include "lib/lock/owner.h"
#include "lib/redis/script.h"
#include "relock/relock.h"
#include "tests/testing/redis_server.h"

namespace relock {
namespace {

using Clock = std::chrono::steady_clock;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             Clock::now().time_since_epoch())
      .count();
}

using bench::SmokeMode;

// ------------------------------------------------------------ environment --

// Where the raw hiredis baseline connects: the same server as the client.
struct RawEndpoint {
  bool unix_socket = false;
  std::string host = "127.0.0.1";
  int port = 6379;
  std::string path;
  std::string user;
  std::string password;
  int db = 0;
};

// A simple parser of the two URL forms relock accepts (no percent-decoding).
absl::StatusOr<RawEndpoint> ParseUrl(absl::string_view url) {
  RawEndpoint ep;
  auto parse_db = [&](absl::string_view s) -> absl::Status {
    if (!s.empty() && !absl::SimpleAtoi(s, &ep.db)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad db \"", s, "\" in ", url));
    }
    return absl::OkStatus();
  };
  if (absl::ConsumePrefix(&url, "unix://")) {
    const size_t q = url.find('?');
    ep.unix_socket = true;
    ep.path = std::string(url.substr(0, q));
    if (q != absl::string_view::npos) {
      absl::string_view query = url.substr(q + 1);
      if (absl::ConsumePrefix(&query, "db=")) {
        if (absl::Status s = parse_db(query.substr(0, query.find('&')));
            !s.ok()) {
          return s;
        }
      }
    }
    return ep;
  }
  if (!absl::ConsumePrefix(&url, "redis://")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RELOCK_BENCH_URL must start with redis:// or unix://, got ", url));
  }
  if (const size_t at = url.rfind('@'); at != absl::string_view::npos) {
    absl::string_view userinfo = url.substr(0, at);
    url.remove_prefix(at + 1);
    const size_t colon = userinfo.find(':');
    if (colon == absl::string_view::npos) {
      ep.password = std::string(userinfo);
    } else {
      ep.user = std::string(userinfo.substr(0, colon));
      ep.password = std::string(userinfo.substr(colon + 1));
    }
  }
  if (const size_t slash = url.find('/'); slash != absl::string_view::npos) {
    if (absl::Status s = parse_db(url.substr(slash + 1)); !s.ok()) return s;
    url = url.substr(0, slash);
  }
  absl::string_view host = url;
  absl::string_view port;
  if (absl::ConsumePrefix(&host, "[")) {  // [IPv6]:port
    const size_t close = host.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("bad host in ", url));
    }
    absl::string_view rest = host.substr(close + 1);
    host = host.substr(0, close);
    if (absl::ConsumePrefix(&rest, ":")) port = rest;
  } else if (const size_t colon = host.rfind(':');
             colon != absl::string_view::npos) {
    port = host.substr(colon + 1);
    host = host.substr(0, colon);
  }
  if (!host.empty()) ep.host = std::string(host);
  if (!port.empty() && !absl::SimpleAtoi(port, &ep.port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad port \"", port, "\" in ", url));
  }
  return ep;
}

// The server and the relock client shared by all benchmarks, made on first
// use. A failure is kept in `status` and reported by every benchmark. Members
// are destroyed bottom-up: the client closes before the server stops.
struct BenchEnv {
  std::unique_ptr<testing::RedisServer> server;  // null with RELOCK_BENCH_URL
  std::unique_ptr<Client> client;
  std::string url;
  RawEndpoint raw;
  std::string key_prefix;
  absl::Status status;
};

BenchEnv MakeEnv() {
  BenchEnv e;
  e.key_prefix = absl::StrCat("relock-bench:", getpid(), ":");
  if (const char* url = std::getenv("RELOCK_BENCH_URL");
      url != nullptr && *url != '\0') {
    e.url = url;
  } else {
    absl::StatusOr<std::unique_ptr<testing::RedisServer>> server =
        testing::RedisServer::Start();
    if (!server.ok()) {
      e.status = server.status();
      return e;
    }
    e.server = *std::move(server);
    e.url = e.server->url();
  }
  absl::StatusOr<RawEndpoint> raw = ParseUrl(e.url);
  if (!raw.ok()) {
    e.status = raw.status();
    return e;
  }
  e.raw = *std::move(raw);
  ClientOptions options;
  options.url = e.url;
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Connect(std::move(options));
  if (!client.ok()) {
    e.status = client.status();
    return e;
  }
  e.client = *std::move(client);
  return e;
}

// Returns the shared environment, or null after SkipWithError. It lives until
// exit, when the client closes and then the private server stops (a static
// made after the fixture's own statics, so destroyed before them).
BenchEnv* EnvOrSkip(benchmark::State& state) {
  static BenchEnv env = MakeEnv();
  if (!env.status.ok()) {
    state.SkipWithError(
        absl::StrCat("benchmark setup: ", env.status.ToString()).c_str());
    return nullptr;
  }
  return &env;
}

std::string Key(const BenchEnv& env, absl::string_view name) {
  return absl::StrCat(env.key_prefix, name);
}

// ------------------------------------------------------ raw hiredis baseline
// --

// The script of the baseline: one hash read, like the first step of relock's
// acquire script.
constexpr char kRawScript[] = "return redis.call('hexists', KEYS[1], ARGV[1])";

using bench::RawCommand;
using bench::RawConnection;
using bench::RawConnectionOptions;
using bench::RawOwner;
using bench::RawReply;
using bench::StepArgv;

absl::StatusOr<RawConnection> RawConnect(const RawEndpoint& ep) {
  RawConnectionOptions options;
  options.connect_timeout = absl::Seconds(2);
  options.command_timeout = absl::Seconds(2);
  options.user = ep.user;
  options.password = ep.password;
  options.db = ep.db;
  options.suppress_sigpipe = false;  // the baselines pay for nothing else
  return ep.unix_socket ? RawConnection::ConnectUnix(ep.path, options)
                        : RawConnection::Connect(ep.host, ep.port, options);
}

// Nanoseconds per raw EVALSHA round trip, as last measured by
// BM_RawEvalshaRoundTrip (0 = not yet).
std::atomic<double> g_rtt_ns{0};

// Runs `round_trips` raw EVALSHAs and returns the ns per round trip.
absl::StatusOr<double> MeasureRawRtt(const RawEndpoint& ep,
                                     const std::string& key, int round_trips) {
  absl::StatusOr<RawConnection> c = RawConnect(ep);
  if (!c.ok()) return c.status();
  absl::StatusOr<RawReply> sha = RawCommand(*c, {"SCRIPT", "LOAD", kRawScript});
  if (!sha.ok()) return sha.status();
  const std::vector<std::string> argv = {
      "EVALSHA", std::string((*sha)->str, (*sha)->len), "1", key, "field"};
  const int64_t start = NowNs();
  for (int i = 0; i < round_trips; ++i) {
    if (auto r = RawCommand(*c, argv); !r.ok()) return r.status();
  }
  return static_cast<double>(NowNs() - start) / round_trips;
}

// The RTT to divide by: the one measured by BM_RawEvalshaRoundTrip in this
// run, or (when a --benchmark_filter skipped it) a quick measurement now.
absl::StatusOr<double> RttNs(const BenchEnv& env) {
  if (double rtt = g_rtt_ns.load(); rtt > 0) return rtt;
  absl::StatusOr<double> rtt =
      MeasureRawRtt(env.raw, Key(env, "raw-calibration"), 2000);
  if (rtt.ok()) g_rtt_ns.store(*rtt);
  return rtt;
}

// RttNs(), or nullopt after marking `state` skipped with the reason.
absl::optional<double> RttNsOrSkip(benchmark::State& state,
                                   const BenchEnv& env) {
  absl::StatusOr<double> rtt = RttNs(env);
  if (rtt.ok()) return *rtt;
  state.SkipWithError(
      absl::StrCat("measuring the raw RTT: ", rtt.status().ToString()).c_str());
  return absl::nullopt;
}

void BM_RawEvalshaRoundTrip(benchmark::State& state) {
  BenchEnv* env = EnvOrSkip(state);
  if (env == nullptr) return;
  absl::StatusOr<RawConnection> c = RawConnect(env->raw);
  if (!c.ok()) {
    state.SkipWithError(c.status().ToString().c_str());
    return;
  }
  absl::StatusOr<RawReply> sha = RawCommand(*c, {"SCRIPT", "LOAD", kRawScript});
  if (!sha.ok()) {
    state.SkipWithError(sha.status().ToString().c_str());
    return;
  }
  const std::vector<std::string> argv = {"EVALSHA",
                                         std::string((*sha)->str, (*sha)->len),
                                         "1", Key(*env, "raw"), "field"};
  const int64_t start = NowNs();
  for (auto _ : state) {
    for (int i = 0; i < 2; ++i) {
      absl::StatusOr<RawReply> r = RawCommand(*c, argv);
      if (!r.ok()) {
        state.SkipWithError(r.status().ToString().c_str());
        return;
      }
    }
  }
  const double rtt_ns = static_cast<double>(NowNs() - start) /
                        (2.0 * static_cast<double>(state.iterations()));
  g_rtt_ns.store(rtt_ns);
  state.counters["rtt_us"] = rtt_ns / 1e3;
}
// Registered first so that it runs first.
BENCHMARK(BM_RawEvalshaRoundTrip);

// ------------------------------------------------ raw pipelined baseline --

// The server's pipelined script rate (`redis-benchmark -c 32 -P 16`): 32 raw
// connections, each with its own key, each sending pipelines of 16 EVALSHAs
// of the library's own scripts, acquire and release alternating (8 pairs),
// exactly as a relock client sends them for an uncontended lock.
constexpr int kPipelinedConnections = 32;
constexpr int kPipelineDepth = 16;  // scripts per pipeline, an even number

// Scripts per second of BM_RawPipelinedEvalsha, as last measured (0 = not
// yet). BM_OwnKeyLockUnlock's `ratio_to_pipelined` divides by it.
std::atomic<double> g_pipelined_scripts_per_s{0};

// One connection of BM_RawPipelinedEvalsha and its pipeline, formatted once.
struct PipelinedConnection {
  RawConnection conn;
  std::string pipeline;
};

absl::StatusOr<PipelinedConnection> OpenPipelinedConnection(const BenchEnv& env,
                                                            int index) {
  absl::StatusOr<RawConnection> c = RawConnect(env.raw);
  if (!c.ok()) return c.status();
  absl::StatusOr<bench::PairWire> pair =
      bench::RelockPairWire(*c, Key(env, absl::StrCat("raw-pipelined-", index)),
                            static_cast<uint64_t>(index) + 1);
  if (!pair.ok()) return pair.status();
  std::string pipeline;
  for (int i = 0; i < kPipelineDepth / 2; ++i) {
    absl::StrAppend(&pipeline, pair->acquire, pair->release);
  }
  return PipelinedConnection{*std::move(c), std::move(pipeline)};
}

absl::Status SendPipeline(PipelinedConnection& p) {
  if (redisAppendFormattedCommand(p.conn.get(), p.pipeline.data(),
                                  p.pipeline.size()) != REDIS_OK) {
    return absl::ResourceExhaustedError("redisAppendFormattedCommand");
  }
  int done = 0;
  while (done == 0) {
    if (redisBufferWrite(p.conn.get(), &done) != REDIS_OK) {
      return absl::UnavailableError(
          absl::StrCat("raw pipeline: write: ", p.conn.get()->errstr));
    }
  }
  return absl::OkStatus();
}

// Reads the replies of one pipeline: each acquire must have taken its key
// (nil), no reply may be an error.
absl::Status ReadPipeline(PipelinedConnection& p) {
  for (int i = 0; i < kPipelineDepth; ++i) {
    void* raw = nullptr;
    if (redisGetReply(p.conn.get(), &raw) != REDIS_OK || raw == nullptr) {
      return absl::UnavailableError(
          absl::StrCat("raw pipeline: read: ", p.conn.get()->errstr));
    }
    RawReply reply(static_cast<redisReply*>(raw));
    if (reply->type == REDIS_REPLY_ERROR) {
      return absl::InternalError(
          absl::StrCat("raw pipeline: ", i % 2 == 0 ? "acquire" : "release",
                       ": ", absl::string_view(reply->str, reply->len)));
    }
    if (i % 2 == 0 && reply->type != REDIS_REPLY_NIL) {
      return absl::InternalError("raw pipeline: acquire found its key held");
    }
  }
  return absl::OkStatus();
}

// One thread drives all connections, as redis-benchmark does: every
// connection has a pipeline in flight; an iteration reads the replies of the
// next connection in turn and sends it its next pipeline. items_per_second is
// the server's script rate.
void BM_RawPipelinedEvalsha(benchmark::State& state) {
  BenchEnv* env = EnvOrSkip(state);
  if (env == nullptr) return;
  auto fail = [&](const absl::Status& s) {
    state.SkipWithError(
        absl::StrCat("raw pipelined EVALSHA: ", s.ToString()).c_str());
  };
  std::vector<PipelinedConnection> conns;
  conns.reserve(kPipelinedConnections);
  for (int i = 0; i < kPipelinedConnections; ++i) {
    absl::StatusOr<PipelinedConnection> p = OpenPipelinedConnection(*env, i);
    if (!p.ok()) return fail(p.status());
    conns.push_back(*std::move(p));
  }
  for (PipelinedConnection& p : conns) {
    if (absl::Status s = SendPipeline(p); !s.ok()) return fail(s);
  }
  size_t next = 0;
  const int64_t start = NowNs();
  for (auto _ : state) {
    PipelinedConnection& p = conns[next];
    next = (next + 1) % conns.size();
    if (absl::Status s = ReadPipeline(p); !s.ok()) return fail(s);
    if (absl::Status s = SendPipeline(p); !s.ok()) return fail(s);
  }
  const double elapsed_ns = static_cast<double>(NowNs() - start);
  for (PipelinedConnection& p : conns) {
    if (absl::Status s = ReadPipeline(p); !s.ok()) return fail(s);
  }
  const int64_t sent = state.iterations() * kPipelineDepth;
  state.SetItemsProcessed(sent);
  g_pipelined_scripts_per_s.store(static_cast<double>(sent) * 1e9 / elapsed_ns);
}
BENCHMARK(BM_RawPipelinedEvalsha)->UseRealTime();

// ------------------------------------------------------------ uncontended --

// Raw EVALSHA round trips run inside a lock benchmark's loop, one per lock
// operation, timed apart from it: the `paired_ratio` counters divide by these,
// so that both sides see the same machine state. (On small VMs the RTT can
// change several-fold from one second to the next, e.g. with where the
// scheduler puts the client thread relative to redis-server.)
//
// They also send `depth` acquires of one key and then `depth` releases with
// relock's own scripts and the arguments relock sends (a first hold, then
// re-entries, with the default watchdog lease), timed apart again.
class PairedRawRoundTrips {
 public:
  static absl::StatusOr<std::unique_ptr<PairedRawRoundTrips>> Open(
      const BenchEnv& env, int depth) {
    absl::StatusOr<RawConnection> c = RawConnect(env.raw);
    if (!c.ok()) return c.status();
    auto load = [&](const std::string& source) -> absl::StatusOr<std::string> {
      absl::StatusOr<RawReply> sha = RawCommand(*c, {"SCRIPT", "LOAD", source});
      if (!sha.ok()) return sha.status();
      return std::string((*sha)->str, (*sha)->len);
    };
    absl::StatusOr<std::string> baseline = load(kRawScript);
    if (!baseline.ok()) return baseline.status();
    absl::StatusOr<std::string> acquire =
        bench::LoadLockScript(*c, internal::kAcquireScript);
    if (!acquire.ok()) return acquire.status();
    absl::StatusOr<std::string> release =
        bench::LoadLockScript(*c, internal::kReleaseScript);
    if (!release.ok()) return release.status();
    auto p = std::unique_ptr<PairedRawRoundTrips>(
        new PairedRawRoundTrips(*std::move(c)));
    p->argv_ = {"EVALSHA", *baseline, "1", Key(env, "raw"), "field"};
    const std::string key = Key(env, "raw-lock");
    const lock::LockName name(key);
    const lock::OwnerField owner = lock::OwnerField::FromWire(RawOwner(1));
    const absl::Duration lease = ClientOptions().lock_watchdog_timeout;
    const lock::LockModel& model = lock::ReentrantModel();
    for (int i = 0; i < depth; ++i) {
      p->lock_argvs_.push_back(
          StepArgv(*acquire, model.Acquire(name, owner, lock::Lease::Of(lease),
                                           /*fresh=*/i == 0,
                                           /*queue=*/true, {}, "publish")));
    }
    for (int i = 0; i < depth; ++i) {
      p->lock_argvs_.push_back(StepArgv(
          *release, model.Release(name, owner,
                                  i + 1 < depth ? lock::Lease::Of(lease)
                                                : lock::Lease::Keep(),
                                  "publish", /*last=*/i + 1 == depth)));
    }
    return p;
  }

  // `round_trips` baseline round trips, then the lock scripts' sequence.
  absl::Status Run(int round_trips) {
    const int64_t start = NowNs();
    for (int i = 0; i < round_trips; ++i) {
      if (auto r = RawCommand(conn_, argv_); !r.ok()) return r.status();
    }
    const int64_t middle = NowNs();
    for (const std::vector<std::string>& argv : lock_argvs_) {
      absl::StatusOr<RawReply> r = RawCommand(conn_, argv);
      if (!r.ok()) return r.status();
      if ((*r)->type == REDIS_REPLY_ERROR) {
        return absl::InternalError(absl::StrCat(
            "raw lock script: ", absl::string_view((*r)->str, (*r)->len)));
      }
    }
    elapsed_ns_ += middle - start;
    lock_scripts_ns_ += NowNs() - middle;
    return absl::OkStatus();
  }

  int64_t elapsed_ns() const { return elapsed_ns_; }
  int64_t lock_scripts_ns() const { return lock_scripts_ns_; }

 private:
  explicit PairedRawRoundTrips(RawConnection conn) : conn_(std::move(conn)) {}
  RawConnection conn_;
  std::vector<std::string> argv_;
  std::vector<std::vector<std::string>> lock_argvs_;
  int64_t elapsed_ns_ = 0;
  int64_t lock_scripts_ns_ = 0;
};

// Runs `ops` (the lock operations of one iteration, `round_trips` round trips
// at best) with a paired raw measurement, and sets the counters:
//   `us_counter`     us per iteration;
//   `ratio_counter`  time per iteration / (round_trips * the RTT measured by
//                    BM_RawEvalshaRoundTrip);
//   paired_ratio     time per iteration / time of `round_trips` paired raw
//                    round trips;
//   same_script_ratio  time per iteration / time of the same scripts sent
//                    raw (`round_trips` / 2 acquires, then as many releases).
// The Time column is the lock operations' time alone (manual time).
template <typename Ops>
void RunWithPairedRatio(benchmark::State& state, const BenchEnv& env,
                        int round_trips, const std::string& ratio_counter,
                        const std::string& us_counter, Ops ops) {
  absl::StatusOr<std::unique_ptr<PairedRawRoundTrips>> raw =
      PairedRawRoundTrips::Open(env, round_trips / 2);
  if (!raw.ok()) {
    state.SkipWithError(raw.status().ToString().c_str());
    return;
  }
  int64_t lock_ns = 0;
  for (auto _ : state) {
    const int64_t start = NowNs();
    if (absl::Status s = ops(); !s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      return;
    }
    const int64_t elapsed = NowNs() - start;
    lock_ns += elapsed;
    state.SetIterationTime(static_cast<double>(elapsed) / 1e9);
    if (absl::Status s = (*raw)->Run(round_trips); !s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      return;
    }
  }
  absl::optional<double> rtt = RttNsOrSkip(state, env);
  if (!rtt.has_value()) return;
  const double iters = static_cast<double>(state.iterations());
  const double per_iter_ns = static_cast<double>(lock_ns) / iters;
  state.counters[us_counter] = per_iter_ns / 1e3;
  state.counters[ratio_counter] = per_iter_ns / (round_trips * *rtt);
  state.counters["paired_ratio"] =
      static_cast<double>(lock_ns) / static_cast<double>((*raw)->elapsed_ns());
  state.counters["same_script_ratio"] =
      static_cast<double>(lock_ns) /
      static_cast<double>((*raw)->lock_scripts_ns());
}

void BM_UncontendedLockUnlock(benchmark::State& state) {
  BenchEnv* env = EnvOrSkip(state);
  if (env == nullptr) return;
  Lock lock = env->client->GetLock(Key(*env, "uncontended"));
  RunWithPairedRatio(state, *env, 2, "ratio_vs_2rtt", "us_per_pair",
                     [&]() -> absl::Status {
                       if (absl::Status s = lock.Acquire(); !s.ok()) return s;
                       return lock.Release();
                     });
}
BENCHMARK(BM_UncontendedLockUnlock)->UseManualTime();

// The same pair on a read-write lock's read lock and write lock
// (relock/read_write_lock.h). Their scripts do more work in Redis (a read
// hold also writes and deletes its lease key), so `paired_ratio` (against
// one-read round trips) is their figure; `same_script_ratio` compares with
// the plain lock's scripts.
void BM_UncontendedReadWriteLockUnlock(benchmark::State& state) {
  BenchEnv* env = EnvOrSkip(state);
  if (env == nullptr) return;
  ReadWriteLock rw = env->client->GetReadWriteLock(Key(
      *env, state.range(0) == 0 ? "uncontended-read" : "uncontended-write"));
  Lock& lock = state.range(0) == 0 ? rw.ReadLock() : rw.WriteLock();
  state.SetLabel(state.range(0) == 0 ? "read" : "write");
  RunWithPairedRatio(state, *env, 2, "ratio_vs_2rtt", "us_per_pair",
                     [&]() -> absl::Status {
                       if (absl::Status s = lock.Acquire(); !s.ok()) return s;
                       return lock.Release();
                     });
}
BENCHMARK(BM_UncontendedReadWriteLockUnlock)->Arg(0)->Arg(1)->UseManualTime();

void BM_NestedChainDepth5(benchmark::State& state) {
  constexpr int kDepth = 5;
  BenchEnv* env = EnvOrSkip(state);
  if (env == nullptr) return;
  Lock lock = env->client->GetLock(Key(*env, "nested"));
  RunWithPairedRatio(state, *env, 2 * kDepth, "ratio_vs_10rtt", "us_per_chain",
                     [&]() -> absl::Status {
                       for (int i = 0; i < kDepth; ++i) {
                         if (absl::Status s = lock.Acquire(); !s.ok()) return s;
                       }
                       for (int i = 0; i < kDepth; ++i) {
                         if (absl::Status s = lock.Release(); !s.ok()) return s;
                       }
                       return absl::OkStatus();
                     });
}
BENCHMARK(BM_NestedChainDepth5)->UseManualTime();

// One permit taken and given back, against 2 raw round trips (the floor:
// one script each). Range 0: a Semaphore; 1: a PermitExpirableSemaphore in
// watchdog mode (its permit registered with the watchdog and renewed, as
// `relock run --permits` holds it).
void BM_UncontendedSemaphoreAcquireRelease(benchmark::State& state) {
  BenchEnv* env = EnvOrSkip(state);
  if (env == nullptr) return;
  const bool expirable = state.range(0) == 1;
  state.SetLabel(expirable ? "permit-expirable" : "semaphore");
  const std::string key =
      Key(*env, expirable ? "uncontended-permit" : "uncontended-semaphore");
  Semaphore semaphore = env->client->GetSemaphore(key);
  PermitExpirableSemaphore permits =
      env->client->GetPermitExpirableSemaphore(key);
  absl::StatusOr<bool> set =
      expirable ? permits.TrySetPermits(1) : semaphore.TrySetPermits(1);
  if (!set.ok()) {
    state.SkipWithError(set.status().ToString().c_str());
    return;
  }
  RunWithPairedRatio(state, *env, 2, "ratio_vs_2rtt", "us_per_pair",
                     [&]() -> absl::Status {
                       if (!expirable) {
                         if (absl::Status s = semaphore.Acquire(); !s.ok()) {
                           return s;
                         }
                         return semaphore.Release();
                       }
                       absl::StatusOr<std::string> id = permits.Acquire();
                       if (!id.ok()) return id.status();
                       return permits.Release(*id);
                     });
  // That ratio is against the lock's scripts: not these.
  state.counters.erase("same_script_ratio");
}
BENCHMARK(BM_UncontendedSemaphoreAcquireRelease)
    ->Arg(0)
    ->Arg(1)
    ->UseManualTime();

// --------------------------------------------------------------- hand-off --

// Hand-offs measured per benchmark iteration.
int HandOffsPerIteration() { return SmokeMode() ? 30 : 300; }

// How long a holder keeps the lock once every other thread waits: long enough
// for the waiters to subscribe, re-check and fall asleep (~3 RTT each, on a
// busy 2-core box). It is not part of any sample, but it does make every
// hand-off start from idle threads and an idle server, as in real use.
absl::Duration HandOffHold(double rtt_ns) {
  return std::max(absl::Milliseconds(1), absl::Nanoseconds(20 * rtt_ns));
}

// `sorted` must not be empty.
double Percentile(const std::vector<int64_t>& sorted, double p) {
  const size_t i = std::min(
      sorted.size() - 1,
      static_cast<size_t>(p * static_cast<double>(sorted.size() - 1) + 0.5));
  return static_cast<double>(sorted[i]);
}

// Sorts `samples` (ns) and sets the latency counters; returns the p50 in ns
// (0 without samples).
double SetLatencyCounters(benchmark::State& state,
                          std::vector<int64_t>& samples, double rtt_ns) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  const double p50 = Percentile(samples, 0.50);
  state.counters["handoffs"] = static_cast<double>(samples.size());
  state.counters["p50_us"] = p50 / 1e3;
  state.counters["p99_us"] = Percentile(samples, 0.99) / 1e3;
  state.counters["max_us"] = static_cast<double>(samples.back()) / 1e3;
  state.counters["p50_ratio_vs_rtt"] = p50 / rtt_ns;
  return p50;
}

// Sets the iteration's manual time to the mean of its samples.
void SetMeanIterationTime(benchmark::State& state,
                          const std::vector<int64_t>& samples) {
  if (samples.empty()) return;
  int64_t sum = 0;
  for (int64_t ns : samples) sum += ns;
  state.SetIterationTime(static_cast<double>(sum) / 1e9 /
                         static_cast<double>(samples.size()));
}

// The least a notified hand-off can cost with plain hiredis: a "releaser"
// runs a script that deletes a key and PUBLISHes; a "waiter" thread, blocked
// reading its own SUBSCRIBEd connection, wakes on the message and runs an
// acquire-like script on a second connection. A sample is the time from the
// releaser's call to the waiter's reply, after the same `hold` of idleness as
// in BM_HandOffLatency. relock adds to this its pub/sub thread's hop to the
// waiting thread and the Lua scripts' own work.
constexpr char kRawReleaseScript[] =
    "redis.call('del', KEYS[1]) "
    "return redis.call('publish', KEYS[2], ARGV[1])";
constexpr char kRawAcquireScript[] =
    "if redis.call('exists', KEYS[1]) == 0 then "
    "redis.call('hincrby', KEYS[1], ARGV[1], 1) "
    "redis.call('pexpire', KEYS[1], 30000) return nil end "
    "return redis.call('pttl', KEYS[1])";

class RawHandOffRound {
 public:
  RawHandOffRound(const RawEndpoint& ep, std::string key, int handoffs,
                  absl::Duration hold)
      : ep_(ep),
        key_(std::move(key)),
        channel_(absl::StrCat(key_, ":channel")),
        handoffs_(handoffs),
        hold_(hold) {}

  absl::StatusOr<std::vector<int64_t>> Run() {
    absl::StatusOr<RawConnection> releaser = RawConnect(ep_);
    if (!releaser.ok()) return releaser.status();
    absl::StatusOr<RawConnection> sub = RawConnect(ep_);
    if (!sub.ok()) return sub.status();
    absl::StatusOr<RawConnection> acquirer = RawConnect(ep_);
    if (!acquirer.ok()) return acquirer.status();
    absl::StatusOr<std::string> release_sha =
        Load(*releaser, kRawReleaseScript);
    if (!release_sha.ok()) return release_sha.status();
    absl::StatusOr<std::string> acquire_sha =
        Load(*releaser, kRawAcquireScript);
    if (!acquire_sha.ok()) return acquire_sha.status();
    if (auto r = RawCommand(*sub, {"SUBSCRIBE", channel_}); !r.ok()) {
      return r.status();
    }
    const std::vector<std::string> release = {"EVALSHA", *release_sha, "2",
                                              key_,      channel_,     "0"};
    const std::vector<std::string> acquire = {"EVALSHA", *acquire_sha, "1",
                                              key_, "owner"};
    std::thread waiter([&] { Waiter(*sub, *acquirer, acquire); });
    for (int i = 0; i < handoffs_; ++i) {
      {
        MutexLock l(&mu_);
        auto waiting = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
          return !error_.ok() || waiting_for_ == i;
        };
        mu_.Await(absl::Condition(&waiting));
        if (!error_.ok()) break;
      }
      absl::SleepFor(hold_);
      release_ns_.store(NowNs());
      if (auto r = RawCommand(*releaser, release); !r.ok()) {
        MutexLock l(&mu_);
        if (error_.ok()) error_ = r.status();
        break;
      }
    }
    // The waiter ends after `handoffs_` messages or on its read timeout.
    waiter.join();
    (void)RawCommand(*releaser, {"DEL", key_});
    MutexLock l(&mu_);
    if (!error_.ok()) return error_;
    return std::move(samples_);
  }

 private:
  static absl::StatusOr<std::string> Load(RawConnection& c,
                                          const char* script) {
    absl::StatusOr<RawReply> sha = RawCommand(c, {"SCRIPT", "LOAD", script});
    if (!sha.ok()) return sha.status();
    return std::string((*sha)->str, (*sha)->len);
  }

  void Waiter(RawConnection& sub, RawConnection& acquirer,
              const std::vector<std::string>& acquire) {
    for (int i = 0; i < handoffs_; ++i) {
      {
        MutexLock l(&mu_);
        if (!error_.ok()) return;
        waiting_for_ = i;
      }
      if (absl::StatusOr<RawReply> message = sub.NextRawReply();
          !message.ok()) {
        MutexLock l(&mu_);
        if (error_.ok()) {
          error_ = absl::UnavailableError(
              absl::StrCat("raw hand-off: reading the unlock message: ",
                           message.status().message()));
        }
        return;
      }
      absl::StatusOr<RawReply> r = RawCommand(acquirer, acquire);
      const int64_t acquired_ns = NowNs();
      MutexLock l(&mu_);
      if (!r.ok()) {
        if (error_.ok()) error_ = r.status();
        return;
      }
      samples_.push_back(acquired_ns - release_ns_.load());
    }
  }

  const RawEndpoint& ep_;
  const std::string key_;
  const std::string channel_;
  const int handoffs_;
  const absl::Duration hold_;
  std::atomic<int64_t> release_ns_{0};

  Mutex mu_;
  int waiting_for_ ABSL_GUARDED_BY(mu_) = -1;  // the waiter expects message #
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> samples_ ABSL_GUARDED_BY(mu_);
};

// p50 of BM_RawNotifyHandOff in ns, as last measured (0 = not yet).
std::atomic<double> g_raw_handoff_p50_ns{0};

void BM_RawNotifyHandOff(benchmark::State& state) {
  BenchEnv* env = EnvOrSkip(state);
  if (env == nullptr) return;
  absl::optional<double> rtt = RttNsOrSkip(state, *env);
  if (!rtt.has_value()) return;
  std::vector<int64_t> all;
  for (auto _ : state) {
    RawHandOffRound round(env->raw, Key(*env, "raw-handoff"),
                          HandOffsPerIteration(), HandOffHold(*rtt));
    absl::StatusOr<std::vector<int64_t>> samples = round.Run();
    if (!samples.ok()) {
      state.SkipWithError(samples.status().ToString().c_str());
      return;
    }
    SetMeanIterationTime(state, *samples);
    all.insert(all.end(), samples->begin(), samples->end());
  }
  g_raw_handoff_p50_ns.store(SetLatencyCounters(state, all, *rtt));
}
BENCHMARK(BM_RawNotifyHandOff)
    ->UseManualTime()
    ->Iterations(SmokeMode() ? 1 : 3)
    ->Unit(benchmark::kMicrosecond);

// One iteration of BM_HandOffLatency: `threads` threads of one client contend
// one key until `handoffs` hand-offs are measured.
//
// Protocol, so that every sample is a real hand-off to a *blocked* waiter:
//   - a thread that released waits (on `mu`) until another thread has taken
//     the lock before it contends again, so nobody re-acquires its own lock;
//   - the holder keeps the lock until every other thread has entered Acquire
//     (`contending` == threads - 1) and then for `hold` more, long enough for
//     them to have subscribed, re-checked and gone to sleep;
//   - the holder notes the time, then calls Release(); the next holder's
//     sample is the time from that note to its own Acquire returning.
// `inside` counts threads in the critical section: more than one is an
// overlap, i.e. a broken lock.
//
// What is contended: a lock, or one permit of a semaphore.
struct HandOffTarget {
  // Takes it, waiting at most the duration: a token for `release` (a
  // permit's id; empty for the others).
  std::function<absl::StatusOr<std::string>(absl::Duration)> acquire;
  std::function<absl::Status(const std::string&)> release;
};

HandOffTarget LockTarget(Lock lock) {
  return {[lock](absl::Duration wait) mutable -> absl::StatusOr<std::string> {
            if (absl::Status s = lock.TryAcquire(wait); !s.ok()) return s;
            return std::string();
          },
          [lock](const std::string&) mutable { return lock.Release(); }};
}

class HandOffRound {
 public:
  HandOffRound(HandOffTarget target, int threads, int handoffs,
               absl::Duration hold)
      : target_(std::move(target)),
        threads_(threads),
        handoffs_(handoffs),
        hold_(hold) {}

  // Runs the round; returns the samples in ns, or the first error.
  absl::StatusOr<std::vector<int64_t>> Run() {
    std::vector<std::thread> workers;
    workers.reserve(threads_);
    for (int i = 0; i < threads_; ++i) {
      workers.emplace_back([this] { Worker(); });
    }
    for (std::thread& t : workers) t.join();
    MutexLock l(&mu_);
    if (!error_.ok()) return error_;
    return std::move(samples_);
  }

 private:
  // How long one Acquire may block before the round is declared stalled (a
  // lost wake-up would otherwise sleep for the holder's whole lease).
  static constexpr absl::Duration kStallLimit = absl::Seconds(5);

  void Fail(absl::Status s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (error_.ok()) error_ = std::move(s);
    done_ = true;
  }

  void Worker() {
    uint64_t seen_changes = 0;
    bool released_before = false;
    while (true) {
      {
        MutexLock l(&mu_);
        if (released_before) {
          // Do not re-acquire until another thread has taken the lock.
          auto changed = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
            return done_ || changes_ != seen_changes;
          };
          mu_.Await(absl::Condition(&changed));
        }
        if (done_) return;
        ++contending_;
      }
      absl::StatusOr<std::string> token = target_.acquire(kStallLimit);
      const int64_t acquired_ns = NowNs();
      absl::Status s = token.status();
      if (!s.ok()) {
        MutexLock l(&mu_);
        --contending_;
        Fail(s.code() == absl::StatusCode::kDeadlineExceeded
                 ? absl::DeadlineExceededError(absl::StrCat(
                       "hand-off stalled: a waiter was not woken within ",
                       absl::FormatDuration(kStallLimit), ": ", s.message()))
                 : s);
        return;
      }
      const bool overlap = inside_.fetch_add(1) != 0;
      const int64_t released_ns = release_ns_.load();
      bool stop;
      {
        MutexLock l(&mu_);
        --contending_;
        ++changes_;
        if (overlap) {
          Fail(absl::InternalError("overlap"));
        } else if (!done_ && released_ns != 0) {
          samples_.push_back(acquired_ns - released_ns);
          if (static_cast<int>(samples_.size()) >= handoffs_) done_ = true;
        }
        // Hold until every other thread is blocked in Acquire.
        auto all_waiting = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
          return done_ || contending_ == threads_ - 1;
        };
        mu_.Await(absl::Condition(&all_waiting));
        stop = done_;
        seen_changes = changes_;
      }
      if (!stop) absl::SleepFor(hold_);
      inside_.fetch_sub(1);
      release_ns_.store(NowNs());
      s = target_.release(*token);
      released_before = true;
      if (!s.ok()) {
        MutexLock l(&mu_);
        Fail(s);
        return;
      }
      if (stop) return;
    }
  }

  HandOffTarget target_;
  const int threads_;
  const int handoffs_;
  const absl::Duration hold_;
  std::atomic<int> inside_{0};
  std::atomic<int64_t> release_ns_{0};  // when the last holder began Release()

  Mutex mu_;
  uint64_t changes_ ABSL_GUARDED_BY(mu_) = 0;  // acquisitions so far
  int contending_ ABSL_GUARDED_BY(mu_) = 0;    // threads inside Acquire
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> samples_ ABSL_GUARDED_BY(mu_);
};

// BM_HandOffLatency/T's p50 in ns, as last measured, by T (0 = not yet).
std::atomic<double> g_lock_handoff_p50_ns[8]{};

// BM_HandOffLatency's, BM_FairHandOffLatency's and
// BM_SemaphoreHandOffLatency's rounds, on the target `get(env, threads)`
// hands out, contended by `threads` threads. Returns the p50 in ns (0 if
// none).
template <class GetTarget>
double HandOffRounds(benchmark::State& state, int threads, GetTarget get) {
  BenchEnv* env = EnvOrSkip(state);
  if (env == nullptr) return 0;
  absl::optional<double> rtt = RttNsOrSkip(state, *env);
  if (!rtt.has_value()) return 0;
  absl::StatusOr<HandOffTarget> target = get(*env, threads);
  if (!target.ok()) {
    state.SkipWithError(target.status().ToString().c_str());
    return 0;
  }
  std::vector<int64_t> all;
  for (auto _ : state) {
    HandOffRound round(*target, threads, HandOffsPerIteration(),
                       HandOffHold(*rtt));
    absl::StatusOr<std::vector<int64_t>> samples = round.Run();
    if (!samples.ok()) {
      state.SkipWithError(samples.status().ToString().c_str());
      return 0;
    }
    SetMeanIterationTime(state, *samples);
    all.insert(all.end(), samples->begin(), samples->end());
  }
  const double p50 = SetLatencyCounters(state, all, *rtt);
  if (const double raw = g_raw_handoff_p50_ns.load(); raw > 0 && p50 > 0) {
    state.counters["p50_ratio_vs_raw"] = p50 / raw;
  }
  return p50;
}

void BM_HandOffLatency(benchmark::State& state) {
  const double p50 = HandOffRounds(
      state, static_cast<int>(state.range(0)),
      [](BenchEnv& env, int threads) -> absl::StatusOr<HandOffTarget> {
        return LockTarget(
            env.client->GetLock(Key(env, absl::StrCat("handoff-", threads))));
      });
  const int64_t threads = state.range(0);
  if (p50 > 0 && threads < 8) g_lock_handoff_p50_ns[threads].store(p50);
}
BENCHMARK(BM_HandOffLatency)
    ->Arg(2)
    ->Arg(4)
    ->UseManualTime()
    ->Iterations(SmokeMode() ? 1 : 5)
    ->Unit(benchmark::kMicrosecond);

// The same rounds on a FairLock (relock/fair_lock.h): each release publishes
// on the head waiter's own channel, and only that waiter makes an attempt.
void BM_FairHandOffLatency(benchmark::State& state) {
  HandOffRounds(
      state, static_cast<int>(state.range(0)),
      [](BenchEnv& env, int threads) -> absl::StatusOr<HandOffTarget> {
        return LockTarget(env.client->GetFairLock(
            Key(env, absl::StrCat("fair-handoff-", threads))));
      });
}
BENCHMARK(BM_FairHandOffLatency)
    ->Arg(4)
    ->UseManualTime()
    ->Iterations(SmokeMode() ? 1 : 5)
    ->Unit(benchmark::kMicrosecond);

// The same rounds on one permit: range(0) 0 a Semaphore, 1 a
// PermitExpirableSemaphore (watchdog mode); range(1) the threads. A release
// publishes the new count on the semaphore's channel and every waiter
// re-checks (a lock's release wakes them the same way).
void BM_SemaphoreHandOffLatency(benchmark::State& state) {
  const bool expirable = state.range(0) == 1;
  state.SetLabel(expirable ? "permit-expirable" : "semaphore");
  const double p50 = HandOffRounds(
      state, static_cast<int>(state.range(1)),
      [expirable](BenchEnv& env, int threads) -> absl::StatusOr<HandOffTarget> {
        const std::string key =
            Key(env, absl::StrCat(expirable ? "permit" : "semaphore",
                                  "-handoff-", threads));
        if (!expirable) {
          Semaphore sem = env.client->GetSemaphore(key);
          absl::StatusOr<bool> set = sem.TrySetPermits(1);
          if (!set.ok()) return set.status();
          return HandOffTarget{
              [sem](
                  absl::Duration wait) mutable -> absl::StatusOr<std::string> {
                if (absl::Status s = sem.TryAcquire(1, wait); !s.ok()) return s;
                return std::string();
              },
              [sem](const std::string&) mutable { return sem.Release(); }};
        }
        PermitExpirableSemaphore sem =
            env.client->GetPermitExpirableSemaphore(key);
        absl::StatusOr<bool> set = sem.TrySetPermits(1);
        if (!set.ok()) return set.status();
        return HandOffTarget{
            [sem](absl::Duration wait) mutable { return sem.TryAcquire(wait); },
            [sem](const std::string& id) mutable { return sem.Release(id); }};
      });
  const int64_t threads = state.range(1);
  if (threads < 8) {
    if (const double lock = g_lock_handoff_p50_ns[threads].load();
        lock > 0 && p50 > 0) {
      state.counters["p50_ratio_vs_lock"] = p50 / lock;
    }
  }
}
// Registered after BM_HandOffLatency, so that its p50 is there.
BENCHMARK(BM_SemaphoreHandOffLatency)
    ->Args({0, 2})
    ->Args({1, 2})
    ->UseManualTime()
    ->Iterations(SmokeMode() ? 1 : 5)
    ->Unit(benchmark::kMicrosecond);

// ------------------------------------------------------------- throughput --

void BM_ThroughputDistinctLocks(benchmark::State& state) {
  BenchEnv* env = EnvOrSkip(state);
  if (env == nullptr) return;
  absl::optional<double> rtt = RttNsOrSkip(state, *env);
  if (!rtt.has_value()) return;
  Lock lock = env->client->GetLock(Key(
      *env, absl::StrCat("tput-", state.threads(), "-", state.thread_index())));
  const int64_t start = NowNs();
  for (auto _ : state) {
    if (absl::Status s = lock.Acquire(); !s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      return;
    }
    if (absl::Status s = lock.Release(); !s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      return;
    }
  }
  const double elapsed_ns = static_cast<double>(NowNs() - start);
  const double iters = static_cast<double>(state.iterations());
  // Both are summed over the threads. pairs_per_s: all threads' pairs over
  // the wall time (UseRealTime). x_serial_conn: this thread's rate in units of
  // one connection doing pairs back to back (1 / 2 RTT).
  state.counters["pairs_per_s"] =
      benchmark::Counter(iters, benchmark::Counter::kIsRate);
  state.counters["x_serial_conn"] = iters * 2 * *rtt / elapsed_ns;
}
BENCHMARK(BM_ThroughputDistinctLocks)
    ->ThreadRange(1, 8)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// ------------------------------------------------------------ connections --

// A relock client of its own whose connections to Redis can be counted:
// CLIENT LIST, asked on a raw connection of ours, minus every connection that
// was there before the client connected (ours and the shared client's among
// them). Lock events are counted, not printed.
class CountedClient {
 public:
  static absl::StatusOr<std::unique_ptr<CountedClient>> Connect(
      const BenchEnv& env) {
    absl::StatusOr<RawConnection> asker = RawConnect(env.raw);
    if (!asker.ok()) return asker.status();
    auto c =
        std::unique_ptr<CountedClient>(new CountedClient(*std::move(asker)));
    absl::StatusOr<std::vector<std::string>> before = c->ClientIds();
    if (!before.ok()) return before.status();
    c->before_ = std::set<std::string>(before->begin(), before->end());
    ClientOptions options;
    options.url = env.url;
    options.on_lock_event = [events = &c->lock_events_](const LockEvent&) {
      events->fetch_add(1);
    };
    absl::StatusOr<std::unique_ptr<Client>> client =
        Client::Connect(std::move(options));
    if (!client.ok()) return client.status();
    c->client_ = *std::move(client);
    return c;
  }

  Client& client() { return *client_; }
  int64_t lock_events() const { return lock_events_.load(); }

  // The client's connections to Redis now (command and pub/sub).
  absl::StatusOr<int> Connections() {
    absl::StatusOr<std::vector<std::string>> ids = ClientIds();
    if (!ids.ok()) return ids.status();
    return static_cast<int>(std::count_if(
        ids->begin(), ids->end(),
        [&](const std::string& id) { return before_.count(id) == 0; }));
  }

 private:
  explicit CountedClient(RawConnection asker) : asker_(std::move(asker)) {}

  // The id= of every connection in CLIENT LIST.
  absl::StatusOr<std::vector<std::string>> ClientIds() {
    absl::StatusOr<RawReply> list = RawCommand(asker_, {"CLIENT", "LIST"});
    if (!list.ok()) return list.status();
    if ((*list)->type != REDIS_REPLY_STRING) {
      return absl::InternalError("CLIENT LIST: not a string reply");
    }
    std::vector<std::string> ids;
    for (absl::string_view line :
         absl::StrSplit(absl::string_view((*list)->str, (*list)->len), '\n',
                        absl::SkipWhitespace())) {
      absl::string_view id = line.substr(0, line.find(' '));
      if (!absl::ConsumePrefix(&id, "id=")) {
        return absl::InternalError(
            absl::StrCat("CLIENT LIST: a line without id=: ", line));
      }
      ids.emplace_back(id);
    }
    return ids;
  }

  RawConnection asker_;
  std::set<std::string> before_;
  std::atomic<int64_t> lock_events_{0};
  std::unique_ptr<Client> client_;  // last: closes before the counter goes
};

// BM_OwnKeyLockUnlock's (and BM_AsyncOwnKeyLoops') per-pair latencies and
// pair counts, merged from its threads after each run.
struct OwnKeyRun {
  void Reset() {
    MutexLock l(&mu);
    reported = 0;
    pairs = 0;
    samples.clear();
  }

  // Adds one thread's pair latencies (ns); thread 0 then waits for the
  // others and sets the counters: p50_us, p99_us, items_per_second (pairs/s)
  // and ratio_to_pipelined. True for thread 0 once it set them.
  bool Report(benchmark::State& state, const std::vector<int64_t>& thread,
              double elapsed_ns) {
    MutexLock l(&mu);
    pairs += static_cast<int64_t>(thread.size());
    samples.insert(samples.end(), thread.begin(), thread.end());
    ++reported;
    if (state.thread_index() != 0) return false;
    auto all_reported = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu) {
      return reported == state.threads();
    };
    mu.Await(absl::Condition(&all_reported));
    if (samples.empty()) return false;
    std::sort(samples.begin(), samples.end());
    state.counters["p50_us"] = Percentile(samples, 0.50) / 1e3;
    state.counters["p99_us"] = Percentile(samples, 0.99) / 1e3;
    // All threads' pairs over thread 0's loop, which ends at the barrier
    // after the last thread's last pair. (SetItemsProcessed would divide by
    // the mean of the threads' own loop times, each stopped before that
    // barrier: too high when some threads finish early, as unfairly served
    // ones do.)
    const double pairs_per_s = static_cast<double>(pairs) * 1e9 / elapsed_ns;
    state.counters["items_per_second"] = pairs_per_s;
    if (const double raw = g_pipelined_scripts_per_s.load(); raw > 0) {
      state.counters["ratio_to_pipelined"] = 2 * pairs_per_s / raw;
    }
    return true;
  }

  Mutex mu;
  int reported ABSL_GUARDED_BY(mu) = 0;  // threads that added their samples
  int64_t pairs ABSL_GUARDED_BY(mu) = 0;
  std::vector<int64_t> samples ABSL_GUARDED_BY(mu);
};

// N threads of one client, each locking and unlocking its own key (watchdog
// lease) back to back. Thread 0 reports for all: pairs/s (items_per_second),
// p50_us and p99_us of a lock+unlock pair, `ratio_to_pipelined` (2 scripts per
// pair, over BM_RawPipelinedEvalsha's rate in this run; absent when the filter
// skipped it) and `connections` (the client's connections to Redis afterwards).
void BM_OwnKeyLockUnlock(benchmark::State& state) {
  BenchEnv* env = EnvOrSkip(state);
  if (env == nullptr) return;
  // One client for every run, made by whichever thread comes first.
  static const absl::StatusOr<std::unique_ptr<CountedClient>> counted =
      CountedClient::Connect(*env);
  static OwnKeyRun run;
  if (!counted.ok()) {
    state.SkipWithError(
        absl::StrCat("own-key client: ", counted.status().ToString()).c_str());
    return;
  }
  Lock lock = (*counted)->client().GetLock(Key(
      *env, absl::StrCat("own-", state.threads(), "-", state.thread_index())));
  std::vector<int64_t> samples;
  samples.reserve(4096);
  absl::Status error;
  // The others touch `run` only after the loop, whose start is a barrier.
  if (state.thread_index() == 0) run.Reset();
  const int64_t start = NowNs();
  for (auto _ : state) {
    const int64_t pair_start = NowNs();
    error = lock.Acquire();
    if (error.ok()) error = lock.Release();
    if (!error.ok()) break;
    samples.push_back(NowNs() - pair_start);
  }
  const double elapsed_ns = static_cast<double>(NowNs() - start);
  if (!error.ok()) state.SkipWithError(error.ToString().c_str());
  if (!run.Report(state, samples, elapsed_ns)) return;
  if (absl::StatusOr<int> n = (*counted)->Connections(); n.ok()) {
    state.counters["connections"] = *n;
  } else {
    state.SkipWithError(
        absl::StrCat("counting connections: ", n.status().ToString()).c_str());
  }
}
BENCHMARK(BM_OwnKeyLockUnlock)
    ->Threads(32)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// ------------------------------------------------------------ async loops --

// BM_AsyncOwnKeyLoops: asynchronous lock+unlock chains, each on its own key
// with its own relock::Owner, started by a few threads of one client. A
// chain's next step starts in the previous step's callback (on the client's
// event loop thread), so the threads only start the chains and count the
// pairs as they complete.
class AsyncChains {
 public:
  // Starts `chains` chains on locks named `prefix`0, `prefix`1, ...
  AsyncChains(Client& client, const std::string& prefix, int chains) {
    for (int i = 0; i < chains; ++i) {
      chains_.push_back(std::make_unique<Chain>(
          Chain{this, client.GetLock(absl::StrCat(prefix, i)), Owner::New()}));
    }
    running_ = chains;
    for (const std::unique_ptr<Chain>& c : chains_) Step(c.get(), NowNs());
  }

  // Waits until `n` more pairs completed (false: a chain failed, see
  // Stop()). absl::Mutex evaluates the condition in the thread that unlocks,
  // so the waiting thread wakes once per `n` pairs, not once per pair.
  bool WaitForPairs(int64_t n) {
    MutexLock l(&mu_);
    consumed_ += n;
    auto ready = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return !error_.ok() || completed_ >= consumed_;
    };
    mu_.Await(absl::Condition(&ready));
    return error_.ok();
  }

  // Stops every chain after its current pair and waits for them; returns the
  // pair latencies (ns) and the first error.
  absl::Status Stop(std::vector<int64_t>* samples) {
    MutexLock l(&mu_);
    stop_ = true;
    auto stopped = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return running_ == 0;
    };
    mu_.Await(absl::Condition(&stopped));
    *samples = std::move(samples_);
    return error_;
  }

 private:
  struct Chain {
    AsyncChains* chains;
    Lock lock;
    Owner owner;
  };

  static void Step(Chain* c, int64_t start_ns) {
    c->lock.AcquireAsync(c->owner, [c, start_ns](absl::Status s) {
      if (!s.ok()) return c->chains->Done(c, start_ns, std::move(s));
      c->lock.ReleaseAsync(c->owner, [c, start_ns](absl::Status s) {
        c->chains->Done(c, start_ns, std::move(s));
      });
    });
  }

  void Done(Chain* c, int64_t start_ns, absl::Status s) {
    const int64_t now = NowNs();
    {
      MutexLock l(&mu_);
      if (!s.ok() && error_.ok()) error_ = std::move(s);
      if (s.ok()) {
        ++completed_;
        samples_.push_back(now - start_ns);
      }
      if (stop_ || !error_.ok()) {
        --running_;
        return;
      }
    }
    Step(c, now);
  }

  std::vector<std::unique_ptr<Chain>> chains_;
  Mutex mu_;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t completed_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t consumed_ ABSL_GUARDED_BY(mu_) = 0;  // pairs waited for
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> samples_ ABSL_GUARDED_BY(mu_);
};

// 32 asynchronous lock+unlock chains on own keys, started by 4 threads (8
// each) of one client; an iteration is 64 pairs of the thread's chains. Thread
// 0 reports for all, as BM_OwnKeyLockUnlock: pairs/s (items_per_second), p50_us
// / p99_us of a pair and `ratio_to_pipelined`.
void BM_AsyncOwnKeyLoops(benchmark::State& state) {
  constexpr int kChainsPerThread = 8;
  constexpr int64_t kPairsPerIteration = 64;  // the thread's chains', in all
  BenchEnv* env = EnvOrSkip(state);
  if (env == nullptr) return;
  static OwnKeyRun run;
  if (state.thread_index() == 0) run.Reset();
  // From before the chains start to after they stopped: conservative.
  const int64_t start = NowNs();
  AsyncChains chains(*env->client,
                     Key(*env, absl::StrCat("async-", state.threads(), "-",
                                            state.thread_index(), "-")),
                     kChainsPerThread);
  for (auto _ : state) {
    if (!chains.WaitForPairs(kPairsPerIteration)) break;
  }
  std::vector<int64_t> samples;
  if (absl::Status s = chains.Stop(&samples); !s.ok()) {
    state.SkipWithError(s.ToString().c_str());
  }
  const double elapsed_ns = static_cast<double>(NowNs() - start);
  if (run.Report(state, samples, elapsed_ns)) {
    state.counters["chains"] = state.threads() * kChainsPerThread;
  }
}
BENCHMARK(BM_AsyncOwnKeyLoops)
    ->Threads(4)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// A fresh client driven by 400 threads at once, each doing a few lock+unlock
// pairs on its own key. Reports the client's connections to Redis afterwards
// (`connections`), the calls that failed (`failed_calls`; the label shows the
// first failure) and the lock events the client sent (`lock_events`). The
// Time column is the burst's wall time.
void BM_ConnectionsUnder400Threads(benchmark::State& state) {
  constexpr int kThreads = 400;
  const int pairs_per_thread = SmokeMode() ? 2 : 5;
  BenchEnv* env = EnvOrSkip(state);
  if (env == nullptr) return;
  for (auto _ : state) {
    absl::StatusOr<std::unique_ptr<CountedClient>> counted =
        CountedClient::Connect(*env);
    if (!counted.ok()) {
      state.SkipWithError(counted.status().ToString().c_str());
      return;
    }
    std::atomic<int64_t> failed{0};
    Mutex mu;
    absl::Status first_failure;  // guarded by mu
    absl::Notification go;
    std::vector<std::thread> workers;
    workers.reserve(kThreads);
    for (int i = 0; i < kThreads; ++i) {
      workers.emplace_back([&, i] {
        Lock lock = (*counted)->client().GetLock(
            Key(*env, absl::StrCat("connections-", i)));
        auto check = [&](absl::Status s) {
          if (s.ok()) return true;
          failed.fetch_add(1);
          MutexLock l(&mu);
          if (first_failure.ok()) first_failure = std::move(s);
          return false;
        };
        go.WaitForNotification();
        for (int p = 0; p < pairs_per_thread; ++p) {
          if (check(lock.Acquire())) check(lock.Release());
        }
      });
    }
    const int64_t start = NowNs();
    go.Notify();
    for (std::thread& t : workers) t.join();
    state.SetIterationTime(static_cast<double>(NowNs() - start) / 1e9);
    absl::StatusOr<int> connections = (*counted)->Connections();
    if (!connections.ok()) {
      state.SkipWithError(absl::StrCat("counting connections: ",
                                       connections.status().ToString())
                              .c_str());
      return;
    }
    state.counters["connections"] = *connections;
    state.counters["failed_calls"] = static_cast<double>(failed.load());
    state.counters["lock_events"] =
        static_cast<double>((*counted)->lock_events());
    MutexLock l(&mu);
    if (!first_failure.ok()) {
      state.SetLabel(absl::StrCat("first failure: ",
                                  first_failure.ToString().substr(0, 160)));
    }
  }
}
BENCHMARK(BM_ConnectionsUnder400Threads)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace relock
