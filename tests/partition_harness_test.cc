// The safety harness's partition faults (tools/harness/README.md): a short
// run with the lock redis-server, the counter redis-server and each worker
// in network namespaces of their own, one worker at a time cut off from the
// lock Redis while it holds a lock: both ways (shorter, then longer than the
// lease), its requests only, its replies only. A cut-off holder must be told
// its lock was lost before its lease ends on the server (minus the drift),
// so before anyone else can take it.
//
// And a short sentinel-mode run with split-brain faults and replica
// acknowledgement (replica_sync = 1): the primary and some workers are cut
// off from the replica, the sentinels and the other workers until the
// replica is promoted; no two holders may overlap. And the same on a
// cluster: a master and some workers cut off from the rest.
//
// Needs root, iproute2 and nftables. Where network namespaces cannot be
// made, the test skips (GTEST_SKIP, and ctest reports the test as skipped:
// CMakeLists.txt), saying why. A binary of its own so that a skip is not
// hidden among the other harness runs (safety_harness_test).

#include <cstdint>
#include <iostream>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/testing/child_process.h"
#include "tests/testing/private_network.h"
#include "tests/testing/status_matchers.h"
#include "tools/harness/harness.h"
#include "tools/harness/netns.h"

// The worker processes of the harness (re-executions of this binary).
RELOCK_CHILD_MAIN(PartitionHarnessWorker) {
  return relock::harness::WorkerMain(args);
}

namespace relock {
namespace harness {
namespace {

TEST(PartitionHarnessTest, ShortPartitionRunTellsCutOffHoldersInTime) {
  if (absl::Status s = NetworkLab::Probe(); !s.ok()) {
    GTEST_SKIP() << "cannot make network namespaces here, so the partition "
                    "faults cannot run (run as root with iproute2 and "
                    "nftables; tools/harness/README.md): "
                 << s;
  }
  HarnessOptions options;  // 3 processes x 2 threads x 3 locks, lease 1.5 s
  options.duration = absl::Seconds(20);
  options.faults = {FaultKind::kPartition, FaultKind::kPartitionRequests,
                    FaultKind::kPartitionReplies};
  options.netns = NetnsMode::kOn;
  options.worker_routine = "PartitionHarnessWorker";
  // The timer and event threads of a worker on a loaded 2-core machine may
  // run tens of milliseconds late; a stand-alone run keeps the default
  // 10 ms (see tools/harness/README.md).
  options.loss_report_slack = absl::Milliseconds(250);
  absl::StatusOr<Report> report = RunHarness(options);
  ASSERT_OK(report);
  std::cout << report->text << std::flush;

  EXPECT_TRUE(report->ok()) << absl::StrJoin(report->failures, "\n");
  EXPECT_EQ(report->unexcused_overlaps, 0)
      << absl::StrJoin(report->overlap_examples, "\n");
  EXPECT_EQ(report->sequence_breaks, 0)
      << absl::StrJoin(report->sequence_examples, "\n");
  EXPECT_GE(report->faults["partition"], 2) << "shorter and longer than lease";
  EXPECT_GE(report->faults["partition-requests"], 1);
  EXPECT_GE(report->faults["partition-replies"], 1);
  // The longer cuts outlast the lease: their holders must have been told, in
  // time (told late is a failure, in report->ok()).
  EXPECT_GE(report->partition_holds, 1) << "no partition cut off a holder";
  EXPECT_GE(report->loss_detection_ns.size(), 1u) << "no cut-off holder told";
  EXPECT_EQ(report->losses_told_late, 0)
      << absl::StrJoin(report->late_examples, "\n");
  for (const int64_t told : report->loss_detection_ns) {
    EXPECT_LT(absl::Nanoseconds(told),
              options.lease + options.loss_report_slack);
  }
}

// Runs `options` (a cluster or sentinel mode) with one split-brain and
// replica acknowledgement: it must pass with no overlap at all. Skips where
// network namespaces cannot be made.
void ExpectNoSplitBrainOverlap(HarnessOptions options) {
  {
    absl::StatusOr<std::unique_ptr<testing::PrivateNetwork>> net =
        testing::PrivateNetwork::Create();
    if (!net.ok()) {
      GTEST_SKIP() << "cannot make network namespaces here, so the "
                      "split-brain fault cannot run (run as root with "
                      "iproute2 and nftables; tools/harness/README.md): "
                   << net.status();
    }
  }
  // 3 processes x 2 threads x 3 locks, lease 1.5 s; the split-brain (and
  // the group's return to health) outlasts the duration.
  options.replica_sync = 1;
  options.duration = absl::Seconds(5);
  options.faults = {FaultKind::kSplitBrain};
  options.worker_routine = "PartitionHarnessWorker";
  absl::StatusOr<Report> report = RunHarness(options);
  ASSERT_OK(report);
  std::cout << report->text << std::flush;

  EXPECT_TRUE(report->ok()) << absl::StrJoin(report->failures, "\n");
  EXPECT_EQ(report->unexcused_overlaps, 0)
      << absl::StrJoin(report->overlap_examples, "\n");
  EXPECT_EQ(report->split_brain_overlaps, 0);
  EXPECT_EQ(report->sequence_breaks, 0)
      << absl::StrJoin(report->sequence_examples, "\n");
  EXPECT_GE(report->faults["split-brain"], 1);
}

// A Sentinel group (a primary, one replica, three sentinels): the primary
// and some workers cut off from the rest until the replica is promoted. A
// short down-after: the split lasts about this long, plus an election, plus
// two leases; no pause of the primary is injected here.
TEST(SplitBrainHarnessTest, SentinelSplitBrainWithReplicaSyncHasNoOverlap) {
  HarnessOptions options;
  options.sentinel = true;
  options.sentinel_down_after = absl::Seconds(1);
  ExpectNoSplitBrainOverlap(options);
}

// The same on a cluster (3 masters, a replica each): a master and some
// workers cut off from the rest until its replica is promoted.
TEST(SplitBrainHarnessTest, ClusterSplitBrainWithReplicaSyncHasNoOverlap) {
  HarnessOptions options;
  options.cluster = true;
  options.cluster_node_timeout = absl::Seconds(2);
  ExpectNoSplitBrainOverlap(options);
}

}  // namespace
}  // namespace harness
}  // namespace relock
