// The hot path of issue 24: relock against a naive C++ client run alongside
// it in the same process run, so that every ratio compares two clients on
// the same server, machine state and CPU placement (STYLE.md point 9,
// DESIGN.md "Performance model").
//
// The naive client is our own code on plain hiredis, as a user would write
// it: one blocking redisContext per thread; lock = `SET key token NX PX
// 30000`, unlock = EVALSHA of a compare-and-delete script (kNaiveUnlock).
//
//   BM_UncontendedVsTwoRoundTrips
//                               target 3: Acquire() + Release(), one thread,
//                               one key, against the two-round-trip bound:
//                               one PING + one EVALSHA of a one-read script
//                               (hexists), sent raw (preformatted) on one
//                               hiredis connection, interleaved with relock's
//                               pairs in the same loop and timed apart. A
//                               second reference, "scripts": relock's own two
//                               scripts with the keys and arguments relock
//                               sends (bench::RelockPairWire), sent raw the
//                               same way; it has the same server work as
//                               relock's pair, so it tells the client's
//                               overhead apart from the scripts' cost.
//                               Counters: relock_pairs_s, bound_pairs_s,
//                               ratio (relock pairs/s over bound pairs/s;
//                               target >= 0.95), scripts_pairs_s,
//                               scripts_ratio (relock over "scripts"),
//                               relock_cpu_us / bound_cpu_us / scripts_cpu_us
//                               (client CPU per pair), relock_csw (voluntary
//                               context switches per pair), relock_allocs
//                               and scripts_allocs (heap allocations per
//                               pair; target 6). The Time column is
//                               relock's pairs alone.
//   BM_OwnKeyThreadsVsNaive     targets 1 and 6: 32 threads of the shared
//                               client, each Acquire() + Release() on its own
//                               key with the blocking API, against the naive
//                               client's 32 threads on their own keys, and
//                               against "lf": 32 threads sending relock's
//                               own scripts raw on one connection shared by
//                               leader/follower I/O (leader_follower.h; the
//                               design relock's event loop did not take).
//                               Rounds of a fixed length alternate: naive,
//                               lf, relock, three times (after one short
//                               warm-up round of each, not counted).
//                               Counters:
//                                 relock_pairs_s, naive_pairs_s  median round
//                                 ratio        relock median / naive median
//                                              (target >= 1.5)
//                                 relock_dev_pct  largest distance of a
//                                              relock round from the median,
//                                              in % of it (target < 20)
//                                 relock_spread_pct, naive_spread_pct
//                                              max / min - 1 over the rounds,
//                                              in %
//                                 relock_p50_us, relock_p99_us (target <=
//                                              2000), naive_p99_us: latency
//                                              of a pair, all rounds' pairs
//                                 relock_cpu_us, naive_cpu_us  this process's
//                                              user + system CPU per pair
//                                              (getrusage(RUSAGE_SELF) around
//                                              each round; redis-server is
//                                              another process)
//                                 cpu_ratio    relock_cpu_us / naive_cpu_us
//                                              (target 6: <= 1)
//                                 relock_server_us, naive_server_us
//                                              redis-server's CPU per pair
//                                              (INFO cpu around each round)
//                                 relock_csw, naive_csw  voluntary context
//                                              switches per pair
//                                 relock_allocs, naive_allocs  heap
//                                              allocations per pair (see
//                                              below)
//                                 lf_pairs_s   the lf side's median round
//                                 lf_ratio     lf median / naive median
//                                 relock_vs_lf relock median / lf median
//                                 lf_cpu_us, lf_server_us, lf_csw  as above
//                                 pinned       1 when RELOCK_BENCH_PIN took
//                                              effect (see below)
//                               The label lists every round's pairs/s and the
//                               pinning. The Time column is the benchmark's
//                               wall time (all rounds).
//   BM_AsyncChainsVsNaive       targets 4 and 6: 32 asynchronous chains
//                               (AcquireAsync / ReleaseAsync, each on its own
//                               key and relock::Owner, the next step started
//                               in the previous step's callback) against the
//                               naive client's 32 threads, alternated as
//                               above; same counters (ratio target >= 2),
//                               without an lf side.
//
// Heap allocations are counted by heap_allocations.cc, linked into this
// binary only: every call of malloc and its relatives, so operator new's and
// hiredis's replies and buffers in relock and in the naive client all count.
// The benchmark itself allocates nothing inside a measured round (sample
// buffers are reserved beforehand). A sanitizer build reports no
// allocation counters.
//
// Environment:
//   RELOCK_BENCH_URL=redis://[[user]:password@]host[:port][/db] or
//       unix:///path[?db=N]: use that server instead of a private one started
//       with the test fixture (relock::testing::RedisServer). Keys are
//       prefixed with "relock-bench:<pid>:" (naive, lf and relock keys apart)
//       and deleted at the end of each benchmark.
//   RELOCK_BENCH_PIN=1: pin redis-server (every thread of it) to the first CPU
//       this process may use, normally CPU 0, and this process (every thread,
//       before the client and the workers start) to the second, normally
//       CPU 1, with sched_setaffinity; both are restored at exit. The server
//       is the fixture's child, or with RELOCK_BENCH_URL the process named by
//       INFO server's process_id if it is a local redis-server. When pinning
//       is impossible (one CPU, a remote server, no permission) the runs go
//       on unpinned: the `pinned` counter and the label say which.
//   RELOCK_BENCH_CONNECTIONS=N: the relock client's
//       ClientOptions::command_connections (default: the library's default).
//   RELOCK_BENCH_ROUND_S=S: the length of one round of the alternated
//       benchmarks in seconds (default 3).
//   RELOCK_BENCH_SMOKE=1: rounds of 0.1 s and the fewest iterations (for CI;
//       pair it with --benchmark_min_time=0.01): a few seconds in all.
//
// Run from an optimized build, e.g.
//   cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
//       -DRELOCK_BUILD_BENCHMARKS=ON
//   cmake --build build -j2 --target hot_path_benchmark
//   build/benchmarks/hot_path_benchmark
//   RELOCK_BENCH_PIN=1 build/benchmarks/hot_path_benchmark
//   RELOCK_BENCH_PIN=1 RELOCK_BENCH_ROUND_S=5
//   build/benchmarks/hot_path_benchmark
//       --benchmark_filter=OwnKeyThreads
//   RELOCK_BENCH_SMOKE=1 build/benchmarks/hot_path_benchmark
//       --benchmark_min_time=0.01

