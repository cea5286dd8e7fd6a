// relock's safety harness: P worker processes x T threads contend K locks on
// a private redis-server (or, in cluster mode, a private Redis Cluster of M
// masters with a replica each) for a bounded time while faults are injected on
// a schedule; then a checker verifies mutual exclusion and liveness from the
// workers' records and prints a report.
//
//   worker.h   the worker process (a child routine) and its critical section
//   record.h   the workers' log format
//   checker.h  the checks and the report
//   netns.h    the network namespaces of the partition faults
//   harness.h  this file: the coordinator, RunHarness()
//
// Faults (each kind at least once per cycle; the first cycle always runs in
// full, later ones in random order while the duration lasts):
//   kill-9-holder       SIGSTOP a worker that holds a lock (seen in Redis),
//                       confirm it still holds it, SIGKILL it, start a
//                       replacement worker. Its lock must free within a lease.
//   pause-short/long    SIGSTOP/SIGCONT redis-server for lease/4 and 2 leases.
//   restart             redis-server restart without persistence: holders
//                       must be told their locks are gone.
//   client-kill-pool    CLIENT KILL ID of every normal connection except the
//                       harness's own counter connections (relock's pools).
//   client-kill-pubsub  CLIENT KILL TYPE pubsub (relock's subscribers).
//   script-flush        SCRIPT FLUSH.
//   pause-holder        SIGSTOP a worker that holds a lock (as for the kill)
//                       for 2 leases, then SIGCONT: it may write after
//                       another owner took the lock; excused by the pause,
//                       its unsafe window reported.
//   partition           (network namespaces, netns.h) a worker asked for a
//                       long hold is cut off from the lock Redis both ways,
//                       for lease/2 and for 2 leases by turns; it must be
//                       told before its lease ends on the server - drift.
//   partition-requests  the same, its packets to Redis dropped (2 leases).
//   partition-replies   the same, Redis's packets to it dropped (2 leases).
// HarnessOptions::faults chooses among them (default: every fault the mode
// supports); HarnessOptions::netns where the processes run. In a netns run
// the counters live on a redis-server of their own, whose links are never
// cut.
//
// In cluster mode the counters live on a redis-server of their own (the
// protected resource, never faulted), the client kills and SCRIPT FLUSH hit
// every node, the pauses and the restart hit the master of a random lock
// (its locks must be told lost, the others must not stall), and two kinds
// are added:
//   failover            SIGKILL of the master of a random lock; its replica
//                       is promoted (cluster-node-timeout + election), then
//                       the dead node is started again and rejoins as a
//                       replica. Locks that reached the replica survive;
//                       the others must be reported lost.
//   reshard             the slot of a random lock is migrated to another
//                       master (MIGRATING/IMPORTING, MIGRATE, SETSLOT) under
//                       traffic: no caller may see an error, no stall.
// cluster-node-timeout defaults to the long pause + 2 s, so that a pause
// never turns into a failover.
//
// Use from a binary that can run child routines (see
// tests/testing/child_process.h):
//
//   RELOCK_CHILD_MAIN(SafetyHarnessWorker) {
//     return relock::harness::WorkerMain(args);
//   }
//   ...
//   relock::harness::HarnessOptions options;  // worker_routine defaults to
//   absl::StatusOr<relock::harness::Report> report =  // "SafetyHarnessWorker"
//       relock::harness::RunHarness(options);
//   std::cout << report->text;  // report->ok(), report->failures, ...
//
// Header-only (inline functions), so a test and tools/harness/main.cc can use
// it without a library target. Needs relock, relock_testing_fixture (the
// redis-server fixture and ChildProcess), hiredis and absl.

#ifndef RELOCK_TOOLS_HARNESS_HARNESS_H_
#define RELOCK_TOOLS_HARNESS_HARNESS_H_

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/testing/child_process.h"
#include "tests/testing/redis_cluster.h"
#include "tests/testing/redis_server.h"
#include "tools/harness/checker.h"
#include "tools/harness/netns.h"
#include "tools/harness/record.h"
#include "tools/harness/worker.h"

