// The safety harness's checker (tools/harness/checker.h) on hand-made
// records, so that a real violation cannot go unnoticed: overlaps (excused or
// not), lost updates, counters, kills, lost reports, ghosts, long pauses and
// restarts, partitions, pauses of holders, fencing tokens, waits, the verdict
// and the printed report; and the workers' log format (record.h). Pure logic:
// no Redis. The runs of the whole harness are safety_harness_test and
// partition_harness_test.

#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tools/harness/checker.h"
#include "tools/harness/harness.h"
#include "tools/harness/record.h"
#include "tools/harness/worker.h"

namespace relock {
namespace harness {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kMs = 1'000'000;

// A worker's log of `lines`, written to a temporary file and parsed back
// (the file is removed).
WorkerLog ParsedLog(const std::vector<std::string>& lines) {
  char path[] = "/tmp/relock-harness-log-test.XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  if (fd < 0) return WorkerLog();
  close(fd);
  {
    std::ofstream log(path);
    for (const std::string& line : lines) log << line << "\n";
  }
  WorkerLog log = ParseWorkerLog(0, path);
  std::remove(path);
  return log;
}

// A closed, clean hold of `lock` by worker `w` over [from, to] ms that read
// `read`.
Hold CleanHold(int w, int lock, int64_t from, int64_t to, int64_t read) {
  Hold h;
  h.worker = w;
  h.lock = lock;
  h.attempt_start = from * kMs - kMs;
  h.attempt_end = from * kMs;
  h.open = false;
  h.outcome = Outcome::kCompleted;
  h.read_value = read;
  h.get_start = from * kMs + 1;
  h.set_sent = true;
  h.set_start = to * kMs - 2;
  h.set_end = to * kMs - 1;
  h.release_start = to * kMs;
  h.release_end = to * kMs + kMs;
  return h;
}

// A hold of `lock` by worker 0 acquired at 10 ms and never closed (no "H"
// line).
Hold OpenHoldOfWorker0(int lock) {
  Hold h;
  h.worker = 0;
  h.lock = lock;
  h.attempt_start = 9 * kMs;
  h.attempt_end = 10 * kMs;
  return h;
}

// Worker 0 stopped at 19 ms and SIGKILLed at 20 ms.
Fault KillOfWorker0At20Ms() {
  Fault kill;
  kill.kind = FaultKind::kKillHolder;
  kill.start = 19 * kMs;
  kill.end = 20 * kMs;
  kill.injected = true;
  kill.worker = 0;
  return kill;
}

CheckInput Input(std::vector<Hold> holds, std::vector<int64_t> counters) {
  CheckInput in;
  in.processes = 2;
  in.threads = 1;
  in.locks = static_cast<int>(counters.size());
  in.lease_ns = 1000 * kMs;
  in.run_start = 0;
  in.run_end = 10'000 * kMs;
  in.counters = std::move(counters);
  in.require_every_fault_kind = false;
  for (int w = 0; w < 2; ++w) {
    WorkerLog log;
    log.worker = w;
    log.done = true;
    for (const Hold& h : holds) {
      if (h.worker == w) log.holds.push_back(h);
    }
    in.logs.push_back(log);
  }
  return in;
}

TEST(HarnessCheckerTest, SequentialHoldsPass) {
  Report r =
      Check(Input({CleanHold(0, 0, 10, 20, 0), CleanHold(1, 0, 21, 30, 1),
                   CleanHold(0, 0, 31, 40, 2)},
                  {3}));
  EXPECT_TRUE(r.ok()) << r.text;
  EXPECT_EQ(r.unexcused_overlaps, 0);
  EXPECT_EQ(r.completed_sections, 3);
  EXPECT_EQ(r.waits_measured, 0);  // nobody waited
}

TEST(HarnessCheckerTest, FlagsOverlapLostUpdateAndCounter) {
  // Two clean holds at once, both read 0: the second increment is lost.
  Report r = Check(
      Input({CleanHold(0, 0, 10, 20, 0), CleanHold(1, 0, 15, 25, 0)}, {1}));
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.unexcused_overlaps, 1);
  EXPECT_EQ(r.sequence_breaks, 1);
  EXPECT_FALSE(r.counters_ok);
  EXPECT_NE(r.text.find("OVERLAP"), std::string::npos) << r.text;
}

TEST(HarnessCheckerTest, OverlapWithAHolderToldLostIsExcused) {
  Hold lost = CleanHold(0, 0, 10, 20, 0);
  lost.release_code = static_cast<int>(absl::StatusCode::kAborted);
  Report r = Check(Input({lost, CleanHold(1, 0, 15, 25, 0)}, {1}));
  EXPECT_EQ(r.unexcused_overlaps, 0);
  EXPECT_EQ(r.excused_overlaps, 1);
  EXPECT_EQ(r.sequence_breaks, 0);
  EXPECT_TRUE(r.counters_ok) << r.text;  // 1 clean + 1 that may have written
  EXPECT_EQ(r.holds_told_lost, 1);
}

TEST(HarnessCheckerTest, LostEventExcusesTheOwnersLatestHold) {
  CheckInput in =
      Input({CleanHold(0, 0, 10, 20, 0), CleanHold(1, 0, 15, 25, 0)}, {1});
  in.logs[0].owners[0] = "client-a:7";
  in.logs[0].lost.push_back(LostEvent{"client-a:7", 0, 18 * kMs, 10});
  Report r = Check(std::move(in));
  EXPECT_EQ(r.unexcused_overlaps, 0) << r.text;
  EXPECT_EQ(r.lost_events, 1);
}

TEST(HarnessCheckerTest, KilledHolderEndsAtTheKillAndIsTimed) {
  const Hold open = OpenHoldOfWorker0(0);
  CheckInput in = Input({open, CleanHold(1, 0, 1200, 1210, 0)}, {1});
  in.faults.push_back(KillOfWorker0At20Ms());
  Report r = Check(std::move(in));
  EXPECT_TRUE(r.ok()) << r.text;
  ASSERT_EQ(r.kill_reacquires.size(), 1u);
  EXPECT_EQ(r.kill_reacquires[0].delay_ns, 1180 * kMs);
}

// Regression (a false overlap seen in a 3-minute run): a worker stopped and
// killed right after its release ran on Redis, before it logged it. Its hold
// ends where the release began, not at the kill.
TEST(HarnessCheckerTest, KilledHolderWhoseReleaseBeganEndsThere) {
  auto check = [](bool release_began) {
    Hold open = OpenHoldOfWorker0(0);
    if (release_began) open.release_start = 12 * kMs;
    CheckInput in = Input({open, CleanHold(1, 0, 13, 14, 0)}, {1});
    in.faults.push_back(KillOfWorker0At20Ms());
    return Check(std::move(in));
  };
  Report began = check(true);
  EXPECT_TRUE(began.ok()) << began.text;
  Report not_began = check(false);
  EXPECT_FALSE(not_began.ok()) << "an overlap with a killed holder that had "
                                  "not begun to release must be reported";
}

// A MultiLock round records both holds before it writes either counter; a
// worker killed while releasing the first leaves both open in its log, so
// the checker knows both counters may have been written (a regression: the
// second hold used to be recorded only once the first was closed, and a
// kill in between showed its write as a lost update).
TEST(HarnessLogTest, ATwoLockRoundKilledWhileReleasingLeavesBothHoldsOpen) {
  char path[] = "/tmp/relock-harness-log-test.XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  Hold first;
  first.thread = 0;
  first.lock = 1;
  first.attempt_start = first.attempt_end = 100;
  first.outcome = Outcome::kCompleted;
  first.release_start = 300;
  first.release_end = 310;
  {
    std::ofstream log(path);
    log << FormatAcquired(0, 2, 100, 100) << "\n"
        << FormatAcquired(0, 1, 100, 100) << "\n"
        << FormatReleasing(0, 2, 200)
        << "\n"
        // Another thread's round closes as usual.
        << FormatAcquired(1, 1, 50, 60) << "\n"
        << FormatReleasing(1, 1, 90) << "\n";
    Hold other = first;
    other.thread = 1;
    other.attempt_start = 50;
    other.attempt_end = 60;
    other.release_start = 90;
    log << FormatHold(other) << "\n";
  }
  const WorkerLog log = ParseWorkerLog(0, path);
  std::remove(path);
  EXPECT_EQ(log.bad_lines, 0);
  ASSERT_EQ(log.holds.size(), 3u);
  EXPECT_TRUE(log.holds[0].open);
  EXPECT_EQ(log.holds[0].lock, 2);
  EXPECT_EQ(log.holds[0].release_start, 200);
  EXPECT_TRUE(log.holds[1].open);
  EXPECT_EQ(log.holds[1].lock, 1);
  EXPECT_EQ(log.holds[1].release_start, 0);
  EXPECT_FALSE(log.holds[2].open);
  EXPECT_EQ(log.holds[2].release_start, 90);
}

TEST(HarnessCheckerTest, MeasuresTheWaitAfterARelease) {
  Hold waiter = CleanHold(1, 0, 520, 530, 1);
  waiter.attempt_start = 15 * kMs;  // waited from before the release at 20
  Report r = Check(Input({CleanHold(0, 0, 10, 20, 0), waiter}, {2}));
  EXPECT_EQ(r.waits_measured, 1);
  EXPECT_EQ(r.max_wait_outside_faults_ns, 500 * kMs);
  EXPECT_TRUE(r.ok()) << r.text;
}

// A restart of Redis over [from, to] ms hitting `locks` (empty: all).
Fault RestartAt(int64_t from, int64_t to, std::vector<int> locks) {
  Fault f;
  f.kind = FaultKind::kRestart;
  f.start = from * kMs;
  f.end = to * kMs;
  f.injected = true;
  f.locks = std::move(locks);
  return f;
}

// Cluster mode: a restart of the master of lock 1 asks nothing of lock 0's
// holds (a hold of lock 0 across it need not be told), and lock 1's holds
// that span it must be told.
TEST(HarnessCheckerTest, AFaultOnOneMasterConcernsOnlyItsLocks) {
  CheckInput in = Input(
      {CleanHold(0, 0, 10, 3000, 0), CleanHold(1, 1, 10, 3000, 0)}, {1, 1});
  in.faults.push_back(RestartAt(100, 200, {1}));
  in.restart_resets_counters = false;
  Report r = Check(std::move(in));
  EXPECT_EQ(r.holds_spanning_losses, 1) << r.text;
  EXPECT_EQ(r.unnotified_losses, 1);
  ASSERT_EQ(r.unnotified_examples.size(), 1u);
  EXPECT_EQ(r.unnotified_examples[0].rfind("lock 1:", 0), 0u)
      << r.unnotified_examples[0];
}

// A waiter of lock 0 that waits through a fault on lock 1's master is not
// excused by it; one of lock 1 is.
TEST(HarnessCheckerTest, OnlyTheFaultedLocksWaitsAreExcused) {
  for (const int faulted : {0, 1}) {
    CheckInput in = Input({CleanHold(0, 0, 10, 20, 0)}, {1});
    // Worker 1 waits from 15 ms to 4 s and gives up; the lock was free from
    // 20 ms.
    in.logs[1].failed.push_back(
        FailedAttempt{0, 0, 15 * kMs, 4000 * kMs,
                      static_cast<int>(absl::StatusCode::kDeadlineExceeded)});
    in.faults.push_back(RestartAt(100, 200, {faulted}));
    in.faults.back().kind = FaultKind::kPauseShort;
    Report r = Check(std::move(in));
    if (faulted == 0) {
      EXPECT_EQ(r.max_waiter_wait_outside_faults_ns, 0) << r.text;
    } else {
      EXPECT_EQ(r.max_waiter_wait_outside_faults_ns, 3980 * kMs) << r.text;
      EXPECT_FALSE(r.ok());
    }
  }
}

// In cluster mode the counters live apart: a restart does not reset them,
// so the sections before it count.
TEST(HarnessCheckerTest, ARestartResetsTheCountersOnlyWhereTheyLive) {
  for (const bool resets : {true, false}) {
    CheckInput in =
        Input({CleanHold(0, 0, 10, 20, 0), CleanHold(1, 0, 300, 310, 1)}, {2});
    in.faults.push_back(RestartAt(100, 200, {}));
    in.restart_resets_counters = resets;
    Report r = Check(std::move(in));
    EXPECT_EQ(r.counters_ok, !resets) << r.text;
  }
}

// Fenced runs: a token not above the previous acquisition's is a failure,
// unless a restart (which loses the counter) came between them.
TEST(HarnessCheckerTest, TokensMustGrowExceptAcrossACounterLoss) {
  for (const bool restarted : {false, true}) {
    Hold first = CleanHold(0, 0, 10, 20, 0);
    Hold second = CleanHold(1, 0, 300, 310, 1);
    first.token = 7;
    second.token = 3;
    // It wrote nothing (a fenced resource refuses a token below 7).
    second.outcome = Outcome::kAbandoned;
    second.set_sent = false;
    CheckInput in = Input({first, second}, {1});
    in.fenced = true;
    in.restart_resets_counters = false;
    if (restarted) in.faults.push_back(RestartAt(100, 200, {}));
    Report r = Check(std::move(in));
    EXPECT_EQ(r.fenced_acquisitions, 2);
    EXPECT_EQ(r.token_regressions, restarted ? 0 : 1) << r.text;
    EXPECT_EQ(r.token_resets, restarted ? 1 : 0);
    EXPECT_EQ(r.ok(), restarted) << r.text;
  }
}

// Fenced runs: a lower token whose attempt overlapped the previous
// acquisition's (its reply read late, after a pause of its process, its
// script having run before the other's) is no regression: which came first
// on Redis is unknown. The next acquisition is still compared with the
// highest token before it.
TEST(HarnessCheckerTest, ALowerTokenOfAnOverlappingAttemptIsNoRegression) {
  Hold first = CleanHold(0, 0, 100, 110, 0);
  Hold late = CleanHold(1, 0, 120, 130, 1);
  late.attempt_start = 50 * kMs;  // its script ran before first's
  Hold next = CleanHold(0, 0, 300, 310, 1);
  first.token = 9;
  late.token = 4;
  late.outcome = Outcome::kAbandoned;  // told lost: wrote nothing
  late.set_sent = false;
  next.token = 8;  // below first's 9: a regression
  CheckInput in = Input({first, late, next}, {1});
  in.fenced = true;
  in.restart_resets_counters = false;
  Report r = Check(std::move(in));
  EXPECT_EQ(r.fenced_acquisitions, 3);
  EXPECT_EQ(r.token_order_unknown, 1) << r.text;
  EXPECT_EQ(r.token_regressions, 1) << r.text;
}

// A fault on worker `w` over [from, to] ms.
Fault WorkerFault(FaultKind kind, int w, int64_t from, int64_t to) {
  Fault f;
  f.kind = kind;
  f.worker = w;
  f.start = from * kMs;
  f.end = to * kMs;
  f.injected = true;
  return f;
}

// Worker 0 is cut off at 12 ms while it holds lock 0 (its lease on the
// server ends at 1012 ms); worker 1 takes the lock at 1015 ms. Worker 0's
// loss report excuses the overlap only if it came before that.
TEST(HarnessCheckerTest, ACutOffHolderMustBeToldBeforeTheNextAcquires) {
  for (const int64_t told : {1000, 1020}) {
    Hold cut = CleanHold(0, 0, 10, 3000, 0);
    cut.outcome = Outcome::kAbandoned;
    CheckInput in = Input({cut, CleanHold(1, 0, 1015, 1020, 0)}, {1});
    in.logs[0].owners[0] = "client-a:7";
    in.logs[0].lost.push_back(LostEvent{"client-a:7", 0, told * kMs, 10});
    Fault f = WorkerFault(FaultKind::kPartition, 0, 12, 4000);
    f.cut_holds.push_back(CutHold{0, 1012 * kMs});
    in.faults.push_back(f);
    Report r = Check(std::move(in));
    const bool in_time = told < 1015;
    EXPECT_EQ(r.unexcused_overlaps, in_time ? 0 : 1) << r.text;
    ASSERT_EQ(r.loss_detection_ns.size(), 1u);
    EXPECT_EQ(r.loss_detection_ns[0], (told - 12) * kMs);
    // The deadline is the lease on the server minus the drift (12 ms).
    EXPECT_EQ(r.losses_told_late, in_time ? 0 : 1) << r.text;
    EXPECT_EQ(r.ok(), in_time) << r.text;
  }
}

// The event of a cut-off holder came late (1020 ms, after worker 1 took the
// lock at 1015 ms), but it gives the end of the holder's SafeUntil() (1000
// ms): the holder, who checks SafeUntil() before it writes, stopped
// believing then, in time. A SafeUntil() end before the hold began is no
// such time (the event's own time counts).
TEST(HarnessCheckerTest, ALateEventsSafeUntilEndTellsTheHolderInTime) {
  for (const int64_t safe_until : {int64_t{1000}, int64_t{5}}) {
    Hold cut = CleanHold(0, 0, 10, 3000, 0);
    cut.outcome = Outcome::kAbandoned;
    CheckInput in = Input({cut, CleanHold(1, 0, 1015, 1020, 0)}, {1});
    in.logs[0].owners[0] = "client-a:7";
    in.logs[0].lost.push_back(
        LostEvent{"client-a:7", 0, 1020 * kMs, 10, safe_until * kMs});
    Fault f = WorkerFault(FaultKind::kPartition, 0, 12, 4000);
    f.cut_holds.push_back(CutHold{0, 1012 * kMs});
    in.faults.push_back(f);
    Report r = Check(std::move(in));
    const bool in_time = safe_until == 1000;
    EXPECT_EQ(r.unexcused_overlaps, in_time ? 0 : 1) << r.text;
    EXPECT_EQ(r.losses_told_late, in_time ? 0 : 1) << r.text;
  }
}

TEST(HarnessLogTest, ALostLineKeepsTheSafeUntilEnd) {
  const WorkerLog log =
      ParsedLog({FormatLost(LostEvent{"c:1", 2, 300, 10, 250}),
                 FormatLost(LostEvent{"c:1", 2, 400, 10, 0})});
  EXPECT_EQ(log.bad_lines, 0);
  ASSERT_EQ(log.lost.size(), 2u);
  EXPECT_EQ(log.lost[0].safe_until, 250);
  EXPECT_EQ(log.lost[0].time, 300);
  EXPECT_EQ(log.lost[1].safe_until, 0);
}

// Worker 0 holds lock 0 over [10, 3000] ms; a restart at 100 ms loses it,
// worker 0 is cut off at 500 ms (for another lock it holds) and told at
// 700 ms. Worker 1 takes the lock at 150 ms: that overlap came from the
// restart, before the cut, and the report, though after it, excuses it (a
// 3-minute fenced run failed on this). Worker 1 takes it at 600 ms instead:
// the cut's rule judges it, and a report after it excuses nothing.
TEST(HarnessCheckerTest, ACutJudgesOnlyTheOverlapsThatBeginAfterIt) {
  for (const int64_t other_at : {150, 600}) {
    Hold held = CleanHold(0, 0, 10, 3000, 0);
    held.outcome = Outcome::kAbandoned;
    CheckInput in =
        Input({held, CleanHold(1, 0, other_at, other_at + 5, 0)}, {1});
    in.logs[0].owners[0] = "client-a:7";
    in.logs[0].lost.push_back(LostEvent{"client-a:7", 0, 700 * kMs, 10});
    in.faults.push_back(WorkerFault(FaultKind::kRestart, -1, 100, 101));
    in.faults.push_back(WorkerFault(FaultKind::kPartition, 0, 500, 4000));
    Report r = Check(std::move(in));
    const bool before_cut = other_at < 500;
    EXPECT_EQ(r.unexcused_overlaps, before_cut ? 0 : 1) << r.text;
  }
}

// A split brain over [5, 100] ms: worker 0 holds lock 0 on the old primary
// over [10, 40] ms, worker 1 on the promoted replica over [20, 30] ms, both
// reading 0 (one increment lost). Unexpected, the overlap fails the run and
// is counted as a split-brain overlap too; expected (without replica
// acknowledgement), it is counted apart, the two sections are not clean
// (so neither the lost update nor the counter fails), and the run passes.
TEST(HarnessCheckerTest, SplitBrainOverlapsFailUnlessExpected) {
  for (const bool expected : {false, true}) {
    CheckInput in =
        Input({CleanHold(0, 0, 10, 40, 0), CleanHold(1, 0, 20, 30, 0)}, {1});
    in.expect_split_brain_overlaps = expected;
    Fault f = WorkerFault(FaultKind::kSplitBrain, -1, 5, 100);
    in.faults.push_back(f);
    Report r = Check(std::move(in));
    EXPECT_EQ(r.split_brain_overlaps, 1) << r.text;
    EXPECT_EQ(r.unexcused_overlaps, expected ? 0 : 1) << r.text;
    EXPECT_EQ(r.sequence_breaks, expected ? 0 : 1) << r.text;
    EXPECT_EQ(r.counters_ok, expected) << r.text;
    EXPECT_EQ(r.ok(), expected) << r.text;
    EXPECT_NE(r.text.find("split-brain overlaps: 1"), std::string::npos)
        << r.text;
  }
}

// In a split brain a holder's loss report excuses an overlap only if it
// came before the other holder acquired, as for a partition.
TEST(HarnessCheckerTest, ASplitBrainHolderMustBeToldBeforeTheNextAcquires) {
  for (const int64_t told : {15, 25}) {
    Hold a = CleanHold(0, 0, 10, 40, 0);
    a.outcome = Outcome::kAbandoned;
    CheckInput in = Input({a, CleanHold(1, 0, 20, 30, 0)}, {1});
    in.logs[0].owners[0] = "client-a:7";
    in.logs[0].lost.push_back(LostEvent{"client-a:7", 0, told * kMs, 10});
    in.faults.push_back(WorkerFault(FaultKind::kSplitBrain, -1, 5, 100));
    Report r = Check(std::move(in));
    EXPECT_EQ(r.unexcused_overlaps, told < 20 ? 0 : 1) << r.text;
  }
}

// A cut-off holder never told, that goes on holding past its lease on the
// server, fails the run even if nobody took the lock meanwhile.
TEST(HarnessCheckerTest, ACutOffHolderNeverToldFails) {
  Hold cut = CleanHold(0, 0, 10, 3000, 0);
  CheckInput in = Input({cut}, {1});
  Fault f = WorkerFault(FaultKind::kPartitionRequests, 0, 12, 4000);
  f.cut_holds.push_back(CutHold{0, 1012 * kMs});
  in.faults.push_back(f);
  Report r = Check(std::move(in));
  EXPECT_EQ(r.losses_told_late, 1) << r.text;
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.text.find("never told"), std::string::npos) << r.text;
}

