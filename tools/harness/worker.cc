// The safety harness's worker process (worker.h).

#include "tools/harness/worker.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/base/log_severity.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/types/optional.h"
#include "tools/harness/checker.h"
#include "tools/harness/netns.h"

namespace relock {
namespace harness {

absl::Duration FairQueueWait(absl::Duration lease) { return 2 * lease; }

std::string LockName(const std::string& prefix, int k) {
  return absl::StrCat(prefix, "lock:", k);
}

std::string CounterName(const std::string& prefix, int k) {
  return absl::StrCat(prefix, "counter:", k);
}

std::string PermitsOutKey(const std::string& prefix, int k) {
  return absl::StrCat("{", LockName(prefix, k), "}:timeout");
}

std::vector<std::string> WorkerConfig::ToArgs() const {
  return {absl::StrCat("worker=", worker),
          absl::StrCat("url=", url),
          absl::StrCat("host=", host),
          absl::StrCat("port=", port),
          absl::StrCat("keys_host=", keys_host),
          absl::StrCat("keys_port=", keys_port),
          absl::StrCat("keys_sentinels=", keys_sentinels),
          absl::StrCat("keys_master=", keys_master),
          absl::StrCat("redlock_masters=", redlock_masters),
          absl::StrCat("threads=", threads),
          absl::StrCat("locks=", locks),
          absl::StrCat("fenced=", fenced ? 1 : 0),
          absl::StrCat("fair=", fair ? 1 : 0),
          absl::StrCat("rw=", rw ? 1 : 0),
          absl::StrCat("multi=", multi ? 1 : 0),
          absl::StrCat("permits=", permits),
          absl::StrCat("replica_sync=", replica_sync),
          absl::StrCat("replica_sync_timeout_ms=", replica_sync_timeout_ms),
          absl::StrCat("prefix=", prefix),
          absl::StrCat("lease_ms=", lease_ms),
          absl::StrCat("wait_ms=", wait_ms),
          absl::StrCat("connect_timeout_ms=", connect_timeout_ms),
          absl::StrCat("command_timeout_ms=", command_timeout_ms),
          absl::StrCat("raw_timeout_ms=", raw_timeout_ms),
          absl::StrCat("hold_min_us=", hold_min_us),
          absl::StrCat("hold_max_us=", hold_max_us),
          absl::StrCat("think_max_us=", think_max_us),
          absl::StrCat("long_hold_ms=", long_hold_ms),
          absl::StrCat("hard_end_ns=", hard_end_ns),
          absl::StrCat("seed=", seed),
          absl::StrCat("log_path=", log_path),
          absl::StrCat("netns=", netns)};
}

absl::Status WorkerConfig::FromArgs(const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    const size_t eq = arg.find('=');
    if (eq == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("bad argument ", arg));
    }
    const std::string key = arg.substr(0, eq);
    const std::string value = arg.substr(eq + 1);
    bool ok = true;
    if (key == "worker") {
      ok = absl::SimpleAtoi(value, &worker);
    } else if (key == "url") {
      url = value;
    } else if (key == "host") {
      host = value;
    } else if (key == "port") {
      ok = absl::SimpleAtoi(value, &port);
    } else if (key == "keys_host") {
      keys_host = value;
    } else if (key == "keys_port") {
      ok = absl::SimpleAtoi(value, &keys_port);
    } else if (key == "keys_sentinels") {
      keys_sentinels = value;
    } else if (key == "keys_master") {
      keys_master = value;
    } else if (key == "redlock_masters") {
      redlock_masters = value;
    } else if (key == "threads") {
      ok = absl::SimpleAtoi(value, &threads);
    } else if (key == "locks") {
      ok = absl::SimpleAtoi(value, &locks);
    } else if (key == "fenced") {
      fenced = value == "1";
      ok = value == "0" || value == "1";
    } else if (key == "fair") {
      fair = value == "1";
      ok = value == "0" || value == "1";
    } else if (key == "rw") {
      rw = value == "1";
      ok = value == "0" || value == "1";
    } else if (key == "multi") {
      multi = value == "1";
      ok = value == "0" || value == "1";
    } else if (key == "permits") {
      ok = absl::SimpleAtoi(value, &permits) && permits >= 0;
    } else if (key == "replica_sync") {
      ok = absl::SimpleAtoi(value, &replica_sync) && replica_sync >= 0 &&
           replica_sync <= 64;
    } else if (key == "replica_sync_timeout_ms") {
      ok = absl::SimpleAtoi(value, &replica_sync_timeout_ms);
    } else if (key == "prefix") {
      prefix = value;
    } else if (key == "lease_ms") {
      ok = absl::SimpleAtoi(value, &lease_ms);
    } else if (key == "wait_ms") {
      ok = absl::SimpleAtoi(value, &wait_ms);
    } else if (key == "connect_timeout_ms") {
      ok = absl::SimpleAtoi(value, &connect_timeout_ms);
    } else if (key == "command_timeout_ms") {
      ok = absl::SimpleAtoi(value, &command_timeout_ms);
    } else if (key == "raw_timeout_ms") {
      ok = absl::SimpleAtoi(value, &raw_timeout_ms);
    } else if (key == "hold_min_us") {
      ok = absl::SimpleAtoi(value, &hold_min_us);
    } else if (key == "hold_max_us") {
      ok = absl::SimpleAtoi(value, &hold_max_us);
    } else if (key == "think_max_us") {
      ok = absl::SimpleAtoi(value, &think_max_us);
    } else if (key == "long_hold_ms") {
      ok = absl::SimpleAtoi(value, &long_hold_ms);
    } else if (key == "hard_end_ns") {
      ok = absl::SimpleAtoi(value, &hard_end_ns);
    } else if (key == "seed") {
      ok = absl::SimpleAtoi(value, &seed);
    } else if (key == "log_path") {
      log_path = value;
    } else if (key == "netns") {
      netns = value;
    } else {
      ok = false;
    }
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat("bad argument ", arg));
    }
  }
  if ((url.empty() && redlock_masters.empty()) || port <= 0 || threads < 1 ||
      locks < 1 || log_path.empty() || hold_max_us < hold_min_us) {
    return absl::InvalidArgumentError("incomplete worker arguments");
  }
  if (keys_port <= 0) {
    keys_host = host;
    keys_port = port;
  }
  return absl::OkStatus();
}