namespace relock {
namespace harness {

enum class NetnsMode : int { kAuto, kOn, kOff };

// Every fault kind a mode can inject: the single-server or cluster kinds and
// pause-holder, plus the partitions on a single server with `netns`.
inline std::vector<FaultKind> SupportedFaultKinds(bool cluster, bool netns) {
  std::vector<FaultKind> kinds =
      cluster ? ClusterFaultKinds() : SingleNodeFaultKinds();
  kinds.push_back(FaultKind::kPauseHolder);
  if (netns && !cluster) {
    kinds.insert(kinds.end(),
                 {FaultKind::kPartition, FaultKind::kPartitionRequests,
                  FaultKind::kPartitionReplies});
  }
  return kinds;
}

// "partition,pause-holder" -> kinds; InvalidArgument names an unknown one.
inline absl::StatusOr<std::vector<FaultKind>> ParseFaultList(
    absl::string_view list) {
  std::vector<FaultKind> kinds;
  for (absl::string_view name : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    absl::StatusOr<FaultKind> kind = FaultKindFromName(name);
    if (!kind.ok()) return kind.status();
    if (std::find(kinds.begin(), kinds.end(), *kind) == kinds.end()) {
      kinds.push_back(*kind);
    }
  }
  if (kinds.empty()) return absl::InvalidArgumentError("empty fault list");
  return kinds;
}

struct HarnessOptions {
  int processes = 3;  // P worker processes at any time
  int threads = 2;    // T threads per worker
  int locks = 3;      // K locks (and counters)
  // How long the workload runs; extended if needed to finish the first fault
  // cycle (so every kind is injected at least once).
  absl::Duration duration = absl::Seconds(30);
  absl::Duration warmup = absl::Seconds(2);       // before the first fault
  absl::Duration fault_gap = absl::Seconds(2.5);  // between faults
  absl::Duration tail = absl::Seconds(2);         // fault-free end of the run
  // relock client settings of the workers.
  absl::Duration lease = absl::Milliseconds(1500);  // lock_watchdog_timeout
  // TryAcquire's wait; longer than max_wait_outside_faults, so that a
  // waiter stalled that long is seen.
  absl::Duration acquire_wait = absl::Seconds(5);
  absl::Duration connect_timeout = absl::Milliseconds(300);
  absl::Duration command_timeout = absl::Milliseconds(300);
  // Critical section: GET, sleep in [hold_min, hold_max], SET; then sleep up
  // to think_max before the next attempt.
  absl::Duration hold_min = absl::Milliseconds(1);
  absl::Duration hold_max = absl::Milliseconds(5);
  absl::Duration think_max = absl::Milliseconds(3);
  // Pauses; zero = lease / 4 and 2 * lease.
  absl::Duration short_pause = absl::ZeroDuration();
  absl::Duration long_pause = absl::ZeroDuration();
  // Verdict bounds (see CheckInput).
  absl::Duration max_wait_outside_faults = absl::Seconds(3);
  // Beyond one lease, and beyond the queue wait in a fair run: see
  // KillReacquireBound().
  absl::Duration max_kill_reacquire_extra = absl::Seconds(3);
  // Ghost holds (a library bug, see worker.h) fail the run unless tolerated.
  bool tolerate_ghost_holds = false;
  uint64_t seed = 0;  // 0 = random
  // The RELOCK_CHILD_MAIN routine that calls WorkerMain().
  std::string worker_routine = "SafetyHarnessWorker";
  // Where worker logs go; empty = a fresh dir under $TMPDIR (removed after a
  // passing run, kept and named in the report otherwise).
  std::string work_dir;
  // Progress lines (faults as they happen); null = silent.
  std::ostream* progress = &std::cout;
  // Cluster mode (see the top of this file): `cluster_masters` masters with
  // one replica each; zero node timeout = long pause + 2 s.
  bool cluster = false;
  int cluster_masters = 3;
  // FencedLocks instead of Locks: every acquisition logs its token, and the
  // checker requires tokens to grow in acquisition order.
  bool fenced = false;
  // FairLocks instead of Locks (the same checks: exclusion, hand-off, loss
  // reports).
  bool fair = false;
  // ReadWriteLocks: the write locks under the same checks, and read holds
  // between them that must see no write (relock/read_write_lock.h).
  bool rw = false;
  // Every other round takes two locks at once with a MultiLock (not with
  // `fenced`).
  bool multi = false;
  absl::Duration cluster_node_timeout = absl::ZeroDuration();
  // The faults to inject (each at least once); empty: every fault the mode
  // supports (SupportedFaultKinds), the partitions only where network
  // namespaces can be made.
  std::vector<FaultKind> faults;
  // Where the servers and workers run: in network namespaces of their own
  // (netns.h; needed by the partition faults) or in the harness's.
  //   kAuto  namespaces when a partition fault is to run (by default, when
  //          they can be made: otherwise the report says why they did not)
  //   kOn    always; the run fails if they cannot be made
  //   kOff   never; asking for a partition fault is then an error
  NetnsMode netns = NetnsMode::kAuto;
  // How long pause-holder keeps a holder stopped; zero = 2 * lease.
  absl::Duration holder_pause = absl::ZeroDuration();
  // How late a cut-off holder's loss report may be recorded after its
  // lease's end on the server minus the drift (CheckInput::
  // loss_report_slack_ns): what the measure cannot resolve on an idle
  // machine. A loaded one delays the timer and event threads by more.
  absl::Duration loss_report_slack = absl::Milliseconds(10);
};

// How soon after a kill -9 of a holder its lock must be taken again: its
// lease ends, plus max_kill_reacquire_extra (scheduling, a waiter's re-check);
// in a fair run, plus the queue wait (FairQueueWait), for the killed worker's
// other thread may have been queued for the lock, at the head, when it died.
inline absl::Duration KillReacquireBound(const HarnessOptions& o) {
  return o.lease + o.max_kill_reacquire_extra +
         (o.fair ? FairQueueWait(o.lease) : absl::ZeroDuration());
}

namespace internal_harness {

using ::relock::testing::ChildProcess;
using ::relock::testing::RedisCluster;
using ::relock::testing::RedisClusterOptions;
using ::relock::testing::RedisServer;
using ::relock::testing::RedisServerOptions;
using ::relock::testing::RedisValue;

struct WorkerProc {
  int index = 0;
  std::unique_ptr<ChildProcess> child;
  std::string client_id;
  std::string log_path;
  bool killed = false;
};

// Waits until /proc/<pid>/stat shows the process stopped (T) or gone.
inline void WaitStopped(pid_t pid, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
    std::string stat((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos || paren + 2 >= stat.size()) return;
    const char state = stat[paren + 2];
    if (state == 'T' || state == 't' || state == 'Z' || state == 'X') return;
    absl::SleepFor(absl::Milliseconds(1));
  }
}

class Coordinator {
 public:
  explicit Coordinator(HarnessOptions o) : o_(std::move(o)) {
    if (o_.seed == 0) o_.seed = std::random_device()() | 1;
    if (o_.short_pause <= absl::ZeroDuration()) o_.short_pause = o_.lease / 4;
    if (o_.long_pause <= absl::ZeroDuration()) o_.long_pause = o_.lease * 2;
    if (o_.cluster_node_timeout <= absl::ZeroDuration()) {
      o_.cluster_node_timeout = o_.long_pause + absl::Seconds(2);
    }
    if (o_.holder_pause <= absl::ZeroDuration()) o_.holder_pause = 2 * o_.lease;
    rng_.seed(o_.seed);
  }