// A holder paused past its lease overlaps the next holders: excused by the
// pause, with its unsafe window reported. Its SET, sent after it resumed,
// sets the counter back (a stale write): the lost update it causes is
// explained, and the counter keeps only its upper bound.
TEST(HarnessCheckerTest, APausedHoldersOverlapIsExcusedAndMeasured) {
  // Worker 1 writes 1 and 2; worker 0, paused since it read 0, writes 1 at
  // 2998 ms; worker 1 then reads 1 and writes 2.
  CheckInput in =
      Input({CleanHold(0, 0, 10, 3000, 0), CleanHold(1, 0, 1600, 1700, 0),
             CleanHold(1, 0, 1710, 1720, 1), CleanHold(1, 0, 3100, 3110, 1)},
            {2});
  in.faults.push_back(WorkerFault(FaultKind::kPauseHolder, 0, 20, 2990));
  Report r = Check(std::move(in));
  EXPECT_EQ(r.unexcused_overlaps, 0) << r.text;
  EXPECT_EQ(r.paused_overlaps, 2);
  EXPECT_EQ(r.stale_writes, 1);
  EXPECT_EQ(r.stale_write_breaks, 1);
  ASSERT_EQ(r.pause_windows.size(), 1u);
  // From the other's acquisition (1600 ms) to the paused one's release.
  EXPECT_NE(r.pause_windows[0].find("unsafe window 1400.0ms"),
            std::string::npos)
      << r.pause_windows[0];
  EXPECT_EQ(r.sequence_breaks, 0) << r.text;
  ASSERT_EQ(r.counters.size(), 1u);
  EXPECT_TRUE(r.counters[0].stale);
  EXPECT_TRUE(r.ok()) << r.text;
}