absl::Status Worker::Caller::TryAcquire(Lock& lock, absl::Duration wait) const {
  return async ? lock.TryAcquireAsync(owner, wait).Get()
               : lock.TryAcquire(owner, wait);
}

absl::Status Worker::Caller::TryAcquire(FencedLock& lock, absl::Duration wait,
                                        int64_t* token) const {
  absl::StatusOr<int64_t> t =
      async ? lock.TryLockAndGetTokenAsync(owner, wait).Get()
            : lock.TryLockAndGetToken(owner, wait);
  if (t.ok()) *token = *t;
  return t.status();
}

absl::Status Worker::Caller::Release(Lock& lock) const {
  return async ? lock.ReleaseAsync(owner).Get() : lock.Release(owner);
}

absl::Status Worker::Caller::TryAcquire(RedlockLock& lock,
                                        absl::Duration wait) const {
  return async ? lock.TryAcquireAsync(owner, wait).Get()
               : lock.TryAcquire(owner, wait);
}

absl::Status Worker::Caller::Release(RedlockLock& lock) const {
  return async ? lock.ReleaseAsync(owner).Get() : lock.Release(owner);
}

absl::StatusOr<std::string> Worker::Caller::TryAcquire(
    PermitExpirableSemaphore& sem, absl::Duration wait) const {
  return async ? sem.TryAcquireAsync(wait).Get() : sem.TryAcquire(wait);
}

absl::Status Worker::Caller::Release(PermitExpirableSemaphore& sem,
                                     const std::string& permit) const {
  return async ? sem.ReleaseAsync(permit).Get() : sem.Release(permit);
}

Worker::Worker(WorkerConfig config) : config_(std::move(config)) {}