#include <hiredis/hiredis.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "benchmarks/bench_util.h"
#include "benchmarks/heap_allocations.h"
#include "benchmarks/leader_follower.h"
#include "lib/common/mutex.h"
#include "lib/redis/url.h"
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

using bench::EnvFlag;
using bench::SmokeMode;

// The length of one measured round of the alternated benchmarks.
absl::Duration RoundLength() {
  if (SmokeMode()) return absl::Milliseconds(100);
  double seconds = 0;
  // NOLINTNEXTLINE(concurrency-mt-unsafe): nothing here calls setenv().
  if (const char* s = std::getenv("RELOCK_BENCH_ROUND_S");
      s != nullptr && absl::SimpleAtod(s, &seconds) && seconds > 0) {
    return absl::Seconds(seconds);
  }
  return absl::Seconds(3);
}

// The warm-up round of each side before the measured ones.
absl::Duration WarmUpLength() {
  return std::max(absl::Milliseconds(20), RoundLength() / 10);
}

constexpr int kRounds = 3;            // measured rounds of each side
constexpr int kThreads = 32;          // blocking threads, and async chains
constexpr int kMaxSamples = 1 << 15;  // pair latencies kept per thread/chain

// This process's CPU time and voluntary context switches so far, every
// thread together (the dead ones too).
struct ProcessUsage {
  double cpu_s = 0;  // user + system
  int64_t voluntary_switches = 0;

  static ProcessUsage Now() {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    auto seconds = [](const timeval& tv) {
      return static_cast<double>(tv.tv_sec) +
             static_cast<double>(tv.tv_usec) / 1e6;
    };
    return {seconds(ru.ru_utime) + seconds(ru.ru_stime), ru.ru_nvcsw};
  }
};

// What a measured stretch of work cost this process: wall time, CPU,
// context switches and heap allocations.
class CostMeter {
 public:
  // The clock is read last here and first in Read(), so that the wall time
  // leaves out the meter's own system calls; the allocation count first
  // here and last in Read(), so that the CPU time leaves out its sum over
  // the shards.
  CostMeter()
      : allocations_(bench::HeapAllocations()),
        usage_(ProcessUsage::Now()),
        start_ns_(NowNs()) {}

  struct Cost {
    double seconds = 0;
    double cpu_s = 0;
    int64_t voluntary_switches = 0;
    int64_t allocations = 0;
  };

  Cost Read() const {
    const int64_t end_ns = NowNs();
    const ProcessUsage usage = ProcessUsage::Now();
    const int64_t allocations = bench::HeapAllocations();
    return {static_cast<double>(end_ns - start_ns_) / 1e9,
            usage.cpu_s - usage_.cpu_s,
            usage.voluntary_switches - usage_.voluntary_switches,
            allocations - allocations_};
  }

 private:
  int64_t allocations_;
  ProcessUsage usage_;
  int64_t start_ns_;
};

// ------------------------------------------------------- raw hiredis --

using Context = bench::RawConnection;
using Reply = bench::RawReply;
using bench::Formatted;
using bench::TakeReply;

std::string ReplyText(const redisReply& r) {
  return r.str == nullptr ? std::string() : std::string(r.str, r.len);
}

// Runs one command given in hiredis's printf-like `format` (%s arguments).
template <typename... Args>
absl::StatusOr<Reply> Call(redisContext* c, const char* format,
                           const Args&... args) {
  return TakeReply(c, redisCommand(c, format, args...), format);
}

absl::StatusOr<Context> Connect(const redis::Endpoint& ep) {
  if (ep.tls) {
    return absl::UnimplementedError(
        "the naive client speaks plain TCP and unix sockets, not TLS");
  }
  bench::RawConnectionOptions options;
  options.connect_timeout = absl::Seconds(5);
  options.command_timeout = absl::Seconds(5);
  options.user = ep.username;
  options.password = ep.password;
  options.db = ep.db;
  options.suppress_sigpipe = false;  // the naive client pays for nothing else
  return ep.kind == redis::Endpoint::Kind::kUnix
             ? Context::ConnectUnix(ep.path, options)
             : Context::Connect(ep.host, ep.port, options);
}

absl::StatusOr<std::string> LoadScript(redisContext* c, const char* source) {
  absl::StatusOr<Reply> sha = Call(c, "SCRIPT LOAD %s", source);
  if (!sha.ok()) return sha.status();
  return ReplyText(**sha);
}

// Sends a command formatted beforehand and reads its reply.
absl::StatusOr<Reply> CallFormatted(redisContext* c, const std::string& cmd,
                                    absl::string_view what) {
  if (redisAppendFormattedCommand(c, cmd.data(), cmd.size()) != REDIS_OK) {
    return absl::ResourceExhaustedError("redisAppendFormattedCommand");
  }
  void* raw = nullptr;
  if (redisGetReply(c, &raw) != REDIS_OK) raw = nullptr;
  return TakeReply(c, raw, what);
}

// ------------------------------------------------------------ pinning --

// The thread ids of process `pid` (/proc/<pid>/task).
std::vector<pid_t> Tasks(pid_t pid) {
  std::vector<pid_t> tids;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(
           absl::StrCat("/proc/", pid, "/task"), ec)) {
    int tid = 0;
    if (absl::SimpleAtoi(entry.path().filename().string(), &tid)) {
      tids.push_back(tid);
    }
  }
  return tids;
}

