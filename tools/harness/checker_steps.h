// The safety harness checker's steps (internal to tools/harness): Check()
// (checker.cc) runs them in this order, each one job, on the state they
// share.
//
//   checker.cc         the run, the faults, the holds (closed, told lost,
//                      paused, cut off), the pauses' unsafe windows, the
//                      partitions' loss reports
//   checker_locks.cc   per lock: overlaps, tokens, the sequence of clean
//                      sections, the counter, waits, losses that must have
//                      been told, kills' reacquisitions
//   checker_report.cc  the verdict and the printed report
//
// Part of tools/harness (see harness.h).

#ifndef RELOCK_TOOLS_HARNESS_CHECKER_STEPS_H_
#define RELOCK_TOOLS_HARNESS_CHECKER_STEPS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tools/harness/checker.h"
#include "tools/harness/record.h"

namespace relock {
namespace harness {
namespace internal_checker {

std::string Secs(int64_t ns);  // "1.234s"
std::string Ms(int64_t ns);    // "1.2ms"
// Whether [a0, a1] and [b0, b1] intersect.
bool Intersects(int64_t a0, int64_t a1, int64_t b0, int64_t b1);

// A fault's window: from its start to its end plus one lease plus 1 s.
struct Window {
  int64_t start, end;
  const Fault* fault;
};

// An acquisition attempt of a lock, acquired or failed.
struct Attempt {
  int64_t start, end;
  int worker, thread;
};

// What the steps share: the input, the report they fill, and what the early
// steps find for the later ones.
struct CheckState {
  explicit CheckState(const CheckInput& input) : in(input) {}

  // "+1.234s": `t` from the run's start.
  std::string Rel(int64_t t) const;
  // A hold for the report: "w1/t0 [+1.000s, +2.000s] told-lost completed".
  std::string Describe(const Hold& h) const;

  const CheckInput& in;
  Report rep;
  // The faults (CollectFaults).
  std::map<int, int64_t> kill_time;  // worker -> SIGKILL time
  // Redis pauses, restarts, failovers, kills, pauses of holders, partitions;
  // and the client kills and SCRIPT FLUSH.
  std::vector<Window> disruptive, connection;
  // The windows of the stalls the workers reported ("S" lines: no reply
  // within command_timeout; CollectHolds), among `disruptive`: every lock.
  Fault stall;
  std::vector<const Fault*> restarts;  // those that wiped the counters
  // The holds (CollectHolds): closed, told lost, paused, cut off.
  std::vector<Hold> holds;
  std::vector<std::vector<Attempt>> attempts;  // per lock
  // Paused hold -> when another owner first acquired its lock beside it
  // (CheckOverlaps).
  std::map<const Hold*, int64_t> paused_overlap;
};

// One lock's holds and attempts, for the per-lock steps.
struct LockView {
  int lock = 0;
  std::vector<const Hold*> holds;  // in acquisition order
  std::vector<int64_t> acquired;   // their acquisition times, in order
  const std::vector<Attempt>* attempts = nullptr;  // by start
  // Paused holders that sent their SET (FindLateWriters).
  std::vector<const Hold*> late_writers;
};

// A hold not told lost, not killed, not paused, whose GET and SET both
// succeeded.
bool IsClean(const Hold& h);
// A hold that is not clean but may have written its counter.
bool MayHaveWritten(const Hold& h);

// checker.cc, in the order Check() runs them.
void SummarizeRun(CheckState* s);
void CollectFaults(CheckState* s);
void CollectHolds(std::vector<WorkerLog>& logs, CheckState* s);
void MarkPausedAndCutHolds(CheckState* s);
void CountHolds(CheckState* s);
// checker_locks.cc: every per-lock step, lock by lock.
void CheckLocks(CheckState* s);
// checker.cc again.
void ReportPauseWindows(CheckState* s);
void CheckPartitions(CheckState* s);
// checker_report.cc.
void DecideVerdict(CheckState* s);
void WriteText(CheckState* s);

}  // namespace internal_checker
}  // namespace harness
}  // namespace relock

#endif  // RELOCK_TOOLS_HARNESS_CHECKER_STEPS_H_