  absl::StatusOr<Report> Run() {
    if (o_.processes < 1 || o_.threads < 1 || o_.locks < 1 ||
        (o_.cluster && o_.cluster_masters < 2)) {
      return absl::InvalidArgumentError(
          "processes, threads, locks must be >= 1, cluster_masters >= 2");
    }
    if (absl::Status k = ChooseFaults(); !k.ok()) return k;
    absl::Status s = MakeWorkDir();
    if (!s.ok()) return s;
    if (lab_ != nullptr) {
      // The counters on a server of their own, whose links are never cut.
      RedisServerOptions locks, counters;
      locks.host = lab_->lock_host();
      locks.netns = lab_->lock_ns();
      counters.host = lab_->counter_host();
      counters.netns = lab_->counter_ns();
      absl::StatusOr<std::unique_ptr<RedisServer>> l =
          RedisServer::Start(locks);
      if (!l.ok()) return l.status();
      lock_redis_ = *std::move(l);
      absl::StatusOr<std::unique_ptr<RedisServer>> c =
          RedisServer::Start(counters);
      if (!c.ok()) return c.status();
      redis_ = *std::move(c);
    } else {
      absl::StatusOr<std::unique_ptr<RedisServer>> redis = RedisServer::Start();
      if (!redis.ok()) return redis.status();
      redis_ = *std::move(redis);
    }
    if (o_.cluster) {
      RedisClusterOptions cluster_options;
      cluster_options.masters = o_.cluster_masters;
      cluster_options.replicas_per_master = 1;
      cluster_options.node_timeout = o_.cluster_node_timeout;
      absl::StatusOr<std::unique_ptr<RedisCluster>> cluster =
          RedisCluster::Start(cluster_options);
      if (!cluster.ok()) return cluster.status();
      cluster_ = *std::move(cluster);
    }
    Progress(absl::StrCat(
        o_.cluster ? absl::StrCat("cluster ", cluster_->url(), ", counters on ",
                                  redis_->url())
        : lock_redis_ != nullptr
            ? absl::StrCat("redis-server on ", lock_redis_->url(), " (netns ",
                           lab_->lock_ns(), "), counters on ", redis_->url(),
                           " (netns ", lab_->counter_ns(), ")")
            : absl::StrCat("redis-server on ", redis_->url()),
        ", seed ", o_.seed, ", faults ", FaultNames(kinds_), ", logs in ",
        dir_));

    run_start_ = MonotonicNanos();
    // Workers stop by themselves at this time even if never told to.
    hard_end_ = run_start_ +
                absl::ToInt64Nanoseconds(o_.duration * 3 + absl::Seconds(120));
    for (int i = 0; i < o_.processes; ++i) {
      if (absl::Status w = SpawnWorker(); !w.ok()) return w;
    }
    RunSchedule();
    const int64_t run_end = MonotonicNanos();
    std::vector<std::string> worker_failures = StopWorkers();

    CheckInput in;
    in.processes = o_.processes;
    in.threads = o_.threads;
    in.locks = o_.locks;
    in.lease_ns = absl::ToInt64Nanoseconds(o_.lease);
    in.run_start = run_start_;
    in.run_end = run_end;
    in.seed = o_.seed;
    in.faults = faults_;
    in.worker_failures = std::move(worker_failures);
    in.max_wait_outside_faults_ns =
        absl::ToInt64Nanoseconds(o_.max_wait_outside_faults);
    in.max_kill_reacquire_extra_ns =
        absl::ToInt64Nanoseconds(KillReacquireBound(o_) - o_.lease);
    in.tolerate_ghost_holds = o_.tolerate_ghost_holds;
    in.loss_report_slack_ns = absl::ToInt64Nanoseconds(o_.loss_report_slack);
    in.fault_kinds = kinds_;
    in.notes = notes_;
    // In cluster and netns runs the counters live on a server of their own.
    in.restart_resets_counters = !o_.cluster && lock_redis_ == nullptr;
    in.fenced = o_.fenced;
    for (int k = 0; k < o_.locks; ++k) {
      absl::StatusOr<RedisValue> v =
          redis_->Command({"GET", CounterName(kPrefix, k)});
      int64_t value = -1;
      if (v.ok() && v->is_nil()) value = 0;
      if (v.ok() && v->is_string() && !absl::SimpleAtoi(v->str, &value)) {
        value = -1;
      }
      in.counters.push_back(value);
    }
    for (const WorkerProc& w : workers_) {
      in.logs.push_back(ParseWorkerLog(w.index, w.log_path));
    }
    redis_.reset();  // stops the servers
    cluster_.reset();
    lock_redis_.reset();
    lab_.reset();  // the namespaces, their links and tables
    Report report = Check(std::move(in));
    if (report.ok() && o_.work_dir.empty()) {
      for (const WorkerProc& w : workers_) unlink(w.log_path.c_str());
      rmdir(dir_.c_str());
    } else {
      report.text += absl::StrCat("logs:       ", dir_, "\n");
    }
    return report;
  }

 private:
  static constexpr char kPrefix[] = "harness:";

  void Progress(const std::string& line) {
    if (o_.progress == nullptr) return;
    *o_.progress << absl::StrFormat("[harness +%6.2fs] ",
                                    run_start_ == 0
                                        ? 0.0
                                        : static_cast<double>(MonotonicNanos() -
                                                              run_start_) /
                                              1e9)
                 << line << std::endl;
  }

  absl::Status MakeWorkDir() {
    if (!o_.work_dir.empty()) {
      dir_ = o_.work_dir;
      return absl::OkStatus();
    }
    const char* tmp = getenv("TMPDIR");
    std::string templ = absl::StrCat(tmp != nullptr && *tmp ? tmp : "/tmp",
                                     "/relock-harness-XXXXXX");
    if (mkdtemp(templ.data()) == nullptr) {
      return absl::UnavailableError(absl::StrCat("mkdtemp ", templ));
    }
    dir_ = templ;
    return absl::OkStatus();
  }