// RELOCK_BENCH_PIN: redis-server on one CPU, this process on another, until
// destroyed, which restores the CPU sets found.
class CpuPinning {
 public:
  // Pins every thread of `server_pid` and of this process, or says why not.
  static absl::StatusOr<std::unique_ptr<CpuPinning>> Apply(pid_t server_pid) {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
      return absl::InternalError(absl::StrCat(
          "sched_getaffinity: ",
          std::error_code(errno, std::generic_category()).message()));
    }
    std::vector<int> cpus;
    for (int cpu = 0; cpu < CPU_SETSIZE && cpus.size() < 2; ++cpu) {
      if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
    }
    if (cpus.size() < 2) {
      return absl::FailedPreconditionError("this process may use one CPU only");
    }
    auto pinning = std::unique_ptr<CpuPinning>(new CpuPinning);
    pinning->own_ = allowed;
    pinning->server_cpu_ = cpus[0];
    pinning->client_cpu_ = cpus[1];
    if (absl::Status s = Pin(server_pid, cpus[0], &pinning->server_saved_);
        !s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("pinning redis-server: ", s.message()));
    }
    if (absl::Status s = Pin(getpid(), cpus[1], nullptr); !s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("pinning this process: ", s.message()));
    }
    return pinning;
  }

  CpuPinning(const CpuPinning&) = delete;
  CpuPinning& operator=(const CpuPinning&) = delete;

  // Restores the server's threads' CPU sets, and gives every thread of this
  // process the set it had before (threads that ended are skipped).
  ~CpuPinning() {
    for (const auto& [tid, set] : server_saved_) {
      sched_setaffinity(tid, sizeof(set), &set);
    }
    for (pid_t tid : Tasks(getpid())) {
      sched_setaffinity(tid, sizeof(own_), &own_);
    }
  }

  std::string ToString() const {
    return absl::StrCat("pinned: redis-server on CPU ", server_cpu_,
                        ", client on CPU ", client_cpu_);
  }

 private:
  CpuPinning() = default;

  // Sets the CPU set of every thread of `pid` to `cpu` alone, saving the
  // sets found in `saved` (if not null).
  static absl::Status Pin(pid_t pid, int cpu,
                          std::vector<std::pair<pid_t, cpu_set_t>>* saved) {
    const std::vector<pid_t> tids = Tasks(pid);
    if (tids.empty()) {
      return absl::NotFoundError(absl::StrCat("no threads in /proc/", pid));
    }
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    for (pid_t tid : tids) {
      cpu_set_t before;
      CPU_ZERO(&before);
      if (sched_getaffinity(tid, sizeof(before), &before) != 0) continue;
      if (sched_setaffinity(tid, sizeof(one), &one) != 0) {
        return absl::PermissionDeniedError(absl::StrCat(
            "sched_setaffinity(", tid,
            "): ", std::error_code(errno, std::generic_category()).message()));
      }
      if (saved != nullptr) saved->emplace_back(tid, before);
    }
    return absl::OkStatus();
  }

  cpu_set_t own_{};  // this process's CPU set before pinning
  int server_cpu_ = -1;
  int client_cpu_ = -1;
  std::vector<std::pair<pid_t, cpu_set_t>> server_saved_;
};

// The value of `field` in the text of an INFO reply.
absl::StatusOr<std::string> InfoField(redisContext* c, const char* section,
                                      absl::string_view field) {
  absl::StatusOr<Reply> info = Call(c, "INFO %s", section);
  if (!info.ok()) return info.status();
  const std::string text = ReplyText(**info);
  const std::string name = absl::StrCat("\n", field, ":");
  const size_t at = absl::StrCat("\n", text).find(name);
  if (at == std::string::npos) {
    return absl::NotFoundError(
        absl::StrCat("INFO ", section, " has no ", field));
  }
  const size_t begin = at + name.size() - 1;
  return text.substr(begin, text.find('\r', begin) - begin);
}

// The pid of a local redis-server behind `ep`: INFO server's process_id,
// checked against /proc/<pid>/comm.
absl::StatusOr<pid_t> LocalServerPid(const redis::Endpoint& ep) {
  absl::StatusOr<Context> c = Connect(ep);
  if (!c.ok()) return c.status();
  absl::StatusOr<std::string> field =
      InfoField(c->get(), "server", "process_id");
  if (!field.ok()) return field.status();
  int pid = 0;
  if (!absl::SimpleAtoi(*field, &pid)) {
    return absl::InternalError(absl::StrCat("process_id: ", *field));
  }
  std::ifstream comm(absl::StrCat("/proc/", pid, "/comm"));
  std::string name;
  std::getline(comm, name);
  if (name.rfind("redis-server", 0) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "process_id ", pid, " is not a local redis-server (", name, ")"));
  }
  return pid;
}

// redis-server's CPU time so far (used_cpu_user + used_cpu_sys of INFO cpu:
// every thread of the server), read on a connection of its own.
class ServerCpu {
 public:
  static absl::StatusOr<ServerCpu> Open(const redis::Endpoint& ep) {
    absl::StatusOr<Context> c = Connect(ep);
    if (!c.ok()) return c.status();
    return ServerCpu(*std::move(c));
  }

  absl::StatusOr<double> Seconds() {
    double total = 0;
    for (const char* field : {"used_cpu_user", "used_cpu_sys"}) {
      absl::StatusOr<std::string> text = InfoField(conn_.get(), "cpu", field);
      if (!text.ok()) return text.status();
      double seconds = 0;
      if (!absl::SimpleAtod(*text, &seconds)) {
        return absl::InternalError(absl::StrCat(field, ": ", *text));
      }
      total += seconds;
    }
    return total;
  }

 private:
  explicit ServerCpu(Context conn) : conn_(std::move(conn)) {}
  Context conn_;
};

// -------------------------------------------------------- environment --

// The server, the CPU placement and the relock client shared by all
// benchmarks, made on first use. A failure is kept in `status` and reported
// by every benchmark. Members are destroyed bottom-up: the client closes,
// then the CPU sets are restored, then the server stops.
struct BenchEnv {
  std::unique_ptr<testing::RedisServer> server;  // null with RELOCK_BENCH_URL
  std::string url;
  redis::Endpoint endpoint;
  std::string key_prefix;
  std::unique_ptr<CpuPinning> pinning;  // null: not pinned
  std::string placement;                // for the labels
  std::unique_ptr<Client> client;
  absl::Status status;
};

