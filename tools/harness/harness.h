// relock's safety harness: P worker processes x T threads contend K locks on
// a private redis-server (or, in cluster mode, a private Redis Cluster of M
// masters with a replica each) for a bounded time while faults are injected on
// a schedule; then a checker verifies mutual exclusion and liveness from the
// workers' records and prints a report.
//
//   worker.h       the worker process (a child routine) and its critical
//                  section; raw_redis.h its plain hiredis connections
//   record.h       the workers' log format
//   checker.h      the checks and the report (checker_steps.h: its steps)
//   netns.h        the network namespaces of the partition faults
//   coordinator.h  the coordinator: servers, workers, the fault schedule
//                  (faults.cc injects them)
//   harness.h      this file: HarnessOptions, RunHarness()
//
// In a Redlock run (HarnessOptions::redlock = N) the locks live on N
// independent redis-servers (no replication) and the workers use a
// relock::RedlockClient over them; each Redis fault hits one master, chosen
// at random, so the lock must hold on the majority that the fault spares
// (see README.md).
//
// In a semaphore run (HarnessOptions::semaphore = N) the locks are
// PermitExpirableSemaphores of N permits and the checker allows N holders of
// each at once; every single-server fault applies (see README.md).
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
//                       its unsafe window reported. In fenced runs every
//                       other one (the first included) has the worker stop
//                       itself between its SafeUntil() check and its write,
//                       so that the resource must refuse its stale write.
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
//   split-brain         (network namespaces, as below) the master of a
//                       random lock and about half of the workers cut off
//                       from the rest of the cluster until its replica is
//                       promoted, two leases more, then healed.
// cluster-node-timeout defaults to the long pause + 2 s, so that a pause
// never turns into a failover.
//
// In sentinel mode the locks live on a Sentinel group (a primary, one
// replica, three sentinels: tests/testing/redis_sentinel.h) that the workers
// reach through the sentinels (a redis-sentinel:// URL); the counters on a
// redis-server of their own. The pauses and the restart hit the primary,
// the client kills and SCRIPT FLUSH every data node; added:
//   failover            SENTINEL FAILOVER: the replica is promoted, the old
//                       primary becomes its replica.
//   split-brain         (network namespaces: every server and worker in a
//                       host of tests/testing/private_network.h) the
//                       primary and about half of the workers are cut off
//                       (nftables, sockets stay open) from the replica, the
//                       sentinels and the other workers until the sentinels
//                       have promoted the replica, and two leases more;
//                       then healed, and the old primary rejoins as a
//                       replica (its writes are lost). With replica_sync = 1
//                       no two holders may overlap; without it they may
//                       (Redis's documented limit), which
//                       expect_split_brain_overlaps reports apart.
// down-after-milliseconds defaults to the long pause + 2 s, as for the
// cluster.
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
// A library (CMake relock_harness, Bazel //tools/harness) for the tests and
// tools/harness/main.cc. Needs relock, relock_testing_fixture (the
// redis-server fixture and ChildProcess), hiredis and absl.

#ifndef RELOCK_TOOLS_HARNESS_HARNESS_H_
#define RELOCK_TOOLS_HARNESS_HARNESS_H_

#include <cstdint>
#include <iostream>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "tools/harness/checker.h"
#include "tools/harness/netns.h"
#include "tools/harness/record.h"
#include "tools/harness/worker.h"

