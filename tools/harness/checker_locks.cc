// The safety harness checker's per-lock steps (checker_steps.h): each lock's
// holds in acquisition order, checked for overlaps, tokens, lost updates and
// the counter's bounds; its waits measured; the losses its holders must have
// been told of; its killed holders' reacquisitions.

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tools/harness/checker.h"
#include "tools/harness/checker_steps.h"
#include "tools/harness/record.h"

namespace relock {
namespace harness {
namespace internal_checker {
namespace {

// Lock k's holds by acquisition, its attempts by start (sorted in place).
LockView ViewOfLock(int k, const std::vector<const Hold*>& holds,
                    CheckState* s) {
  LockView v;
  v.lock = k;
  v.holds = holds;
  std::sort(v.holds.begin(), v.holds.end(), [](const Hold* a, const Hold* b) {
    return a->attempt_end < b->attempt_end;
  });
  for (const Hold* h : v.holds) v.acquired.push_back(h->attempt_end);
  std::vector<Attempt>& at = s->attempts[k];
  std::sort(at.begin(), at.end(), [](const Attempt& a, const Attempt& b) {
    return a.start < b.start;
  });
  v.attempts = &at;
  return v;
}

// Whether [from, to] touches the window of a disruptive fault on lock k's
// Redis.
bool InDisruptiveWindow(const CheckState& s, int k, int64_t from, int64_t to) {
  bool in_fault = false;
  for (const Window& w : s.disruptive) {
    in_fault |= w.fault->Affects(k) && Intersects(from, to, w.start, w.end);
  }
  return in_fault;
}

// Whether the overlap of the older hold `a` with `h`, acquired while `a`
// was held, is excused by a loss report: once `a` is cut off, only by a
// report to `a` received before `h` acquired; otherwise (before the cut, as
// for a hold never cut: a restart, say, lost it first) by any report to
// either.
bool OverlapExcused(const Hold& a, const Hold& h) {
  return a.cut && h.attempt_end >= a.cut_at
             ? a.told_lost && a.told_at <= h.attempt_end
             : a.told_lost || h.told_lost;
}

// Whether hold `h` intersects the window of a split-brain fault (from the
// split to the old primary's return as a replica).
bool InSplitBrainWindow(const CheckState& s, const Hold& h) {
  for (const Fault& f : s.in.faults) {
    if (f.injected && f.kind == FaultKind::kSplitBrain && f.Affects(h.lock) &&
        Intersects(h.attempt_end, h.end, f.start, f.end)) {
      return true;
    }
  }
  return false;
}

// Overlaps: at each acquisition, the holders beyond the permits (one for a
// lock, N in a semaphore run) among it and the holds it met, in three
// classes: beyond even when only the holds no fault excuses count
// (unexcused), beyond only with those a loss report excuses (excused), and
// beyond only with the paused holders (fencing's job; when the first came
// is kept in s->paused_overlap). For a lock that is every intersecting pair,
// by class. Also the most holders seen at once, all of them and those no
// fault excuses. Unexcused holders of which both holds are in a split-brain
// window are counted as split-brain overlaps too, and only there when the
// run expects them (CheckInput::expect_split_brain_overlaps).
void CheckOverlaps(const LockView& v, CheckState* s) {
  Report& rep = s->rep;
  const int k = v.lock;
  const int64_t permits = std::max(1, s->in.permits);
  const std::vector<const Hold*>& hs = v.holds;
  std::vector<const Hold*> active;
  for (const Hold* h : hs) {
    active.erase(
        std::remove_if(active.begin(), active.end(),
                       [&](const Hold* a) { return a->end <= h->attempt_end; }),
        active.end());
    std::vector<const Hold*> unexcused, paused;
    int64_t excused = 0, split = 0;
    const bool h_split = !active.empty() && InSplitBrainWindow(*s, *h);
    for (const Hold* a : active) {
      if (a->paused) {
        paused.push_back(a);
      } else if (OverlapExcused(*a, *h)) {
        ++excused;
      } else if (h_split && InSplitBrainWindow(*s, *a)) {
        ++split;
        if (!s->in.expect_split_brain_overlaps) unexcused.push_back(a);
      } else {
        unexcused.push_back(a);
      }
    }
    const int64_t strict = 1 + static_cast<int64_t>(unexcused.size());
    const int64_t all = 1 + static_cast<int64_t>(active.size());
    auto beyond = [permits](int64_t n) {
      return std::max<int64_t>(0, n - permits);
    };
    // With the split-brain holders (whether or not in `unexcused`).
    const int64_t with_split =
        s->in.expect_split_brain_overlaps ? strict + split : strict;
    rep.split_brain_overlaps += beyond(with_split) - beyond(with_split - split);
    rep.unexcused_overlaps += beyond(strict);
    rep.excused_overlaps += beyond(with_split + excused) - beyond(with_split);
    // The old holders paused past their lease: nothing a lock can do
    // (fencing is); report how long the others held beside them.
    const int64_t beside_paused = beyond(all) - beyond(with_split + excused);
    rep.paused_overlaps += beside_paused;
    for (const Hold* a : paused) {
      if (beside_paused == 0) break;
      auto first = s->paused_overlap.emplace(a, h->attempt_end).first;
      first->second = std::min(first->second, h->attempt_end);
    }
    if (all > rep.max_concurrency) {
      rep.max_concurrency = all;
      rep.max_concurrency_where =
          absl::StrCat("lock ", k, " at +", s->Rel(h->attempt_end));
    }
    rep.max_unexcused_concurrency =
        std::max(rep.max_unexcused_concurrency, strict);
    for (const Hold* a : unexcused) {
      if (beyond(strict) == 0 || rep.overlap_examples.size() >= 10) break;
      rep.overlap_examples.push_back(absl::StrCat(
          "lock ", k, ": ", s->Describe(*a), " and ", s->Describe(*h),
          a->cut && a->told_lost
              ? absl::StrCat(" (the cut-off holder was told at +",
                             s->Rel(a->told_at), ", after)")
              : "",
          permits > 1
              ? absl::StrCat(" (", strict, " holders, ", permits, " permits)")
              : ""));
    }
    active.push_back(h);
  }
}

// Fenced runs: tokens, in acquisition order, must grow, but across a restart
// or failover of the lock's Redis (which may lose its counter).
void CheckTokens(const LockView& v, CheckState* s) {
  const CheckInput& in = s->in;
  Report& rep = s->rep;
  const int k = v.lock;
  const std::vector<const Hold*>& hs = v.holds;
  const Hold* last = nullptr;
  for (const Hold* h : hs) {
    if (h->token < 1) {
      rep.anomalies.push_back(absl::StrCat("lock ", k, ": ", s->Describe(*h),
                                           " has no fencing token"));
      continue;
    }
    ++rep.fenced_acquisitions;
    if (last != nullptr && h->token <= last->token &&
        h->attempt_start < last->attempt_end) {
      // The two attempts overlapped, so which script ran first on Redis is
      // unknown: an attempt ends when its reply is read, which a pause of
      // its process delays past acquisitions that came after its script
      // (told lost then, as its lease ran out meanwhile). Only a token not
      // above that of an acquisition that certainly came first is a
      // regression; the next one is compared with `last` still.
      ++rep.token_order_unknown;
      continue;
    }
    if (last != nullptr && h->token <= last->token) {
      bool reset = false;
      for (const Fault& f : in.faults) {
        reset |=
            f.injected && f.Affects(k) &&
            (f.kind == FaultKind::kRestart || f.kind == FaultKind::kFailover ||
             f.kind == FaultKind::kSplitBrain) &&
            Intersects(last->attempt_end, h->attempt_end, f.start, f.end);
      }
      if (reset) {
        ++rep.token_resets;
      } else {
        ++rep.token_regressions;
        if (rep.token_examples.size() < 10) {
          rep.token_examples.push_back(absl::StrCat(
              "lock ", k, ": ", s->Describe(*last), " token ", last->token,
              ", then ", s->Describe(*h), " token ", h->token));
        }
      }
    }
    last = h;
  }
}

// Fenced runs, at the resource: counts the writes the counter's script
// accepted and refused, and the stale writes it accepted (must be none): as
// it reported them (accepted below the highest token it reported), and from
// the logs, independently of what it reported: an accepted write whose token
// is below that of a write accepted wholly before it was sent (set_end
// before its set_start: that one certainly landed first).
void CheckFencedWrites(const LockView& v, CheckState* s) {
  Report& rep = s->rep;
  std::vector<const Hold*> accepted;
  for (const Hold* h : v.holds) {
    if (h->open || !h->set_sent) continue;
    if (h->outcome == Outcome::kRefused) {
      ++rep.stale_writes_refused;
      continue;
    }
    if (h->outcome != Outcome::kCompleted) continue;
    ++rep.fenced_writes_accepted;
    accepted.push_back(h);
    if (h->fence_high >= 0 && h->token < h->fence_high) {
      ++rep.stale_writes_accepted;
      if (rep.fence_examples.size() < 10) {
        rep.fence_examples.push_back(absl::StrCat(
            "lock ", v.lock, ": ", s->Describe(*h), " token ", h->token,
            " accepted though the resource had accepted ", h->fence_high));
      }
    }
  }
  // A restart that wipes the counters wipes the highest accepted token too
  // (and the lock's token counter): the cross-check compares writes between
  // the same two such restarts only, and leaves out those during one.
  auto epoch = [s](const Hold* w) -> int {
    int e = 0;
    for (const Fault* r : s->restarts) {
      if (Intersects(w->set_start, w->set_end, r->start, r->end)) return -1;
      if (r->end < w->set_start) ++e;
    }
    return e;
  };
  std::vector<const Hold*> by_end = accepted;
  std::sort(accepted.begin(), accepted.end(), [](const Hold* a, const Hold* b) {
    return a->set_start < b->set_start;
  });
  std::sort(by_end.begin(), by_end.end(), [](const Hold* a, const Hold* b) {
    return a->set_end < b->set_end;
  });
  size_t ended = 0;
  std::map<int, const Hold*> highest;  // per epoch, of the writes that ended
  for (const Hold* h : accepted) {
    while (ended < by_end.size() && by_end[ended]->set_end < h->set_start) {
      const Hold* w = by_end[ended++];
      const int e = epoch(w);
      if (e < 0 || w->token < 1) continue;
      const Hold*& top = highest[e];
      if (top == nullptr || w->token > top->token) top = w;
    }
    const int e = epoch(h);
    auto top = highest.find(e);
    if (e < 0 || h->token < 1 || top == highest.end() ||
        h->token >= top->second->token) {
      continue;
    }
    ++rep.stale_writes_accepted_in_logs;
    if (rep.fence_examples.size() < 10) {
      rep.fence_examples.push_back(
          absl::StrCat("lock ", v.lock, ": ", s->Describe(*h), " token ",
                       h->token, " accepted after ", s->Describe(*top->second),
                       " token ", top->second->token, " was"));
    }
  }
}

// Paused holders that sent their SET: it may land any time after the
// pause, long after holds acquired later (a stale write). One that came
// after another owner had acquired the lock is counted.
void FindLateWriters(LockView* v, CheckState* s) {
  Report& rep = s->rep;
  const std::vector<const Hold*>& hs = v->holds;
  for (const Hold* h : hs) {
    // A write the fenced resource refused is no stale write: it never landed.
    if (!h->paused || !h->set_sent || h->outcome == Outcome::kRefused) {
      continue;
    }
    v->late_writers.push_back(h);
    auto first = s->paused_overlap.find(h);
    rep.stale_writes +=
        first != s->paused_overlap.end() && h->set_start > first->second;
  }
}

// The sequence of clean sections: each reads the value the previous one
// wrote, unless a section that may have written, a restart or a stale write
// came between them.
void CheckSequence(const LockView& v, CheckState* s) {
  Report& rep = s->rep;
  const int k = v.lock;
  const std::vector<const Hold*>& hs = v.holds;
  const Hold* prev = nullptr;
  bool tainted = false;
  for (const Hold* h : hs) {
    if (IsClean(*h)) {
      bool restarted = false, stale = false;
      if (prev != nullptr) {
        for (const Fault* r : s->restarts) {
          restarted |=
              Intersects(prev->set_end, h->get_start, r->start, r->end);
        }
        for (const Hold* w : v.late_writers) {
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
              "lock ", k, ": ", s->Describe(*prev), " read ", prev->read_value,
              ", then ", s->Describe(*h), " read ", h->read_value));
        }
      }
      prev = h;
      tainted = false;
    } else if (MayHaveWritten(*h)) {
      tainted = true;
    }
  }
}

// The counter's final value against the sections that may have written it.
void CheckCounter(const LockView& v, const Fault* last_restart, CheckState* s) {
  const CheckInput& in = s->in;
  Report& rep = s->rep;
  const int k = v.lock;
  const std::vector<const Hold*>& hs = v.holds;
  CounterCheck c;
  c.lock = k;
  c.value = k < static_cast<int>(in.counters.size()) ? in.counters[k] : -1;
  for (const Hold* h : hs) {
    const bool after_restart =
        last_restart == nullptr || h->get_start > last_restart->end;
    if (IsClean(*h) && after_restart) {
      ++c.clean;
    } else if (IsClean(*h) || MayHaveWritten(*h)) {
      const int64_t wrote_by =
          h->open ? h->end : (h->set_end != 0 ? h->set_end : h->end);
      if (last_restart == nullptr || wrote_by > last_restart->start) {
        ++c.maybe_wrote;
      }
    }
  }
  // A stale write may undo any number of increments: only the upper
  // bound holds then.
  c.stale = !v.late_writers.empty();
  c.ok = (c.stale || c.value >= c.clean) && c.value <= c.clean + c.maybe_wrote;
  rep.counters_ok &= c.ok;
  rep.counters.push_back(c);
}

// Hand-offs: from a release while another attempt waited to the lock's next
// acquisition by anyone.
void MeasureHandoffs(const LockView& v, CheckState* s) {
  Report& rep = s->rep;
  const int k = v.lock;
  const std::vector<const Hold*>& hs = v.holds;
  const std::vector<Attempt>& at = *v.attempts;
  int64_t longest_attempt = 0;
  for (const Attempt& a : at) {
    longest_attempt = std::max(longest_attempt, a.end - a.start);
  }
  for (const Hold* h : hs) {
    if (h->open || h->release_code != static_cast<int>(absl::StatusCode::kOk)) {
      continue;
    }
    const int64_t free_at = h->release_start;
    auto it = std::upper_bound(v.acquired.begin(), v.acquired.end(), free_at);
    if (it == v.acquired.end()) continue;
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
    if (InDisruptiveWindow(*s, k, free_at, next)) continue;
    if (wait > rep.max_wait_outside_faults_ns) {
      rep.max_wait_outside_faults_ns = wait;
      rep.max_wait_outside_where =
          absl::StrCat("lock ", k, " freed at +", s->Rel(free_at));
    }
    rep.waits_over_1s_outside_faults += wait > 1'000'000'000;
    for (const Window& w : s->connection) {
      if (Intersects(free_at, next, w.start, w.end)) {
        rep.max_wait_near_connection_faults_ns =
            std::max(rep.max_wait_near_connection_faults_ns, wait);
      }
    }
  }
}

// Waiters: from the first release (by another owner) during an attempt
// to the attempt's end (acquired, or gave up).
void MeasureWaiterWaits(const LockView& v, CheckState* s) {
  Report& rep = s->rep;
  const int k = v.lock;
  const std::vector<const Hold*>& hs = v.holds;
  const std::vector<Attempt>& at = *v.attempts;
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
      if (!InDisruptiveWindow(*s, k, free_at, a.end) &&
          wait > rep.max_waiter_wait_outside_faults_ns) {
        rep.max_waiter_wait_outside_faults_ns = wait;
        rep.max_waiter_wait_where = absl::StrCat(
            "lock ", k, " freed at +", s->Rel(free_at), ", w", a.worker, "/t",
            a.thread, " waited until +", s->Rel(a.end));
      }
      break;
    }
  }
}

