// Redis's CPU per lock+unlock pair: relock's lock scripts against Redisson's
// own (tests/redisson_scripts.h) doing the same pairs on the same server
// (issue 24, target 2: relock's cost <= 1.0 x Redisson's).
//
// Each benchmark is one lock type. Its pairs go to a private redis-server
// (the test fixture, relock::testing::RedisServer) as raw hiredis EVALSHAs,
// pipelined in batches of 100 calls, so that only the scripts' cost is
// measured, not a client's. A batch's cost is the growth of the usec of
// cmdstat_evalsha (plus cmdstat_eval, which stays 0) in INFO commandstats
// over its pairs. A round sends `pairs` pairs of each side, relock's and
// Redisson's batches alternating (which goes first swaps from round to
// round), so that both meet the same machine; a side's cost in the round is
// the median of its batches' (a batch during which another process took the
// CPU reads high: Redis counts wall time), the round's ratio relock's cost
// over Redisson's, and the median of the rounds' ratios the figure of
// target 2.
//
// Both send what their library sends: relock's calls are the Steps of
// lib/lock/lock_model.h (the scripts of lib/lock/lock_scripts.h with the
// keys and arguments of a real call), Redisson's those of its RLock,
// RFencedLock, RFairLock and RReadWriteLock. Names are braced
// ("{script-cost:<type>:<i>}", 50 names per batch, the same for both), owner
// fields "<uuid>:<thread>" (a different client id for each side). Every
// reply is checked against what the pair expects (a lock granted, then
// freed), so a script that fails early cannot look cheap.
//
//   BM_ScriptCost/<type>     type: lock (relock::Lock / RLock: acquire +
//                            release, a watchdog lease), reentry (acquire,
//                            re-entry, two releases, an explicit lease: the
//                            re-entry reaches Redis, where a watchdog one is
//                            counted locally), fenced (FencedLock /
//                            RFencedLock), fair (FairLock / RFairLock, nobody
//                            queued), read and write (ReadWriteLock /
//                            RReadWriteLock).
//     relock_us        relock's Redis CPU per pair, usec, median over the
//                      rounds
//     redisson_us      Redisson's, the same
//     ratio            median of the rounds' ratios (relock / Redisson):
//                      target 2 is ratio <= 1.0 for every type
//     ratio_min, ratio_max   the spread of the rounds' ratios
//     ratio_<r>        round r's ratio
//
// Environment:
//   RELOCK_BENCH_PAIRS=N    pairs of each side per round (default 2000)
//   RELOCK_BENCH_ROUNDS=N   rounds (default 15)
//   RELOCK_BENCH_SMOKE=1    200 pairs, 3 rounds (for CI)
//
// Run from a Release build, e.g.
//   build/benchmarks/script_cost_benchmark
//   build/benchmarks/script_cost_benchmark --benchmark_filter=fair

#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "benchmarks/bench_util.h"
#include "lib/backend/backend.h"
#include "lib/lock/lock_model.h"
#include "lib/lock/lock_scripts.h"
#include "lib/lock/owner.h"
#include "tests/redisson_scripts.h"
#include "tests/testing/redis_server.h"