namespace relock {
namespace harness {

enum class NetnsMode : int { kAuto, kOn, kOff };

// The replicas of each master of the cluster mode's cluster, and of the
// sentinel mode's primary.
inline constexpr int kClusterReplicasPerMaster = 1;
inline constexpr int kSentinelReplicas = 1;

// The deployment the locks live on.
enum class LockTopology : int { kSingle, kCluster, kSentinel };

// Every fault kind a mode can inject: the single-server, cluster or sentinel
// kinds and pause-holder, plus with `netns` the partitions on a single
// server and split-brain on a cluster or a sentinel group.
std::vector<FaultKind> SupportedFaultKinds(LockTopology topology, bool netns);

// "partition,pause-holder" -> kinds; InvalidArgument names an unknown one.
absl::StatusOr<std::vector<FaultKind>> ParseFaultList(absl::string_view list);

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
  // passing run, kept and named in the report otherwise). A given dir is
  // made if missing (InvalidArgument if it cannot be) and always kept.
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
  // Semaphore runs (--semaphore=N): above 0, each of the K "locks" is a
  // PermitExpirableSemaphore of N permits, taken in its watchdog mode, and
  // the checker allows N holders at once (CheckInput::permits). Not with
  // fenced, fair, rw or multi (see ValidateHarnessOptions); with or without
  // cluster.
  int semaphore = 0;
  absl::Duration cluster_node_timeout = absl::ZeroDuration();
  // Sentinel mode (see the top of this file): a primary, one replica and
  // three sentinels; the sentinels' down-after-milliseconds (zero = long
  // pause + 2 s, so that a pause never turns into a failover; a split-brain
  // lasts about this long plus an election plus two leases). Not with
  // `cluster`.
  bool sentinel = false;
  absl::Duration sentinel_down_after = absl::ZeroDuration();
  // Overlaps of two holds in a split-brain window (checker.h) are reported
  // apart as Redis's documented limit without replica acknowledgement, and
  // do not fail the run. Only in cluster or sentinel mode and with
  // replica_sync = 0 (with acknowledgement there must be none).
  bool expect_split_brain_overlaps = false;
  // Redlock runs (--redlock=N): above 0, the locks live on N independent
  // redis-servers (N odd, 3 to 7) and the workers use RedlockClients
  // (relock/redlock.h); the single-server faults hit one master each, at
  // random. Not with cluster, sentinel, fenced, fair, rw, multi, semaphore,
  // replica_sync or network namespaces (see ValidateHarnessOptions).
  int redlock = 0;
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
  // The replicas that must acknowledge each of the workers' acquires and
  // renewals: their clients' ReplicaSync::replicas (relock/options.h), with
  // a WAIT timeout of command_timeout / 2 (it must stay 100 ms below
  // command_timeout, so command_timeout must be above 200 ms). 0 (the default):
  // no WAIT. In [0, 64]; above 0 only in cluster mode, whose masters have one
  // replica each, or sentinel mode, whose primary has one, so at most 1 there
  // (see ValidateHarnessOptions).
  int replica_sync = 0;
  // How late a cut-off holder's loss report may be recorded after its
  // lease's end on the server minus the drift (CheckInput::
  // loss_report_slack_ns): what the measure cannot resolve on an idle
  // machine. A loaded one delays the timer and event threads by more.
  absl::Duration loss_report_slack = absl::Milliseconds(10);
};

// The most permits a semaphore run's semaphores may have.
inline constexpr int kMaxHarnessPermits = 1000;

// InvalidArgument, naming the option, for options no run can use:
// processes, threads or locks below 1; cluster_masters below 2 in cluster
// mode; cluster with sentinel; replica_sync outside [0, 64], above 0
// without --cluster or --sentinel (a single redis-server has no replica), or
// above their replicas (1: a WAIT for more could never be satisfied);
// expect_split_brain_overlaps without cluster or sentinel or with
// replica_sync above 0; semaphore outside
// [0, kMaxHarnessPermits], or above 0 with fenced, fair, rw or multi (lock
// kinds); redlock other than 0 or an odd number in [3, 7], or with cluster,
// sentinel, fenced, fair, rw, multi, semaphore or netns on (none has a
// Redlock form). RunHarness() checks them
// first; relock_safety_harness reports them as usage errors (exit 2).
absl::Status ValidateHarnessOptions(const HarnessOptions& o);

// How soon after a kill -9 of a holder its lock must be taken again: its
// lease ends, plus max_kill_reacquire_extra (scheduling, a waiter's re-check);
// in a fair run, plus the queue wait (FairQueueWait), for the killed worker's
// other thread may have been queued for the lock, at the head, when it died.
absl::Duration KillReacquireBound(const HarnessOptions& o);

// Runs the whole harness: starts a private redis-server, the workers and the
// fault schedule, then checks. An error Status means the harness itself could
// not run (no redis-server, a worker that never started); a run that found
// problems returns a Report with failures.
absl::StatusOr<Report> RunHarness(const HarnessOptions& options);

}  // namespace harness
}  // namespace relock

#endif  // RELOCK_TOOLS_HARNESS_HARNESS_H_