int Worker::Run() {
  if (absl::Status s = log_.Open(config_.log_path); !s.ok()) {
    std::cerr << "harness worker " << config_.worker << ": " << s << std::endl;
    return 2;
  }
  // Detached: it may still block on stdin when the hard end time ends the
  // run, so it shares the flag instead of referring to this object.
  std::thread([stop = stop_, long_until = long_until_, long_locks = long_locks_,
               pause_until = pause_before_write_until_] {
    std::string line;
    while (std::getline(std::cin, line) && line != "stop") {
      std::vector<absl::string_view> words = absl::StrSplit(line, ' ');
      int64_t ms = 0;
      if (words.size() == 2 && words[0] == "pause-before-write" &&
          absl::SimpleAtoi(words[1], &ms)) {
        pause_until->store(MonotonicNanos() + ms * 1000000);
        continue;
      }
      if (words.size() < 2 || words[0] != "long" ||
          !absl::SimpleAtoi(words[1], &ms)) {
        continue;
      }
      uint64_t mask = ~uint64_t{0};
      if (words.size() > 2) {
        mask = 0;
        for (absl::string_view k : absl::StrSplit(words[2], ',')) {
          int lock = 0;
          if (absl::SimpleAtoi(k, &lock) && lock >= 0 && lock < 64) {
            mask |= uint64_t{1} << lock;
          }
        }
      }
      long_locks->store(mask);
      long_until->store(MonotonicNanos() + ms * 1000000);
    }
    stop->store(true);
  }).detach();

  ClientOptions options;
  options.url = config_.url;
  options.lock_watchdog_timeout = absl::Milliseconds(config_.lease_ms);
  options.connect_timeout = absl::Milliseconds(config_.connect_timeout_ms);
  options.command_timeout = absl::Milliseconds(config_.command_timeout_ms);
  options.replica_sync.replicas = config_.replica_sync;
  options.replica_sync.timeout =
      absl::Milliseconds(config_.replica_sync_timeout_ms);
  options.on_lock_event = [this](const LockEvent& e) { OnEvent(e); };
  // A connection lost because a request had no reply within command_timeout
  // is a stall of Redis or of the machine (a loaded one; the faults that
  // pause Redis have windows of their own): logged, so that the checker does
  // not take waits across it for relock's. Messages still go to stderr as
  // the default logger writes them.
  options.logger = [this](absl::LogSeverity severity,
                          absl::string_view message) {
    if (absl::StrContains(message, "no reply within command_timeout")) {
      log_.Append(FormatStall(MonotonicNanos()));
    }
    if (severity >= absl::LogSeverity::kWarning) {
      std::cerr << absl::StrCat("relock: ", message, "\n") << std::flush;
    }
  };
  RedlockOptions redlock;
  if (!config_.redlock_masters.empty()) {
    for (absl::string_view m :
         absl::StrSplit(config_.redlock_masters, ',', absl::SkipEmpty())) {
      redlock.urls.push_back(absl::StrCat("redis://", m));
    }
    redlock.connection = options;
    // redsync's per-master timeout (5% of the lease, 75 ms for 1.5 s): the
    // default 1% (15 ms) fails attempts on a loaded 2-core machine.
    redlock.timeout_factor = 0.05;
  }
  std::unique_ptr<Client> client;
  std::unique_ptr<RedlockClient> redlock_client;
  while (!Stopping()) {
    absl::Status s;
    if (config_.redlock_masters.empty()) {
      absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect(options);
      if (c.ok()) client = *std::move(c);
      s = c.status();
    } else {
      absl::StatusOr<std::unique_ptr<RedlockClient>> c =
          RedlockClient::Connect(redlock);
      if (c.ok()) redlock_client = *std::move(c);
      s = c.status();
    }
    if (s.ok()) break;
    if (s.code() == absl::StatusCode::kInvalidArgument) {
      // Options no retry can fix (the coordinator validates its own).
      std::cerr << "harness worker " << config_.worker << ": " << s
                << std::endl;
      return 2;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  if (client == nullptr && redlock_client == nullptr) {
    std::cerr << "harness worker " << config_.worker
              << ": could not connect before the end" << std::endl;
    return 3;
  }
  std::cout << "ready "
            << (client != nullptr ? client->id() : redlock_client->id())
            << std::endl;

  std::vector<std::thread> threads;
  for (int t = 0; t < config_.threads; ++t) {
    threads.emplace_back([this, &client, &redlock_client, t] {
      if (client != nullptr) {
        ThreadLoop(*client, t);
      } else {
        RedlockLoop(*redlock_client, t);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  if (client != nullptr) client->Close();
  if (redlock_client != nullptr) redlock_client->Close();
  log_.Append("D");
  std::cout << "done" << std::endl;
  return 0;
}

bool Worker::Stopping() const {
  return stop_->load() ||
         (config_.hard_end_ns > 0 && MonotonicNanos() > config_.hard_end_ns);
}

int Worker::LockIndex(const std::string& name) const {
  const std::string head = config_.prefix + "lock:";
  int k = -1;
  if (!absl::StartsWith(name, head) ||
      !absl::SimpleAtoi(absl::string_view(name).substr(head.size()), &k)) {
    return -1;
  }
  return k;
}

void Worker::OnEvent(const LockEvent& e) {
  if (e.type != LockEventType::kLockLost) {
    if (e.type == LockEventType::kUnlockFailed) {
      log_.Append(absl::StrCat("E unexpected event ", LockEventTypeName(e.type),
                               " ", e.lock_name, ": ", e.status.ToString()));
    }
    return;
  }
  LostEvent lost;
  lost.owner = e.owner;
  if (config_.permits > 0) {
    // The event names the permit: log it for the thread that holds it. A
    // permit no thread holds (its release has returned) is left out, for
    // the checker would give it to whichever thread held the lock last.
    std::lock_guard<std::mutex> l(permits_mu_);
    auto it = permit_owner_.find(e.owner);
    if (it == permit_owner_.end()) return;
    lost.owner = it->second;
  }
  if (config_.rw) {
    // The checker follows the write holds (under the thread's field):
    // a read hold's loss excuses none of them.
    if (!absl::EndsWith(lost.owner, ":write")) return;
    lost.owner.resize(lost.owner.size() - std::string(":write").size());
  }
  lost.lock = LockIndex(e.lock_name);
  lost.time = MonotonicNanos();
  // Why (the log's L line keeps the code only): on stderr, which the
  // coordinator passes on.
  std::cerr << absl::StrCat("harness worker ", config_.worker, ": ",
                            LockEventTypeName(e.type), " ", e.lock_name, " (",
                            e.owner, ") at ", lost.time, ": ",
                            e.status.ToString(), "\n")
            << std::flush;
  lost.code = static_cast<int>(e.status.code());
  // steady_clock is CLOCK_MONOTONIC, as MonotonicNanos() (record.h).
  if (e.safe_until != std::chrono::steady_clock::time_point()) {
    lost.safe_until = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          e.safe_until.time_since_epoch())
                          .count();
  }
  log_.Append(FormatLost(lost));
}

void Worker::Anomaly(int thread, absl::string_view what,
                     const absl::Status& s) {
  log_.Append(
      absl::StrCat("E thread ", thread, ": ", what, ": ", s.ToString()));
}

void Worker::Sleep(std::mt19937_64& rng, int64_t min_us, int64_t max_us) {
  if (max_us <= 0) return;
  std::uniform_int_distribution<int64_t> d(min_us, max_us);
  absl::SleepFor(absl::Microseconds(d(rng)));
}

Worker::Caller Worker::CallerFor(int t) {
  const bool async = t % 2 == 1;
  return Caller{async ? Owner::New() : Owner::ThisThread(), async};
}

std::string Worker::LearnOwner(Client& client, RawKeys& keys,
                               const Caller& caller, int t) {
  const std::string name =
      absl::StrCat(config_.prefix, "probe:", config_.worker, ":", t);
  Lock probe = client.GetLock(name);
  while (!Stopping()) {
    if (caller.TryAcquire(probe, absl::Milliseconds(config_.wait_ms)).ok()) {
      std::vector<std::string> fields = keys.HKeys(name);
      absl::Status released = caller.Release(probe);
      (void)released;
      if (fields.size() == 1) {
        log_.Append(absl::StrCat("O ", t, " ", fields[0]));
        return fields[0];
      }
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return "";
}

void Worker::ThreadLoop(Client& client, int t) {
  std::mt19937_64 rng(config_.seed * 1000003 + config_.worker * 1009 + t);
  RawRedis raw(config_.host, config_.port,
               absl::Milliseconds(config_.raw_timeout_ms));
  RawKeys keys(config_.keys_host, config_.keys_port,
               absl::Milliseconds(config_.raw_timeout_ms),
               absl::StrSplit(config_.keys_sentinels, ',', absl::SkipEmpty()),
               config_.keys_master);
  const Caller caller = CallerFor(t);
  const std::string owner = LearnOwner(client, keys, caller, t);
  if (config_.permits > 0) {
    SemaphoreLoop(client, raw, caller, rng, t, owner);
    return;
  }
  // In fenced runs, locks[k] is fenced[k] (a Lock handle of a fenced lock
  // takes tokens too).
  std::vector<FencedLock> fenced;
  std::vector<Lock> locks;
  std::vector<Lock> reads;  // rw runs: locks[k]'s read lock
  for (int k = 0; k < config_.locks; ++k) {
    const std::string name = LockName(config_.prefix, k);
    if (config_.fenced) {
      fenced.push_back(client.GetFencedLock(name));
      locks.push_back(fenced.back());
    } else if (config_.rw) {
      ReadWriteLock rw = client.GetReadWriteLock(name);
      locks.push_back(rw.WriteLock());
      reads.push_back(rw.ReadLock());
    } else if (config_.fair) {
      FairLockOptions fair;
      fair.queue_wait = FairQueueWait(absl::Milliseconds(config_.lease_ms));
      locks.push_back(client.GetFairLock(name, fair));  // a Lock handle
    } else {
      locks.push_back(client.GetLock(name));
    }
  }
  const absl::Duration wait = absl::Milliseconds(config_.wait_ms);
  // Skip the SET unless the lease is safe for at least this long.
  const absl::Duration margin = std::max(
      absl::Milliseconds(50), absl::Milliseconds(config_.lease_ms) / 10);
  std::uniform_int_distribution<int> pick(0, config_.locks - 1);
  // The write lock's holds have their own field.
  const std::string field =
      config_.rw && !owner.empty() ? owner + ":write" : owner;
  while (!Stopping()) {
    const int k = pick(rng);
    Lock& lock = locks[k];
    if (config_.rw && (rng() & 1) == 0) {
      ReadRound(reads[k], raw, caller, rng, margin, t, k);
      continue;
    }
    if (config_.multi && !config_.fenced && config_.locks >= 2 &&
        (rng() & 1) == 0) {
      MultiRound(locks, raw, keys, caller, rng, margin, t, field);
      continue;
    }
    LockCalls calls;
    calls.acquire = [&, k](Hold* h) {
      return config_.fenced ? caller.TryAcquire(fenced[k], wait, &h->token)
                            : caller.TryAcquire(lock, wait);
    };
    calls.safe_until = [&](const Hold&) {
      return lock.SafeUntil(caller.owner);
    };
    calls.release = [&] { return caller.Release(lock); };
    calls.check_no_ghost = [&, k](absl::string_view where) {
      CheckNoGhost(lock, keys, caller, field, t, k, where);
    };
    LockRound(calls, raw, rng, margin, t, k);
  }
}

void Worker::LockRound(const LockCalls& calls, RawRedis& raw,
                       std::mt19937_64& rng, absl::Duration margin, int t,
                       int k) {
  Hold h;
  h.worker = config_.worker;
  h.thread = t;
  h.lock = k;
  h.attempt_start = MonotonicNanos();
  absl::Status s = calls.acquire(&h);
  h.attempt_end = MonotonicNanos();
  if (!s.ok()) {
    log_.Append(FormatFailed(FailedAttempt{t, k, h.attempt_start, h.attempt_end,
                                           static_cast<int>(s.code())}));
    if (s.code() != absl::StatusCode::kDeadlineExceeded &&
        s.code() != absl::StatusCode::kUnavailable) {
      Anomaly(t, "TryAcquire", s);
    }
    if (!absl::StrContains(s.message(), "held by another owner")) {
      // The acquire may have run on Redis without us hearing of it.
      calls.check_no_ghost("after-failed-acquire");
    }
    if (s.code() != absl::StatusCode::kDeadlineExceeded) {
      absl::SleepFor(absl::Milliseconds(20));  // Redis is unwell
    }
    return;
  }
  log_.Append(FormatAcquired(t, k, h.attempt_start, h.attempt_end, h.token));
  CriticalSection([&] { return calls.safe_until(h); }, raw, rng, margin, &h);
  h.release_start = MonotonicNanos();
  log_.Append(FormatReleasing(t, k, h.release_start));
  absl::Status r = calls.release();
  h.release_end = MonotonicNanos();
  h.release_code = static_cast<int>(r.code());
  log_.Append(FormatHold(h));
  if (!r.ok() && r.code() != absl::StatusCode::kAborted &&
      r.code() != absl::StatusCode::kUnavailable) {
    Anomaly(t, "Release", r);
  }
  if (r.ok()) calls.check_no_ghost("after-release-ok");
  Sleep(rng, 0, config_.think_max_us);
}

void Worker::RedlockLoop(RedlockClient& client, int t) {
  std::mt19937_64 rng(config_.seed * 1000003 + config_.worker * 1009 + t);
  RawRedis raw(config_.host, config_.port,
               absl::Milliseconds(config_.raw_timeout_ms));
  // One reader of the lock hashes per master, with the client's command
  // timeout: a paused master is skipped (read as unknown) instead of
  // stalling the thread for the pause. A ghost is renewed on every master
  // that answers, so a majority still shows it.
  std::vector<std::unique_ptr<RawKeys>> masters;
  std::vector<RawKeys*> keys;
  for (absl::string_view m :
       absl::StrSplit(config_.redlock_masters, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> hp =
        absl::StrSplit(m, absl::MaxSplits(':', 1));
    int port = 0;
    if (!absl::SimpleAtoi(hp.second, &port)) continue;
    masters.push_back(std::make_unique<RawKeys>(
        hp.first, port, absl::Milliseconds(config_.command_timeout_ms)));
    keys.push_back(masters.back().get());
  }
  const Caller caller = CallerFor(t);
  // The owner field: a private lock's field, as LearnOwner finds it, on
  // whichever master shows exactly one.
  std::string owner;
  {
    const std::string name =
        absl::StrCat(config_.prefix, "probe:", config_.worker, ":", t);
    RedlockLock probe = client.GetLock(name);
    while (!Stopping() && owner.empty()) {
      if (caller.TryAcquire(probe, absl::Milliseconds(config_.wait_ms)).ok()) {
        for (RawKeys* k : keys) {
          std::vector<std::string> fields = k->HKeys(name);
          if (fields.size() == 1) {
            owner = fields[0];
            break;
          }
        }
        (void)caller.Release(probe);
      }
      if (owner.empty()) absl::SleepFor(absl::Milliseconds(50));
    }
    if (!owner.empty()) log_.Append(absl::StrCat("O ", t, " ", owner));
  }
  std::vector<RedlockLock> locks;
  for (int k = 0; k < config_.locks; ++k) {
    locks.push_back(client.GetLock(LockName(config_.prefix, k)));
  }
  const absl::Duration wait = absl::Milliseconds(config_.wait_ms);
  const absl::Duration margin = std::max(
      absl::Milliseconds(50), absl::Milliseconds(config_.lease_ms) / 10);
  // The validity an acquire guarantees (redlock.h): from before its first
  // request (attempt_start is earlier still), the lease minus the drift.
  const int64_t valid_ns =
      config_.lease_ms * 1'000'000 - DriftNanos(config_.lease_ms * 1'000'000);
  std::uniform_int_distribution<int> pick(0, config_.locks - 1);
  while (!Stopping()) {
    const int k = pick(rng);
    RedlockLock& lock = locks[k];
    LockCalls calls;
    calls.acquire = [&](Hold*) { return caller.TryAcquire(lock, wait); };
    calls.safe_until = [&](const Hold& h)
        -> absl::StatusOr<std::chrono::steady_clock::time_point> {
      if (!caller.async) return lock.ValidUntil();
      return std::chrono::steady_clock::now() +
             std::chrono::nanoseconds(h.attempt_start + valid_ns -
                                      MonotonicNanos());
    };
    calls.release = [&] { return caller.Release(lock); };
    calls.check_no_ghost = [&, k](absl::string_view where) {
      CheckNoGhost(
          lock.name(), keys, [&] { return caller.Release(lock); }, owner, t, k,
          where);
    };
    LockRound(calls, raw, rng, margin, t, k);
  }
}

void Worker::CheckNoGhost(Lock& lock, RawKeys& keys, const Caller& caller,
                          const std::string& owner, int t, int k,
                          absl::string_view where) {
  CheckNoGhost(
      lock.name(), {&keys}, [&] { return caller.Release(lock); }, owner, t, k,
      where);
}

void Worker::CheckNoGhost(const std::string& name,
                          const std::vector<RawKeys*>& keys,
                          const std::function<absl::Status()>& release,
                          const std::string& owner, int t, int k,
                          absl::string_view where) {
  if (owner.empty()) return;
  // The highest count of `owner` on any reader, and that reader's PTTL.
  auto look = [&](int64_t* pttl) {
    int64_t most = 0;
    for (RawKeys* r : keys) {
      const absl::optional<int64_t> c = r->HGet(name, owner);
      if (c.has_value() && *c > most) {
        most = *c;
        if (pttl != nullptr) *pttl = r->PTtl(name);
      }
    }
    return most;
  };
  int64_t pttl = -3;
  const int64_t count = look(&pttl);
  if (count <= 0) return;
  const int64_t found_at = MonotonicNanos();
  absl::SleepFor(absl::Milliseconds(config_.lease_ms + 500));
  const int64_t still = look(nullptr);
  const bool ghost = still > 0;
  log_.Append(absl::StrCat("G ", t, " ", k, " ", found_at, " ", count, " ",
                           pttl, " ", ghost ? where : "orphan-expired"));
  for (int64_t i = 0; ghost && i < std::min<int64_t>(still, 10); ++i) {
    if (!release().ok()) break;
  }
}

void Worker::MultiRound(std::vector<Lock>& locks, RawRedis& raw, RawKeys& keys,
                        const Caller& caller, std::mt19937_64& rng,
                        absl::Duration margin, int t,
                        const std::string& field) {
  const int n = config_.locks;
  const int k1 = std::uniform_int_distribution<int>(0, n - 1)(rng);
  const int k2 =
      (k1 + 1 + std::uniform_int_distribution<int>(0, n - 2)(rng)) % n;
  MultiLock multi(locks[k1], locks[k2]);
  // The first lock it takes is held unrecorded while it waits for the
  // second: keep that well below the checker's limit on a free lock's
  // wait (3 s).
  const absl::Duration wait =
      std::min(absl::Milliseconds(config_.wait_ms), absl::Seconds(1));
  const absl::Status s = caller.async
                             ? multi.TryAcquireAsync(caller.owner, wait).Get()
                             : multi.TryAcquire(caller.owner, wait);
  const int64_t acquired_at = MonotonicNanos();
  if (!s.ok()) {
    if (s.code() != absl::StatusCode::kDeadlineExceeded &&
        s.code() != absl::StatusCode::kUnavailable) {
      Anomaly(t, "TryAcquire(multi)", s);
    }
    // Whatever the error (a part held by another owner included: the
    // parts taken before it were released), neither lock may stay held.
    CheckNoGhost(locks[k1], keys, caller, field, t, k1,
                 "after-failed-multi-acquire");
    CheckNoGhost(locks[k2], keys, caller, field, t, k2,
                 "after-failed-multi-acquire");
    if (s.code() != absl::StatusCode::kDeadlineExceeded) {
      absl::SleepFor(absl::Milliseconds(20));  // Redis is unwell
    }
    return;
  }
  Hold holds[2];
  const int which[2] = {k1, k2};
  for (int i = 0; i < 2; ++i) {
    holds[i].worker = config_.worker;
    holds[i].thread = t;
    holds[i].lock = which[i];
    holds[i].attempt_start = acquired_at;
    holds[i].attempt_end = acquired_at;
  }
  // Both holds are recorded before either counter is written: a kill at any
  // later point finds both open (and their counters maybe written).
  log_.Append(FormatAcquired(t, k1, acquired_at, acquired_at));
  log_.Append(FormatAcquired(t, k2, acquired_at, acquired_at));
  for (Hold& h : holds) {
    Lock& lock = locks[h.lock];
    CriticalSection([&] { return lock.SafeUntil(caller.owner); }, raw, rng,
                    margin, &h);
  }
  for (int i = 0; i < 2; ++i) {
    Hold& h = holds[i];
    Lock& lock = locks[h.lock];
    h.release_start = MonotonicNanos();
    log_.Append(FormatReleasing(t, h.lock, h.release_start));
    const absl::Status r = caller.Release(lock);
    h.release_end = MonotonicNanos();
    h.release_code = static_cast<int>(r.code());
    log_.Append(FormatHold(h));
    if (!r.ok() && r.code() != absl::StatusCode::kAborted &&
        r.code() != absl::StatusCode::kUnavailable) {
      Anomaly(t, "Release(multi part)", r);
    }
    if (r.ok()) {
      CheckNoGhost(lock, keys, caller, field, t, h.lock, "after-release-ok");
    }
  }
}

void Worker::ReadRound(Lock& read, RawRedis& raw, const Caller& caller,
                       std::mt19937_64& rng, absl::Duration margin, int t,
                       int k) {
  const absl::Status s =
      caller.TryAcquire(read, absl::Milliseconds(config_.wait_ms));
  if (!s.ok()) {
    if (s.code() != absl::StatusCode::kDeadlineExceeded &&
        s.code() != absl::StatusCode::kUnavailable) {
      Anomaly(t, "TryAcquire(read)", s);
    }
    if (s.code() != absl::StatusCode::kDeadlineExceeded) {
      absl::SleepFor(absl::Milliseconds(20));  // Redis is unwell
    }
    return;
  }
  const std::string counter = CounterName(config_.prefix, k);
  absl::optional<int64_t> before, after;
  if (raw.EnsureConnected()) before = raw.Get(counter);
  Sleep(rng, config_.hold_min_us, config_.hold_max_us);
  if (before.has_value()) after = raw.Get(counter);
  absl::StatusOr<std::chrono::steady_clock::time_point> safe =
      read.SafeUntil(caller.owner);
  if (!safe.ok() && safe.status().code() != absl::StatusCode::kAborted) {
    Anomaly(t, "SafeUntil(read)", safe.status());
  }
  if (safe.ok() && *safe - std::chrono::steady_clock::now() >=
                       absl::ToChronoNanoseconds(margin)) {
    if (before.has_value() && after.has_value() && *before != *after) {
      Anomaly(t, absl::StrCat("read hold of lock ", k),
              absl::InternalError(absl::StrCat(
                  "a write happened under a safe read hold: ", *before, " -> ",
                  *after)));
    }
  }
  const absl::Status r = caller.Release(read);
  if (!r.ok() && r.code() != absl::StatusCode::kAborted &&
      r.code() != absl::StatusCode::kUnavailable) {
    Anomaly(t, "Release(read)", r);
  }
}

void Worker::CriticalSection(
    const std::function<
        absl::StatusOr<std::chrono::steady_clock::time_point>()>& safe_until,
    RawRedis& raw, std::mt19937_64& rng, absl::Duration margin, Hold* h) {
  const std::string counter = CounterName(config_.prefix, h->lock);
  if (!raw.EnsureConnected()) {
    h->outcome = Outcome::kNoConnection;
    return;
  }
  h->get_start = MonotonicNanos();
  absl::optional<int64_t> value = raw.Get(counter);
  if (!value.has_value()) {
    h->outcome = Outcome::kGetFailed;
    return;
  }
  h->read_value = *value;
  SleepInHold(rng, h->lock);
  absl::StatusOr<std::chrono::steady_clock::time_point> safe = safe_until();
  h->safe_code = static_cast<int>(safe.status().code());
  if (!safe.ok() && safe.status().code() != absl::StatusCode::kAborted) {
    Anomaly(h->thread, "SafeUntil", safe.status());
  }
  if (!safe.ok() || *safe - std::chrono::steady_clock::now() <
                        absl::ToChronoNanoseconds(margin)) {
    h->outcome = Outcome::kAbandoned;
    return;
  }
  PauseBeforeWriteIfAsked(h->lock);
  h->set_sent = true;
  h->set_start = MonotonicNanos();
  if (config_.fenced) {
    // The resource checks the token: a holder paused past its lease whose
    // lock another owner has taken (and written under) since is refused.
    const absl::optional<RawRedis::FencedWrite> w =
        raw.FencedSet(counter, *value + 1, h->token);
    h->set_end = MonotonicNanos();
    if (!w.has_value()) {
      h->outcome = Outcome::kSetFailed;
      return;
    }
    h->fence_high = w->highest_before;
    h->outcome = w->accepted ? Outcome::kCompleted : Outcome::kRefused;
    return;
  }
  const bool ok = raw.Set(counter, *value + 1);
  h->set_end = MonotonicNanos();
  h->outcome = ok ? Outcome::kCompleted : Outcome::kSetFailed;
}

void Worker::SleepInHold(std::mt19937_64& rng, int k) {
  int64_t until = long_until_->load();
  const bool long_lock = k < 64 && (long_locks_->load() >> k & 1) != 0;
  if (until > MonotonicNanos() && long_lock &&
      long_until_->compare_exchange_strong(until, 0)) {
    absl::SleepFor(absl::Milliseconds(config_.long_hold_ms));
  } else {
    Sleep(rng, config_.hold_min_us, config_.hold_max_us);
  }
}

void Worker::SemaphoreLoop(Client& client, RawRedis& raw, const Caller& caller,
                           std::mt19937_64& rng, int t,
                           const std::string& owner) {
  std::vector<PermitExpirableSemaphore> sems;
  for (int k = 0; k < config_.locks; ++k) {
    sems.push_back(
        client.GetPermitExpirableSemaphore(LockName(config_.prefix, k)));
  }
  const absl::Duration wait = absl::Milliseconds(config_.wait_ms);
  std::uniform_int_distribution<int> pick(0, config_.locks - 1);
  while (!Stopping()) {
    const int k = pick(rng);
    PermitExpirableSemaphore& sem = sems[k];
    absl::StatusOr<bool> set = sem.TrySetPermits(config_.permits);
    if (!set.ok() && set.status().code() != absl::StatusCode::kUnavailable) {
      Anomaly(t, "TrySetPermits", set.status());
    }
    Hold h;
    h.worker = config_.worker;
    h.thread = t;
    h.lock = k;
    h.attempt_start = MonotonicNanos();
    absl::StatusOr<std::string> permit = caller.TryAcquire(sem, wait);
    h.attempt_end = MonotonicNanos();
    if (!permit.ok()) {
      const absl::StatusCode code = permit.status().code();
      log_.Append(FormatFailed(FailedAttempt{
          t, k, h.attempt_start, h.attempt_end, static_cast<int>(code)}));
      if (code != absl::StatusCode::kDeadlineExceeded &&
          code != absl::StatusCode::kUnavailable) {
        Anomaly(t, "TryAcquire(semaphore)", permit.status());
      }
      if (code != absl::StatusCode::kDeadlineExceeded) {
        absl::SleepFor(absl::Milliseconds(20));  // Redis is unwell
      }
      continue;
    }
    {
      std::lock_guard<std::mutex> l(permits_mu_);
      permit_owner_[*permit] = owner;
    }
    log_.Append(FormatAcquired(t, k, h.attempt_start, h.attempt_end));
    log_.Append(FormatPermit(t, k, *permit));
    SemaphoreSection(raw, rng, &h);
    h.release_start = MonotonicNanos();
    log_.Append(FormatReleasing(t, k, h.release_start));
    absl::Status r = caller.Release(sem, *permit);
    h.release_end = MonotonicNanos();
    h.release_code = static_cast<int>(r.code());
    log_.Append(FormatHold(h));
    {
      std::lock_guard<std::mutex> l(permits_mu_);
      permit_owner_.erase(*permit);
    }
    // Aborted: its lease had ended; NotFound: it was gone (a restart):
    // both tell the holder its permit was lost (the checker's "told lost").
    if (!r.ok() && r.code() != absl::StatusCode::kAborted &&
        r.code() != absl::StatusCode::kNotFound &&
        r.code() != absl::StatusCode::kUnavailable) {
      Anomaly(t, "Release(semaphore)", r);
    }
    Sleep(rng, 0, config_.think_max_us);
  }
}

void Worker::SemaphoreSection(RawRedis& raw, std::mt19937_64& rng, Hold* h) {
  const std::string counter = CounterName(config_.prefix, h->lock);
  h->get_start = MonotonicNanos();
  SleepInHold(rng, h->lock);
  h->set_sent = true;
  h->set_start = MonotonicNanos();
  const absl::optional<int64_t> value = raw.Incr(counter);
  h->set_end = MonotonicNanos();
  if (!value.has_value()) {
    h->outcome = Outcome::kSetFailed;
    return;
  }
  h->read_value = *value - 1;
  h->outcome = Outcome::kCompleted;
}

void Worker::PauseBeforeWriteIfAsked(int k) {
  int64_t until = pause_before_write_until_->load();
  if (until <= MonotonicNanos() ||
      !pause_before_write_until_->compare_exchange_strong(until, 0)) {
    return;
  }
  // Told before the stop (the coordinator waits for this line, then for
  // the process to be stopped); the whole process stops, every thread.
  std::cout << "pausing-before-write " << k << std::endl;
  raise(SIGSTOP);
}

int WorkerMain(const std::vector<std::string>& args) {
  WorkerConfig config;
  if (absl::Status s = config.FromArgs(args); !s.ok()) {
    std::cerr << "harness worker: " << s << std::endl;
    return 2;
  }
  // Before any thread starts: threads stay in the namespace they began in.
  if (!config.netns.empty()) {
    if (absl::Status s = EnterNetns(config.netns); !s.ok()) {
      std::cerr << "harness worker: " << s << std::endl;
      return 2;
    }
  }
  return Worker(std::move(config)).Run();
}

}  // namespace harness
}  // namespace relock
