// The safety harness's worker process: one relock::Client, T threads that
// contend K locks until told to stop. Even-numbered threads use the blocking
// calls as the thread; odd-numbered ones act for a relock::Owner of their
// own through the asynchronous calls (TryAcquireAsync, ReleaseAsync, waited
// for with Future::Get()), so both paths are checked. Each hold is a critical
// section that does a non-atomic read-modify-write of a Redis counter (GET,
// pause, SET) on the thread's own plain hiredis connection; every attempt and
// hold is recorded in the worker's log file (record.h). In a semaphore run
// ("permits=N") the locks are PermitExpirableSemaphores of N permits, taken
// and recorded as the locks are (see SemaphoreLoop).
//
// Protocol with the coordinator (over the child's stdin/stdout, see
// tests/testing/child_process.h): the worker prints "ready <client-id>" once
// connected, runs until it reads "stop" (or EOF, or its hard end time), then
// prints "done" and exits 0. A line "long <ms>" makes one hold that begins
// within <ms> a long one (long_hold_ms), to span a coming fault; "long <ms>
// <k>,<k>..." the same, but only a hold of one of those locks (lock numbers
// below 64). A line "pause-before-write <ms>" makes the first critical
// section that passes its SafeUntil() check within <ms> stop the whole
// process (raise(SIGSTOP)) between that check and its write, after printing
// "pausing-before-write <lock>": the coordinator's pause-holder fault, in
// fenced runs, resumes it (SIGCONT) after the lease, and its write is then
// a stale one that the fenced resource must refuse.
//
// In a netns run (netns.h) the worker enters its network namespace
// ("netns=<name>") before it starts a thread.
//
// In a Redlock run ("redlock_masters=host:port,...") the worker connects a
// relock::RedlockClient to those independent masters instead of a Client
// and its threads take RedlockLocks (RedlockLoop), as blocking or
// asynchronous callers as above; its ghost checks look on every master.
//
// Part of tools/harness (see harness.h); worker.cc has the definitions, and
// raw_redis.h the worker's plain hiredis connections.

#ifndef RELOCK_TOOLS_HARNESS_WORKER_H_
#define RELOCK_TOOLS_HARNESS_WORKER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "relock/redlock.h"
#include "relock/relock.h"
#include "tools/harness/raw_redis.h"
#include "tools/harness/record.h"

namespace relock {
namespace harness {

// A fair run's queue wait (FairLockOptions::queue_wait): two leases. A killed
// worker's queued waiter holds the queue up that long past its turn at most
// (the default, 5 minutes, would stall the run).
absl::Duration FairQueueWait(absl::Duration lease);

// The names of lock k and of its counter in Redis.
std::string LockName(const std::string& prefix, int k);
std::string CounterName(const std::string& prefix, int k);
// Semaphore runs: the sorted set of semaphore k's permits out (Redisson's
// "{name}:timeout": member the id's bytes, score its lease's end in epoch
// ms on the server's clock).
std::string PermitsOutKey(const std::string& prefix, int k);

// Everything a worker needs, passed as "key=value" arguments.
struct WorkerConfig {
  int worker = 0;
  std::string url;  // for relock
  std::string host = "127.0.0.1";
  int port = 0;  // the counters' server (raw connections)
  // Where the raw lock reads start (RawKeys): the lock's server, or on a
  // cluster any node. 0: host:port.
  std::string keys_host = "127.0.0.1";
  int keys_port = 0;
  // Sentinel mode: the sentinels ("host:port,host:port,...") and the master
  // name by which the lock hashes are found on the primary (RawKeys);
  // keys_host and keys_port are then unused.
  std::string keys_sentinels;
  std::string keys_master;
  // Redlock runs: the N independent masters ("host:port,host:port,...");
  // the worker then uses a RedlockClient over them (url is unused) and
  // reads the lock hashes on each of them. Empty: not a Redlock run.
  std::string redlock_masters;
  int threads = 2;
  int locks = 3;
  // FencedLocks (every acquisition logs its token) instead of Locks.
  bool fenced = false;
  // FairLocks (relock/fair_lock.h) instead of Locks.
  bool fair = false;
  // ReadWriteLocks (relock/read_write_lock.h): the write lock instead of a
  // Lock, and every other round a read hold that checks no write happened
  // under it.
  bool rw = false;
  // Every other round takes two of the locks at once with a MultiLock
  // (relock/multi_lock.h); not in fenced runs.
  bool multi = false;
  // Semaphore runs: above 0, each "lock" is a PermitExpirableSemaphore of
  // `permits` permits (relock/permit_expirable_semaphore.h), taken in its
  // watchdog mode; see Worker::SemaphoreLoop.
  int permits = 0;
  // The client's ReplicaSync (relock/options.h): replicas in [0, 64], and
  // the WAIT timeout, below command_timeout_ms - 100.
  int replica_sync = 0;
  int64_t replica_sync_timeout_ms = 150;
  std::string prefix = "harness:";
  int64_t lease_ms = 1500;
  int64_t wait_ms = 2000;
  int64_t connect_timeout_ms = 300;
  int64_t command_timeout_ms = 300;
  int64_t raw_timeout_ms = 5000;
  int64_t hold_min_us = 1000;
  int64_t hold_max_us = 5000;
  int64_t think_max_us = 3000;
  int64_t long_hold_ms = 5000;  // a hold requested by a "long" line
  int64_t hard_end_ns = 0;      // stop by then even without "stop"
  uint64_t seed = 1;
  std::string log_path;
  // The network namespace to run in (netns.h); empty: the harness's own.
  std::string netns;