absl::Status SetUp(BenchEnv& e) {
  e.key_prefix = absl::StrCat("relock-bench:", getpid(), ":");
  // NOLINTNEXTLINE(concurrency-mt-unsafe): nothing here calls setenv().
  if (const char* url = std::getenv("RELOCK_BENCH_URL");
      url != nullptr && *url != '\0') {
    e.url = url;
  } else {
    absl::StatusOr<std::unique_ptr<testing::RedisServer>> server =
        testing::RedisServer::Start();
    if (!server.ok()) return server.status();
    e.server = *std::move(server);
    e.url = e.server->url();
  }
  absl::StatusOr<redis::Endpoint> endpoint = redis::ParseRedisUrl(e.url);
  if (!endpoint.ok()) return endpoint.status();
  e.endpoint = *std::move(endpoint);
  e.placement = "unpinned";
  if (EnvFlag("RELOCK_BENCH_PIN")) {
    absl::StatusOr<pid_t> pid = e.server != nullptr
                                    ? absl::StatusOr<pid_t>(e.server->pid())
                                    : LocalServerPid(e.endpoint);
    absl::StatusOr<std::unique_ptr<CpuPinning>> pinning =
        pid.ok() ? CpuPinning::Apply(*pid)
                 : absl::StatusOr<std::unique_ptr<CpuPinning>>(pid.status());
    if (pinning.ok()) {
      e.pinning = *std::move(pinning);
      e.placement = e.pinning->ToString();
    } else {
      e.placement = absl::StrCat(
          "unpinned (RELOCK_BENCH_PIN: ", pinning.status().message(), ")");
      std::cerr << "hot_path_benchmark: " << e.placement << "\n";
    }
  }
  // After pinning: the client's threads inherit the CPU set.
  ClientOptions options;
  options.url = e.url;
  // NOLINTNEXTLINE(concurrency-mt-unsafe): read before any thread starts
  if (const char* n = std::getenv("RELOCK_BENCH_CONNECTIONS")) {
    if (!absl::SimpleAtoi(n, &options.command_connections)) {
      return absl::InvalidArgumentError(
          absl::StrCat("RELOCK_BENCH_CONNECTIONS=", n, " is not a number"));
    }
  }
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Connect(std::move(options));
  if (!client.ok()) return client.status();
  e.client = *std::move(client);
  return absl::OkStatus();
}

