// The safety harness's checker: from the workers' logs (record.h), the faults
// the coordinator injected and the final counter values, decides whether the
// locks excluded each other, and measures how long waiters waited.
//
// Definitions:
//   overlap     two holds of one lock that intersect, not excused by a
//               loss report (see "told lost") nor by a pause (see
//               "paused"). In a semaphore run (CheckInput::permits = N),
//               an acquisition that makes more than N holds at once that
//               no report or pause excuses: each hold beyond N is counted
//               (for a lock, N = 1, that is each intersecting pair).
//   hold        [the acquire call's return, the release call's start], or
//               [acquire, kill time] when its process was SIGKILLed holding
//               it. Under mutual exclusion two holds of one lock never
//               intersect: the first holder's release is sent before Redis
//               runs it, and the next holder's acquire returns after.
//   told lost   the holder got a kLockLost event for that lock and owner
//               (attributed to its latest hold of the lock begun before the
//               event), SafeUntil() said Aborted, or Release() returned
//               Aborted (in a semaphore run also NotFound: the permit was
//               gone). Overlaps with a hold told lost are "excused": the
//               library reported them, as its correctness model requires.
//   clean       a hold not told lost, not killed, whose GET and SET both
//               succeeded.
//   maybe-wrote a hold that is not clean but may have written its counter
//               (SET sent, or killed while holding).
//   counter     after the last restart (which wipes it, unless the counters
//               live on a server of their own, as in cluster mode), with N
//               clean sections that read after the restart and X maybe-wrote
//               sections that may have written after it began:
//               N <= value <= N + X.
//   sequence    consecutive clean sections of a lock, with no maybe-wrote
//               section or restart between them, read consecutive values
//               (no lost update).
//   tokens      (fenced runs) in acquisition order, each lock's tokens
//               strictly increase, except across a restart or failover of
//               the Redis that holds its counter (which may lose it).
//   ghost       a thread's owner field found in Redis (by the worker) after
//               its Release() returned OK or its acquire failed without
//               "held by another owner": the lock is held by nobody's hold.
//   cut-off     a hold open when its worker was partitioned from the lock
//               Redis, or any hold in a split-brain window: only a loss
//               report received before the next holder acquired excuses an
//               overlap with it; and (partitions) it must be told by
//               its lease's end on the server (read right after the cut)
//               minus the drift, if the cut and the hold last that long.
//   paused      a hold whose process was SIGSTOPped (pause-holder) during
//               it: its overlaps are excused by the pause (fencing's job),
//               and each pause's unsafe window is reported; never clean.
//               Its SET may land long after later holds (a stale write):
//               the lost updates it explains are counted apart, and its
//               lock's counter keeps only the upper bound.
//   split-brain a hold that intersects a split-brain fault's window (the
//               split to the old primary's return as a replica). Redis's
//               asynchronous replication lets a holder on the old primary's
//               side and one on the promoted replica's hold at once; with
//               replica acknowledgement (replica_sync = 1) it must not. An
//               unexcused overlap of two such holds is counted as a
//               split-brain overlap too; under expect_split_brain_overlaps
//               it is counted only there, not as unexcused, and such holds
//               are never clean (a lost update between them is expected).
//   told-must   a hold that began before a restart or a pause longer than
//               the lease and ended more than a lease after it must have
//               been told lost (in cluster mode: a hold of a lock on the
//               restarted or paused master). A failover asks nothing of it:
//               a lock that reached the replica survives.
//   wait        per waiter: from the first release (returned OK, by another
//               owner) during its attempt to the attempt's end (acquired or
//               gave up). A waiter that stays asleep while the lock is free,
//               or a lock that stays held after its owner released it, shows
//               up here.
//   handoff     for a hold released OK while another attempt on the lock was
//               waiting: from the release call to the next acquisition of the
//               lock by anyone.
//               Waits and handoffs that touch a "disruptive" fault window (a
//               Redis pause, restart or failover, or a holder kill, from its
//               start to its end plus one lease plus 1 s) are reported apart;
//               in cluster mode a fault on one master excuses only the locks
//               on it.
//
// Part of tools/harness (see harness.h). Check() runs the steps in
// checker_steps.h; checker.cc, checker_locks.cc and checker_report.cc have
// the definitions.

#ifndef RELOCK_TOOLS_HARNESS_CHECKER_H_
#define RELOCK_TOOLS_HARNESS_CHECKER_H_

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tools/harness/record.h"