  absl::Status SpawnWorker() {
    WorkerConfig c;
    c.worker = static_cast<int>(workers_.size());
    c.url = o_.cluster ? cluster_->url() : LockServer()->url();
    c.host = redis_->host();
    c.port = redis_->port();
    for (RedisServer* node : DataNodes()) {
      c.keys_host = node->host();
      c.keys_port = node->port();
      break;
    }
    if (lab_ != nullptr) {
      absl::StatusOr<std::string> ns = lab_->AddWorker(c.worker);
      if (!ns.ok()) return ns.status();
      c.netns = *ns;
    }
    c.threads = o_.threads;
    c.locks = o_.locks;
    c.fenced = o_.fenced;
    c.fair = o_.fair;
    c.rw = o_.rw;
    c.multi = o_.multi;
    c.prefix = kPrefix;
    c.lease_ms = absl::ToInt64Milliseconds(o_.lease);
    c.wait_ms = absl::ToInt64Milliseconds(o_.acquire_wait);
    c.connect_timeout_ms = absl::ToInt64Milliseconds(o_.connect_timeout);
    c.command_timeout_ms = absl::ToInt64Milliseconds(o_.command_timeout);
    c.raw_timeout_ms =
        absl::ToInt64Milliseconds(o_.long_pause + absl::Seconds(2));
    c.hold_min_us = absl::ToInt64Microseconds(o_.hold_min);
    c.hold_max_us = absl::ToInt64Microseconds(o_.hold_max);
    c.think_max_us = absl::ToInt64Microseconds(o_.think_max);
    c.long_hold_ms = absl::ToInt64Milliseconds(LongHold());
    c.hard_end_ns = hard_end_;
    c.seed = o_.seed;
    c.log_path = absl::StrCat(dir_, "/worker-", c.worker, ".log");
    WorkerProc w;
    w.index = c.worker;
    w.log_path = c.log_path;
    absl::StatusOr<std::unique_ptr<ChildProcess>> child =
        ChildProcess::Spawn(o_.worker_routine, c.ToArgs());
    if (!child.ok()) return child.status();
    w.child = *std::move(child);
    absl::StatusOr<std::string> line = w.child->ReadLine(absl::Seconds(30));
    if (!line.ok() || !absl::StartsWith(*line, "ready ")) {
      return absl::InternalError(absl::StrCat(
          "worker ", w.index,
          " did not start: ", line.ok() ? *line : line.status().ToString()));
    }
    w.client_id = line->substr(6);
    Progress(
        absl::StrCat("worker ", w.index, " (pid ", w.child->pid(), ") ready"));
    workers_.push_back(std::move(w));
    return absl::OkStatus();
  }

  int64_t Deadline(absl::Duration d) const {
    return run_start_ + absl::ToInt64Nanoseconds(d);
  }
  static void SleepUntil(int64_t t) {
    const int64_t now = MonotonicNanos();
    if (t > now) absl::SleepFor(absl::Nanoseconds(t - now));
  }

  // Long enough to span a long pause or a restart plus the lease, so that
  // the holder must be told its lock was lost before it releases.
  absl::Duration LongHold() const {
    return o_.long_pause + o_.lease + absl::Seconds(1);
  }

  // Asks every live worker to make one hold that begins in the next 300 ms
  // a long one, and waits that long.
  // In cluster mode, only of one of `locks` (the faulted master's), so that
  // the long hold does not stall a lock the fault does not excuse.
  void RequestLongHolds(const std::vector<int>& locks) {
    const std::string line =
        locks.empty() ? std::string("long 300")
                      : absl::StrCat("long 300 ", absl::StrJoin(locks, ","));
    for (WorkerProc& w : workers_) {
      if (!w.killed) (void)w.child->WriteLine(line);
    }
    absl::SleepFor(absl::Milliseconds(300));
  }

  absl::Duration FaultLength(FaultKind kind) const {
    if (kind == FaultKind::kPauseShort) return o_.short_pause;
    if (kind == FaultKind::kPauseLong) return o_.long_pause;
    if (kind == FaultKind::kPauseHolder) return o_.holder_pause;
    // Both ways: shorter than the lease, then longer, by turns.
    if (kind == FaultKind::kPartition && partitions_ % 2 == 0) {
      return o_.lease / 2;
    }
    if (IsPartition(kind)) return 2 * o_.lease;
    if (kind == FaultKind::kFailover) {
      return o_.cluster_node_timeout + absl::Seconds(5);  // about
    }
    return absl::ZeroDuration();
  }

  // The servers that hold locks: the redis-server, or the cluster's running
  // nodes.
  std::vector<RedisServer*> DataNodes() const {
    std::vector<RedisServer*> nodes;
    if (!o_.cluster) {
      nodes.push_back(LockServer());
      return nodes;
    }
    for (size_t i = 0; i < cluster_->size(); ++i) {
      if (cluster_->node(i).running()) nodes.push_back(&cluster_->node(i));
    }
    return nodes;
  }

  // The server that holds lock k now; null if the cluster cannot say.
  RedisServer* LockNode(int k) const {
    if (!o_.cluster) return LockServer();
    absl::StatusOr<size_t> i = cluster_->NodeForKey(LockName(kPrefix, k));
    return i.ok() ? &cluster_->node(*i) : nullptr;
  }

  // A fault's target: the redis-server, or the master of a random lock, with
  // the locks it holds in f->locks and its index in *index. Null (and why in
  // f->detail) if the cluster cannot say.
  RedisServer* Target(Fault* f, size_t* index = nullptr) {
    if (!o_.cluster) return LockServer();
    std::uniform_int_distribution<int> pick(0, o_.locks - 1);
    absl::StatusOr<size_t> master =
        cluster_->NodeForKey(LockName(kPrefix, pick(rng_)));
    if (!master.ok()) {
      f->detail = master.status().ToString();
      return nullptr;
    }
    for (int k = 0; k < o_.locks; ++k) {
      absl::StatusOr<size_t> node = cluster_->NodeForKey(LockName(kPrefix, k));
      if (node.ok() && *node == *master) f->locks.push_back(k);
    }
    if (index != nullptr) *index = *master;
    f->detail = absl::StrCat("master ", *master, " (port ",
                             cluster_->node(*master).port(), ", locks ",
                             absl::StrJoin(f->locks, ","), "): ");
    return &cluster_->node(*master);
  }

