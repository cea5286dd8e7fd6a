// The safety harness's checker (checker.h).

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
         IsPartition(kind);
}

bool Fault::Affects(int lock) const {
  return locks.empty() ||
         std::find(locks.begin(), locks.end(), lock) != locks.end();
}

namespace internal_checker {
namespace {

std::string Secs(int64_t ns) {
  return absl::StrFormat("%.3fs", static_cast<double>(ns) / 1e9);
}
std::string Ms(int64_t ns) {
  return absl::StrFormat("%.1fms", static_cast<double>(ns) / 1e6);
}
bool Intersects(int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
  return a0 <= b1 && b0 <= a1;
}

}  // namespace
}  // namespace internal_checker

Report Check(CheckInput in) {
  using internal_checker::Intersects;
  using internal_checker::Ms;
  using internal_checker::Secs;
  Report rep;
  rep.seconds = static_cast<double>(in.run_end - in.run_start) / 1e9;
  rep.processes = in.processes;
  rep.threads = in.threads;
  rep.locks = in.locks;
  rep.fenced = in.fenced;
  rep.lease_ns = in.lease_ns;
  rep.seed = in.seed;
  rep.workers_started = static_cast<int>(in.logs.size());
  rep.worker_failures = in.worker_failures;
  auto rel = [&](int64_t t) { return Secs(t - in.run_start); };

  // --- Faults.
  std::map<int, int64_t> kill_time;  // worker -> SIGKILL time
  struct Window {
    int64_t start, end;
    const Fault* fault;
  };
  std::vector<Window> disruptive, connection;
  std::vector<const Fault*> restarts;
  const int64_t grace = in.lease_ns + 1'000'000'000;
  for (const Fault& f : in.faults) {
    rep.fault_log.push_back(
        absl::StrCat("+", rel(f.start), " ", FaultKindName(f.kind), ": ",
                     f.injected ? "" : "NOT INJECTED: ", f.detail));
    if (!f.injected) continue;
    ++rep.faults[FaultKindName(f.kind)];
    if (f.kind == FaultKind::kKillHolder && f.worker >= 0) {
      kill_time[f.worker] = f.end;
    }
    if (f.kind == FaultKind::kRestart && in.restart_resets_counters) {
      restarts.push_back(&f);
    }
    (IsDisruptive(f.kind) ? disruptive : connection)
        .push_back(Window{f.start, f.end + grace, &f});
  }
  rep.workers_killed = static_cast<int>(kill_time.size());

  // --- Holds: close killed ones, attribute lost reports.
  std::vector<Hold> holds;
  struct Attempt {
    int64_t start, end;
    int worker, thread;
  };
  std::vector<std::vector<Attempt>> attempts(in.locks);
  for (WorkerLog& log : in.logs) {
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
                         " at +", rel(g.time), " ", g.where,
                         ": count=", g.count, " pttl=", g.pttl, "ms"));
      }
    }
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
        if (best->told_at == 0 || e.time < best->told_at)
          best->told_at = e.time;
      }
    }
    auto killed = kill_time.find(log.worker);
    for (Hold& h : log.holds) {
      if (h.lock < 0 || h.lock >= in.locks) continue;
      if (h.open) {
        if (killed != kill_time.end()) {
          // Killed while holding: the hold ends where its release began (the
          // lock may have been freed before the worker was stopped), else at
          // the kill.
          h.killed = true;
          h.end = h.release_start > 0 ? h.release_start : killed->second;
        } else {
          rep.anomalies.push_back(absl::StrCat(
              "worker ", log.worker, " thread ", h.thread, ": hold of lock ",
              h.lock, " acquired at +", rel(h.attempt_end),
              " never closed, but the worker was not killed"));
          h.end = std::numeric_limits<int64_t>::max();
        }
      } else {
        h.end = h.release_start;
        // SafeUntil() was asked before the release began (its own time is
        // not logged).
        const int64_t told_by =
            h.safe_code == static_cast<int>(absl::StatusCode::kAborted)
                ? h.release_start
            : h.release_code == static_cast<int>(absl::StatusCode::kAborted)
                ? h.release_end
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
      attempts[h.lock].push_back(
          {h.attempt_start, h.attempt_end, h.worker, h.thread});
      ++rep.acquisitions_per_worker[log.worker];
      holds.push_back(h);
    }
    if (rep.acquisitions_per_worker.count(log.worker) == 0) {
      rep.acquisitions_per_worker[log.worker] = 0;
    }
    for (const FailedAttempt& f : log.failed) {
      ++rep.failed_attempts[absl::StatusCodeToString(
          static_cast<absl::StatusCode>(f.code))];
      rep.max_acquire_call_ns =
          std::max(rep.max_acquire_call_ns, f.end - f.start);
      if (f.lock >= 0 && f.lock < in.locks) {
        attempts[f.lock].push_back({f.start, f.end, log.worker, f.thread});
      }
    }
  }
  // Holds whose process was paused, or whose worker was cut off, during
  // them.
  for (Hold& h : holds) {
    for (const Fault& f : in.faults) {
      if (!f.injected || f.worker != h.worker || f.start > h.end ||
          f.start < h.attempt_end) {
        continue;
      }
      h.paused |= f.kind == FaultKind::kPauseHolder;
      h.cut |= IsPartition(f.kind);
    }
  }
  rep.acquisitions = static_cast<int64_t>(holds.size());
  rep.attempts = rep.acquisitions;
  for (const auto& [code, n] : rep.failed_attempts) rep.attempts += n;
  auto clean = [](const Hold& h) {
    return !h.open && !h.told_lost && !h.paused &&
           h.outcome == Outcome::kCompleted;
  };
  auto maybe_wrote = [&](const Hold& h) {
    return !clean(h) && (h.open || h.set_sent);
  };
  auto describe = [&](const Hold& h) {
    return absl::StrCat(
        "w", h.worker, "/t", h.thread, " [+", rel(h.attempt_end), ", +",
        h.end == std::numeric_limits<int64_t>::max() ? std::string("never")
                                                     : rel(h.end),
        "]", h.killed ? " killed" : "", h.told_lost ? " told-lost" : "",
        h.paused ? " paused" : "", h.cut ? " cut-off" : "",
        h.open ? "" : absl::StrCat(" ", OutcomeName(h.outcome)));
  };
  for (const Hold& h : holds) {
    rep.holds_told_lost += h.told_lost;
    rep.completed_sections += clean(h);
  }

  // --- Per lock.
  std::vector<std::vector<const Hold*>> by_lock(in.locks);
  for (const Hold& h : holds) by_lock[h.lock].push_back(&h);
  const Fault* last_restart = restarts.empty() ? nullptr : restarts.back();
  rep.counters_ok = true;
  // Paused hold -> when another owner first acquired its lock beside it.
  std::map<const Hold*, int64_t> paused_overlap;
  for (int k = 0; k < in.locks; ++k) {
    std::vector<const Hold*>& hs = by_lock[k];
    std::sort(hs.begin(), hs.end(), [](const Hold* a, const Hold* b) {
      return a->attempt_end < b->attempt_end;
    });

    // Overlaps: every pair of intersecting holds.
    std::vector<const Hold*> active;
    for (const Hold* h : hs) {
      active.erase(std::remove_if(
                       active.begin(), active.end(),
                       [&](const Hold* a) { return a->end <= h->attempt_end; }),
                   active.end());
      for (const Hold* a : active) {
        // The old holder `a` paused past its lease: nothing a lock can do
        // (fencing is); report how long the other held beside it.
        if (a->paused) {
          ++rep.paused_overlaps;
          auto first = paused_overlap.emplace(a, h->attempt_end).first;
          first->second = std::min(first->second, h->attempt_end);
          continue;
        }
        // Cut off from Redis: only a report received before the new holder
        // acquired excuses it. Otherwise (as before) any report does.
        const bool excused = a->cut
                                 ? a->told_lost && a->told_at <= h->attempt_end
                                 : a->told_lost || h->told_lost;
        (excused ? rep.excused_overlaps : rep.unexcused_overlaps)++;
        if (!excused && rep.overlap_examples.size() < 10) {
          rep.overlap_examples.push_back(absl::StrCat(
              "lock ", k, ": ", describe(*a), " and ", describe(*h),
              a->cut && a->told_lost
                  ? absl::StrCat(" (the cut-off holder was told at +",
                                 rel(a->told_at), ", after)")
                  : ""));
        }
      }
      active.push_back(h);
    }

    // Tokens, in acquisition order.
    if (in.fenced) {
      const Hold* last = nullptr;
      for (const Hold* h : hs) {
        if (h->token < 1) {
          rep.anomalies.push_back(absl::StrCat("lock ", k, ": ", describe(*h),
                                               " has no fencing token"));
          continue;
        }
        ++rep.fenced_acquisitions;
        if (last != nullptr && h->token <= last->token) {
          bool reset = false;
          for (const Fault& f : in.faults) {
            reset |=
                f.injected && f.Affects(k) &&
                (f.kind == FaultKind::kRestart ||
                 f.kind == FaultKind::kFailover) &&
                Intersects(last->attempt_end, h->attempt_end, f.start, f.end);
          }
          if (reset) {
            ++rep.token_resets;
          } else {
            ++rep.token_regressions;
            if (rep.token_examples.size() < 10) {
              rep.token_examples.push_back(absl::StrCat(
                  "lock ", k, ": ", describe(*last), " token ", last->token,
                  ", then ", describe(*h), " token ", h->token));
            }
          }
        }
        last = h;
      }
    }

    // Sequence of clean sections.
    const Hold* prev = nullptr;
    // Paused holders that sent their SET: it may land any time after the
    // pause, long after holds acquired later (a stale write). One that came
    // after another owner had acquired the lock is counted.
    std::vector<const Hold*> late_writers;
    for (const Hold* h : hs) {
      if (!h->paused || !h->set_sent) continue;
      late_writers.push_back(h);
      auto first = paused_overlap.find(h);
      rep.stale_writes +=
          first != paused_overlap.end() && h->set_start > first->second;
    }
    bool tainted = false;
    for (const Hold* h : hs) {
      if (clean(*h)) {
        bool restarted = false, stale = false;
        if (prev != nullptr) {
          for (const Fault* r : restarts) {
            restarted |=
                Intersects(prev->set_end, h->get_start, r->start, r->end);
          }
          for (const Hold* w : late_writers) {
            stale |= Intersects(w->set_start, w->set_end, prev->get_start,
                                h->get_start);
          }
        }
        if (prev != nullptr && stale && h->read_value != prev->read_value + 1) {
          ++rep.stale_write_breaks;
        } else if (prev != nullptr && !tainted && !restarted &&
                   h->read_value != prev->read_value + 1) {
          ++rep.sequence_breaks;
          if (rep.sequence_examples.size() < 10) {
            rep.sequence_examples.push_back(absl::StrCat(
                "lock ", k, ": ", describe(*prev), " read ", prev->read_value,
                ", then ", describe(*h), " read ", h->read_value));
          }
        }
        prev = h;
        tainted = false;
      } else if (maybe_wrote(*h)) {
        tainted = true;
      }
    }

    // Counter.
    CounterCheck c;
    c.lock = k;
    c.value = k < static_cast<int>(in.counters.size()) ? in.counters[k] : -1;
    for (const Hold* h : hs) {
      const bool after_restart =
          last_restart == nullptr || h->get_start > last_restart->end;
      if (clean(*h) && after_restart) {
        ++c.clean;
      } else if (clean(*h) || maybe_wrote(*h)) {
        const int64_t wrote_by =
            h->open ? h->end : (h->set_end != 0 ? h->set_end : h->end);
        if (last_restart == nullptr || wrote_by > last_restart->start) {
          ++c.maybe_wrote;
        }
      }
    }
    // A stale write may undo any number of increments: only the upper
    // bound holds then.
    c.stale = !late_writers.empty();
    c.ok =
        (c.stale || c.value >= c.clean) && c.value <= c.clean + c.maybe_wrote;
    rep.counters_ok &= c.ok;
    rep.counters.push_back(c);

    // Waits after a release, while someone was waiting.
    std::vector<Attempt>& at = attempts[k];
    std::sort(at.begin(), at.end(), [](const Attempt& a, const Attempt& b) {
      return a.start < b.start;
    });
    int64_t longest_attempt = 0;
    for (const Attempt& a : at) {
      longest_attempt = std::max(longest_attempt, a.end - a.start);
    }
    std::vector<int64_t> acquired;
    for (const Hold* h : hs) acquired.push_back(h->attempt_end);
    for (const Hold* h : hs) {
      if (h->open ||
          h->release_code != static_cast<int>(absl::StatusCode::kOk)) {
        continue;
      }
      const int64_t free_at = h->release_start;
      auto it = std::upper_bound(acquired.begin(), acquired.end(), free_at);
      if (it == acquired.end()) continue;
      const int64_t next = *it;
      bool waiter = false;
      auto w = std::lower_bound(
          at.begin(), at.end(), free_at,
          [](const Attempt& a, int64_t t) { return a.start < t; });
      while (w != at.begin() && !waiter) {
        --w;
        if (w->start < free_at - longest_attempt) break;
        waiter = w->end > free_at && w->start != h->attempt_start;
      }
      if (!waiter) continue;
      const int64_t wait = next - free_at;
      ++rep.waits_measured;
      rep.max_wait_ns = std::max(rep.max_wait_ns, wait);
      bool in_fault = false;
      for (const Window& w : disruptive) {
        in_fault |=
            w.fault->Affects(k) && Intersects(free_at, next, w.start, w.end);
      }
      if (in_fault) continue;
      if (wait > rep.max_wait_outside_faults_ns) {
        rep.max_wait_outside_faults_ns = wait;
        rep.max_wait_outside_where =
            absl::StrCat("lock ", k, " freed at +", rel(free_at));
      }
      rep.waits_over_1s_outside_faults += wait > 1'000'000'000;
      for (const Window& w : connection) {
        if (Intersects(free_at, next, w.start, w.end)) {
          rep.max_wait_near_connection_faults_ns =
              std::max(rep.max_wait_near_connection_faults_ns, wait);
        }
      }
    }

    // Waiters: from the first release (by another owner) during an attempt
    // to the attempt's end (acquired, or gave up).
    std::vector<const Hold*> frees;
    for (const Hold* h : hs) {
      if (!h->open &&
          h->release_code == static_cast<int>(absl::StatusCode::kOk)) {
        frees.push_back(h);
      }
    }
    std::sort(frees.begin(), frees.end(), [](const Hold* a, const Hold* b) {
      return a->release_start < b->release_start;
    });
    for (const Attempt& a : at) {
      auto it = std::lower_bound(
          frees.begin(), frees.end(), a.start,
          [](const Hold* h, int64_t t) { return h->release_start < t; });
      for (; it != frees.end() && (*it)->release_start < a.end; ++it) {
        if ((*it)->worker == a.worker && (*it)->thread == a.thread) continue;
        const int64_t free_at = (*it)->release_start;
        const int64_t wait = a.end - free_at;
        rep.max_wait_ns = std::max(rep.max_wait_ns, wait);
        bool in_fault = false;
        for (const Window& w : disruptive) {
          in_fault |=
              w.fault->Affects(k) && Intersects(free_at, a.end, w.start, w.end);
        }
        if (!in_fault && wait > rep.max_waiter_wait_outside_faults_ns) {
          rep.max_waiter_wait_outside_faults_ns = wait;
          rep.max_waiter_wait_where = absl::StrCat(
              "lock ", k, " freed at +", rel(free_at), ", w", a.worker, "/t",
              a.thread, " waited until +", rel(a.end));
        }
        break;
      }
    }

    // Holders that must have been told: holds that span a restart, or a
    // pause longer than the lease, by more than a lease.
    for (const Hold* h : hs) {
      if (h->killed) continue;
      for (const Fault& f : in.faults) {
        if (!f.injected || !f.Affects(k) ||
            (f.kind != FaultKind::kRestart &&
             f.kind != FaultKind::kPauseLong)) {
          continue;
        }
        if (h->attempt_end >= f.start || h->end <= f.end + in.lease_ns) {
          continue;
        }
        ++rep.holds_spanning_losses;
        if (!h->told_lost) {
          ++rep.unnotified_losses;
          if (rep.unnotified_examples.size() < 10) {
            rep.unnotified_examples.push_back(
                absl::StrCat("lock ", k, ": ", describe(*h), " spans the ",
                             FaultKindName(f.kind), " at +", rel(f.start)));
          }
        }
      }
    }

    // Locks of killed holders: when did someone else get them?
    for (const Hold* h : hs) {
      if (!h->killed) continue;
      KillReacquire kr{h->worker, k, h->end, -1};
      auto it = std::upper_bound(acquired.begin(), acquired.end(), h->end);
      if (it != acquired.end()) kr.delay_ns = *it - h->end;
      rep.kill_reacquires.push_back(kr);
    }
  }

  // --- Pauses of holders: each one's unsafe window.
  for (const Fault& f : in.faults) {
    if (!f.injected || f.kind != FaultKind::kPauseHolder) continue;
    // From another owner's first acquisition to when the paused holder
    // stopped believing it held the lock (told, or released).
    int64_t window = 0;
    for (const auto& [h, first] : paused_overlap) {
      if (h->worker == f.worker && h->attempt_end <= f.start &&
          h->end >= f.start) {
        const int64_t believed =
            h->told_lost ? std::min(h->told_at, h->end) : h->end;
        window = std::max(window, believed - first);
      }
    }
    rep.pause_windows.push_back(absl::StrCat(
        "worker ", f.worker, " stopped at +", rel(f.start), " for ",
        Ms(f.end - f.start), ": unsafe window ", Ms(window)));
  }

  // --- Partitions: how soon a cut-off holder was told.
  const int64_t drift = DriftNanos(in.lease_ns);
  for (const Fault& f : in.faults) {
    if (!f.injected || !IsPartition(f.kind)) continue;
    for (const CutHold& c : f.cut_holds) {
      const Hold* held = nullptr;
      for (const Hold& h : holds) {
        if (h.worker == f.worker && h.lock == c.lock &&
            h.attempt_end <= f.start && h.end > f.start) {
          held = &h;
        }
      }
      if (held == nullptr) continue;
      ++rep.partition_holds;
      const int64_t deadline = c.server_lease_end - drift;
      // A report more than a lease after the heal is not this cut's (a hold
      // may outlive a short cut and be cut again).
      const bool told = held->told_lost && held->told_at >= f.start &&
                        held->told_at <= f.end + in.lease_ns;
      rep.partition_details.push_back(absl::StrCat(
          "+", rel(f.start), " ", FaultKindName(f.kind), " w", f.worker,
          " lock ", c.lock, ": lease on the server ended ",
          Ms(c.server_lease_end - f.start), " after the cut; ",
          told ? absl::StrCat("told after ", Ms(held->told_at - f.start))
          : held->told_lost ? absl::StrCat("told at +", rel(held->told_at))
                            : std::string("never told"),
          ", released at +", rel(held->end)));
      if (told) {
        rep.loss_detection_ns.push_back(held->told_at - f.start);
        rep.min_loss_margin_ns = std::min(rep.min_loss_margin_ns,
                                          c.server_lease_end - held->told_at);
      }
      // The rule binds while the cut lasts past the deadline and the holder
      // holds past it.
      if (f.end < deadline || held->end <= deadline) continue;
      if (!told || held->told_at > deadline + in.loss_report_slack_ns) {
        ++rep.losses_told_late;
        if (rep.late_examples.size() < 10) {
          rep.late_examples.push_back(absl::StrCat(
              "lock ", c.lock, ": ", describe(*held), " cut off at +",
              rel(f.start), " (", FaultKindName(f.kind),
              "), lease on the server until +", rel(c.server_lease_end),
              told ? absl::StrCat(", told at +", rel(held->told_at))
                   : std::string(", never told")));
        }
      }
    }
  }
  std::sort(rep.loss_detection_ns.begin(), rep.loss_detection_ns.end());

  // --- Verdict.
  std::vector<std::string>& fail = rep.failures;
  if (rep.unexcused_overlaps > 0) {
    fail.push_back(
        absl::StrCat(rep.unexcused_overlaps, " unexcused overlap(s) of holds"));
  }
  if (rep.sequence_breaks > 0) {
    fail.push_back(absl::StrCat(rep.sequence_breaks,
                                " lost update(s) between clean sections"));
  }
  if (!rep.counters_ok) fail.push_back("a counter is out of bounds");
  if (rep.token_regressions > 0) {
    fail.push_back(absl::StrCat(rep.token_regressions,
                                " fencing token(s) not above the previous "
                                "acquisition's"));
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

  // --- Text.
  std::string& t = rep.text;
  absl::StrAppend(&t, "==== relock safety harness report ====\n");
  absl::StrAppend(
      &t, absl::StrFormat("run:        %.1f s, %d processes x %d threads x "
                          "%d locks, lease %s, seed %u\n",
                          rep.seconds, rep.processes, rep.threads, rep.locks,
                          Secs(rep.lease_ns), rep.seed));
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
  absl::StrAppend(&t, "overlaps:   ", rep.unexcused_overlaps,
                  " unexcused (must be 0); ", rep.excused_overlaps,
                  " excused overlapping pairs (one holder was told its lock "
                  "was lost)\n");
  for (const std::string& e : rep.overlap_examples) {
    absl::StrAppend(&t, "            OVERLAP ", e, "\n");
  }
  absl::StrAppend(&t, "lost locks: ", rep.lost_events, " kLockLost events; ",
                  rep.holds_told_lost, " holds told lost (",
                  rep.release_aborted, " by Release() = Aborted); ",
                  rep.release_unavailable, " releases Unavailable\n");
  absl::StrAppend(&t, "            ", rep.holds_spanning_losses,
                  " holds spanned a restart/long pause; ",
                  rep.unnotified_losses, " of them never told (must be 0)\n");
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
                    " restarts across a counter loss (restart/failover)\n");
    for (const std::string& e : rep.token_examples) {
      absl::StrAppend(&t, "            TOKEN ", e, "\n");
    }
  }
  absl::StrAppend(&t, "counters:  ");
  for (const CounterCheck& c : rep.counters) {
    absl::StrAppend(&t, " lock ", c.lock, "=", c.value, " (",
                    c.stale ? "stale write.." : absl::StrCat(c.clean, ".."),
                    c.clean + c.maybe_wrote, ") ", c.ok ? "ok" : "BAD", ";");
  }
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
  for (const KillReacquire& kr : rep.kill_reacquires) {
    absl::StrAppend(&t, "kill -9:    lock ", kr.lock, " of worker ", kr.worker,
                    " (killed at +", rel(kr.kill_time), ") ",
                    kr.delay_ns < 0
                        ? std::string("NEVER reacquired")
                        : absl::StrCat("reacquired after ", Secs(kr.delay_ns)),
                    "\n");
  }
  absl::StrAppend(&t, "calls:      longest TryAcquire ",
                  Ms(rep.max_acquire_call_ns), ", longest Release ",
                  Ms(rep.max_release_call_ns), "\n");
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
  return rep;
}

}  // namespace harness
}  // namespace relock