// Holders that must have been told: holds that span a restart, or a
// pause longer than the lease, by more than a lease.
void CheckToldLosses(const LockView& v, CheckState* s) {
  const CheckInput& in = s->in;
  Report& rep = s->rep;
  const int k = v.lock;
  const std::vector<const Hold*>& hs = v.holds;
  for (const Hold* h : hs) {
    if (h->killed) continue;
    for (const Fault& f : in.faults) {
      if (!f.injected || !f.Affects(k) ||
          (f.kind != FaultKind::kRestart && f.kind != FaultKind::kPauseLong)) {
        continue;
      }
      if (h->attempt_end >= f.start || h->end <= f.end + in.lease_ns) {
        continue;
      }
      ++rep.holds_spanning_losses;
      // A Redlock master's fault is a minority's: the lock stays held.
      if (!h->told_lost && in.redlock_masters == 0) {
        ++rep.unnotified_losses;
        if (rep.unnotified_examples.size() < 10) {
          rep.unnotified_examples.push_back(
              absl::StrCat("lock ", k, ": ", s->Describe(*h), " spans the ",
                           FaultKindName(f.kind), " at +", s->Rel(f.start)));
        }
      }
    }
  }
}

// Locks of killed holders: when did someone else get them?
void TimeKillReacquires(const LockView& v, CheckState* s) {
  Report& rep = s->rep;
  const int k = v.lock;
  const std::vector<const Hold*>& hs = v.holds;
  for (const Hold* h : hs) {
    if (!h->killed) continue;
    KillReacquire kr{h->worker, k, h->end, -1};
    auto it = std::upper_bound(v.acquired.begin(), v.acquired.end(), h->end);
    if (it != v.acquired.end()) kr.delay_ns = *it - h->end;
    rep.kill_reacquires.push_back(kr);
  }
}

}  // namespace

void CheckLocks(CheckState* s) {
  const CheckInput& in = s->in;
  std::vector<std::vector<const Hold*>> by_lock(in.locks);
  for (const Hold& h : s->holds) by_lock[h.lock].push_back(&h);
  const Fault* last_restart =
      s->restarts.empty() ? nullptr : s->restarts.back();
  s->rep.counters_ok = true;
  for (int k = 0; k < in.locks; ++k) {
    LockView v = ViewOfLock(k, by_lock[k], s);
    CheckOverlaps(v, s);
    if (in.fenced) {
      CheckTokens(v, s);
      CheckFencedWrites(v, s);
    }
    FindLateWriters(&v, s);
    // Semaphore runs: several holders increment the counter at once
    // (atomically), so its values read need not follow each other.
    if (in.permits == 0) CheckSequence(v, s);
    CheckCounter(v, last_restart, s);
    MeasureHandoffs(v, s);
    MeasureWaiterWaits(v, s);
    CheckToldLosses(v, s);
    TimeKillReacquires(v, s);
  }
}

}  // namespace internal_checker
}  // namespace harness
}  // namespace relock