  // Kills master i, waits for its replica's promotion, starts it again and
  // waits until it has rejoined as a replica. The node is started again even
  // if no replica took over (the fault then says so), so that the cluster
  // heals for the rest of the run.
  void Failover(size_t i, Fault* f) {
    const int64_t start = MonotonicNanos();
    absl::Status s = cluster_->Kill(i);
    f->injected = s.ok();
    if (!s.ok()) {
      absl::StrAppend(&f->detail, s.ToString());
      return;
    }
    const absl::Status promoted = cluster_->WaitUntilHealthy(absl::Seconds(30));
    const int64_t promoted_at = MonotonicNanos();
    s = cluster_->Revive(i);
    if (s.ok()) s = cluster_->WaitUntilHealthy(absl::Seconds(60));
    auto secs = [start](int64_t t) {
      return absl::FormatDuration(absl::Nanoseconds(t - start));
    };
    absl::StrAppend(
        &f->detail, "SIGKILL; ",
        promoted.ok()
            ? absl::StrCat("replica promoted after ", secs(promoted_at))
            : absl::StrCat("NO REPLICA PROMOTED: ", promoted.ToString()),
        s.ok() ? absl::StrCat(", the node back as a replica after ",
                              secs(MonotonicNanos()))
               : absl::StrCat(", the node NOT BACK: ", s.ToString()));
  }

  // Migrates the slot of a random lock to another master.
  void Reshard(Fault* f) {
    std::uniform_int_distribution<int> pick(0, o_.locks - 1);
    const int k = pick(rng_);
    const std::string name = LockName(kPrefix, k);
    f->locks = {k};
    absl::StatusOr<size_t> from = cluster_->NodeForKey(name);
    absl::StatusOr<RedisValue> slot =
        from.ok() ? cluster_->node(*from).Command({"CLUSTER", "KEYSLOT", name})
                  : absl::StatusOr<RedisValue>(from.status());
    if (!slot.ok() || !slot->is_integer()) {
      f->detail = slot.ok() ? slot->DebugString() : slot.status().ToString();
      return;
    }
    std::vector<size_t> others;
    for (size_t i = 0; i < cluster_->size(); ++i) {
      absl::StatusOr<bool> master = cluster_->IsMaster(i);
      if (i != *from && cluster_->node(i).running() && master.ok() && *master) {
        others.push_back(i);
      }
    }
    if (others.empty()) {
      f->detail = "no other master";
      return;
    }
    std::uniform_int_distribution<size_t> to_pick(0, others.size() - 1);
    const size_t to = others[to_pick(rng_)];
    absl::Status s = cluster_->MigrateSlot(static_cast<int>(slot->integer), to);
    f->injected = s.ok();
    f->detail = absl::StrCat("slot ", slot->integer, " (lock ", k,
                             ") from master ", *from, " to master ", to,
                             s.ok() ? "" : absl::StrCat(": ", s.ToString()));
  }

  void RunSchedule() {
    // The first cycle in a fixed order (of the kinds chosen): cheap faults
    // first, the kill and the holder's pause before the Redis pauses (they
    // need a healthy Redis), the partitions (both ways twice: shorter, then
    // longer than the lease) between them, the restart last.
    std::vector<FaultKind> cycle;
    for (const FaultKind kind :
         {FaultKind::kClientKillNormal, FaultKind::kScriptFlush,
          FaultKind::kReshard, FaultKind::kKillHolder, FaultKind::kPauseHolder,
          FaultKind::kClientKillPubsub, FaultKind::kPartition,
          FaultKind::kPartitionRequests, FaultKind::kPartitionReplies,
          FaultKind::kPartition, FaultKind::kPauseShort, FaultKind::kPauseLong,
          FaultKind::kFailover, FaultKind::kRestart}) {
      if (std::find(kinds_.begin(), kinds_.end(), kind) != kinds_.end()) {
        cycle.push_back(kind);
      }
    }
    size_t next = 0;
    bool first_cycle = true;
    int64_t at = Deadline(o_.warmup);
    const int64_t end = Deadline(o_.duration);
    const int64_t tail = absl::ToInt64Nanoseconds(o_.tail);
    while (true) {
      if (next == cycle.size()) {
        first_cycle = false;
        next = 0;
        std::shuffle(cycle.begin(), cycle.end(), rng_);
      }
      const FaultKind kind = cycle[next];
      if (!first_cycle &&
          at + absl::ToInt64Nanoseconds(FaultLength(kind)) + tail > end) {
        break;
      }
      ++next;
      SleepUntil(at);
      Fault f = Inject(kind);
      Progress(absl::StrCat("fault ", FaultKindName(kind), ": ",
                            f.injected ? "" : "NOT INJECTED: ", f.detail));
      faults_.push_back(std::move(f));
      at = MonotonicNanos() + absl::ToInt64Nanoseconds(o_.fault_gap);
    }
    SleepUntil(
        std::max(end, at - absl::ToInt64Nanoseconds(o_.fault_gap) + tail));
  }