namespace relock {
namespace {

using lock::LockKind;
using lock::Step;

// The lock types measured, in BM_ScriptCost's argument order.
enum Type : int { kLock, kReentry, kFenced, kFair, kRead, kWrite, kTypes };

constexpr const char* kTypeNames[kTypes] = {"lock", "reentry", "fenced",
                                            "fair", "read",    "write"};

// Calls per pipelined batch (a multiple of every pair's call count: 2, 4).
constexpr int kBatch = 100;

// The lease both sides ask for (relock's default watchdog lease, Redisson's
// lockWatchdogTimeout) and Redisson's default threadWaitTime.
constexpr absl::Duration kLease = absl::Seconds(30);
constexpr char kLeaseMs[] = "30000";
constexpr char kQueueWaitMs[] = "300000";

// The two sides' client ids: UUIDs, as both libraries' are.
constexpr char kRelockId[] = "6c2f7a52-3c1e-4d8a-9b7e-0a1b2c3d4e5f";
constexpr char kRedissonId[] = "d7e8f9a0-1b2c-4d3e-8f4a-5b6c7d8e9f00";
constexpr uint64_t kThread = 1;

int EnvInt(const char* name, int fallback) {
  const char* env = std::getenv(name);
  int value = 0;
  if (env == nullptr || !absl::SimpleAtoi(env, &value) || value <= 0) {
    return fallback;
  }
  return value;
}

using bench::RawConnection;
using bench::SmokeMode;
using Reply = bench::RawReply;
constexpr auto& Command = bench::RawCommand;

// What a call of a pair must answer.
enum class Expect { kNil, kZero, kOne, kTokenArray };

bool Matches(const redisReply& r, Expect expect) {
  switch (expect) {
    case Expect::kNil:
      return r.type == REDIS_REPLY_NIL;
    case Expect::kZero:
      return r.type == REDIS_REPLY_INTEGER && r.integer == 0;
    case Expect::kOne:
      return r.type == REDIS_REPLY_INTEGER && r.integer == 1;
    case Expect::kTokenArray:  // {-1, token}
      return r.type == REDIS_REPLY_ARRAY && r.elements == 2 &&
             r.element[0]->type == REDIS_REPLY_INTEGER &&
             r.element[0]->integer == -1;
  }
  return false;
}

std::string Describe(const redisReply& r) {
  switch (r.type) {
    case REDIS_REPLY_NIL:
      return "nil";
    case REDIS_REPLY_INTEGER:
      return absl::StrCat("integer ", r.integer);
    case REDIS_REPLY_ERROR:
      return absl::StrCat("error ", absl::string_view(r.str, r.len));
    case REDIS_REPLY_ARRAY:
      return absl::StrCat("array of ", r.elements);
    default:
      return absl::StrCat("reply type ", r.type, " \"",
                          absl::string_view(r.str, r.len), "\"");
  }
}

// One script call: EVALSHA sha numkeys keys... args..., and its reply.
struct Call {
  std::vector<std::string> argv;
  Expect expect;
};

// The scripts of one side, loaded with SCRIPT LOAD: their SHA1s by index.
using Shas = std::vector<std::string>;

Call Evalsha(const std::string& sha, const std::vector<std::string>& keys,
             const std::vector<std::string>& args, Expect expect) {
  Call call{{"EVALSHA", sha, absl::StrCat(keys.size())}, expect};
  call.argv.insert(call.argv.end(), keys.begin(), keys.end());
  call.argv.insert(call.argv.end(), args.begin(), args.end());
  return call;
}

Call FromStep(const Shas& relock, const Step& step, Expect expect) {
  const backend::Call views = step.Views();
  return Evalsha(relock[step.script], {views.keys.begin(), views.keys.end()},
                 {views.args.begin(), views.args.end()}, expect);
}

// relock's pair on `name`: the Steps the library sends (lib/lock/attempt.cc
// and release.cc: a fresh acquire; a release whose holds remain refreshes
// a watchdog lease and keeps an explicit one's TTL, "0").
std::vector<Call> RelockPair(Type type, const Shas& shas,
                             const std::string& name) {
  const lock::LockName lock_name(name);
  const lock::OwnerField owner(kRelockId, kThread);
  const absl::string_view publish = "publish";
  lock::AcquireOptions options;
  std::vector<Call> calls;
  switch (type) {
    case kLock:
    case kFenced: {
      options.fenced = type == kFenced;
      const lock::LockModel& model = lock::ReentrantModel();
      calls.push_back(
          FromStep(shas,
                   model.Acquire(lock_name, owner, lock::Lease::Of(kLease),
                                 /*fresh=*/true,
                                 /*queue=*/true, options, publish),
                   type == kFenced ? Expect::kTokenArray : Expect::kNil));
      calls.push_back(
          FromStep(shas,
                   model.Release(lock_name, owner, lock::Lease::Of(kLease),
                                 publish, true),
                   Expect::kOne));
      break;
    }
    case kReentry: {
      const lock::LockModel& model = lock::ReentrantModel();
      calls.push_back(
          FromStep(shas,
                   model.Acquire(lock_name, owner, lock::Lease::Of(kLease),
                                 true, true, options, publish),
                   Expect::kNil));
      calls.push_back(
          FromStep(shas,
                   model.Acquire(lock_name, owner, lock::Lease::Of(kLease),
                                 false, true, options, publish),
                   Expect::kNil));
      calls.push_back(
          FromStep(shas,
                   model.Release(lock_name, owner, lock::Lease::Keep(), publish,
                                 /*last=*/false),
                   Expect::kZero));
      calls.push_back(
          FromStep(shas,
                   model.Release(lock_name, owner, lock::Lease::Keep(), publish,
                                 /*last=*/true),
                   Expect::kOne));
      break;
    }
    case kFair: {
      options.kind = LockKind::kFair;
      const lock::LockModel& model = lock::ModelOf(LockKind::kFair);
      calls.push_back(
          FromStep(shas,
                   model.Acquire(lock_name, owner, lock::Lease::Of(kLease),
                                 true, true, options, publish),
                   Expect::kNil));
      calls.push_back(
          FromStep(shas,
                   model.Release(lock_name, owner, lock::Lease::Of(kLease),
                                 publish, true),
                   Expect::kOne));
      break;
    }
    case kRead:
    case kWrite: {
      const LockKind kind = type == kRead ? LockKind::kRead : LockKind::kWrite;
      options.kind = kind;
      const lock::LockModel& model = lock::ModelOf(kind);
      // A write hold's field is the writer's (lib/lock/owner.h).
      const lock::OwnerField field(
          kRelockId, lock::HolderOf(lock::OwnerId{kThread}, kind).number);
      calls.push_back(
          FromStep(shas,
                   model.Acquire(lock_name, field, lock::Lease::Of(kLease),
                                 true, true, options, publish),
                   Expect::kNil));
      calls.push_back(
          FromStep(shas,
                   model.Release(lock_name, field, lock::Lease::Of(kLease),
                                 publish, true),
                   Expect::kOne));
      break;
    }
    case kTypes:
      break;
  }
  return calls;
}

// Redisson's scripts, loaded in this order.
enum RedissonScript : size_t {
  kRLock,
  kRUnlock,
  kRFencedLock,
  kRFairLock,
  kRFairUnlock,
  kRReadLock,
  kRReadUnlock,
  kRWriteLock,
  kRWriteUnlock,
};

std::vector<absl::string_view> RedissonSources() {
  return {testing::kRedissonLock,          testing::kRedissonUnlock,
          testing::kRedissonFencedAcquire, testing::kRedissonFairAcquire,
          testing::kRedissonFairUnlock,    testing::kRedissonReadLock,
          testing::kRedissonReadUnlock,    testing::kRedissonWriteLock,
          testing::kRedissonWriteUnlock};
}

std::string NowMs() { return absl::StrCat(absl::ToUnixMillis(absl::Now())); }

// Redisson's pair on `name`, as its client sends it (its names: prefixName()
// and suffixName(), which relock's PrefixName() reproduces).
std::vector<Call> RedissonPair(Type type, const Shas& shas,
                               const std::string& name) {
  const std::string owner = absl::StrCat(kRedissonId, ":", kThread);
  const std::string channel = lock::UnlockChannel(name);
  std::vector<Call> calls;
  auto lock = [&] {
    return Evalsha(shas[kRLock], {name}, {kLeaseMs, owner}, Expect::kNil);
  };
  auto unlock = [&](Expect expect) {
    return Evalsha(shas[kRUnlock], {name, channel},
                   {"0", kLeaseMs, owner, "PUBLISH"}, expect);
  };
  switch (type) {
    case kLock:
      calls = {lock(), unlock(Expect::kOne)};
      break;
    case kReentry:
      calls = {lock(), lock(), unlock(Expect::kZero), unlock(Expect::kOne)};
      break;
    case kFenced:
      calls = {Evalsha(shas[kRFencedLock], {name, lock::TokenKey(name)},
                       {kLeaseMs, owner}, Expect::kTokenArray),
               unlock(Expect::kOne)};
      break;
    case kFair: {
      const std::string queue = lock::PrefixName("redisson_lock_queue", name);
      const std::string timeouts =
          lock::PrefixName("redisson_lock_timeout", name);
      calls = {Evalsha(shas[kRFairLock], {name, queue, timeouts},
                       {kLeaseMs, owner, kQueueWaitMs, NowMs()}, Expect::kNil),
               Evalsha(shas[kRFairUnlock], {name, queue, timeouts, channel},
                       {"0", kLeaseMs, owner, NowMs()}, Expect::kOne)};
      break;
    }
    case kRead: {
      // RedissonReadLock: the lease key prefix suffixName(name, "<owner>:
      // rwlock_timeout") and the key prefix before it.
      const std::string rw_channel = lock::PrefixName("redisson_rwlock", name);
      const std::string braced = name.find('{') != std::string::npos
                                     ? name
                                     : absl::StrCat("{", name, "}");
      const std::string timeout_prefix =
          absl::StrCat(braced, ":", owner, ":rwlock_timeout");
      calls = {Evalsha(shas[kRReadLock], {name, timeout_prefix},
                       {kLeaseMs, owner, absl::StrCat(owner, ":write")},
                       Expect::kNil),
               Evalsha(shas[kRReadUnlock],
                       {name, rw_channel, timeout_prefix, braced},
                       {"0", owner, "PUBLISH"}, Expect::kOne)};
      break;
    }
    case kWrite: {
      const std::string rw_channel = lock::PrefixName("redisson_rwlock", name);
      const std::string writer = absl::StrCat(owner, ":write");
      calls = {
          Evalsha(shas[kRWriteLock], {name}, {kLeaseMs, writer}, Expect::kNil),
          Evalsha(shas[kRWriteUnlock], {name, rw_channel},
                  {"1", kLeaseMs, writer, "PUBLISH"}, Expect::kOne)};
      break;
    }
    case kTypes:
      break;
  }
  return calls;
}

using PairMaker =
    std::function<std::vector<Call>(Type, const Shas&, const std::string&)>;

// The usec of the script calls (EVALSHA, EVAL) so far, from INFO
// commandstats.
absl::StatusOr<int64_t> ScriptUsec(RawConnection& c) {
  absl::StatusOr<Reply> info = Command(c, {"INFO", "commandstats"});
  if (!info.ok()) return info.status();
  int64_t usec = 0;
  for (absl::string_view line :
       absl::StrSplit(absl::string_view((*info)->str, (*info)->len), "\r\n")) {
    if (!absl::StartsWith(line, "cmdstat_evalsha:") &&
        !absl::StartsWith(line, "cmdstat_eval:")) {
      continue;
    }
    for (absl::string_view field : absl::StrSplit(line, ',')) {
      if (!absl::ConsumePrefix(&field, "usec=")) continue;
      int64_t v = 0;
      if (!absl::SimpleAtoi(field, &v)) {
        return absl::InternalError(absl::StrCat("bad commandstats: ", line));
      }
      usec += v;
    }
  }
  return usec;
}

// One side's batch of `type`: kBatch calls, the pairs on 50 (or 25) names
// (each pair runs to completion, so a name is free again for the next).
struct Batch {
  std::vector<Call> calls;
  int pairs = 0;
};

Batch MakeBatch(Type type, const Shas& shas, const PairMaker& make) {
  Batch batch;
  const size_t per_pair = make(type, shas, "x").size();
  batch.pairs = kBatch / static_cast<int>(per_pair);
  for (int i = 0; i < batch.pairs; ++i) {
    std::vector<Call> pair =
        make(type, shas,
             absl::StrCat("{script-cost:", kTypeNames[type], ":", i, "}"));
    batch.calls.insert(batch.calls.end(), pair.begin(), pair.end());
  }
  return batch;
}

// Sends `batch` pipelined and checks every reply.
absl::Status Send(redisContext* c, Type type, const Batch& batch) {
  std::vector<const char*> args;
  std::vector<size_t> lens;
  for (const Call& call : batch.calls) {
    args.clear();
    lens.clear();
    for (const std::string& a : call.argv) {
      args.push_back(a.data());
      lens.push_back(a.size());
    }
    if (redisAppendCommandArgv(c, static_cast<int>(args.size()), args.data(),
                               lens.data()) != REDIS_OK) {
      return absl::UnavailableError(c->errstr);
    }
  }
  for (const Call& call : batch.calls) {
    void* raw = nullptr;
    if (redisGetReply(c, &raw) != REDIS_OK) {
      return absl::UnavailableError(c->errstr);
    }
    Reply reply(static_cast<redisReply*>(raw));
    if (!Matches(*reply, call.expect)) {
      return absl::InternalError(
          absl::StrCat(kTypeNames[type], ": ", call.argv[0], " of ",
                       call.argv[3], " answered ", Describe(*reply)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Shas> Load(RawConnection& c,
                          const std::vector<absl::string_view>& sources) {
  Shas shas;
  for (absl::string_view source : sources) {
    absl::StatusOr<Reply> r =
        Command(c, {"SCRIPT", "LOAD", std::string(source)});
    if (!r.ok()) return r.status();
    shas.emplace_back((*r)->str, (*r)->len);
  }
  return shas;
}

// The server (stopped at exit), a connection, and both sides' scripts.
struct Env {
  std::unique_ptr<testing::RedisServer> server;
  std::optional<RawConnection> c;
  Shas relock, redisson;
  absl::Status status;
};

Env MakeEnv() {
  Env e;
  absl::StatusOr<std::unique_ptr<testing::RedisServer>> server =
      testing::RedisServer::Start();
  if (!server.ok()) {
    e.status = server.status();
    return e;
  }
  e.server = *std::move(server);
  bench::RawConnectionOptions options;
  options.connect_timeout = absl::Seconds(10);
  options.command_timeout = absl::Seconds(10);
  options.suppress_sigpipe = false;
  absl::StatusOr<RawConnection> c =
      RawConnection::Connect(e.server->port(), options);
  if (!c.ok()) {
    e.status = c.status();
    return e;
  }
  e.c.emplace(*std::move(c));
  std::vector<absl::string_view> relock;
  for (const redis::ScriptSource& s : internal::LockScripts()) {
    relock.push_back(s.source);
  }
  absl::StatusOr<Shas> relock_shas = Load(*e.c, relock);
  if (!relock_shas.ok()) {
    e.status = relock_shas.status();
    return e;
  }
  e.relock = *std::move(relock_shas);
  absl::StatusOr<Shas> redisson_shas = Load(*e.c, RedissonSources());
  if (!redisson_shas.ok()) {
    e.status = redisson_shas.status();
    return e;
  }
  e.redisson = *std::move(redisson_shas);
  return e;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void BM_ScriptCost(benchmark::State& state) {
  static Env env = MakeEnv();
  if (!env.status.ok()) {
    state.SkipWithError(
        absl::StrCat("benchmark setup: ", env.status.ToString()).c_str());
    return;
  }
  const Type type = static_cast<Type>(state.range(0));
  const bool smoke = SmokeMode();
  const int pairs = EnvInt("RELOCK_BENCH_PAIRS", smoke ? 200 : 2000);
  const int rounds = EnvInt("RELOCK_BENCH_ROUNDS", smoke ? 3 : 15);
  state.SetLabel(kTypeNames[type]);
  redisContext* c = env.c->get();
  // [0] relock's, [1] Redisson's.
  const Batch batches[2] = {MakeBatch(type, env.relock, RelockPair),
                            MakeBatch(type, env.redisson, RedissonPair)};
  std::vector<double> us[2], ratios;
  for (auto _ : state) {
    // Warm-up batches (not counted).
    for (int i = 0; i < 20; ++i) {
      if (absl::Status s = Send(c, type, batches[i % 2]); !s.ok()) {
        state.SkipWithError(s.ToString().c_str());
        return;
      }
    }
    absl::StatusOr<int64_t> before = ScriptUsec(*env.c);
    for (int r = 0; r < rounds && before.ok(); ++r) {
      std::vector<double> per_pair[2];
      for (int i = 0; per_pair[1].size() * batches[1].pairs < size_t(pairs);
           ++i) {
        const int side = (i + r) % 2;
        if (absl::Status s = Send(c, type, batches[side]); !s.ok()) {
          state.SkipWithError(s.ToString().c_str());
          return;
        }
        absl::StatusOr<int64_t> after = ScriptUsec(*env.c);
        if (!after.ok()) {
          before = after;
          break;
        }
        per_pair[side].push_back(static_cast<double>(*after - *before) /
                                 batches[side].pairs);
        before = after;
      }
      if (!before.ok()) break;
      const double round[2] = {Median(per_pair[0]), Median(per_pair[1])};
      us[0].push_back(round[0]);
      us[1].push_back(round[1]);
      ratios.push_back(round[0] / round[1]);
    }
    if (!before.ok()) {
      state.SkipWithError(before.status().ToString().c_str());
      return;
    }
  }
  state.counters["relock_us"] = Median(us[0]);
  state.counters["redisson_us"] = Median(us[1]);
  state.counters["ratio"] = Median(ratios);
  state.counters["ratio_min"] = *std::min_element(ratios.begin(), ratios.end());
  state.counters["ratio_max"] = *std::max_element(ratios.begin(), ratios.end());
  for (size_t r = 0; r < ratios.size(); ++r) {
    state.counters[absl::StrCat("ratio_", r)] = ratios[r];
  }
}
BENCHMARK(BM_ScriptCost)
    ->DenseRange(0, kTypes - 1)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace relock