  std::vector<std::string> ToArgs() const;

  absl::Status FromArgs(const std::vector<std::string>& args);
};

class Worker {
 public:
  explicit Worker(WorkerConfig config);

  // The child's main: returns its exit code.
  int Run();

 private:
  bool Stopping() const;

  int LockIndex(const std::string& name) const;

  void OnEvent(const LockEvent& e);

  void Anomaly(int thread, absl::string_view what, const absl::Status& s);

  void Sleep(std::mt19937_64& rng, int64_t min_us, int64_t max_us);

  // How thread `t` calls relock: as the thread, blocking, or for an owner
  // token of its own, asynchronously.
  struct Caller {
    Owner owner;
    bool async;

    absl::Status TryAcquire(Lock& lock, absl::Duration wait) const;
    // A fenced acquisition: its token in `*token`.
    absl::Status TryAcquire(FencedLock& lock, absl::Duration wait,
                            int64_t* token) const;
    absl::Status Release(Lock& lock) const;
    // Redlock runs.
    absl::Status TryAcquire(RedlockLock& lock, absl::Duration wait) const;
    absl::Status Release(RedlockLock& lock) const;
    // Semaphore runs: a permit (watchdog mode), its id; and its release.
    absl::StatusOr<std::string> TryAcquire(PermitExpirableSemaphore& sem,
                                           absl::Duration wait) const;
    absl::Status Release(PermitExpirableSemaphore& sem,
                         const std::string& permit) const;
  };
  static Caller CallerFor(int t);

  // Learns the caller's owner field: takes a private lock and reads the
  // field relock wrote.
  std::string LearnOwner(Client& client, RawKeys& keys, const Caller& caller,
                         int t);

  void ThreadLoop(Client& client, int t);

  // Checks that this thread does not hold `lock` in Redis (after Release()
  // returned OK, or after an acquire that failed without a clear "held by
  // another owner"). An owner field found there is either
  //   - an "orphan": an acquire of this thread whose reply was lost ran on
  //     Redis (perhaps late, after a later release). relock never renews
  //     it, so it ends with its lease (or this thread's next acquire absorbs
  //     it). Expected under faults.
  //   - a "ghost": a hold relock keeps renewing although its thread believes
  //     it holds nothing, so the lock is never free again. A bug.
  // To tell them apart, wait one lease (plus a margin; this thread acquires
  // nothing meanwhile) and look again. Records a "G" line: `where`, or
  // "orphan-expired"; frees a ghost by releasing as often as Redis counts.
  //
  // With several readers (a Redlock run's masters) the field is looked for
  // on each: found on any is found, and a ghost is a field still present on
  // any master a lease later. `release` frees the hold once (a ghost is
  // released as often as the highest count found).
  void CheckNoGhost(const std::string& name, const std::vector<RawKeys*>& keys,
                    const std::function<absl::Status()>& release,
                    const std::string& owner, int t, int k,
                    absl::string_view where);
  void CheckNoGhost(Lock& lock, RawKeys& keys, const Caller& caller,
                    const std::string& owner, int t, int k,
                    absl::string_view where);

  // How a round calls its lock (LockRound): take it (a fenced acquisition
  // sets the hold's token), say until when it is safe, release it, and look
  // for a ghost after a release or a failed acquire (with `where`).
  struct LockCalls {
    std::function<absl::Status(Hold*)> acquire;
    std::function<absl::StatusOr<std::chrono::steady_clock::time_point>(
        const Hold&)>
        safe_until;
    std::function<absl::Status()> release;
    std::function<void(absl::string_view where)> check_no_ghost;
  };

  // One round on lock k: acquire, record, critical section, release,
  // record, ghost check, think.
  void LockRound(const LockCalls& calls, RawRedis& raw, std::mt19937_64& rng,
                 absl::Duration margin, int t, int k);

  // A Redlock run's thread: RedlockLocks instead of Locks, taken in
  // LockRound as ThreadLoop's are. RedlockLock::ValidUntil() answers only
  // for the calling thread, so the asynchronous threads (an Owner of their
  // own) check the validity that their acquire guarantees by the
  // algorithm: the attempt's start + lease - drift (as DriftNanos),
  // not moved by renewals (a long hold then skips its write).
  void RedlockLoop(RedlockClient& client, int t);