namespace relock {
namespace harness {

enum class FaultKind : int {
  kKillHolder = 0,        // SIGKILL of a worker process holding a lock
  kPauseShort = 1,        // SIGSTOP/SIGCONT of redis-server, < lease
  kPauseLong = 2,         // SIGSTOP/SIGCONT of redis-server, > lease
  kRestart = 3,           // redis-server restart without persistence
  kClientKillNormal = 4,  // CLIENT KILL of every relock pool connection
  kClientKillPubsub = 5,  // CLIENT KILL TYPE pubsub
  kScriptFlush = 6,       // SCRIPT FLUSH
  // Cluster mode only:
  kFailover = 7,  // SIGKILL of a master, its replica promoted, it rejoins
  kReshard = 8,   // a lock's slot migrated to another master under traffic
  // Network namespaces only (netns.h): one worker cut off from the lock
  // Redis, both ways (shorter, then longer than the lease), or one way.
  kPartition = 9,
  kPartitionRequests = 10,  // its requests lost, Redis's replies get through
  kPartitionReplies = 11,   // its requests get through, the replies are lost
  // Any mode: SIGSTOP of a worker holding a lock, past its lease; SIGCONT.
  kPauseHolder = 12,
  // Cluster or sentinel mode, on a private network: a master (the primary)
  // and some workers cut off from its replica, the rest of the cluster (the
  // sentinels) and the other workers until the replica is promoted, then
  // healed (the old master becomes a replica). It concerns every lock (the
  // cut-off workers are cut off from every master but the old one).
  kSplitBrain = 13,
};
inline constexpr int kFaultKinds = 14;

bool IsPartition(FaultKind kind);

// The kinds a run injects (each at least once): on a single redis-server,
// and on a cluster (where pauses, restarts and failovers hit one master).
std::vector<FaultKind> SingleNodeFaultKinds();
std::vector<FaultKind> ClusterFaultKinds();

const char* FaultKindName(FaultKind kind);

// The kind named `name` (FaultKindName), or InvalidArgument.
absl::StatusOr<FaultKind> FaultKindFromName(absl::string_view name);

// The drift allowance relock subtracts from a lease (lib/lock/lock_env.h:
// 1% of the lease + 2 ms): a holder must be told its lock is lost that long
// before its lease ends on the server.
int64_t DriftNanos(int64_t lease_ns);

// The faults whose windows excuse waits and hand-offs (see "wait" above):
// pauses, restarts and failovers of Redis, kills and pauses of holders,
// partitions.
bool IsDisruptive(FaultKind kind);

// A lock a partitioned worker held when its link was cut, and when its lease
// ended on the lock Redis as read (PTTL) right after the cut.
struct CutHold {
  int lock = 0;
  int64_t server_lease_end = 0;  // MonotonicNanos()
};

struct Fault {
  FaultKind kind = FaultKind::kScriptFlush;
  int64_t start = 0;  // MonotonicNanos()
  int64_t end = 0;    // for a kill: the SIGKILL
  bool injected = false;
  // The worker killed (kKillHolder), paused (kPauseHolder) or cut off (the
  // partitions).
  int worker = -1;
  // Partitions: the locks the worker held at the cut (start = the cut, end
  // = the heal).
  std::vector<CutHold> cut_holds;
  // The locks whose Redis node the fault hit (a cluster's paused, restarted
  // or failed-over master; a resharded lock); empty: every lock.
  std::vector<int> locks;
  std::string detail;