// Returns the shared environment, or null after SkipWithError. It lives until
// exit (a static made after the fixture's own statics, so destroyed before
// them).
BenchEnv* EnvOrSkip(benchmark::State& state) {
  static BenchEnv env = [] {
    BenchEnv e;
    e.status = SetUp(e);
    return e;
  }();
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

// Deletes every key of this process's runs (SCAN MATCH <prefix>*).
absl::Status DeleteKeys(const BenchEnv& env) {
  absl::StatusOr<Context> c = Connect(env.endpoint);
  if (!c.ok()) return c.status();
  const std::string pattern = absl::StrCat(env.key_prefix, "*");
  std::string cursor = "0";
  do {
    absl::StatusOr<Reply> page = Call(c->get(), "SCAN %s MATCH %s COUNT 1000",
                                      cursor.c_str(), pattern.c_str());
    if (!page.ok()) return page.status();
    const redisReply& r = **page;
    if (r.type != REDIS_REPLY_ARRAY || r.elements != 2) {
      return absl::InternalError("SCAN: not a two-element array");
    }
    cursor = ReplyText(*r.element[0]);
    const redisReply& keys = *r.element[1];
    for (size_t i = 0; i < keys.elements; ++i) {
      const std::string key = ReplyText(*keys.element[i]);
      if (absl::StatusOr<Reply> d = Call(c->get(), "DEL %s", key.c_str());
          !d.ok()) {
        return d.status();
      }
    }
  } while (cursor != "0");
  return absl::OkStatus();
}

// ------------------------------------------------------ naive client --

// The naive client's unlock: delete the key if it still holds our token.
constexpr char kNaiveUnlock[] =
    "if redis.call('get',KEYS[1])==ARGV[1] then "
    "return redis.call('del',KEYS[1]) end return 0";

// One thread's lock of the naive client: its own blocking connection, key
// and token.
class NaiveLock {
 public:
  static absl::StatusOr<NaiveLock> Open(const BenchEnv& env, std::string key,
                                        std::string token) {
    absl::StatusOr<Context> c = Connect(env.endpoint);
    if (!c.ok()) return c.status();
    absl::StatusOr<std::string> sha = LoadScript(c->get(), kNaiveUnlock);
    if (!sha.ok()) return sha.status();
    return NaiveLock(*std::move(c), *std::move(sha), std::move(key),
                     std::move(token));
  }

  // SET key token NX PX 30000. The key is this thread's own, so a nil reply
  // (held) is an error here.
  absl::Status Lock() {
    absl::StatusOr<Reply> r = Call(conn_.get(), "SET %s %s NX PX 30000",
                                   key_.c_str(), token_.c_str());
    if (!r.ok()) return r.status();
    if ((*r)->type != REDIS_REPLY_STATUS) {
      return absl::InternalError(
          absl::StrCat("naive lock: ", key_, " was held"));
    }
    return absl::OkStatus();
  }

  absl::Status Unlock() {
    absl::StatusOr<Reply> r =
        Call(conn_.get(), "EVALSHA %s 1 %s %s", unlock_sha_.c_str(),
             key_.c_str(), token_.c_str());
    if (!r.ok()) return r.status();
    if ((*r)->type != REDIS_REPLY_INTEGER || (*r)->integer != 1) {
      return absl::InternalError(
          absl::StrCat("naive unlock: ", key_, " was not ours"));
    }
    return absl::OkStatus();
  }

 private:
  NaiveLock(Context conn, std::string unlock_sha, std::string key,
            std::string token)
      : conn_(std::move(conn)),
        unlock_sha_(std::move(unlock_sha)),
        key_(std::move(key)),
        token_(std::move(token)) {}
  Context conn_;
  std::string unlock_sha_;
  std::string key_;
  std::string token_;
};

// `threads` naive locks on keys "<prefix>naive-<name>-<i>".
absl::StatusOr<std::vector<NaiveLock>> OpenNaiveLocks(const BenchEnv& env,
                                                      absl::string_view name,
                                                      int threads) {
  std::vector<NaiveLock> locks;
  locks.reserve(threads);
  for (int i = 0; i < threads; ++i) {
    absl::StatusOr<NaiveLock> lock =
        NaiveLock::Open(env, Key(env, absl::StrCat("naive-", name, "-", i)),
                        absl::StrCat("naive-token:", getpid(), ":", i));
    if (!lock.ok()) return lock.status();
    locks.push_back(*std::move(lock));
  }
  return locks;
}

// ------------------------------------------------------------- rounds --

// What one round of one side measured.
struct Round {
  CostMeter::Cost cost;
  double server_cpu_s = 0;            // redis-server's CPU in that time
  int64_t pairs = 0;                  // completed within `cost.seconds`
  std::vector<int64_t> latencies_ns;  // of (at most kMaxSamples per worker)

  double pairs_per_s() const {
    return static_cast<double>(pairs) / cost.seconds;
  }
};

// One worker's (thread's or chain's) pair count and latencies; only the
// worker writes them while the round runs.
struct alignas(64) WorkerRecord {
  WorkerRecord() { latencies_ns.reserve(kMaxSamples); }

  void Add(int64_t latency_ns) {
    if (latencies_ns.size() < latencies_ns.capacity()) {
      latencies_ns.push_back(latency_ns);
    }
    pairs.store(pairs.load(std::memory_order_relaxed) + 1,
                std::memory_order_relaxed);
  }

  std::atomic<int64_t> pairs{0};
  std::vector<int64_t> latencies_ns;
};

void MergeLatencies(const std::vector<std::unique_ptr<WorkerRecord>>& records,
                    Round* round) {
  for (const std::unique_ptr<WorkerRecord>& r : records) {
    round->latencies_ns.insert(round->latencies_ns.end(),
                               r->latencies_ns.begin(), r->latencies_ns.end());
  }
}

int64_t SumPairs(const std::vector<std::unique_ptr<WorkerRecord>>& records) {
  int64_t pairs = 0;
  for (const std::unique_ptr<WorkerRecord>& r : records) {
    pairs += r->pairs.load(std::memory_order_relaxed);
  }
  return pairs;
}

// One lock+unlock pair of worker `i`.
using PairFn = std::function<absl::Status(int)>;

// `threads` threads run `pair` back to back for `length`. Each does one pair
// before the round starts (connections and thread state warm), and the
// round's cost is read when the time is up, before the threads are joined.
absl::StatusOr<Round> RunThreadRound(int threads, absl::Duration length,
                                     ServerCpu& server, const PairFn& pair) {
  std::vector<std::unique_ptr<WorkerRecord>> records;
  records.reserve(threads);
  for (int i = 0; i < threads; ++i) {
    records.push_back(std::make_unique<WorkerRecord>());
  }
  std::vector<absl::Status> errors(threads);
  absl::BlockingCounter ready(threads);
  absl::Notification go;
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  workers.reserve(threads);
  for (int i = 0; i < threads; ++i) {
    workers.emplace_back([&, i] {
      absl::Status s = pair(i);
      ready.DecrementCount();
      go.WaitForNotification();
      WorkerRecord& record = *records[i];
      while (s.ok() && !stop.load(std::memory_order_relaxed)) {
        const int64_t start = NowNs();
        s = pair(i);
        if (s.ok()) record.Add(NowNs() - start);
      }
      errors[i] = std::move(s);
    });
  }
  ready.Wait();
  const absl::StatusOr<double> server_start = server.Seconds();
  const CostMeter meter;
  go.Notify();
  absl::SleepFor(length);
  Round round;
  round.pairs = SumPairs(records);
  round.cost = meter.Read();
  const absl::StatusOr<double> server_end = server.Seconds();
  stop.store(true);
  for (std::thread& t : workers) t.join();
  for (absl::Status& s : errors) {
    if (!s.ok()) return s;
  }
  if (!server_start.ok()) return server_start.status();
  if (!server_end.ok()) return server_end.status();
  round.server_cpu_s = *server_end - *server_start;
  MergeLatencies(records, &round);
  return round;
}

// Asynchronous lock+unlock chains, each on its own lock and Owner: a chain's
// next pair starts in the callback that completed its previous one (on the
// client's event loop thread).
class AsyncRound {
 public:
  // One chain per lock, each with an Owner of its own.
  explicit AsyncRound(const std::vector<Lock>& locks) {
    for (const Lock& lock : locks) {
      chains_.push_back(std::make_unique<Chain>(this, lock, Owner::New()));
    }
  }

  absl::StatusOr<Round> Run(absl::Duration length, ServerCpu& server) {
    {
      MutexLock l(&mu_);
      running_ = static_cast<int>(chains_.size());
    }
    const absl::StatusOr<double> server_start = server.Seconds();
    if (!server_start.ok()) return server_start.status();
    const CostMeter meter;
    for (const std::unique_ptr<Chain>& c : chains_) Step(c.get());
    absl::SleepFor(length);
    Round round;
    int64_t pairs = 0;
    for (const std::unique_ptr<Chain>& c : chains_) {
      pairs += c->record.pairs.load(std::memory_order_relaxed);
    }
    round.pairs = pairs;
    round.cost = meter.Read();
    const absl::StatusOr<double> server_end = server.Seconds();
    stop_.store(true);
    MutexLock l(&mu_);
    auto stopped = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return running_ == 0;
    };
    mu_.Await(absl::Condition(&stopped));
    if (!error_.ok()) return error_;
    if (!server_end.ok()) return server_end.status();
    round.server_cpu_s = *server_end - *server_start;
    for (const std::unique_ptr<Chain>& c : chains_) {
      round.latencies_ns.insert(round.latencies_ns.end(),
                                c->record.latencies_ns.begin(),
                                c->record.latencies_ns.end());
    }
    return round;
  }

 private:
  struct Chain {
    Chain(AsyncRound* r, Lock l, Owner o)
        : round(r), lock(std::move(l)), owner(o) {}

    AsyncRound* round;
    Lock lock;
    Owner owner;
    WorkerRecord record;
  };

  static void Step(Chain* c) {
    const int64_t start = NowNs();
    c->lock.AcquireAsync(c->owner, [c, start](absl::Status s) {
      if (!s.ok()) return c->round->ChainEnded(std::move(s));
      c->lock.ReleaseAsync(c->owner, [c, start](absl::Status s) {
        if (!s.ok()) return c->round->ChainEnded(std::move(s));
        c->record.Add(NowNs() - start);
        if (c->round->stop_.load(std::memory_order_relaxed)) {
          return c->round->ChainEnded(absl::OkStatus());
        }
        Step(c);
      });
    });
  }

  // A chain ends, with `s` unless all went well.
  void ChainEnded(absl::Status s) {
    MutexLock l(&mu_);
    if (!s.ok() && error_.ok()) error_ = std::move(s);
    --running_;
  }

  std::vector<std::unique_ptr<Chain>> chains_;
  std::atomic<bool> stop_{false};
  Mutex mu_;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

// One side's measured rounds.
struct Side {
  std::vector<Round> rounds;

  std::vector<double> Rates() const {
    std::vector<double> rates;
    for (const Round& r : rounds) rates.push_back(r.pairs_per_s());
    return rates;
  }
  double Median() const {
    std::vector<double> rates = Rates();
    std::sort(rates.begin(), rates.end());
    return rates[rates.size() / 2];
  }
  // max / min - 1, in %.
  double SpreadPct() const {
    const std::vector<double> rates = Rates();
    const auto [lo, hi] = std::minmax_element(rates.begin(), rates.end());
    return (*hi / *lo - 1) * 100;
  }
  // The largest distance of a round from the median, in % of it.
  double DeviationPct() const {
    const double median = Median();
    double dev = 0;
    for (double rate : Rates()) {
      dev = std::max(dev, std::abs(rate - median) / median * 100);
    }
    return dev;
  }
  int64_t Pairs() const {
    int64_t pairs = 0;
    for (const Round& r : rounds) pairs += r.pairs;
    return pairs;
  }
  // Per pair, over every round.
  double CpuUs() const {
    double cpu = 0;
    for (const Round& r : rounds) cpu += r.cost.cpu_s;
    return cpu * 1e6 / static_cast<double>(Pairs());
  }
  double ServerCpuUs() const {
    double cpu = 0;
    for (const Round& r : rounds) cpu += r.server_cpu_s;
    return cpu * 1e6 / static_cast<double>(Pairs());
  }
  double Switches() const {
    int64_t n = 0;
    for (const Round& r : rounds) n += r.cost.voluntary_switches;
    return static_cast<double>(n) / static_cast<double>(Pairs());
  }
  double Allocations() const {
    int64_t n = 0;
    for (const Round& r : rounds) n += r.cost.allocations;
    return static_cast<double>(n) / static_cast<double>(Pairs());
  }
  // The `p` quantile of every round's pair latencies, in us.
  double LatencyUs(double p) const {
    std::vector<int64_t> all;
    for (const Round& r : rounds) {
      all.insert(all.end(), r.latencies_ns.begin(), r.latencies_ns.end());
    }
    if (all.empty()) return 0;
    const size_t i =
        std::min(all.size() - 1, static_cast<size_t>(std::llround(
                                     p * static_cast<double>(all.size() - 1))));
    std::nth_element(all.begin(), all.begin() + static_cast<ptrdiff_t>(i),
                     all.end());
    return static_cast<double>(all[i]) / 1e3;
  }
  std::string RatesText() const {
    return absl::StrJoin(Rates(), " ", [](std::string* out, double rate) {
      absl::StrAppend(out, std::llround(rate));
    });
  }
};

// A round of one side, of the given length.
using RoundFn = std::function<absl::StatusOr<Round>(absl::Duration)>;

// A warm-up round of each side, then kRounds measured rounds of each,
// alternated (naive first, then `lf` if given, then relock), then the
// counters of BM_OwnKeyThreadsVsNaive.
void CompareAlternated(benchmark::State& state, const BenchEnv& env,
                       const RoundFn& naive_round, const RoundFn& relock_round,
                       const RoundFn* lf_round) {
  Side naive;
  Side lf;
  Side relock;
  std::vector<std::pair<const RoundFn*, Side*>> sides = {
      {&naive_round, &naive}};
  if (lf_round != nullptr) sides.emplace_back(lf_round, &lf);
  sides.emplace_back(&relock_round, &relock);
  for (auto _ : state) {
    for (auto [run, side] : sides) {
      if (absl::StatusOr<Round> r = (*run)(WarmUpLength()); !r.ok()) {
        state.SkipWithError(r.status().ToString().c_str());
        return;
      }
    }
    for (int i = 0; i < kRounds; ++i) {
      for (auto [run, side] : sides) {
        absl::StatusOr<Round> r = (*run)(RoundLength());
        if (!r.ok()) {
          state.SkipWithError(r.status().ToString().c_str());
          return;
        }
        side->rounds.push_back(*std::move(r));
      }
    }
  }
  for (auto [run, side] : sides) {
    if (side->Pairs() == 0) {
      state.SkipWithError("a side completed no pairs");
      return;
    }
  }
  state.counters["relock_pairs_s"] = relock.Median();
  state.counters["naive_pairs_s"] = naive.Median();
  state.counters["ratio"] = relock.Median() / naive.Median();
  state.counters["relock_dev_pct"] = relock.DeviationPct();
  state.counters["relock_spread_pct"] = relock.SpreadPct();
  state.counters["naive_spread_pct"] = naive.SpreadPct();
  state.counters["relock_p50_us"] = relock.LatencyUs(0.50);
  state.counters["relock_p99_us"] = relock.LatencyUs(0.99);
  state.counters["naive_p99_us"] = naive.LatencyUs(0.99);
  state.counters["relock_cpu_us"] = relock.CpuUs();
  state.counters["naive_cpu_us"] = naive.CpuUs();
  state.counters["cpu_ratio"] = relock.CpuUs() / naive.CpuUs();
  state.counters["relock_server_us"] = relock.ServerCpuUs();
  state.counters["naive_server_us"] = naive.ServerCpuUs();
  state.counters["relock_csw"] = relock.Switches();
  state.counters["naive_csw"] = naive.Switches();
  if (bench::CountsHeapAllocations()) {
    state.counters["relock_allocs"] = relock.Allocations();
    state.counters["naive_allocs"] = naive.Allocations();
  }
  std::string lf_rates;
  if (lf_round != nullptr) {
    state.counters["lf_pairs_s"] = lf.Median();
    state.counters["lf_ratio"] = lf.Median() / naive.Median();
    state.counters["relock_vs_lf"] = relock.Median() / lf.Median();
    state.counters["lf_cpu_us"] = lf.CpuUs();
    state.counters["lf_server_us"] = lf.ServerCpuUs();
    state.counters["lf_csw"] = lf.Switches();
    lf_rates = absl::StrCat(" | lf ", lf.RatesText());
  }
  state.counters["pinned"] = env.pinning != nullptr ? 1 : 0;
  state.SetLabel(absl::StrCat("relock ", relock.RatesText(), " | naive ",
                              naive.RatesText(), lf_rates, " pairs/s | ",
                              env.placement));
}

// ------------------------------------------------------ the benchmarks --

// Target 3: relock's uncontended pair and the two-round-trip bound, in the
// same loop, timed apart.
void BM_UncontendedVsTwoRoundTrips(benchmark::State& state) {
  BenchEnv* env = EnvOrSkip(state);
  if (env == nullptr) return;
  absl::StatusOr<Context> raw = Connect(env->endpoint);
  if (!raw.ok()) {
    state.SkipWithError(raw.status().ToString().c_str());
    return;
  }
  absl::StatusOr<std::string> sha =
      LoadScript(raw->get(), "return redis.call('hexists',KEYS[1],ARGV[1])");
  if (!sha.ok()) {
    state.SkipWithError(sha.status().ToString().c_str());
    return;
  }
  const std::string ping = Formatted({"PING"});
  const std::string evalsha =
      Formatted({"EVALSHA", *sha, "1", Key(*env, "bound"), "field"});
  absl::StatusOr<bench::PairWire> scripts_wire =
      bench::RelockPairWire(*raw, Key(*env, "scripts"), /*owner=*/1);
  if (!scripts_wire.ok()) {
    state.SkipWithError(scripts_wire.status().ToString().c_str());
    return;
  }
  Lock lock = env->client->GetLock(Key(*env, "uncontended"));
  CostMeter::Cost relock;
  CostMeter::Cost bound;
  CostMeter::Cost scripts;
  auto add = [](CostMeter::Cost& sum, const CostMeter::Cost& c) {
    sum.seconds += c.seconds;
    sum.cpu_s += c.cpu_s;
    sum.voluntary_switches += c.voluntary_switches;
    sum.allocations += c.allocations;
  };
  for (auto _ : state) {
    const CostMeter relock_meter;
    absl::Status s = lock.Acquire();
    if (s.ok()) s = lock.Release();
    const CostMeter::Cost relock_cost = relock_meter.Read();
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      return;
    }
    const CostMeter bound_meter;
    absl::StatusOr<Reply> r = CallFormatted(raw->get(), ping, "PING");
    if (r.ok()) r = CallFormatted(raw->get(), evalsha, "EVALSHA");
    const CostMeter::Cost bound_cost = bound_meter.Read();
    if (!r.ok()) {
      state.SkipWithError(r.status().ToString().c_str());
      return;
    }
    const CostMeter scripts_meter;
    r = CallFormatted(raw->get(), scripts_wire->acquire, "acquire script");
    if (r.ok() && (*r)->type != REDIS_REPLY_NIL) {
      r = absl::InternalError("the acquire script found its key held");
    }
    if (r.ok()) {
      r = CallFormatted(raw->get(), scripts_wire->release, "release script");
    }
    const CostMeter::Cost scripts_cost = scripts_meter.Read();
    if (!r.ok()) {
      state.SkipWithError(r.status().ToString().c_str());
      return;
    }
    state.SetIterationTime(relock_cost.seconds);
    add(relock, relock_cost);
    add(bound, bound_cost);
    add(scripts, scripts_cost);
  }
  const double pairs = static_cast<double>(state.iterations());
  state.counters["relock_pairs_s"] = pairs / relock.seconds;
  state.counters["bound_pairs_s"] = pairs / bound.seconds;
  state.counters["ratio"] = bound.seconds / relock.seconds;
  state.counters["scripts_pairs_s"] = pairs / scripts.seconds;
  state.counters["scripts_ratio"] = scripts.seconds / relock.seconds;
  state.counters["relock_cpu_us"] = relock.cpu_s * 1e6 / pairs;
  state.counters["bound_cpu_us"] = bound.cpu_s * 1e6 / pairs;
  state.counters["scripts_cpu_us"] = scripts.cpu_s * 1e6 / pairs;
  state.counters["relock_csw"] =
      static_cast<double>(relock.voluntary_switches) / pairs;
  if (bench::CountsHeapAllocations()) {
    state.counters["relock_allocs"] =
        static_cast<double>(relock.allocations) / pairs;
    state.counters["scripts_allocs"] =
        static_cast<double>(scripts.allocations) / pairs;
  }
  state.counters["pinned"] = env->pinning != nullptr ? 1 : 0;
  state.SetLabel(env->placement);
  if (absl::Status s = DeleteKeys(*env); !s.ok()) {
    state.SkipWithError(absl::StrCat("cleanup: ", s.ToString()).c_str());
  }
}
BENCHMARK(BM_UncontendedVsTwoRoundTrips)
    ->UseManualTime()
    ->MinTime(SmokeMode() ? 0.01 : 3.0)
    ->Unit(benchmark::kMicrosecond);