  Fault Inject(FaultKind kind) {
    Fault f;
    f.kind = kind;
    // The server that a pause, a restart or a failover hits.
    RedisServer* target = nullptr;
    size_t index = 0;
    if (kind == FaultKind::kPauseShort || kind == FaultKind::kPauseLong ||
        kind == FaultKind::kRestart || kind == FaultKind::kFailover) {
      target = Target(&f, &index);
      if (target == nullptr) {
        f.start = f.end = MonotonicNanos();
        return f;
      }
    }
    if (kind == FaultKind::kPauseLong || kind == FaultKind::kRestart ||
        kind == FaultKind::kFailover) {
      RequestLongHolds(f.locks);
    }
    f.start = MonotonicNanos();
    switch (kind) {
      case FaultKind::kKillHolder:
        KillHolder(&f);
        break;
      case FaultKind::kPauseHolder:
        PauseHolder(&f);
        break;
      case FaultKind::kPartition:
      case FaultKind::kPartitionRequests:
      case FaultKind::kPartitionReplies:
        PartitionWorker(&f);
        break;
      case FaultKind::kPauseShort:
      case FaultKind::kPauseLong: {
        const absl::Duration d = FaultLength(kind);
        absl::Status s = target->Pause();
        if (s.ok()) {
          absl::SleepFor(d);
          s = target->Resume();
        }
        f.injected = s.ok();
        absl::StrAppend(
            &f.detail,
            s.ok() ? absl::StrCat("SIGSTOP for ", absl::FormatDuration(d))
                   : s.ToString());
        break;
      }
      case FaultKind::kRestart: {
        absl::Status s = target->Restart();
        f.injected = s.ok();
        absl::StrAppend(&f.detail, s.ok() ? "restarted empty" : s.ToString());
        break;
      }
      case FaultKind::kFailover:
        Failover(index, &f);
        break;
      case FaultKind::kReshard:
        Reshard(&f);
        break;
      case FaultKind::kClientKillNormal:
        KillPoolConnections(&f);
        break;
      case FaultKind::kClientKillPubsub: {
        // A relock subscriber is of type "pubsub" only while some thread
        // waits (is subscribed); retry briefly until one does.
        int64_t killed = 0;
        std::string error;
        for (int attempt = 0; attempt < 40 && killed == 0; ++attempt) {
          if (attempt > 0) absl::SleepFor(absl::Milliseconds(50));
          for (RedisServer* node : DataNodes()) {
            absl::StatusOr<RedisValue> v =
                node->Command({"CLIENT", "KILL", "TYPE", "pubsub"});
            if (v.ok() && v->is_integer()) killed += v->integer;
            if (!v.ok()) error = v.status().ToString();
          }
        }
        f.injected = killed > 0;
        f.detail = absl::StrCat("killed ", killed, " pub/sub connections",
                                error.empty() ? "" : "; ", error);
        break;
      }
      case FaultKind::kScriptFlush: {
        int flushed = 0;
        const std::vector<RedisServer*> nodes = DataNodes();
        for (RedisServer* node : nodes) {
          absl::StatusOr<RedisValue> v = node->Command({"SCRIPT", "FLUSH"});
          flushed += v.ok() && v->is_ok();
          if (!v.ok() || !v->is_ok()) {
            absl::StrAppend(&f.detail,
                            v.ok() ? v->DebugString() : v.status().ToString(),
                            "; ");
          }
        }
        f.injected = flushed == static_cast<int>(nodes.size());
        absl::StrAppend(&f.detail, "flushed on ", flushed, " of ", nodes.size(),
                        " servers");
        break;
      }
    }
    if (f.end == 0) f.end = MonotonicNanos();
    return f;
  }

  void KillPoolConnections(Fault* f) {
    int killed = 0, spared = 0;
    for (RedisServer* node : DataNodes()) {
      KillPoolConnectionsOn(*node, f, &killed, &spared);
    }
    f->injected = killed > 0;
    absl::StrAppend(&f->detail, "killed ", killed,
                    " relock pool connections (spared ", spared,
                    " counter and lock-reading connections)");
  }

  void KillPoolConnectionsOn(RedisServer& node, Fault* f, int* killed,
                             int* spared) {
    absl::StatusOr<RedisValue> list =
        node.Command({"CLIENT", "LIST", "TYPE", "normal"});
    if (!list.ok() || !list->is_string()) {
      absl::StrAppend(
          &f->detail,
          list.ok() ? list->DebugString() : list.status().ToString(), "; ");
      return;
    }
    for (absl::string_view line : absl::StrSplit(list->str, '\n')) {
      std::string id, name;
      for (absl::string_view field : absl::StrSplit(line, ' ')) {
        if (absl::StartsWith(field, "id=")) id = std::string(field.substr(3));
        if (absl::StartsWith(field, "name=")) {
          name = std::string(field.substr(5));
        }
      }
      if (id.empty()) continue;
      if (name == kRawClientName) {
        ++*spared;
        continue;
      }
      absl::StatusOr<RedisValue> r = node.Command({"CLIENT", "KILL", "ID", id});
      *killed += r.ok() && r->is_integer() && r->integer == 1;
    }
  }

  // The worker whose client id owns field `owner` ("<client-id>:<n>").
  WorkerProc* OwnerWorker(const std::string& owner) {
    const size_t colon = owner.rfind(':');
    if (colon == std::string::npos) return nullptr;
    const std::string id = owner.substr(0, colon);
    for (WorkerProc& w : workers_) {
      if (!w.killed && w.client_id == id) return &w;
    }
    return nullptr;
  }

  std::vector<std::string> Owners(int k) {
    std::vector<std::string> owners;
    RedisServer* node = LockNode(k);
    if (node == nullptr) return owners;
    absl::StatusOr<RedisValue> v =
        node->Command({"HKEYS", LockName(kPrefix, k)});
    if (v.ok() && v->is_array()) {
      for (const RedisValue& e : v->elements) {
        std::string owner = e.str;
        // rw runs: the writers (whose holds the workers record), under the
        // thread's own field; not "mode" nor the readers.
        if (o_.rw && !absl::EndsWith(owner, ":write")) continue;
        if (o_.rw) owner.resize(owner.size() - std::string(":write").size());
        owners.push_back(std::move(owner));
      }
    }
    return owners;
  }