  // Whether the fault hit lock `lock`'s Redis node.
  bool Affects(int lock) const;
};

// Semaphore runs: what the lock Redis held of semaphore `lock` at the end,
// a lease after every worker had stopped (a worker's Client::Close() gives
// back the permits its threads held). Its permits are conserved when
// available + out = the permits, or when it is unset with none out (a
// restart wiped it and no thread set it again: every thread was waiting);
// a permit still out with a lease not yet ended was renewed though no live
// process held it.
struct PermitTally {
  int lock = 0;
  bool unset = false;      // no count in Redis
  int64_t available = -1;  // the count (-1: unreadable; unset: 0)
  int64_t out = -1;        // permits out ("{name}:timeout"; -1: unreadable)
  int64_t leased = 0;      // of those, with a lease not yet ended
};

struct CheckInput {
  int processes = 0;
  int threads = 0;
  int locks = 0;
  int64_t lease_ns = 0;
  int64_t run_start = 0;
  int64_t run_end = 0;  // when the workers were told to stop
  uint64_t seed = 0;
  // The replicas the workers' clients asked to acknowledge each write
  // (ReplicaSync::replicas; HarnessOptions::replica_sync): printed only.
  int replica_sync = 0;
  std::vector<WorkerLog> logs;
  std::vector<Fault> faults;
  // Final value of each counter; -1 if it could not be read.
  std::vector<int64_t> counters;
  // Workers that did not finish normally (hung, crashed), with why.
  std::vector<std::string> worker_failures;
  // Bounds for the verdict.
  int64_t max_wait_outside_faults_ns = 3'000'000'000;
  int64_t max_kill_reacquire_extra_ns = 3'000'000'000;  // beyond one lease
  bool require_every_fault_kind = true;
  // The kinds required; empty: SingleNodeFaultKinds().
  std::vector<FaultKind> fault_kinds;
  // Whether a restart wipes the counters (they live on the restarted
  // server); false in cluster mode, where they live on a server of their
  // own.
  bool restart_resets_counters = true;
  // FencedLocks: every hold carries its token (Hold::token).
  bool fenced = false;
  // Semaphore runs (--semaphore=N): each "lock" is a semaphore of `permits`
  // permits, and an overlap is more than that many holds at once (see
  // "overlaps"); its counter is incremented atomically, so the sequence of
  // reads is not checked. 0: locks (one holder).
  int permits = 0;
  // Semaphore runs: each semaphore's permits at the end (see PermitTally);
  // each must be conserved, none still leased.
  std::vector<PermitTally> permit_tallies;
  // Ghost holds (see worker.h) fail the run unless tolerated.
  bool tolerate_ghost_holds = false;
  // How much later than the lease's end on the server minus the drift a
  // cut-off holder's loss report may be recorded: what the measure cannot
  // resolve (PTTL's whole milliseconds, the timer wheel's rounding up to one,
  // the event's delivery to the worker's callback, which logs its time).
  // Below the drift, so a report within it still precedes the server's end.
  int64_t loss_report_slack_ns = 10'000'000;
  // Printed on the report (e.g. why the partition faults did not run).
  std::vector<std::string> notes;
  // Overlaps of two holds in a split-brain window are Redis's documented
  // limit without replica acknowledgement: counted apart
  // (Report::split_brain_overlaps), they do not fail the run.
  bool expect_split_brain_overlaps = false;
  // Redlock runs: the number of independent masters (0: not a Redlock
  // run). Each Redis fault hits one master, a minority: a hold that spans
  // a restart or a long pause of it keeps its lock on the others and need
  // not be told (such holds are counted, not required to be told); the
  // overlap check stays as strict.
  int redlock_masters = 0;
};

struct CounterCheck {
  int lock = 0;
  int64_t value = -1;
  int64_t clean = 0;        // N
  int64_t maybe_wrote = 0;  // X
  bool stale = false;       // a paused holder wrote late: no lower bound
  bool ok = false;
};

struct KillReacquire {
  int worker = 0;
  int lock = 0;
  int64_t kill_time = 0;
  int64_t delay_ns = -1;  // -1: never reacquired
};

struct Report {
  // Run.
  double seconds = 0;
  int processes = 0, threads = 0, locks = 0;
  int64_t lease_ns = 0;
  uint64_t seed = 0;
  int replica_sync = 0;
  int redlock_masters = 0;  // CheckInput::redlock_masters
  int workers_started = 0, workers_killed = 0;
  std::map<int, int64_t> acquisitions_per_worker;
  // Attempts and sections.
  int64_t attempts = 0, acquisitions = 0;
  std::map<std::string, int64_t> failed_attempts;  // by status code name
  std::map<std::string, int64_t> outcomes;         // by Outcome name
  int64_t completed_sections = 0;                  // clean
  // Faults.
  std::map<std::string, int> faults;  // injected, by kind name
  std::vector<std::string> fault_log;
  // Safety. Overlaps: holders beyond the permits at each acquisition (for a
  // lock, intersecting pairs); see "overlaps" above.
  int permits = 0;  // CheckInput::permits
  int64_t unexcused_overlaps = 0, excused_overlaps = 0;
  // Overlaps that no loss report or pause excuses between two holds in a
  // split-brain window: part of unexcused_overlaps, unless expected
  // (CheckInput::expect_split_brain_overlaps), then apart from them.
  int64_t split_brain_overlaps = 0;
  bool expect_split_brain_overlaps = false;
  // The most holds of one lock (semaphore) seen at once at an acquisition,
  // and the most of those no loss report or pause excused.
  int64_t max_concurrency = 0, max_unexcused_concurrency = 0;
  std::string max_concurrency_where;
  // Semaphore runs: CheckInput::permit_tallies.
  std::vector<PermitTally> permit_tallies;
  std::vector<std::string> overlap_examples;
  int64_t sequence_breaks = 0;
  std::vector<std::string> sequence_examples;
  // Fenced runs: acquisitions with a token, tokens not above the previous
  // acquisition's (regressions, must be 0; resets: across a counter loss).
  bool fenced = false;
  int64_t fenced_acquisitions = 0, token_regressions = 0, token_resets = 0;
  // Tokens not above the previous acquisition's whose attempt overlapped
  // that one's (their order on Redis unknown: a reply read late, as after a
  // pause of the process); not regressions.
  int64_t token_order_unknown = 0;
  std::vector<std::string> token_examples;
  // Fenced runs, at the resource (the counter's script): writes it accepted,
  // stale writes it refused (a token below the highest it had accepted), and
  // stale writes accepted, counted two ways, both of which must be 0: as the
  // script reported them (accepted, yet below the highest it reported), and
  // from the logs (an accepted write whose token is below that of a write
  // accepted entirely before it was sent).
  int64_t fenced_writes_accepted = 0, stale_writes_refused = 0,
          stale_writes_accepted = 0, stale_writes_accepted_in_logs = 0;
  std::vector<std::string> fence_examples;
  std::vector<CounterCheck> counters;
  bool counters_ok = false;
  // Lost-lock reports.
  int64_t lost_events = 0, holds_told_lost = 0, release_aborted = 0,
          release_unavailable = 0;
  // Holds across a restart or long pause (by more than a lease after it);
  // those not told lost.
  int64_t holds_spanning_losses = 0, unnotified_losses = 0;
  std::vector<std::string> unnotified_examples;
  // Partitions: for each lock a cut-off worker held at the cut, how long
  // until it was told (kLockLost); late: told (or never told while it went
  // on holding) after its lease ended on the server minus the drift.
  std::vector<int64_t> loss_detection_ns;
  int64_t partition_holds = 0, losses_told_late = 0;
  // The least time between a report and the lease's end on the server.
  int64_t min_loss_margin_ns = std::numeric_limits<int64_t>::max();
  std::vector<std::string> late_examples;
  std::vector<std::string> partition_details;  // one line per cut-off hold
  // Overlaps excused by a pause of the old holder's process (pause-holder),
  // and each pause's unsafe window: from another owner's first acquisition
  // of the lock to when the paused holder stopped believing it held it
  // (told it was lost, or released).
  int64_t paused_overlaps = 0;
  // Paused holders' SETs sent after another owner had acquired the lock
  // (stale writes: only fencing at the resource refuses them), and the
  // breaks in the sequence of clean sections they explain.
  int64_t stale_writes = 0, stale_write_breaks = 0;
  std::vector<std::string> pause_windows;
  // Liveness.
  int64_t waits_measured = 0;
  int64_t max_wait_ns = 0, max_wait_outside_faults_ns = 0,
          max_wait_near_connection_faults_ns = 0;
  int64_t waits_over_1s_outside_faults = 0;
  std::string max_wait_outside_where;
  // Per waiter: from the first release by another owner during its attempt
  // to the attempt's end.
  int64_t max_waiter_wait_outside_faults_ns = 0;
  std::string max_waiter_wait_where;
  // Stalls the workers reported outside the injected faults' windows (a
  // request without a reply within command_timeout: Redis or the machine
  // stalled): waits across one are not counted as outside faults.
  int64_t stalls = 0;
  std::vector<KillReacquire> kill_reacquires;
  int64_t max_acquire_call_ns = 0, max_release_call_ns = 0;
  // Ghost holds: a thread's owner field still in Redis one lease after its
  // thread held nothing (Release() had returned OK, or its acquire had
  // failed): a hold kept alive that nobody will release (a bug).
  int64_t ghost_holds = 0;
  // Orphans: such an owner field that ended within one lease: an acquire
  // whose reply was lost ran on Redis. Expected under faults; relock never
  // renews them.
  int64_t orphan_holds = 0;
  std::vector<std::string> ghost_examples;
  // Problems.
  std::vector<std::string> anomalies;  // E lines, bad lines, unclosed holds
  std::vector<std::string> worker_failures;
  std::vector<std::string> notes;
  std::vector<std::string> failures;  // the verdict: empty = PASS
  bool ok() const { return failures.empty(); }
  std::string text;  // the printable report
};

// Checks a run's records (see the definitions above) and writes the report.
Report Check(CheckInput in);

}  // namespace harness
}  // namespace relock

#endif  // RELOCK_TOOLS_HARNESS_CHECKER_H_