// The "lf" side of BM_OwnKeyThreadsVsNaive: kThreads threads on one
// bench::LeaderFollowerConnection, each sending relock's own pair of scripts
// for a key of its own ("<prefix>lf-<name>-<i>"), formatted once.
class LeaderFollowerLocks {
 public:
  static absl::StatusOr<std::unique_ptr<LeaderFollowerLocks>> Open(
      const BenchEnv& env, absl::string_view name) {
    absl::StatusOr<Context> conn = Connect(env.endpoint);
    if (!conn.ok()) return conn.status();
    auto locks = std::unique_ptr<LeaderFollowerLocks>(new LeaderFollowerLocks);
    for (int i = 0; i < kThreads; ++i) {
      absl::StatusOr<bench::PairWire> wire = bench::RelockPairWire(
          *conn, Key(env, absl::StrCat("lf-", name, "-", i)),
          /*owner=*/static_cast<uint64_t>(i) + 1);
      if (!wire.ok()) return wire.status();
      locks->wires_.push_back(*std::move(wire));
    }
    locks->conn_ = std::make_unique<bench::LeaderFollowerConnection>(
        *std::move(conn), kThreads);
    return locks;
  }

  // Thread `i`'s lock+unlock pair.
  absl::Status Pair(int i) {
    absl::StatusOr<Reply> r = conn_->Call(i, wires_[i].acquire);
    if (!r.ok()) return r.status();
    if ((*r)->type != REDIS_REPLY_NIL) {
      return absl::InternalError(absl::StrCat("lf acquire: ", ReplyText(**r),
                                              " (type ", (*r)->type,
                                              "): its key was held"));
    }
    r = conn_->Call(i, wires_[i].release);
    if (!r.ok()) return r.status();
    if ((*r)->type != REDIS_REPLY_INTEGER || (*r)->integer != 1) {
      return absl::InternalError(absl::StrCat("lf release: ", ReplyText(**r),
                                              " (type ", (*r)->type, ")"));
    }
    return absl::OkStatus();
  }