  // Finds a worker whose owner field is in a lock and SIGSTOPs it, then
  // makes sure it still holds the lock, in Redis and by its own record (an
  // open hold); else lets it go on and looks again, for up to 5 s. The
  // stopped worker (and the lock in *lock), or null (and why in f->detail).
  WorkerProc* StopAHolder(Fault* f, int* lock) {
    const int64_t give_up = MonotonicNanos() + 5'000'000'000;
    std::vector<int> order(o_.locks);
    for (int k = 0; k < o_.locks; ++k) order[k] = k;
    while (MonotonicNanos() < give_up) {
      std::shuffle(order.begin(), order.end(), rng_);
      for (int k : order) {
        for (const std::string& owner : Owners(k)) {
          WorkerProc* w = OwnerWorker(owner);
          if (w == nullptr) continue;
          if (!w->child->Signal(SIGSTOP).ok()) continue;
          WaitStopped(w->child->pid(), absl::Milliseconds(200));
          std::vector<std::string> now = Owners(k);
          bool recorded = false;
          for (const Hold& h : ParseWorkerLog(w->index, w->log_path).holds) {
            recorded |= h.open && h.lock == k;
          }
          if (std::find(now.begin(), now.end(), owner) == now.end() ||
              !recorded) {
            (void)w->child->Signal(SIGCONT);
            continue;
          }
          *lock = k;
          return w;
        }
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    f->detail = "found no worker holding a lock within 5s";
    return nullptr;
  }

  void KillHolder(Fault* f) {
    int k = -1;
    WorkerProc* w = StopAHolder(f, &k);
    if (w == nullptr) return;
    (void)w->child->Signal(SIGKILL);
    f->end = MonotonicNanos();
    w->killed = true;
    (void)w->child->Wait(absl::Seconds(10));
    f->injected = true;
    f->worker = w->index;
    f->detail = absl::StrCat("worker ", w->index, " (pid ", w->child->pid(),
                             ") holding lock ", k);
    if (absl::Status s = SpawnWorker(); !s.ok()) {
      f->detail += absl::StrCat("; replacement failed: ", s.ToString());
    } else {
      f->detail += absl::StrCat("; replaced by worker ", workers_.back().index);
    }
  }

  // A holder's process stopped past its lease (a GC pause, a VM steal),
  // then resumed: it may write after another owner took the lock.
  void PauseHolder(Fault* f) {
    int k = -1;
    WorkerProc* w = StopAHolder(f, &k);
    if (w == nullptr) return;
    f->start = MonotonicNanos();
    absl::SleepFor(o_.holder_pause);
    const absl::Status s = w->child->Signal(SIGCONT);
    f->end = MonotonicNanos();
    f->injected = s.ok();
    f->worker = w->index;
    f->detail = absl::StrCat("worker ", w->index, " (pid ", w->child->pid(),
                             ") holding lock ", k, " stopped for ",
                             absl::FormatDuration(o_.holder_pause),
                             s.ok() ? "" : absl::StrCat(": ", s.ToString()));
  }

  // Cuts a worker off from the lock Redis (netns.h) while it holds a lock
  // if it can (it is asked for a long hold first), for FaultLength(); the
  // lease each of its locks has left on the server is read right after the
  // cut, through the harness's own link.
  void PartitionWorker(Fault* f) {
    const absl::Duration length = FaultLength(f->kind);
    if (f->kind == FaultKind::kPartition) ++partitions_;
    std::vector<WorkerProc*> live;
    for (WorkerProc& w : workers_) {
      if (!w.killed) live.push_back(&w);
    }
    if (live.empty()) {
      f->detail = "no live worker";
      return;
    }
    std::uniform_int_distribution<size_t> pick(0, live.size() - 1);
    WorkerProc* w = live[pick(rng_)];
    // Every worker is asked (a worker's threads may be waiting behind
    // another's long hold for a while); the cut falls on one that took it.
    const int64_t asked = MonotonicNanos();
    for (WorkerProc* l : live) (void)l->child->WriteLine("long 3000");
    // A worker in a long hold: its owner field in a lock, and its log shows
    // an open hold of that lock begun since it was asked and over 100 ms ago
    // (not a short one that ends as the cut begins, nor a long one asked for
    // by an earlier fault, nearly over). Its other locks are cut off with it.
    std::vector<int> held;
    for (int64_t give_up = MonotonicNanos() + 3'500'000'000;
         held.empty() && MonotonicNanos() < give_up;) {
      for (int k = 0; k < o_.locks && held.empty(); ++k) {
        for (const std::string& owner : Owners(k)) {
          WorkerProc* h = OwnerWorker(owner);
          if (h == nullptr) continue;
          const int64_t before = MonotonicNanos() - 100'000'000;
          for (const Hold& open : ParseWorkerLog(h->index, h->log_path).holds) {
            if (open.open && open.attempt_end > asked &&
                open.attempt_end < before) {
              held.push_back(open.lock);
            }
          }
          if (!held.empty()) {
            w = h;
            break;
          }
        }
      }
      if (held.empty()) absl::SleepFor(absl::Milliseconds(50));
    }
    const Cut cut = f->kind == FaultKind::kPartitionRequests  ? Cut::kRequests
                    : f->kind == FaultKind::kPartitionReplies ? Cut::kReplies
                                                              : Cut::kBoth;
    f->worker = w->index;
    f->start = MonotonicNanos();
    absl::Status s = lab_->Partition(w->index, cut);
    if (!s.ok()) {
      f->detail = s.ToString();
      return;
    }
    for (int k : held) {
      absl::StatusOr<RedisValue> pttl =
          LockServer()->Command({"PTTL", LockName(kPrefix, k)});
      const int64_t now = MonotonicNanos();
      if (pttl.ok() && pttl->is_integer() && pttl->integer > 0) {
        f->cut_holds.push_back(CutHold{k, now + pttl->integer * 1'000'000});
      }
    }
    absl::SleepFor(length - absl::Nanoseconds(MonotonicNanos() - f->start));
    s = lab_->Heal(w->index);
    f->end = MonotonicNanos();
    f->injected = true;
    std::vector<std::string> locks;
    for (const CutHold& c : f->cut_holds) {
      locks.push_back(absl::StrCat(c.lock, " (",
                                   (c.server_lease_end - f->start) / 1'000'000,
                                   " ms left)"));
    }
    f->detail = absl::StrCat(
        "worker ", w->index, " (pid ", w->child->pid(), ") for ",
        absl::FormatDuration(length), ", holding ",
        locks.empty() ? std::string("no lock") : absl::StrJoin(locks, ", "),
        s.ok() ? "" : absl::StrCat("; HEAL FAILED: ", s.ToString()));
  }

  // Tells every live worker to stop and collects them; returns problems.
  std::vector<std::string> StopWorkers() {
    std::vector<std::string> problems;
    for (WorkerProc& w : workers_) {
      if (!w.killed) (void)w.child->WriteLine("stop");
    }
    Progress("workers told to stop");
    const absl::Duration drain =
        o_.acquire_wait + o_.long_pause + o_.lease * 2 + absl::Seconds(20);
    for (WorkerProc& w : workers_) {
      if (w.killed) continue;
      absl::StatusOr<std::string> line = w.child->ReadLine(drain);
      if (!line.ok() || *line != "done") {
        problems.push_back(absl::StrCat(
            "worker ", w.index, " (pid ", w.child->pid(),
            ") did not finish within ", absl::FormatDuration(drain), ": ",
            line.ok() ? *line : line.status().ToString()));
        (void)w.child->Signal(SIGKILL);
      }
      absl::StatusOr<int> code = w.child->Wait(absl::Seconds(10));
      if (!code.ok() || *code != 0) {
        problems.push_back(absl::StrCat(
            "worker ", w.index, " exited with ",
            code.ok() ? absl::StrCat(*code) : code.status().ToString()));
      }
    }
    return problems;
  }

  // The faults to inject (each at least once) and the faults dropped and
  // why: from HarnessOptions::faults and netns; makes lab_ if they need it.
  absl::Status ChooseFaults() {
    const bool asked_net =
        std::any_of(o_.faults.begin(), o_.faults.end(),
                    [](FaultKind k) { return IsPartition(k); });
    if (o_.cluster && (asked_net || o_.netns == NetnsMode::kOn)) {
      return absl::InvalidArgumentError(
          "the partition faults and network namespaces are single-server "
          "only for now");
    }
    const bool want_lab =
        !o_.cluster && o_.netns != NetnsMode::kOff &&
        (o_.netns == NetnsMode::kOn || asked_net || o_.faults.empty());
    if (asked_net && o_.netns == NetnsMode::kOff) {
      return absl::InvalidArgumentError(
          "the partition faults need network namespaces (netns off)");
    }
    if (want_lab) {
      absl::StatusOr<std::unique_ptr<NetworkLab>> lab = NetworkLab::Create();
      if (lab.ok()) {
        lab_ = *std::move(lab);
      } else if (asked_net || o_.netns == NetnsMode::kOn) {
        return lab.status();
      } else {
        notes_.push_back(
            absl::StrCat("partition faults not run: ", lab.status().message()));
        Progress(notes_.back());
      }
    }
    const std::vector<FaultKind> supported =
        SupportedFaultKinds(o_.cluster, lab_ != nullptr);
    if (o_.faults.empty()) {
      kinds_ = supported;
      return absl::OkStatus();
    }
    for (const FaultKind kind : o_.faults) {
      if (std::find(supported.begin(), supported.end(), kind) ==
          supported.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("fault ", FaultKindName(kind), " is not supported in ",
                         o_.cluster ? "cluster" : "single-server", " mode"));
      }
    }
    kinds_ = o_.faults;
    return absl::OkStatus();
  }

  static std::string FaultNames(const std::vector<FaultKind>& kinds) {
    std::vector<std::string> names;
    for (const FaultKind k : kinds) names.emplace_back(FaultKindName(k));
    return absl::StrJoin(names, ",");
  }

  // The single server's locks: the lock redis-server in a netns run, else
  // the only one.
  RedisServer* LockServer() const {
    return lock_redis_ != nullptr ? lock_redis_.get() : redis_.get();
  }

  HarnessOptions o_;
  std::mt19937_64 rng_;
  // First, so that it goes last: its namespaces after the processes in them.
  std::unique_ptr<NetworkLab> lab_;
  std::vector<FaultKind> kinds_;
  std::vector<std::string> notes_;
  int partitions_ = 0;  // both-ways partitions so far
  std::string dir_;
  // The redis-server: the locks' and the counters' (single mode), or the
  // counters' only (cluster mode, where the locks are on cluster_).
  std::unique_ptr<RedisServer> redis_;
  std::unique_ptr<RedisCluster> cluster_;
  // Netns runs: the locks' redis-server (redis_ holds the counters only).
  std::unique_ptr<RedisServer> lock_redis_;
  std::vector<WorkerProc> workers_;
  std::vector<Fault> faults_;
  int64_t run_start_ = 0;
  int64_t hard_end_ = 0;
};

}  // namespace internal_harness

// Runs the whole harness: starts a private redis-server, the workers and the
// fault schedule, then checks. An error Status means the harness itself could
// not run (no redis-server, a worker that never started); a run that found
// problems returns a Report with failures.
inline absl::StatusOr<Report> RunHarness(const HarnessOptions& options) {
  return internal_harness::Coordinator(options).Run();
}

}  // namespace harness
}  // namespace relock

#endif  // RELOCK_TOOLS_HARNESS_HARNESS_H_
