// The safety harness's worker process (worker.h): its threads' rounds, one
// per lock type and mode (a lock, a read lock, a MultiLock, a semaphore's
// permit, a Redlock), the critical section each hold runs, and the ghost
// checks after a release.

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
#include "tools/harness/worker.h"

namespace relock {
namespace harness {

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

}  // namespace harness
}  // namespace relock