 private:
  LeaderFollowerLocks() = default;
  std::vector<bench::PairWire> wires_;
  std::unique_ptr<bench::LeaderFollowerConnection> conn_;
};

// What BM_OwnKeyThreadsVsNaive and BM_AsyncChainsVsNaive share: the naive
// client's kThreads threads, each on a key of its own, against
// `relock_round` on kThreads locks of the shared client (keys
// "<prefix>relock-<name>-<i>") and, `with_lf`, against LeaderFollowerLocks'
// kThreads threads, alternated by CompareAlternated(); then the keys are
// deleted.
using RelockRoundFn = std::function<absl::StatusOr<Round>(
    std::vector<Lock>&, absl::Duration, ServerCpu&)>;

void RunAgainstNaiveThreads(benchmark::State& state, absl::string_view name,
                            const RelockRoundFn& relock_round, bool with_lf) {
  BenchEnv* env = EnvOrSkip(state);
  if (env == nullptr) return;
  absl::StatusOr<std::vector<NaiveLock>> naive_locks =
      OpenNaiveLocks(*env, name, kThreads);
  if (!naive_locks.ok()) {
    state.SkipWithError(naive_locks.status().ToString().c_str());
    return;
  }
  std::unique_ptr<LeaderFollowerLocks> lf_locks;
  if (with_lf) {
    absl::StatusOr<std::unique_ptr<LeaderFollowerLocks>> opened =
        LeaderFollowerLocks::Open(*env, name);
    if (!opened.ok()) {
      state.SkipWithError(opened.status().ToString().c_str());
      return;
    }
    lf_locks = *std::move(opened);
  }
  std::vector<Lock> locks;
  locks.reserve(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    locks.push_back(
        env->client->GetLock(Key(*env, absl::StrCat("relock-", name, "-", i))));
  }
  absl::StatusOr<ServerCpu> server = ServerCpu::Open(env->endpoint);
  if (!server.ok()) {
    state.SkipWithError(server.status().ToString().c_str());
    return;
  }
  const PairFn naive_pair = [&](int i) {
    NaiveLock& lock = (*naive_locks)[i];
    absl::Status s = lock.Lock();
    return s.ok() ? lock.Unlock() : s;
  };
  const RoundFn lf_round = [&](absl::Duration d) {
    return RunThreadRound(kThreads, d, *server,
                          [&](int i) { return lf_locks->Pair(i); });
  };
  CompareAlternated(
      state, *env,
      [&](absl::Duration d) {
        return RunThreadRound(kThreads, d, *server, naive_pair);
      },
      [&](absl::Duration d) { return relock_round(locks, d, *server); },
      with_lf ? &lf_round : nullptr);
  if (absl::Status s = DeleteKeys(*env); !s.ok()) {
    state.SkipWithError(absl::StrCat("cleanup: ", s.ToString()).c_str());
  }
}

// Targets 1 and 6: 32 blocking threads of relock, own keys, against 32 naive
// threads.
void BM_OwnKeyThreadsVsNaive(benchmark::State& state) {
  RunAgainstNaiveThreads(
      state, "threads",
      [](std::vector<Lock>& locks, absl::Duration length, ServerCpu& server) {
        return RunThreadRound(kThreads, length, server, [&](int i) {
          Lock& lock = locks[i];
          absl::Status s = lock.Acquire();
          return s.ok() ? lock.Release() : s;
        });
      },
      /*with_lf=*/true);
}
BENCHMARK(BM_OwnKeyThreadsVsNaive)
    ->Iterations(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Targets 4 and 6: 32 asynchronous relock chains, own keys and owners,
// against 32 naive threads.
void BM_AsyncChainsVsNaive(benchmark::State& state) {
  RunAgainstNaiveThreads(
      state, "async",
      [](std::vector<Lock>& locks, absl::Duration length, ServerCpu& server) {
        return AsyncRound(locks).Run(length, server);
      },
      /*with_lf=*/false);
}
BENCHMARK(BM_AsyncChainsVsNaive)
    ->Iterations(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace relock
