// The safety harness's worker process (worker.h): its start (Run: the
// client, the threads, the coordinator's orders), the callers' lock calls,
// and its loss events. worker_config.cc has its command line and the keys'
// names; worker_rounds.cc its threads' rounds and critical sections.

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