TEST(HarnessCheckerTest, FaultListsNameKnownFaultsOnly) {
  absl::StatusOr<std::vector<FaultKind>> kinds =
      ParseFaultList("partition,pause-holder,partition");
  ASSERT_OK(kinds);
  EXPECT_EQ(*kinds, (std::vector<FaultKind>{FaultKind::kPartition,
                                            FaultKind::kPauseHolder}));
  absl::StatusOr<std::vector<FaultKind>> bad = ParseFaultList("partitoin");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("partitoin"), std::string::npos);
  for (int i = 0; i < kFaultKinds; ++i) {
    const FaultKind kind = static_cast<FaultKind>(i);
    absl::StatusOr<FaultKind> back = FaultKindFromName(FaultKindName(kind));
    ASSERT_OK(back);
    EXPECT_EQ(*back, kind);
  }
}

// --replica_sync=N: in [0, 64], and above 0 only where there are replicas
// to acknowledge: the cluster mode's, one per master.
TEST(HarnessOptionsTest, ReplicaSyncNeedsTheClustersOneReplicaPerMaster) {
  HarnessOptions o;
  EXPECT_OK(ValidateHarnessOptions(o));  // 0, single server
  o.cluster = true;
  for (int n : {0, 1}) {
    o.replica_sync = n;
    EXPECT_OK(ValidateHarnessOptions(o)) << n;
  }
  for (int n : {-1, 2, 64, 65}) {
    o.replica_sync = n;
    absl::Status s = ValidateHarnessOptions(o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << n;
    EXPECT_NE(s.message().find("replica_sync"), std::string::npos) << s;
  }
  o.replica_sync = 65;
  EXPECT_NE(ValidateHarnessOptions(o).message().find("[0, 64]"),
            std::string::npos);
  o.replica_sync = 2;
  EXPECT_NE(ValidateHarnessOptions(o).message().find("1 replica per master"),
            std::string::npos);
  // The WAIT's timeout is half the command_timeout, and Redis may answer a
  // WAIT 100 ms late.
  o.replica_sync = 1;
  o.command_timeout = absl::Milliseconds(200);
  absl::Status short_timeout = ValidateHarnessOptions(o);
  EXPECT_EQ(short_timeout.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(short_timeout.message().find("command_timeout above 200ms"),
            std::string::npos)
      << short_timeout;
  // The workers get it in whole milliseconds: 200.5 ms is 200 there.
  o.command_timeout = absl::Microseconds(200500);
  EXPECT_EQ(ValidateHarnessOptions(o).code(),
            absl::StatusCode::kInvalidArgument);
  o.command_timeout = absl::Milliseconds(201);
  EXPECT_OK(ValidateHarnessOptions(o));
  o.cluster = false;
  absl::Status single = ValidateHarnessOptions(o);
  EXPECT_EQ(single.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(single.message().find("--cluster"), std::string::npos) << single;
}

// The coordinator hands replica_sync to its workers as an argument.
TEST(HarnessOptionsTest, WorkerArgumentsCarryReplicaSync) {
  WorkerConfig c;
  c.url = "redis://127.0.0.1:1";
  c.port = 1;
  c.log_path = "/nonexistent/log";
  c.replica_sync = 1;
  c.replica_sync_timeout_ms = 150;
  WorkerConfig back;
  ASSERT_OK(back.FromArgs(c.ToArgs()));
  EXPECT_EQ(back.replica_sync, 1);
  EXPECT_EQ(back.replica_sync_timeout_ms, 150);
  EXPECT_EQ(back.FromArgs({"replica_sync=65"}).code(),
            absl::StatusCode::kInvalidArgument);
}

// A clean hold of lock 0 by worker 0's thread `thread` over [from, to] ms.
Hold ThreadHold(int thread, int64_t from, int64_t to, int64_t read) {
  Hold h = CleanHold(0, 0, from, to, read);
  h.thread = thread;
  return h;
}

// A loss report goes to its owner's thread only: the report for thread 1's
// owner excuses nothing of thread 0's hold, which overlaps worker 1's.
TEST(HarnessCheckerTest, ALostEventExcusesOnlyItsOwnersHold) {
  for (const char* owner : {"client-a:1", "client-a:2"}) {
    CheckInput in = Input({ThreadHold(1, 5, 8, 0), ThreadHold(0, 10, 20, 1),
                           CleanHold(1, 0, 15, 25, 1)},
                          {2});
    in.logs[0].owners = {{0, "client-a:1"}, {1, "client-a:2"}};
    in.logs[0].lost.push_back(LostEvent{owner, 0, 18 * kMs, 10});
    Report r = Check(std::move(in));
    const bool own = std::string(owner) == "client-a:1";
    EXPECT_EQ(r.unexcused_overlaps, own ? 0 : 1) << r.text;
    EXPECT_EQ(r.excused_overlaps, own ? 1 : 0);
    EXPECT_EQ(r.holds_told_lost, 1);
    EXPECT_EQ(r.ok(), own) << r.text;
  }
}

// Outside partitions a report to either holder excuses an overlap: here the
// later one's SafeUntil() said Aborted, so it skipped its SET.
TEST(HarnessCheckerTest, AReportToTheLaterHolderExcusesTheOverlapToo) {
  Hold later = CleanHold(1, 0, 15, 25, 0);
  later.safe_code = static_cast<int>(absl::StatusCode::kAborted);
  later.outcome = Outcome::kAbandoned;
  later.set_sent = false;
  Report r = Check(Input({CleanHold(0, 0, 10, 20, 0), later}, {1}));
  EXPECT_EQ(r.unexcused_overlaps, 0) << r.text;
  EXPECT_EQ(r.excused_overlaps, 1);
  EXPECT_EQ(r.holds_told_lost, 1);
  EXPECT_EQ(r.release_aborted, 0);
  EXPECT_EQ(r.completed_sections, 1);
  EXPECT_EQ(r.outcomes["completed"], 1);
  EXPECT_EQ(r.outcomes["abandoned"], 1);
  EXPECT_TRUE(r.ok()) << r.text;
}

// Two clean sections one after the other that read the same value: an
// update was lost although the holds never overlapped.
TEST(HarnessCheckerTest, ALostUpdateBetweenCleanSectionsFails) {
  Report r = Check(
      Input({CleanHold(0, 0, 10, 20, 0), CleanHold(1, 0, 30, 40, 0)}, {1}));
  EXPECT_EQ(r.unexcused_overlaps, 0);
  EXPECT_EQ(r.sequence_breaks, 1);
  ASSERT_EQ(r.sequence_examples.size(), 1u);
  EXPECT_THAT(r.sequence_examples[0], HasSubstr("read 0, then w1/t0"));
  EXPECT_FALSE(r.counters_ok);  // 2 clean sections, the counter says 1
  EXPECT_THAT(r.failures, Contains("1 lost update(s) between clean sections"));
  EXPECT_THAT(r.text, HasSubstr("LOST UPDATE lock 0"));
}

// A section that may have written (its SET failed) between two clean ones
// explains a jump in what they read; so does a restart that wiped the
// counter. The counter then lies between the clean sections after the
// restart and those plus the ones that may have written after it began.
TEST(HarnessCheckerTest, AMaybeWriteOrARestartExplainsAJump) {
  Hold failed = CleanHold(1, 0, 22, 25, 1);
  failed.outcome = Outcome::kSetFailed;
  Report tainted = Check(Input(
      {CleanHold(0, 0, 10, 20, 0), failed, CleanHold(0, 0, 30, 40, 2)}, {3}));
  EXPECT_EQ(tainted.sequence_breaks, 0) << tainted.text;
  ASSERT_EQ(tainted.counters.size(), 1u);
  EXPECT_EQ(tainted.counters[0].clean, 2);
  EXPECT_EQ(tainted.counters[0].maybe_wrote, 1);
  EXPECT_TRUE(tainted.ok()) << tainted.text;

  for (const int64_t value : {1, 2}) {
    CheckInput in = Input(
        {CleanHold(0, 0, 10, 20, 0), CleanHold(1, 0, 300, 310, 0)}, {value});
    in.faults.push_back(RestartAt(100, 200, {}));
    Report r = Check(std::move(in));
    EXPECT_EQ(r.sequence_breaks, 0) << r.text;
    ASSERT_EQ(r.counters.size(), 1u);
    EXPECT_EQ(r.counters[0].clean, 1);  // the section after the restart
    EXPECT_EQ(r.counters[0].maybe_wrote, 0);
    EXPECT_EQ(r.counters_ok, value == 1) << r.text;
    EXPECT_THAT(r.text, HasSubstr(value == 1 ? "lock 0=1 (1..1) ok;"
                                             : "lock 0=2 (1..1) BAD;"));
  }
}

// A killed holder's lock must be taken again within a lease plus the
// allowance: never, or too late, fails the run.
TEST(HarnessCheckerTest, AKilledHoldersLockMustBeReacquiredInTime) {
  const Hold open = OpenHoldOfWorker0(0);
  {
    CheckInput in = Input({open, CleanHold(1, 0, 4, 6, 0)}, {1});
    in.faults.push_back(KillOfWorker0At20Ms());
    Report r = Check(std::move(in));
    ASSERT_EQ(r.kill_reacquires.size(), 1u);
    EXPECT_EQ(r.kill_reacquires[0].delay_ns, -1);
    EXPECT_EQ(r.workers_killed, 1);
    EXPECT_THAT(r.failures,
                Contains("lock 0 of killed worker 0 was never reacquired"));
    EXPECT_THAT(r.text, HasSubstr("NEVER reacquired"));
  }
  {
    // Lease 1 s + 3 s allowed; reacquired 4.1 s after the kill.
    CheckInput in = Input({open, CleanHold(1, 0, 4120, 4130, 0)}, {1});
    in.faults.push_back(KillOfWorker0At20Ms());
    Report r = Check(std::move(in));
    ASSERT_EQ(r.kill_reacquires.size(), 1u);
    EXPECT_EQ(r.kill_reacquires[0].delay_ns, 4100 * kMs);
    EXPECT_THAT(r.failures,
                Contains("lock 0 of killed worker 0 was reacquired only "
                         "4.100s after the kill"));
    // The killed hold may have written: the counter may be 1 or 2.
    EXPECT_TRUE(r.counters_ok) << r.text;
  }
}

// A ghost (an owner field still renewed in Redis though its thread holds
// nothing) fails the run unless tolerated; an orphan (one that ended within
// a lease) is only counted.
TEST(HarnessCheckerTest, AGhostFailsUnlessToleratedAnOrphanNever) {
  for (const bool tolerate : {false, true}) {
    CheckInput in = Input({CleanHold(0, 0, 10, 20, 0)}, {1});
    in.logs[0].ghosts.push_back(
        GhostHold{0, 0, 30 * kMs, 1, 900, "after-release-ok"});
    in.logs[1].ghosts.push_back(
        GhostHold{0, 0, 40 * kMs, 1, 800, "orphan-expired"});
    in.tolerate_ghost_holds = tolerate;
    Report r = Check(std::move(in));
    EXPECT_EQ(r.ghost_holds, 1);
    EXPECT_EQ(r.orphan_holds, 1);
    ASSERT_EQ(r.ghost_examples.size(), 1u);
    EXPECT_EQ(r.ghost_examples[0],
              "lock 0 w0/t0 at +0.030s after-release-ok: count=1 pttl=900ms");
    // Worker 1 never acquired a lock: that fails either way.
    EXPECT_THAT(r.failures, Contains("worker 1 never acquired a lock"));
    EXPECT_EQ(r.failures.size(), tolerate ? 1u : 2u) << r.text;
    EXPECT_THAT(r.text, HasSubstr(tolerate ? ", tolerated" : "(must be 0)"));
  }
}

// A hold across a long pause of Redis, by more than a lease after it, must
// have been told its lock was lost; a killed one is not asked.
TEST(HarnessCheckerTest, AHoldAcrossALongPauseMustBeTold) {
  for (const bool told : {false, true}) {
    CheckInput in = Input({CleanHold(0, 0, 10, 3500, 0)}, {1});
    if (told) {
      in.logs[0].owners[0] = "client-a:7";
      in.logs[0].lost.push_back(LostEvent{"client-a:7", 0, 2200 * kMs, 10});
    }
    Fault pause = RestartAt(100, 2100, {});
    pause.kind = FaultKind::kPauseLong;
    in.faults.push_back(pause);
    Report r = Check(std::move(in));
    EXPECT_EQ(r.holds_spanning_losses, 1) << r.text;
    EXPECT_EQ(r.unnotified_losses, told ? 0 : 1);
    EXPECT_EQ(r.holds_told_lost, told ? 1 : 0);
    // A told hold is not clean: the counter may stay at 0.
    EXPECT_EQ(r.completed_sections, told ? 0 : 1);
    const std::string not_told = "1 holder(s) never told their lock was lost";
    if (told) {
      EXPECT_THAT(r.failures, Not(Contains(not_told))) << r.text;
    } else {
      EXPECT_THAT(r.failures, Contains(not_told)) << r.text;
    }
  }
  // Ended within a lease after the pause: nothing asked.
  CheckInput in = Input({CleanHold(0, 0, 10, 3000, 0)}, {1});
  Fault pause = RestartAt(100, 2100, {});
  pause.kind = FaultKind::kPauseLong;
  in.faults.push_back(pause);
  Report r = Check(std::move(in));
  EXPECT_EQ(r.holds_spanning_losses, 0) << r.text;
}

// Records the checker cannot account for are anomalies, and fail the run:
// a hold never closed by a worker that was not killed, "E" lines, and
// unparsable lines (but for one torn last line of a worker that did not
// finish).
TEST(HarnessCheckerTest, UnaccountedRecordsAreAnomalies) {
  Hold open = CleanHold(0, 0, 10, 20, 0);
  open.open = true;
  CheckInput in = Input({open}, {1});
  in.logs[0].anomalies.push_back("thread 0: Release: INTERNAL: boom");
  in.logs[1].bad_lines = 1;  // done: not a torn last line
  Report r = Check(std::move(in));
  ASSERT_EQ(r.anomalies.size(), 3u) << r.text;
  EXPECT_EQ(r.anomalies[0], "worker 0: thread 0: Release: INTERNAL: boom");
  EXPECT_EQ(r.anomalies[1],
            "worker 0 thread 0: hold of lock 0 acquired at +0.010s never "
            "closed, but the worker was not killed");
  EXPECT_EQ(r.anomalies[2], "worker 1: 1 unparsable log lines");
  EXPECT_THAT(r.failures, Contains("3 anomal(ies)"));

  CheckInput torn = Input({CleanHold(1, 0, 10, 20, 0)}, {1});
  torn.logs[0].bad_lines = 1;
  torn.logs[0].done = false;
  torn.logs[0].holds.push_back(CleanHold(0, 0, 30, 40, 1));
  Report t = Check(std::move(torn));
  EXPECT_TRUE(t.anomalies.empty()) << t.text;
}

// Fencing at the resource: a resumed paused holder's write with an old
// token is refused by the counter's script; it counts as a stale write
// refused, wrote nothing (no late writer, no lost update), and the run
// passes.
TEST(HarnessCheckerTest, AStaleWriteTheResourceRefusedIsCountedAndHarmless) {
  Hold paused = CleanHold(0, 0, 10, 3000, 0);
  paused.token = 1;
  paused.outcome = Outcome::kRefused;
  paused.fence_high = 2;
  Hold next = CleanHold(1, 0, 1500, 1600, 0);
  next.token = 2;
  next.fence_high = 1;
  CheckInput in = Input({paused, next}, {1});
  in.fenced = true;
  in.faults.push_back(WorkerFault(FaultKind::kPauseHolder, 0, 20, 2990));
  Report r = Check(std::move(in));
  EXPECT_EQ(r.stale_writes_refused, 1);
  EXPECT_EQ(r.fenced_writes_accepted, 1);
  EXPECT_EQ(r.stale_writes_accepted, 0);
  EXPECT_EQ(r.stale_writes_accepted_in_logs, 0);
  EXPECT_EQ(r.stale_writes, 0);  // refused: it never landed
  EXPECT_EQ(r.sequence_breaks, 0);
  EXPECT_TRUE(r.counters_ok) << r.text;
  EXPECT_THAT(r.text, HasSubstr("1 stale writes refused"));
  EXPECT_TRUE(r.ok()) << r.text;
}

// An accepted write whose token is below the highest the script reported
// having accepted: the script's own report of a stale write accepted.
TEST(HarnessCheckerTest, AStaleWriteTheScriptReportsAcceptedFailsTheRun) {
  Hold first = CleanHold(0, 0, 10, 20, 0);
  first.token = 1;
  first.fence_high = 5;  // (the resource said it had accepted 5)
  CheckInput in = Input({first}, {1});
  in.fenced = true;
  Report r = Check(std::move(in));
  EXPECT_EQ(r.stale_writes_accepted, 1);
  EXPECT_FALSE(r.ok());
  EXPECT_THAT(r.text, HasSubstr("stale write(s) accepted by the fenced "
                                "resource: 1 as its script reported"));
}

// The logs' cross-check, whatever the script reported: a write accepted
// after one with a higher token had landed is stale, unless a restart that
// wiped the counters (and the highest accepted token) came between them.
TEST(HarnessCheckerTest,
     TheLogsCrossCheckFindsStaleWritesAcceptedButAcrossAReset) {
  for (const bool restarted : {false, true}) {
    Hold high = CleanHold(0, 0, 10, 20, 0);
    high.token = 5;
    Hold low = CleanHold(1, 0, 300, 310, 1);
    low.token = 3;  // accepted after 5 landed; fence_high unknown (-1)
    CheckInput in = Input({high, low}, {restarted ? 1 : 2});
    in.fenced = true;
    if (restarted) in.faults.push_back(RestartAt(100, 200, {}));
    Report r = Check(std::move(in));
    EXPECT_EQ(r.stale_writes_accepted, 0);
    EXPECT_EQ(r.stale_writes_accepted_in_logs, restarted ? 0 : 1) << r.text;
    EXPECT_THAT(r.text, HasSubstr(restarted ? "0 by the logs' cross-check"
                                            : "1 by the logs' cross-check"));
  }
}

// The "H" line carries the highest accepted token in fenced runs.
TEST(HarnessCheckerTest, TheHoldLineKeepsTheResourcesHighestToken) {
  const char* path = "harness_checker_test_fence.log";
  Hold h = CleanHold(0, 0, 10, 20, 0);
  h.thread = 0;
  h.token = 4;
  h.outcome = Outcome::kRefused;
  h.fence_high = 9;
  {
    std::ofstream log(path);
    log << FormatAcquired(0, 0, h.attempt_start, h.attempt_end, h.token) << "\n"
        << FormatHold(h) << "\n";
  }
  const WorkerLog log = ParseWorkerLog(0, path);
  std::remove(path);
  EXPECT_EQ(log.bad_lines, 0);
  ASSERT_EQ(log.holds.size(), 1u);
  EXPECT_FALSE(log.holds[0].open);
  EXPECT_EQ(log.holds[0].outcome, Outcome::kRefused);
  EXPECT_EQ(log.holds[0].fence_high, 9);
  EXPECT_EQ(log.holds[0].token, 4);
}

// Fenced runs: every acquisition must carry a token.
TEST(HarnessCheckerTest, AFencedHoldWithoutATokenIsAnAnomaly) {
  Hold first = CleanHold(0, 0, 10, 20, 0);
  first.token = 4;
  CheckInput in = Input({first, CleanHold(1, 0, 30, 40, 1)}, {2});
  in.fenced = true;
  Report r = Check(std::move(in));
  EXPECT_EQ(r.fenced_acquisitions, 1);
  ASSERT_EQ(r.anomalies.size(), 1u);
  EXPECT_THAT(r.anomalies[0], HasSubstr("has no fencing token"));
  EXPECT_FALSE(r.ok());
}

// The verdict asks for every fault kind of the run and for a kill of a
// holder, and that every worker finished.
TEST(HarnessCheckerTest, TheVerdictNamesWhatTheRunLacked) {
  CheckInput in =
      Input({CleanHold(0, 0, 10, 20, 0), CleanHold(1, 0, 30, 40, 1)}, {2});
  in.require_every_fault_kind = true;
  in.fault_kinds = {FaultKind::kKillHolder, FaultKind::kScriptFlush,
                    FaultKind::kClientKillPubsub};
  Fault flush = WorkerFault(FaultKind::kScriptFlush, -1, 100, 101);
  Fault kill = KillOfWorker0At20Ms();
  kill.injected = false;
  kill.detail = "found no worker holding a lock within 5s";
  in.faults = {flush, kill};
  in.worker_failures.push_back("worker 1 exited with 3");
  Report r = Check(std::move(in));
  EXPECT_EQ(r.faults.size(), 1u);
  EXPECT_EQ(r.faults["script-flush"], 1);
  EXPECT_EQ(r.workers_killed, 0);
  EXPECT_EQ(r.failures, (std::vector<std::string>{
                            "1 worker(s) did not finish normally",
                            "fault kill-9-holder was never injected",
                            "fault client-kill-pubsub was never injected",
                            "no worker was killed while holding a lock"}));
  ASSERT_EQ(r.fault_log.size(), 2u);
  EXPECT_EQ(r.fault_log[1],
            "+0.019s kill-9-holder: NOT INJECTED: found no worker holding a "
            "lock within 5s");
}

// A free lock's hand-off to a waiter: excused inside a disruptive fault's
// window (its span plus a lease plus 1 s), measured apart near a client
// kill, which excuses nothing.
TEST(HarnessCheckerTest, AHandOffIsExcusedOnlyByADisruptiveFault) {
  for (const FaultKind kind :
       {FaultKind::kPauseShort, FaultKind::kClientKillNormal}) {
    Hold waiter = CleanHold(1, 0, 1520, 1530, 1);
    waiter.attempt_start = 15 * kMs;  // waited from before the release at 20
    CheckInput in = Input({CleanHold(0, 0, 10, 20, 0), waiter}, {2});
    in.max_wait_outside_faults_ns = 1000 * kMs;
    in.faults.push_back(WorkerFault(kind, -1, 18, 19));
    Report r = Check(std::move(in));
    const bool disruptive = kind == FaultKind::kPauseShort;
    EXPECT_EQ(r.waits_measured, 1);
    EXPECT_EQ(r.max_wait_ns, 1500 * kMs);
    EXPECT_EQ(r.max_wait_outside_faults_ns, disruptive ? 0 : 1500 * kMs);
    EXPECT_EQ(r.max_wait_near_connection_faults_ns,
              disruptive ? 0 : 1500 * kMs);
    EXPECT_EQ(r.waits_over_1s_outside_faults, disruptive ? 0 : 1);
    EXPECT_EQ(r.max_waiter_wait_outside_faults_ns, disruptive ? 0 : 1500 * kMs);
    EXPECT_EQ(r.ok(), disruptive) << r.text;
    if (!disruptive) {
      EXPECT_EQ(r.max_wait_outside_where, "lock 0 freed at +0.020s");
      EXPECT_EQ(r.max_waiter_wait_where,
                "lock 0 freed at +0.020s, w1/t0 waited until +1.520s");
    }
  }
}

// A stall a worker reported ("S": a request without a reply within
// command_timeout) excuses the waits within a lease and 1 s of it, on every
// lock, and is counted; a wait far from it is not excused.
TEST(HarnessCheckerTest, AStallAWorkerReportedExcusesTheWaitsNearIt) {
  for (const int64_t stall_ms : {int64_t{500}, int64_t{5000}}) {
    Hold waiter = CleanHold(1, 0, 1520, 1530, 1);
    waiter.attempt_start = 15 * kMs;  // waited from before the release at 20
    CheckInput in = Input({CleanHold(0, 0, 10, 20, 0), waiter}, {2});
    in.max_wait_outside_faults_ns = 1000 * kMs;
    in.logs[1].stalls.push_back(stall_ms * kMs);
    Report r = Check(std::move(in));
    // The lease is 1 s: the window is [stall - 2 s, stall + 2 s].
    const bool near = stall_ms == 500;
    EXPECT_EQ(r.stalls, 1);
    EXPECT_EQ(r.max_wait_outside_faults_ns, near ? 0 : 1500 * kMs);
    EXPECT_EQ(r.max_waiter_wait_outside_faults_ns, near ? 0 : 1500 * kMs);
    EXPECT_THAT(r.text, HasSubstr("stalls:     1 connections lost"));
    EXPECT_EQ(r.ok(), near) << r.text;
  }
}

TEST(HarnessLogTest, AStallLineIsRead) {
  const WorkerLog log = ParsedLog({FormatStall(123456789)});
  EXPECT_EQ(log.bad_lines, 0);
  EXPECT_THAT(log.stalls, ::testing::ElementsAre(123456789));
}

// Worker 0 holds lock 0 over [10, 3000] ms (it skips its SET), is cut off by
// `kind` over [12, heal] ms (its lease on the server ends at 1012 ms) and is
// told its lock was lost at `told` ms.
CheckInput CutOffHolder(FaultKind kind, int64_t heal, int64_t told) {
  Hold held = CleanHold(0, 0, 10, 3000, 0);
  held.outcome = Outcome::kAbandoned;
  CheckInput in = Input({held}, {0});
  in.logs[0].owners[0] = "client-a:7";
  in.logs[0].lost.push_back(LostEvent{"client-a:7", 0, told * kMs, 10});
  Fault f = WorkerFault(kind, 0, 12, heal);
  f.cut_holds.push_back(CutHold{0, 1012 * kMs});
  in.faults.push_back(f);
  return in;
}

// A cut-off holder's report counts for its cut only between the cut and a
// lease after the heal; a cut shorter than the lease asks nothing of it.
TEST(HarnessCheckerTest, ACutOffHoldersReportCountsForItsOwnCutOnly) {
  // Told 1.1 s after a 500 ms cut that ended before the deadline.
  Report r = Check(CutOffHolder(FaultKind::kPartition, 512, 1112));
  EXPECT_EQ(r.partition_holds, 1);
  EXPECT_EQ(r.losses_told_late, 0) << r.text;
  ASSERT_EQ(r.loss_detection_ns.size(), 1u);
  EXPECT_EQ(r.min_loss_margin_ns, -100 * kMs);
  EXPECT_THAT(r.failures, Not(Contains(HasSubstr("cut-off holder")))) << r.text;

  // Told before the cut: not a report of it.
  r = Check(CutOffHolder(FaultKind::kPartitionReplies, 2012, 11));
  EXPECT_TRUE(r.loss_detection_ns.empty());
  EXPECT_EQ(r.losses_told_late, 1) << r.text;
  ASSERT_EQ(r.partition_details.size(), 1u);
  EXPECT_EQ(r.partition_details[0],
            "+0.012s partition-replies w0 lock 0: lease on the server ended "
            "1000.0ms after the cut; told at +0.011s, released at +3.000s");
}

// Every section of the report at once, as the checker prints it.
TEST(HarnessCheckerTest, TheReportPrintsEverySection) {
  const Hold killed = OpenHoldOfWorker0(1);
  Hold paused = CleanHold(1, 0, 10, 3000, 0);
  Hold cut = CleanHold(1, 1, 4000, 7000, 0);
  cut.thread = 1;
  cut.outcome = Outcome::kAbandoned;
  cut.set_sent = false;
  std::vector<Hold> holds = {killed,
                             paused,
                             cut,
                             CleanHold(0, 0, 1600, 1700, 0),
                             CleanHold(0, 0, 1710, 1720, 1),
                             CleanHold(0, 1, 1300, 1310, 0),
                             CleanHold(0, 0, 3100, 3110, 1),
                             CleanHold(0, 1, 7100, 7110, 5),
                             CleanHold(1, 1, 1305, 1308, 0)};
  int64_t token = 1;
  for (Hold& h : holds) h.token = token++;
  holds[4].token = 2;
  CheckInput in = Input(holds, {2, 7});
  in.seed = 42;
  in.replica_sync = 1;
  in.fenced = true;
  in.threads = 2;
  in.logs[1].owners = {{0, "client-b:1"}, {1, "client-b:2"}};
  in.logs[1].lost.push_back(LostEvent{"client-b:2", 1, 5100 * kMs, 10});
  in.logs[0].ghosts.push_back(
      GhostHold{0, 0, 3200 * kMs, 1, 900, "after-release-ok"});
  in.logs[0].anomalies.push_back("thread 0: TryAcquire: INTERNAL: boom");
  Fault kill = KillOfWorker0At20Ms();
  Fault pause = WorkerFault(FaultKind::kPauseHolder, 1, 20, 2990);
  pause.detail = "worker 1 stopped";
  Fault partition = WorkerFault(FaultKind::kPartition, 1, 4100, 6100);
  partition.cut_holds.push_back(CutHold{1, 5000 * kMs});
  Fault flush = WorkerFault(FaultKind::kScriptFlush, -1, 8000, 8001);
  flush.detail = "flushed on 1 of 1 servers";
  in.faults = {kill, pause, partition, flush};
  in.worker_failures.push_back("worker 1 exited with 3");
  in.notes.push_back("partition faults not run: a note");
  Report r = Check(std::move(in));
  EXPECT_EQ(r.text, R"(==== relock safety harness report ====
run:        10.0 s, 2 processes x 2 threads x 2 locks, lease 1.000s, seed 42, replica_sync 1
workers:    2 started, 1 killed; acquisitions per worker: w0=6 w1=3
attempts:   9 (9 acquired)
sections:   6 clean; abandoned=1 completed=7
faults:     kill-9-holder=1 partition=1 pause-holder=1 script-flush=1 
            +0.019s kill-9-holder: 
            +0.020s pause-holder: worker 1 stopped
            +4.100s partition: 
            +8.000s script-flush: flushed on 1 of 1 servers
overlaps:   1 unexcused (must be 0); 0 excused overlapping pairs (one holder was told its lock was lost)
            OVERLAP lock 1: w0/t0 [+1.300s, +1.310s] completed and w1/t0 [+1.305s, +1.308s] completed
lost locks: 1 kLockLost events; 1 holds told lost (0 by Release() = Aborted); 0 releases Unavailable
            0 holds spanned a restart/long pause; 0 of them never told (must be 0)
partition:  1 holds cut off from Redis; told after p50 1000.0ms, max 1000.0ms (1 told; lease 1000.0ms), at the least -100.0ms before the lease ended on the server; 1 told after that end minus the drift (12.0ms; slack 10.0ms) (must be 0)
            +4.100s partition w1 lock 1: lease on the server ended 900.0ms after the cut; told after 1000.0ms, released at +7.000s
            LATE lock 1: w1/t1 [+4.000s, +7.000s] told-lost cut-off abandoned cut off at +4.100s (partition), lease on the server until +5.000s, told at +5.100s
pauses:     2 overlaps with a paused holder (excused: only fencing protects the resource then); 1 stale writes by resumed holders, 1 lost updates they explain
            worker 1 stopped at +0.020s for 2970.0ms: unsafe window 1400.0ms
ghosts:     1 ghost holds (owner field still in Redis one lease after its thread held nothing; freed by the worker) (must be 0)
            GHOST lock 0 w0/t0 at +3.200s after-release-ok: count=1 pttl=900ms
orphans:    0 owner fields left by acquires whose reply was lost, gone within one lease (expected under faults)
updates:    2 lost updates between clean sections (must be 0)
            LOST UPDATE lock 1: w0/t0 [+1.300s, +1.310s] completed read 0, then w1/t0 [+1.305s, +1.308s] completed read 0
            LOST UPDATE lock 1: w1/t0 [+1.305s, +1.308s] completed read 0, then w0/t0 [+7.100s, +7.110s] completed read 5
tokens:     9 fenced acquisitions; 2 tokens not above the previous one (must be 0); 0 restarts across a counter loss (restart/failover); 0 lower tokens whose attempt overlapped the previous one (order on Redis unknown, e.g. a reply read after a pause)
            TOKEN lock 0: w0/t0 [+1.600s, +1.700s] completed token 4, then w0/t0 [+1.710s, +1.720s] completed token 2
            TOKEN lock 1: w1/t0 [+1.305s, +1.308s] completed token 9, then w1/t1 [+4.000s, +7.000s] told-lost cut-off abandoned token 3
fencing:    7 writes accepted by the resource; 0 stale writes refused; 0 stale writes accepted (must be 0; 4 by the logs' cross-check, must be 0)
            STALE lock 0: w0/t0 [+1.710s, +1.720s] completed token 2 accepted after w0/t0 [+1.600s, +1.700s] completed token 4 was
            STALE lock 0: w1/t0 [+0.010s, +3.000s] paused completed token 2 accepted after w0/t0 [+1.600s, +1.700s] completed token 4 was
            STALE lock 1: w0/t0 [+1.300s, +1.310s] completed token 6 accepted after w1/t0 [+1.305s, +1.308s] completed token 9 was
            STALE lock 1: w0/t0 [+7.100s, +7.110s] completed token 8 accepted after w1/t0 [+1.305s, +1.308s] completed token 9 was
counters:   lock 0=2 (stale write..4) ok; lock 1=7 (3..4) BAD;
waits:      longest a waiter waited after its lock was released: 0.0ms outside pause/restart/failover/kill windows, 0.0ms overall
handoffs:   0 frees with a waiter; longest until the next acquire: 0.0ms outside pause/restart/failover/kill windows, 0.0ms near client-kill/script-flush; 0 > 1s
kill -9:    lock 1 of worker 0 (killed at +0.020s) reacquired after 1.280s
calls:      longest TryAcquire 1.0ms, longest Release 1.0ms
ANOMALY:    worker 0: thread 0: TryAcquire: INTERNAL: boom
WORKER:     worker 1 exited with 3
FAIL:       1 unexcused overlap(s) of holds
FAIL:       2 lost update(s) between clean sections
FAIL:       a counter is out of bounds
FAIL:       2 fencing token(s) not above the previous acquisition's
FAIL:       stale write(s) accepted by the fenced resource: 0 as its script reported, 4 from the logs
FAIL:       1 cut-off holder(s) not told before their lease ended on the server (minus the drift)
FAIL:       1 ghost hold(s): a lock still held in Redis by a thread that held nothing
FAIL:       1 anomal(ies)
FAIL:       1 worker(s) did not finish normally
note:       partition faults not run: a note
result:     FAIL
)");
}

// --- Semaphore runs (CheckInput::permits = N) ------------------------------

// Hold i of semaphore 0, over [from, to] ms, by thread i of worker i % 2;
// it incremented the counter (read i).
Hold SemaphoreHold(int i, int64_t from, int64_t to) {
  Hold h = CleanHold(i % 2, 0, from, to, i);
  h.thread = i;
  return h;
}

// Holds 0..n-1 over [10 ms, 20 ms], [11, 21], ...: `n` of them at once from
// the last one's acquisition.
std::vector<Hold> SemaphoreHolds(int n) {
  std::vector<Hold> holds;
  for (int i = 0; i < n; ++i) holds.push_back(SemaphoreHold(i, 10 + i, 20 + i));
  return holds;
}

// Three holders at once: of 3 permits a pass; of 2, the third is one
// beyond them.
TEST(HarnessSemaphoreCheckerTest, NHoldersPassAndNPlusOneFail) {
  for (int permits : {3, 2}) {
    CheckInput in = Input(SemaphoreHolds(3), {3});
    in.permits = permits;
    Report r = Check(std::move(in));
    EXPECT_EQ(r.max_concurrency, 3);
    EXPECT_EQ(r.max_unexcused_concurrency, 3);
    EXPECT_EQ(r.sequence_breaks, 0);  // not checked: the reads may repeat
    EXPECT_THAT(r.text, HasSubstr("semaphores of " + std::to_string(permits) +
                                  " permits"));
    EXPECT_THAT(r.text, HasSubstr("at most 3 holders at once"));
    if (permits == 3) {
      EXPECT_TRUE(r.ok()) << r.text;
      EXPECT_EQ(r.unexcused_overlaps, 0);
      continue;
    }
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.unexcused_overlaps, 1);  // the third holder
    EXPECT_THAT(r.failures, Contains(HasSubstr("beyond the 2 permits")));
    ASSERT_FALSE(r.overlap_examples.empty());
    EXPECT_THAT(r.overlap_examples[0], HasSubstr("3 holders, 2 permits"));
  }
}

// The maximum is the most holds seen at any acquisition: four holds of two
// permits, never more than two at once.
TEST(HarnessSemaphoreCheckerTest, CountsTheMostHoldersAtOnce) {
  CheckInput in = Input({SemaphoreHold(0, 10, 20), SemaphoreHold(1, 15, 30),
                         SemaphoreHold(2, 21, 40), SemaphoreHold(3, 31, 50)},
                        {4});
  in.permits = 2;
  Report r = Check(std::move(in));
  EXPECT_TRUE(r.ok()) << r.text;
  EXPECT_EQ(r.max_concurrency, 2);
  EXPECT_EQ(r.max_concurrency_where, "lock 0 at +0.015s");
}

// A holder told its permit was lost (a kLockLost event, Release() =
// Aborted, or NotFound: the permit was gone) excuses the holder beyond N,
// as a loss report excuses a lock's overlap.
TEST(HarnessSemaphoreCheckerTest, AHolderToldLostExcusesTheOneBeyondN) {
  for (absl::StatusCode told :
       {absl::StatusCode::kAborted, absl::StatusCode::kNotFound}) {
    std::vector<Hold> holds = SemaphoreHolds(3);
    holds[0].release_code = static_cast<int>(told);
    CheckInput in = Input(holds, {3});
    in.permits = 2;
    Report r = Check(std::move(in));
    EXPECT_TRUE(r.ok()) << r.text;
    EXPECT_EQ(r.unexcused_overlaps, 0);
    EXPECT_EQ(r.excused_overlaps, 1);
    EXPECT_EQ(r.max_concurrency, 3);
    EXPECT_EQ(r.max_unexcused_concurrency, 2);
  }
  // A lock's Release() has no NotFound that tells a loss.
  std::vector<Hold> holds = SemaphoreHolds(2);
  holds[0].release_code = static_cast<int>(absl::StatusCode::kNotFound);
  Report lock = Check(Input(holds, {2}));
  EXPECT_EQ(lock.unexcused_overlaps, 1) << lock.text;
}

// Of one permit, a semaphore is judged as a lock is: every intersecting
// pair counts once (three holds at once: three pairs).
TEST(HarnessSemaphoreCheckerTest, OnePermitCountsOverlapsAsALockDoes) {
  CheckInput one = Input(SemaphoreHolds(3), {3});
  one.permits = 1;
  Report semaphore = Check(std::move(one));
  Report lock = Check(Input(SemaphoreHolds(3), {3}));
  EXPECT_EQ(lock.unexcused_overlaps, 3) << lock.text;
  EXPECT_EQ(semaphore.unexcused_overlaps, lock.unexcused_overlaps);
  EXPECT_EQ(semaphore.max_concurrency, 3);
}

// A holder paused past its lease (pause-holder) is beside the others only
// when the permits run out: then the pause excuses it, and its unsafe
// window starts (worker 0 is paused; worker 1's threads take the permits).
TEST(HarnessSemaphoreCheckerTest, APausedHolderIsExcusedBeyondNOnly) {
  auto other = [](int thread, int64_t from, int64_t to, int64_t read) {
    Hold h = CleanHold(1, 0, from, to, read);
    h.thread = thread;
    return h;
  };
  CheckInput in = Input({ThreadHold(0, 10, 3000, 0), other(1, 1600, 1700, 1),
                         other(2, 1800, 1900, 2), other(3, 1850, 1950, 3)},
                        {4});
  in.faults.push_back(WorkerFault(FaultKind::kPauseHolder, 0, 20, 2990));
  in.permits = 2;
  Report r = Check(std::move(in));
  EXPECT_EQ(r.unexcused_overlaps, 0) << r.text;
  EXPECT_EQ(r.paused_overlaps, 1);  // at 1850 ms: three holders, two permits
  ASSERT_EQ(r.pause_windows.size(), 1u);
  EXPECT_THAT(r.pause_windows[0], HasSubstr("unsafe window 1150.0ms"));
  EXPECT_TRUE(r.ok()) << r.text;
}

// At the end every semaphore's permits add up (available + out = N; a
// killed holder's permit may still be out, its lease over), and none is
// still leased a lease after the workers stopped.
TEST(HarnessSemaphoreCheckerTest, PermitsMustAddUpAndNoneStayLeased) {
  struct Case {
    PermitTally tally;
    bool ok;
  };
  for (const Case& c :
       {Case{{0, false, 1, 1, 0}, true}, Case{{0, false, 2, 0, 0}, true},
        // Wiped by a restart and not set again: nothing is out.
        Case{{0, true, 0, 0, 0}, true}, Case{{0, true, 0, 1, 0}, false},
        Case{{0, false, 2, 1, 0}, false}, Case{{0, false, 1, 0, 0}, false},
        Case{{0, false, 1, 1, 1}, false}, Case{{0, false, -1, 0, 0}, false}}) {
    CheckInput in = Input(SemaphoreHolds(2), {2});
    in.permits = 2;
    in.permit_tallies = {c.tally};
    Report r = Check(std::move(in));
    EXPECT_EQ(r.ok(), c.ok) << r.text;
    EXPECT_THAT(r.text, HasSubstr("semaphore 0: "));
  }
}

// The "P" line gives the open hold its permit id.
TEST(HarnessSemaphoreCheckerTest, ThePermitLineNamesTheHoldsPermit) {
  const char* path = "harness_checker_test_permit.log";
  {
    std::ofstream log(path);
    log << FormatAcquired(1, 2, 100, 110) << "\n"
        << FormatPermit(1, 2, "00112233445566778899aabbccddeeff") << "\n"
        << FormatPermit(0, 2, "ffff") << "\n";  // no open hold: ignored
  }
  const WorkerLog log = ParseWorkerLog(0, path);
  std::remove(path);
  EXPECT_EQ(log.bad_lines, 0);
  ASSERT_EQ(log.holds.size(), 1u);
  EXPECT_TRUE(log.holds[0].open);
  EXPECT_EQ(log.holds[0].permit, "00112233445566778899aabbccddeeff");
}

// --semaphore=N: in [0, kMaxHarnessPermits], not with another lock kind (on
// a single server or a cluster); the workers get it as an argument.
TEST(HarnessOptionsTest, SemaphoreRunsTakeNoOtherLockKind) {
  HarnessOptions o;
  o.semaphore = 3;
  EXPECT_OK(ValidateHarnessOptions(o));
  for (int n : {-1, kMaxHarnessPermits + 1}) {
    o.semaphore = n;
    EXPECT_EQ(ValidateHarnessOptions(o).code(),
              absl::StatusCode::kInvalidArgument)
        << n;
  }
  o.semaphore = 2;
  for (bool HarnessOptions::*kind :
       {&HarnessOptions::fenced, &HarnessOptions::fair, &HarnessOptions::rw,
        &HarnessOptions::multi}) {
    HarnessOptions with = o;
    with.*kind = true;
    EXPECT_EQ(ValidateHarnessOptions(with).code(),
              absl::StatusCode::kInvalidArgument);
  }
  HarnessOptions on_cluster = o;
  on_cluster.cluster = true;
  EXPECT_OK(ValidateHarnessOptions(on_cluster));
  WorkerConfig c;
  c.url = "redis://127.0.0.1:1";
  c.port = 1;
  c.log_path = "/nonexistent/log";
  c.permits = 4;
  WorkerConfig back;
  ASSERT_OK(back.FromArgs(c.ToArgs()));
  EXPECT_EQ(back.permits, 4);
}

}  // namespace
}  // namespace harness
}  // namespace relock
