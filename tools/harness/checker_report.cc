// The safety harness checker's verdict and printed report
// (checker_steps.h).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/harness/checker.h"
#include "tools/harness/checker_steps.h"

namespace relock {
namespace harness {
namespace internal_checker {

// The verdict: every failed check, one line each; none is a PASS.
void DecideVerdict(CheckState* s) {
  const CheckInput& in = s->in;
  Report& rep = s->rep;
  std::vector<std::string>& fail = rep.failures;
  if (rep.unexcused_overlaps > 0) {
    fail.push_back(rep.permits > 0
                       ? absl::StrCat(rep.unexcused_overlaps,
                                      " holder(s) beyond the ", rep.permits,
                                      " permits, not excused")
                       : absl::StrCat(rep.unexcused_overlaps,
                                      " unexcused overlap(s) of holds"));
  }
  if (rep.sequence_breaks > 0) {
    fail.push_back(absl::StrCat(rep.sequence_breaks,
                                " lost update(s) between clean sections"));
  }
  if (!rep.counters_ok) fail.push_back("a counter is out of bounds");
  for (const PermitTally& p : rep.permit_tallies) {
    const bool conserved =
        p.available >= 0 && p.out >= 0 &&
        (p.available + p.out == rep.permits || (p.unset && p.out == 0));
    if (!conserved) {
      fail.push_back(absl::StrCat("semaphore ", p.lock, " ended with ",
                                  p.available, " available + ", p.out,
                                  " out, not ", rep.permits, " permits"));
    }
    if (p.leased > 0) {
      fail.push_back(absl::StrCat(
          "semaphore ", p.lock, " ended with ", p.leased,
          " permit(s) leased a lease after every worker had stopped"));
    }
  }
  if (rep.token_regressions > 0) {
    fail.push_back(absl::StrCat(rep.token_regressions,
                                " fencing token(s) not above the previous "
                                "acquisition's"));
  }
  if (rep.stale_writes_accepted > 0 || rep.stale_writes_accepted_in_logs > 0) {
    fail.push_back(
        absl::StrCat("stale write(s) accepted by the fenced resource: ",
                     rep.stale_writes_accepted, " as its script reported, ",
                     rep.stale_writes_accepted_in_logs, " from the logs"));
  }
  if (rep.unnotified_losses > 0) {
    fail.push_back(absl::StrCat(rep.unnotified_losses,
                                " holder(s) never told their lock was lost"));
  }
  if (rep.losses_told_late > 0) {
    fail.push_back(absl::StrCat(
        rep.losses_told_late,
        " cut-off holder(s) not told before their lease ended on the server "
        "(minus the drift)"));
  }
  if (rep.ghost_holds > 0 && !in.tolerate_ghost_holds) {
    fail.push_back(absl::StrCat(
        rep.ghost_holds,
        " ghost hold(s): a lock still held in Redis by a thread that held "
        "nothing"));
  }
  if (!rep.anomalies.empty()) {
    fail.push_back(absl::StrCat(rep.anomalies.size(), " anomal(ies)"));
  }
  if (!rep.worker_failures.empty()) {
    fail.push_back(absl::StrCat(rep.worker_failures.size(),
                                " worker(s) did not finish normally"));
  }
  for (const auto& [worker, n] : rep.acquisitions_per_worker) {
    if (n == 0)
      fail.push_back(absl::StrCat("worker ", worker, " never acquired a lock"));
  }
  if (in.require_every_fault_kind) {
    for (const FaultKind kind :
         in.fault_kinds.empty() ? SingleNodeFaultKinds() : in.fault_kinds) {
      const char* name = FaultKindName(kind);
      if (rep.faults.count(name) == 0) {
        fail.push_back(absl::StrCat("fault ", name, " was never injected"));
      }
    }
    const std::vector<FaultKind>& kinds =
        in.fault_kinds.empty() ? SingleNodeFaultKinds() : in.fault_kinds;
    if (rep.kill_reacquires.empty() &&
        std::find(kinds.begin(), kinds.end(), FaultKind::kKillHolder) !=
            kinds.end()) {
      fail.push_back("no worker was killed while holding a lock");
    }
  }
  for (const KillReacquire& kr : rep.kill_reacquires) {
    if (kr.delay_ns < 0 ||
        kr.delay_ns > in.lease_ns + in.max_kill_reacquire_extra_ns) {
      fail.push_back(absl::StrCat(
          "lock ", kr.lock, " of killed worker ", kr.worker,
          kr.delay_ns < 0
              ? " was never reacquired"
              : absl::StrCat(" was reacquired only ", Secs(kr.delay_ns),
                             " after the kill")));
    }
  }
  if (rep.max_wait_outside_faults_ns > in.max_wait_outside_faults_ns) {
    fail.push_back(absl::StrCat("a free lock went unacquired for ",
                                Secs(rep.max_wait_outside_faults_ns),
                                " while a thread waited for it (",
                                rep.max_wait_outside_where, ")"));
  }
  if (rep.max_waiter_wait_outside_faults_ns > in.max_wait_outside_faults_ns) {
    fail.push_back(absl::StrCat(
        "a waiter waited ", Secs(rep.max_waiter_wait_outside_faults_ns),
        " after the lock was released (", rep.max_waiter_wait_where, ")"));
  }
}

namespace {

// The run, its attempts, sections and faults.
void WriteRunText(CheckState* s) {
  Report& rep = s->rep;
  std::string& t = rep.text;
  absl::StrAppend(&t, "==== relock safety harness report ====\n");
  absl::StrAppend(
      &t,
      absl::StrFormat(
          "run:        %.1f s, %d processes x %d threads x "
          "%d %s, lease %s, seed %u, replica_sync %d%s\n",
          rep.seconds, rep.processes, rep.threads, rep.locks,
          rep.permits > 0
              ? absl::StrCat("semaphores of ", rep.permits, " permits")
              : std::string("locks"),
          Secs(rep.lease_ns), rep.seed, rep.replica_sync,
          rep.redlock_masters > 0
              ? absl::StrCat(", redlock over ", rep.redlock_masters, " masters")
              : std::string()));
  absl::StrAppend(&t, "workers:    ", rep.workers_started, " started, ",
                  rep.workers_killed, " killed; acquisitions per worker:");
  for (const auto& [w, n] : rep.acquisitions_per_worker) {
    absl::StrAppend(&t, " w", w, "=", n);
  }
  absl::StrAppend(&t, "\nattempts:   ", rep.attempts, " (", rep.acquisitions,
                  " acquired");
  for (const auto& [code, n] : rep.failed_attempts) {
    absl::StrAppend(&t, ", ", n, " ", code);
  }
  absl::StrAppend(&t, ")\nsections:   ", rep.completed_sections, " clean;");
  for (const auto& [name, n] : rep.outcomes) {
    absl::StrAppend(&t, " ", name, "=", n);
  }
  absl::StrAppend(&t, "\nfaults:     ");
  if (rep.faults.empty()) absl::StrAppend(&t, "none");
  for (const auto& [name, n] : rep.faults) {
    absl::StrAppend(&t, name, "=", n, " ");
  }
  absl::StrAppend(&t, "\n");
  for (const std::string& f : rep.fault_log) {
    absl::StrAppend(&t, "            ", f, "\n");
  }
}

// Overlaps, lost locks (restarts, long pauses, partitions) and pauses of
// holders.
void WriteLossesText(CheckState* s) {
  const CheckInput& in = s->in;
  Report& rep = s->rep;
  std::string& t = rep.text;
  const int64_t drift = DriftNanos(in.lease_ns);
  if (rep.permits > 0) {
    absl::StrAppend(
        &t, "overlaps:   ", rep.unexcused_overlaps, " holders beyond the ",
        rep.permits, " permits that no fault excuses (must be 0); ",
        rep.excused_overlaps,
        " beyond them excused (a holder was told its permit was lost)\n");
    absl::StrAppend(&t, "concurrency: at most ", rep.max_concurrency,
                    " holders at once (", rep.max_concurrency_where, "), ",
                    rep.max_unexcused_concurrency,
                    " not excused by a loss report or a pause (at most ",
                    rep.permits, ")\n");
  } else {
    absl::StrAppend(&t, "overlaps:   ", rep.unexcused_overlaps,
                    " unexcused (must be 0); ", rep.excused_overlaps,
                    " excused overlapping pairs (one holder was told its "
                    "lock was lost)\n");
  }
  for (const std::string& e : rep.overlap_examples) {
    absl::StrAppend(&t, "            OVERLAP ", e, "\n");
  }
  if (rep.faults.count(FaultKindName(FaultKind::kSplitBrain)) != 0 ||
      rep.split_brain_overlaps > 0) {
    absl::StrAppend(
        &t, "split-brain overlaps: ", rep.split_brain_overlaps,
        rep.expect_split_brain_overlaps
            ? ", Redis's documented limit without replica acknowledgement "
              "(expected: not counted as unexcused)\n"
            : absl::StrCat(" (counted as unexcused; replica_sync ",
                           rep.replica_sync, ")\n"));
  }
  absl::StrAppend(&t, "lost locks: ", rep.lost_events, " kLockLost events; ",
                  rep.holds_told_lost, " holds told lost (",
                  rep.release_aborted, " by Release() = Aborted); ",
                  rep.release_unavailable, " releases Unavailable\n");
  if (rep.redlock_masters > 0) {
    absl::StrAppend(&t, "            ", rep.holds_spanning_losses,
                    " holds spanned a restart/long pause of one of ",
                    rep.redlock_masters,
                    " Redlock masters (a minority: they keep their lock, "
                    "need not be told)\n");
  } else {
    absl::StrAppend(&t, "            ", rep.holds_spanning_losses,
                    " holds spanned a restart/long pause; ",
                    rep.unnotified_losses, " of them never told (must be 0)\n");
  }
  for (const std::string& e : rep.unnotified_examples) {
    absl::StrAppend(&t, "            NOT TOLD ", e, "\n");
  }
  if (rep.partition_holds > 0) {
    const std::vector<int64_t>& d = rep.loss_detection_ns;
    absl::StrAppend(
        &t, "partition:  ", rep.partition_holds,
        " holds cut off from Redis; told after p50 ",
        d.empty() ? std::string("-") : Ms(d[d.size() / 2]), ", max ",
        d.empty() ? std::string("-") : Ms(d.back()), " (", d.size(),
        " told; lease ", Ms(in.lease_ns), "), at the least ",
        d.empty() ? std::string("-") : Ms(rep.min_loss_margin_ns),
        " before the lease ended on the server; ", rep.losses_told_late,
        " told after that end minus the drift (", Ms(drift), "; slack ",
        Ms(in.loss_report_slack_ns), ") (must be 0)\n");
  }
  for (const std::string& e : rep.partition_details) {
    absl::StrAppend(&t, "            ", e, "\n");
  }
  for (const std::string& e : rep.late_examples) {
    absl::StrAppend(&t, "            LATE ", e, "\n");
  }
  if (!rep.pause_windows.empty()) {
    absl::StrAppend(&t, "pauses:     ", rep.paused_overlaps,
                    " overlaps with a paused holder (excused: only fencing "
                    "protects the resource then); ",
                    rep.stale_writes, " stale writes by resumed holders, ",
                    rep.stale_write_breaks, " lost updates they explain\n");
  }
  for (const std::string& w : rep.pause_windows) {
    absl::StrAppend(&t, "            ", w, "\n");
  }
}

// Ghosts, orphans, lost updates, tokens and counters.
void WriteSectionsText(CheckState* s) {
  const CheckInput& in = s->in;
  Report& rep = s->rep;
  std::string& t = rep.text;
  absl::StrAppend(&t, "ghosts:     ", rep.ghost_holds,
                  " ghost holds (owner field still in Redis one lease after "
                  "its thread held nothing; freed by the worker)",
                  in.tolerate_ghost_holds ? ", tolerated" : " (must be 0)",
                  "\n");
  for (const std::string& g : rep.ghost_examples) {
    absl::StrAppend(&t, "            GHOST ", g, "\n");
  }
  absl::StrAppend(&t, "orphans:    ", rep.orphan_holds,
                  " owner fields left by acquires whose reply was lost, "
                  "gone within one lease (expected under faults)\n");
  absl::StrAppend(&t, "updates:    ", rep.sequence_breaks,
                  " lost updates between clean sections (must be 0)\n");
  for (const std::string& e : rep.sequence_examples) {
    absl::StrAppend(&t, "            LOST UPDATE ", e, "\n");
  }
  if (rep.fenced) {
    absl::StrAppend(&t, "tokens:     ", rep.fenced_acquisitions,
                    " fenced acquisitions; ", rep.token_regressions,
                    " tokens not above the previous one (must be 0); ",
                    rep.token_resets,
                    " restarts across a counter loss (restart/failover); ",
                    rep.token_order_unknown,
                    " lower tokens whose attempt overlapped the previous one "
                    "(order on Redis unknown, e.g. a reply read after a "
                    "pause)\n");
    for (const std::string& e : rep.token_examples) {
      absl::StrAppend(&t, "            TOKEN ", e, "\n");
    }
    absl::StrAppend(&t, "fencing:    ", rep.fenced_writes_accepted,
                    " writes accepted by the resource; ",
                    rep.stale_writes_refused, " stale writes refused; ",
                    rep.stale_writes_accepted,
                    " stale writes accepted (must be 0; ",
                    rep.stale_writes_accepted_in_logs,
                    " by the logs' cross-check, must be 0)\n");
    for (const std::string& e : rep.fence_examples) {
      absl::StrAppend(&t, "            STALE ", e, "\n");
    }
  }
  if (!rep.permit_tallies.empty()) {
    absl::StrAppend(&t, "permits:   ");
    for (const PermitTally& p : rep.permit_tallies) {
      absl::StrAppend(&t, " semaphore ", p.lock, ": ",
                      p.unset ? "unset (wiped by a restart), " : "",
                      p.available, " available + ", p.out, " out (", p.leased,
                      " still leased) of ", rep.permits, ";");
    }
    absl::StrAppend(&t,
                    " at the end, a lease after the workers stopped (must "
                    "add up, none leased)\n");
  }
  absl::StrAppend(&t, "counters:  ");
  for (const CounterCheck& c : rep.counters) {
    absl::StrAppend(&t, " lock ", c.lock, "=", c.value, " (",
                    c.stale ? "stale write.." : absl::StrCat(c.clean, ".."),
                    c.clean + c.maybe_wrote, ") ", c.ok ? "ok" : "BAD", ";");
  }
}

// Waits, hand-offs, kills' reacquisitions and the longest calls.
void WriteLivenessText(CheckState* s) {
  Report& rep = s->rep;
  std::string& t = rep.text;
  absl::StrAppend(
      &t, "\nwaits:      longest a waiter waited after its lock was released: ",
      Ms(rep.max_waiter_wait_outside_faults_ns),
      " outside pause/restart/failover/kill windows",
      rep.max_waiter_wait_where.empty()
          ? ""
          : absl::StrCat(" (", rep.max_waiter_wait_where, ")"),
      ", ", Ms(rep.max_wait_ns), " overall\n");
  absl::StrAppend(&t, "handoffs:   ", rep.waits_measured,
                  " frees with a waiter; longest until the next acquire: ",
                  Ms(rep.max_wait_outside_faults_ns),
                  " outside pause/restart/failover/kill windows",
                  rep.max_wait_outside_where.empty()
                      ? ""
                      : absl::StrCat(" (", rep.max_wait_outside_where, ")"),
                  ", ", Ms(rep.max_wait_near_connection_faults_ns),
                  " near client-kill/script-flush; ",
                  rep.waits_over_1s_outside_faults, " > 1s\n");
  if (rep.stalls > 0) {
    absl::StrAppend(&t, "stalls:     ", rep.stalls,
                    " connections lost to a request without a reply within "
                    "command_timeout (Redis or the machine stalled; not "
                    "injected): waits within a lease and 1s of one are not "
                    "counted as outside faults\n");
  }
  for (const KillReacquire& kr : rep.kill_reacquires) {
    absl::StrAppend(&t, "kill -9:    lock ", kr.lock, " of worker ", kr.worker,
                    " (killed at +", s->Rel(kr.kill_time), ") ",
                    kr.delay_ns < 0
                        ? std::string("NEVER reacquired")
                        : absl::StrCat("reacquired after ", Secs(kr.delay_ns)),
                    "\n");
  }
  absl::StrAppend(&t, "calls:      longest TryAcquire ",
                  Ms(rep.max_acquire_call_ns), ", longest Release ",
                  Ms(rep.max_release_call_ns), "\n");
}

// Anomalies, failed workers, the verdict, notes and the result.
void WriteVerdictText(CheckState* s) {
  const CheckInput& in = s->in;
  Report& rep = s->rep;
  std::string& t = rep.text;
  for (const std::string& a : rep.anomalies) {
    absl::StrAppend(&t, "ANOMALY:    ", a, "\n");
  }
  for (const std::string& w : rep.worker_failures) {
    absl::StrAppend(&t, "WORKER:     ", w, "\n");
  }
  for (const std::string& f : rep.failures) {
    absl::StrAppend(&t, "FAIL:       ", f, "\n");
  }
  rep.notes = in.notes;
  for (const std::string& n : rep.notes) {
    absl::StrAppend(&t, "note:       ", n, "\n");
  }
  absl::StrAppend(&t, "result:     ", rep.ok() ? "PASS" : "FAIL", "\n");
}

}  // namespace

void WriteText(CheckState* s) {
  WriteRunText(s);
  WriteLossesText(s);
  WriteSectionsText(s);
  WriteLivenessText(s);
  WriteVerdictText(s);
}

}  // namespace internal_checker
}  // namespace harness
}  // namespace relock