  // A MultiLock round (multi runs): two distinct locks taken as one, then
  // each held and checked as a single round's lock is, and released one by
  // one (so each release's own outcome is recorded). Both holds are recorded
  // from the moment the MultiLock's acquire returned, and its waits are not
  // recorded as attempts: a MultiLock waiting for one lock does not take
  // another that is free meanwhile, which the checker's measure of waits
  // on free locks would count against it. A failed acquire must leave
  // neither lock held (the ghost checks).
  void MultiRound(std::vector<Lock>& locks, RawRedis& raw, RawKeys& keys,
                  const Caller& caller, std::mt19937_64& rng,
                  absl::Duration margin, int t, const std::string& field);

  // A read hold of lock k (rw runs): reads the counter, waits, reads it
  // again; while the read hold was safe throughout, no writer may have
  // changed it (an "E" line, an anomaly, if one did).
  void ReadRound(Lock& read, RawRedis& raw, const Caller& caller,
                 std::mt19937_64& rng, absl::Duration margin, int t, int k);

  // A semaphore run's thread (config_.permits > 0): takes a permit of a
  // random semaphore, records the hold as a lock's ("A", then "P" with the
  // permit id), holds it (SemaphoreSection) and releases it, until told to
  // stop. Before each attempt it sets the semaphore's permits if they are
  // not set (TrySetPermits): the first thread to come after a restart sets
  // them again. No ghost checks: a permit whose acquire reply was lost
  // returns at its lease's end (the watchdog never renews it).
  void SemaphoreLoop(Client& client, RawRedis& raw, const Caller& caller,
                     std::mt19937_64& rng, int t, const std::string& owner);

  // A semaphore hold: sleeps as a lock's section does (or long, when asked),
  // then increments the semaphore's counter with INCR: several holders
  // write it at once, so the write is atomic and only the counter's bounds
  // are checked. A permit has no SafeUntil(): it writes even when its
  // permit was lost meanwhile (counted as a section that may have written).
  void SemaphoreSection(RawRedis& raw, std::mt19937_64& rng, Hold* h);

  // Sleeps inside a hold of lock k: in [hold_min, hold_max], or
  // long_hold_ms if a "long" request is pending for k and this thread takes
  // it.
  void SleepInHold(std::mt19937_64& rng, int k);

  // `safe_until`: the hold's SafeUntil() (or a Redlock hold's validity).
  void CriticalSection(
      const std::function<
          absl::StatusOr<std::chrono::steady_clock::time_point>()>& safe_until,
      RawRedis& raw, std::mt19937_64& rng, absl::Duration margin, Hold* h);

  // Between a critical section's SafeUntil() check and its write (of lock
  // k): if a "pause-before-write" request is pending and this thread takes
  // it, says so on stdout and stops the process until SIGCONT.
  void PauseBeforeWriteIfAsked(int k);

  const WorkerConfig config_;
  LogFile log_;
  // Semaphore runs: the owner field (the "O" line) of the thread holding
  // each permit out, so that a kLockLost event, which names the permit, is
  // logged for that thread as a lock's is. std::mutex, not absl::Mutex:
  // Debian's Abseil is not instrumented for TSan (lib/common/mutex.h), which
  // then reports false races on what it guards.
  std::mutex permits_mu_;
  std::map<std::string, std::string> permit_owner_;  // guarded by permits_mu_
  std::shared_ptr<std::atomic<bool>> stop_ =
      std::make_shared<std::atomic<bool>>(false);
  // A "long <ms>" line asks that one hold beginning in the next <ms> sleep
  // long_hold_ms inside its critical section: the first thread to get there
  // takes the request (resets it to 0).
  std::shared_ptr<std::atomic<int64_t>> long_until_ =
      std::make_shared<std::atomic<int64_t>>(0);
  // The locks (bit k: lock k) whose holds may take that request.
  std::shared_ptr<std::atomic<uint64_t>> long_locks_ =
      std::make_shared<std::atomic<uint64_t>>(~uint64_t{0});
  // A "pause-before-write <ms>" line: until when (monotonic ns) the next
  // section to pass its check stops itself before writing; 0: no request.
  // The first thread to get there takes it (resets it to 0).
  std::shared_ptr<std::atomic<int64_t>> pause_before_write_until_ =
      std::make_shared<std::atomic<int64_t>>(0);
};

// The body of the worker child routine: RELOCK_CHILD_MAIN(SafetyHarnessWorker)
// { return relock::harness::WorkerMain(args); }
int WorkerMain(const std::vector<std::string>& args);

}  // namespace harness
}  // namespace relock

#endif  // RELOCK_TOOLS_HARNESS_WORKER_H_
