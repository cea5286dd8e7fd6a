// The safety harness's checker (checker.h): Check() and its steps but the
// per-lock ones (checker_locks.cc) and the report (checker_report.cc); see
// checker_steps.h.

#include "tools/harness/checker.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "tools/harness/checker_steps.h"
#include "tools/harness/record.h"

namespace relock {
namespace harness {

bool IsPartition(FaultKind kind) {
  return kind == FaultKind::kPartition ||
         kind == FaultKind::kPartitionRequests ||
         kind == FaultKind::kPartitionReplies;
}

std::vector<FaultKind> SingleNodeFaultKinds() {
  return {FaultKind::kKillHolder,       FaultKind::kPauseShort,
          FaultKind::kPauseLong,        FaultKind::kRestart,
          FaultKind::kClientKillNormal, FaultKind::kClientKillPubsub,
          FaultKind::kScriptFlush};
}
std::vector<FaultKind> ClusterFaultKinds() {
  std::vector<FaultKind> kinds = SingleNodeFaultKinds();
  kinds.push_back(FaultKind::kFailover);
  kinds.push_back(FaultKind::kReshard);
  return kinds;
}

const char* FaultKindName(FaultKind kind) {
  switch (kind) {
    case FaultKind::kKillHolder:
      return "kill-9-holder";
    case FaultKind::kPauseShort:
      return "pause-short";
    case FaultKind::kPauseLong:
      return "pause-long";
    case FaultKind::kRestart:
      return "restart";
    case FaultKind::kClientKillNormal:
      return "client-kill-pool";
    case FaultKind::kClientKillPubsub:
      return "client-kill-pubsub";
    case FaultKind::kScriptFlush:
      return "script-flush";
    case FaultKind::kFailover:
      return "failover";
    case FaultKind::kReshard:
      return "reshard";
    case FaultKind::kPartition:
      return "partition";
    case FaultKind::kPartitionRequests:
      return "partition-requests";
    case FaultKind::kPartitionReplies:
      return "partition-replies";
    case FaultKind::kPauseHolder:
      return "pause-holder";
    case FaultKind::kSplitBrain:
      return "split-brain";
  }
  return "?";
}

absl::StatusOr<FaultKind> FaultKindFromName(absl::string_view name) {
  std::vector<std::string> known;
  for (int i = 0; i < kFaultKinds; ++i) {
    const FaultKind kind = static_cast<FaultKind>(i);
    if (name == FaultKindName(kind)) return kind;
    known.emplace_back(FaultKindName(kind));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown fault \"", name, "\" (known: ", absl::StrJoin(known, ","), ")"));
}

int64_t DriftNanos(int64_t lease_ns) { return lease_ns / 100 + 2'000'000; }

bool IsDisruptive(FaultKind kind) {
  return kind == FaultKind::kKillHolder || kind == FaultKind::kPauseShort ||
         kind == FaultKind::kPauseLong || kind == FaultKind::kRestart ||
         kind == FaultKind::kFailover || kind == FaultKind::kPauseHolder ||
         kind == FaultKind::kSplitBrain || IsPartition(kind);
}

bool Fault::Affects(int lock) const {
  return locks.empty() ||
         std::find(locks.begin(), locks.end(), lock) != locks.end();
}

Report Check(CheckInput in) {
  namespace steps = internal_checker;
  steps::CheckState s(in);
  steps::SummarizeRun(&s);
  steps::CollectFaults(&s);
  steps::CollectHolds(in.logs, &s);
  steps::MarkPausedAndCutHolds(&s);
  steps::CountHolds(&s);
  steps::CheckLocks(&s);
  steps::ReportPauseWindows(&s);
  steps::CheckPartitions(&s);
  steps::DecideVerdict(&s);
  steps::WriteText(&s);
  return std::move(s.rep);
}

namespace internal_checker {

std::string Secs(int64_t ns) {
  return absl::StrFormat("%.3fs", static_cast<double>(ns) / 1e9);
}

std::string Ms(int64_t ns) {
  return absl::StrFormat("%.1fms", static_cast<double>(ns) / 1e6);
}

bool Intersects(int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
  return a0 <= b1 && b0 <= a1;
}

std::string CheckState::Rel(int64_t t) const { return Secs(t - in.run_start); }

std::string CheckState::Describe(const Hold& h) const {
  return absl::StrCat(
      "w", h.worker, "/t", h.thread, " [+", Rel(h.attempt_end), ", +",
      h.end == std::numeric_limits<int64_t>::max() ? std::string("never")
                                                   : Rel(h.end),
      "]", h.killed ? " killed" : "", h.told_lost ? " told-lost" : "",
      h.paused ? " paused" : "", h.cut ? " cut-off" : "",
      h.open ? "" : absl::StrCat(" ", OutcomeName(h.outcome)));
}

bool IsClean(const Hold& h) {
  return !h.open && !h.told_lost && !h.paused && !h.split_brain &&
         h.outcome == Outcome::kCompleted;
}

bool MayHaveWritten(const Hold& h) {
  // A write the fenced resource refused wrote nothing.
  return !IsClean(h) &&
         (h.open || (h.set_sent && h.outcome != Outcome::kRefused));
}

// The run's figures from the input.
void SummarizeRun(CheckState* s) {
  const CheckInput& in = s->in;
  Report& rep = s->rep;
  rep.seconds = static_cast<double>(in.run_end - in.run_start) / 1e9;
  rep.processes = in.processes;
  rep.threads = in.threads;
  rep.locks = in.locks;
  rep.fenced = in.fenced;
  rep.permits = in.permits;
  rep.permit_tallies = in.permit_tallies;
  rep.lease_ns = in.lease_ns;
  rep.seed = in.seed;
  rep.replica_sync = in.replica_sync;
  rep.redlock_masters = in.redlock_masters;
  rep.expect_split_brain_overlaps = in.expect_split_brain_overlaps;
  rep.workers_started = static_cast<int>(in.logs.size());
  rep.worker_failures = in.worker_failures;
}

// The fault log, the faults injected by kind, the kills, the restarts that
// wiped the counters, and the windows that excuse waits.
void CollectFaults(CheckState* s) {
  const CheckInput& in = s->in;
  Report& rep = s->rep;
  const int64_t grace = in.lease_ns + 1'000'000'000;
  for (const Fault& f : in.faults) {
    rep.fault_log.push_back(
        absl::StrCat("+", s->Rel(f.start), " ", FaultKindName(f.kind), ": ",
                     f.injected ? "" : "NOT INJECTED: ", f.detail));
    if (!f.injected) continue;
    ++rep.faults[FaultKindName(f.kind)];
    if (f.kind == FaultKind::kKillHolder && f.worker >= 0) {
      s->kill_time[f.worker] = f.end;
    }
    if (f.kind == FaultKind::kRestart && in.restart_resets_counters) {
      s->restarts.push_back(&f);
    }
    (IsDisruptive(f.kind) ? s->disruptive : s->connection)
        .push_back(Window{f.start, f.end + grace, &f});
  }
  rep.workers_killed = static_cast<int>(s->kill_time.size());
}

namespace {

// A worker's anomalies ("E" lines, unparsable lines), loss reports and ghost
// holds, counted.
void RecordLogProblems(const WorkerLog& log, CheckState* s) {
  Report& rep = s->rep;
  for (const std::string& a : log.anomalies) {
    rep.anomalies.push_back(absl::StrCat("worker ", log.worker, ": ", a));
  }
  if (log.bad_lines > 1 || (log.bad_lines == 1 && log.done)) {
    rep.anomalies.push_back(absl::StrCat(
        "worker ", log.worker, ": ", log.bad_lines, " unparsable log lines"));
  }
  rep.lost_events += static_cast<int64_t>(log.lost.size());
  for (const GhostHold& g : log.ghosts) {
    if (g.where == "orphan-expired") {
      ++rep.orphan_holds;
      continue;
    }
    ++rep.ghost_holds;
    if (rep.ghost_examples.size() < 10) {
      rep.ghost_examples.push_back(
          absl::StrCat("lock ", g.lock, " w", log.worker, "/t", g.thread,
                       " at +", s->Rel(g.time), " ", g.where,
                       ": count=", g.count, " pttl=", g.pttl, "ms"));
    }
  }
}

// Marks each hold a kLockLost event reports (its owner's latest hold of the
// lock begun before the event) told lost: at the event's time, or at the end
// of the hold's SafeUntil() the event gives, if earlier (the holder, who
// checks SafeUntil() before it writes, stopped believing then; the event's
// delivery may lag on a loaded machine).
void AttributeLostReports(WorkerLog& log) {
  std::map<std::string, int> thread_of;
  for (const auto& [thread, owner] : log.owners) thread_of[owner] = thread;
  for (const LostEvent& e : log.lost) {
    auto t = thread_of.find(e.owner);
    Hold* best = nullptr;
    for (Hold& h : log.holds) {
      if (h.lock != e.lock || h.attempt_end > e.time) continue;
      if (t != thread_of.end() && h.thread != t->second) continue;
      if (best == nullptr || h.attempt_end > best->attempt_end) best = &h;
    }
    if (best != nullptr) {
      best->told_lost = true;
      const int64_t told = e.safe_until >= best->attempt_end && e.safe_until > 0
                               ? std::min(e.time, e.safe_until)
                               : e.time;
      if (best->told_at == 0 || told < best->told_at) best->told_at = told;
    }
  }
}

// Closes the worker's holds (a killed worker's open ones at the kill), marks
// those SafeUntil() or Release() said Aborted for as told lost, and keeps
// them (s->holds) with their attempts.
void CloseHolds(WorkerLog& log, CheckState* s) {
  const CheckInput& in = s->in;
  Report& rep = s->rep;
  auto killed = s->kill_time.find(log.worker);
  for (Hold& h : log.holds) {
    if (h.lock < 0 || h.lock >= in.locks) continue;
    if (h.open) {
      if (killed != s->kill_time.end()) {
        // Killed while holding: the hold ends where its release began (the
        // lock may have been freed before the worker was stopped), else at
        // the kill.
        h.killed = true;
        h.end = h.release_start > 0 ? h.release_start : killed->second;
      } else {
        rep.anomalies.push_back(absl::StrCat(
            "worker ", log.worker, " thread ", h.thread, ": hold of lock ",
            h.lock, " acquired at +", s->Rel(h.attempt_end),
            " never closed, but the worker was not killed"));
        h.end = std::numeric_limits<int64_t>::max();
      }
    } else {
      h.end = h.release_start;
      // SafeUntil() was asked before the release began (its own time is
      // not logged).
      // A semaphore's Release() says NotFound for a permit that was gone
      // (a restart wiped it): a loss report as Aborted is.
      const bool release_told =
          h.release_code == static_cast<int>(absl::StatusCode::kAborted) ||
          (in.permits > 0 &&
           h.release_code == static_cast<int>(absl::StatusCode::kNotFound));
      const int64_t told_by =
          h.safe_code == static_cast<int>(absl::StatusCode::kAborted)
              ? h.release_start
          : release_told ? h.release_end
                         : 0;
      if (told_by != 0) {
        h.told_lost = true;
        if (h.told_at == 0 || told_by < h.told_at) h.told_at = told_by;
      }
      rep.release_aborted +=
          h.release_code == static_cast<int>(absl::StatusCode::kAborted);
      rep.release_unavailable +=
          h.release_code == static_cast<int>(absl::StatusCode::kUnavailable);
      ++rep.outcomes[OutcomeName(h.outcome)];
      rep.max_release_call_ns =
          std::max(rep.max_release_call_ns, h.release_end - h.release_start);
    }
    rep.max_acquire_call_ns =
        std::max(rep.max_acquire_call_ns, h.attempt_end - h.attempt_start);
    s->attempts[h.lock].push_back(
        {h.attempt_start, h.attempt_end, h.worker, h.thread});
    ++rep.acquisitions_per_worker[log.worker];
    s->holds.push_back(h);
  }
  if (rep.acquisitions_per_worker.count(log.worker) == 0) {
    rep.acquisitions_per_worker[log.worker] = 0;
  }
}

// Failed attempts, counted by status code and kept with their lock's
// attempts (for the waits).
void RecordFailedAttempts(const WorkerLog& log, CheckState* s) {
  const CheckInput& in = s->in;
  Report& rep = s->rep;
  for (const FailedAttempt& f : log.failed) {
    ++rep.failed_attempts[absl::StatusCodeToString(
        static_cast<absl::StatusCode>(f.code))];
    rep.max_acquire_call_ns =
        std::max(rep.max_acquire_call_ns, f.end - f.start);
    if (f.lock >= 0 && f.lock < in.locks) {
      s->attempts[f.lock].push_back({f.start, f.end, log.worker, f.thread});
    }
  }
}

}  // namespace

// Every worker's holds, closed and told lost, and every lock's attempts.
void CollectHolds(std::vector<WorkerLog>& logs, CheckState* s) {
  s->attempts.resize(s->in.locks);
  // A stall began at least command_timeout before it was reported, and its
  // wake-ups may take a reconnect: a lease and a second on either side. One
  // within an injected fault's window (a paused Redis stalls by design) is
  // that fault's.
  const int64_t margin = s->in.lease_ns + 1'000'000'000;
  const size_t injected = s->disruptive.size();
  auto in_fault = [&](int64_t t) {
    for (size_t i = 0; i < injected; ++i) {
      if (t >= s->disruptive[i].start && t <= s->disruptive[i].end) return true;
    }
    for (const Window& w : s->connection) {
      if (t >= w.start && t <= w.end) return true;
    }
    return false;
  };
  for (WorkerLog& log : logs) {
    for (const int64_t t : log.stalls) {
      if (in_fault(t)) continue;
      s->disruptive.push_back(Window{t - margin, t + margin, &s->stall});
      ++s->rep.stalls;
    }
    RecordLogProblems(log, s);
    AttributeLostReports(log);
    CloseHolds(log, s);
    RecordFailedAttempts(log, s);
  }
}

namespace {

// Marks `h` cut off from `at` on (the earliest cut counts).
void Cut(int64_t at, Hold* h) {
  h->cut_at = h->cut ? std::min(h->cut_at, at) : at;
  h->cut = true;
}

}  // namespace

// Marks the holds whose process was paused, or whose worker was cut off,
// during them.
void MarkPausedAndCutHolds(CheckState* s) {
  const CheckInput& in = s->in;
  for (Hold& h : s->holds) {
    for (const Fault& f : in.faults) {
      if (!f.injected || f.worker != h.worker || f.start > h.end ||
          f.start < h.attempt_end) {
        continue;
      }
      h.paused |= f.kind == FaultKind::kPauseHolder;
      if (IsPartition(f.kind)) Cut(f.start, &h);
    }
    // In a split brain any holder may be cut off from the primary that
    // the other side uses: only a report received before another holder
    // acquired excuses an overlap, as for a partition.
    for (const Fault& f : in.faults) {
      if (!f.injected || f.kind != FaultKind::kSplitBrain ||
          !f.Affects(h.lock) ||
          !Intersects(h.attempt_end, h.end, f.start, f.end)) {
        continue;
      }
      Cut(std::max(f.start, h.attempt_end), &h);
      h.split_brain |= in.expect_split_brain_overlaps;
    }
    // Redlock: a fault of one master is a minority's, so no other owner may
    // take the lock before its holder is told: only a report received
    // before another holder acquired excuses an overlap, as for a
    // partition. Not across a master's restart: a master restarted
    // without persistence forgets its grants, and a hold granted by a bare
    // quorum (the others too slow) can then be won by another owner before
    // its holder learns it (redlock.h's documented caveat).
    bool spans_restart = false;
    for (const Fault& f : in.faults) {
      spans_restart |= f.injected && f.kind == FaultKind::kRestart &&
                       Intersects(h.attempt_end, h.end, f.start, f.end);
    }
    if (in.redlock_masters > 0 && !spans_restart) Cut(h.attempt_end, &h);
  }
}

// Acquisitions, attempts, holds told lost and clean sections.
void CountHolds(CheckState* s) {
  Report& rep = s->rep;
  rep.acquisitions = static_cast<int64_t>(s->holds.size());
  rep.attempts = rep.acquisitions;
  for (const auto& [code, n] : rep.failed_attempts) rep.attempts += n;
  for (const Hold& h : s->holds) {
    rep.holds_told_lost += h.told_lost;
    rep.completed_sections += IsClean(h);
  }
}

// Each pause of a holder's unsafe window: from another owner's first
// acquisition to when the paused holder stopped believing it held the lock
// (told, or released).
void ReportPauseWindows(CheckState* s) {
  const CheckInput& in = s->in;
  Report& rep = s->rep;
  for (const Fault& f : in.faults) {
    if (!f.injected || f.kind != FaultKind::kPauseHolder) continue;
    // From another owner's first acquisition to when the paused holder
    // stopped believing it held the lock (told, or released).
    int64_t window = 0;
    for (const auto& [h, first] : s->paused_overlap) {
      if (h->worker == f.worker && h->attempt_end <= f.start &&
          h->end >= f.start) {
        const int64_t believed =
            h->told_lost ? std::min(h->told_at, h->end) : h->end;
        window = std::max(window, believed - first);
      }
    }
    rep.pause_windows.push_back(absl::StrCat(
        "worker ", f.worker, " stopped at +", s->Rel(f.start), " for ",
        Ms(f.end - f.start), ": unsafe window ", Ms(window)));
  }
}

namespace {

// The hold of `f`'s worker on `c`'s lock open at the cut; null if none.
const Hold* HoldCutOff(const Fault& f, const CutHold& c, const CheckState& s) {
  const Hold* held = nullptr;
  for (const Hold& h : s.holds) {
    if (h.worker == f.worker && h.lock == c.lock && h.attempt_end <= f.start &&
        h.end > f.start) {
      held = &h;
    }
  }
  return held;
}

// How soon the holder cut off by partition `f` holding `c` was told, and
// whether it was told by its lease's end on the server minus `drift`.
void CheckCutHold(const Fault& f, const CutHold& c, int64_t drift,
                  CheckState* s) {
  const CheckInput& in = s->in;
  Report& rep = s->rep;
  const Hold* held = HoldCutOff(f, c, *s);
  if (held == nullptr) return;
  ++rep.partition_holds;
  const int64_t deadline = c.server_lease_end - drift;
  // A report more than a lease after the heal is not this cut's (a hold
  // may outlive a short cut and be cut again).
  const bool told = held->told_lost && held->told_at >= f.start &&
                    held->told_at <= f.end + in.lease_ns;
  rep.partition_details.push_back(absl::StrCat(
      "+", s->Rel(f.start), " ", FaultKindName(f.kind), " w", f.worker,
      " lock ", c.lock, ": lease on the server ended ",
      Ms(c.server_lease_end - f.start), " after the cut; ",
      told ? absl::StrCat("told after ", Ms(held->told_at - f.start))
      : held->told_lost ? absl::StrCat("told at +", s->Rel(held->told_at))
                        : std::string("never told"),
      ", released at +", s->Rel(held->end)));
  if (told) {
    rep.loss_detection_ns.push_back(held->told_at - f.start);
    rep.min_loss_margin_ns =
        std::min(rep.min_loss_margin_ns, c.server_lease_end - held->told_at);
  }
  // The rule binds while the cut lasts past the deadline and the holder
  // holds past it.
  if (f.end < deadline || held->end <= deadline) return;
  if (!told || held->told_at > deadline + in.loss_report_slack_ns) {
    ++rep.losses_told_late;
    if (rep.late_examples.size() < 10) {
      rep.late_examples.push_back(absl::StrCat(
          "lock ", c.lock, ": ", s->Describe(*held), " cut off at +",
          s->Rel(f.start), " (", FaultKindName(f.kind),
          "), lease on the server until +", s->Rel(c.server_lease_end),
          told ? absl::StrCat(", told at +", s->Rel(held->told_at))
               : std::string(", never told")));
    }
  }
}

}  // namespace

// Partitions: how soon each cut-off holder was told.
void CheckPartitions(CheckState* s) {
  const int64_t drift = DriftNanos(s->in.lease_ns);
  for (const Fault& f : s->in.faults) {
    if (!f.injected || !IsPartition(f.kind)) continue;
    for (const CutHold& c : f.cut_holds) CheckCutHold(f, c, drift, s);
  }
  std::sort(s->rep.loss_detection_ns.begin(), s->rep.loss_detection_ns.end());
}

}  // namespace internal_checker
}  // namespace harness
}  // namespace relock
