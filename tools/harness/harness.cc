// relock's safety harness (harness.h): the fault kinds a run may ask for,
// and RunHarness(), which hands the run to the coordinator (coordinator.h).

#include "tools/harness/harness.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tools/harness/coordinator.h"

namespace relock {
namespace harness {

std::vector<FaultKind> SupportedFaultKinds(LockTopology topology, bool netns) {
  std::vector<FaultKind> kinds = topology == LockTopology::kCluster
                                     ? ClusterFaultKinds()
                                     : SingleNodeFaultKinds();
  if (topology == LockTopology::kSentinel) {
    kinds.push_back(FaultKind::kFailover);
  }
  kinds.push_back(FaultKind::kPauseHolder);
  if (netns && topology == LockTopology::kSingle) {
    kinds.insert(kinds.end(),
                 {FaultKind::kPartition, FaultKind::kPartitionRequests,
                  FaultKind::kPartitionReplies});
  }
  if (netns && topology != LockTopology::kSingle) {
    kinds.push_back(FaultKind::kSplitBrain);
  }
  return kinds;
}

absl::StatusOr<std::vector<FaultKind>> ParseFaultList(absl::string_view list) {
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

absl::Status ValidateHarnessOptions(const HarnessOptions& o) {
  if (o.processes < 1 || o.threads < 1 || o.locks < 1 ||
      (o.cluster && o.cluster_masters < 2)) {
    return absl::InvalidArgumentError(
        "processes, threads, locks must be >= 1, cluster_masters >= 2");
  }
  if (o.replica_sync < 0 || o.replica_sync > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("replica_sync must be in [0, 64], not ", o.replica_sync));
  }
  if (o.cluster && o.sentinel) {
    return absl::InvalidArgumentError(
        "cluster and sentinel are two modes: choose one");
  }
  if (o.replica_sync > 0 && !o.cluster && !o.sentinel) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replica_sync=", o.replica_sync,
        " needs replicas: only cluster mode (--cluster) and sentinel mode "
        "(--sentinel) have them, one per master; a single redis-server has "
        "none"));
  }
  if (o.cluster && o.replica_sync > kClusterReplicasPerMaster) {
    return absl::InvalidArgumentError(
        absl::StrCat("replica_sync=", o.replica_sync,
                     " can never be acknowledged: the cluster has ",
                     kClusterReplicasPerMaster, " replica per master"));
  }
  if (o.sentinel && o.replica_sync > kSentinelReplicas) {
    return absl::InvalidArgumentError(
        absl::StrCat("replica_sync=", o.replica_sync,
                     " can never be acknowledged: the sentinel group's "
                     "primary has ",
                     kSentinelReplicas, " replica"));
  }
  // In whole milliseconds, as the workers get it (WorkerConfig).
  if (o.replica_sync > 0 &&
      absl::ToInt64Milliseconds(o.command_timeout) <= 200) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replica_sync needs command_timeout above 200ms, not ",
        absl::FormatDuration(o.command_timeout),
        ": the WAIT's timeout is half of it, and Redis may answer a WAIT "
        "100 ms late (relock/options.h, ReplicaSync::timeout)"));
  }
  if (o.expect_split_brain_overlaps &&
      ((!o.sentinel && !o.cluster) || o.replica_sync > 0)) {
    return absl::InvalidArgumentError(
        "expect_split_brain_overlaps needs cluster or sentinel mode "
        "(--cluster, --sentinel) without replica acknowledgement "
        "(replica_sync=0): with it, a split brain must cause no overlap at "
        "all");
  }
  if (o.semaphore < 0 || o.semaphore > kMaxHarnessPermits) {
    return absl::InvalidArgumentError(absl::StrCat("semaphore must be in [0, ",
                                                   kMaxHarnessPermits,
                                                   "], not ", o.semaphore));
  }
  if (o.semaphore > 0 && (o.fenced || o.fair || o.rw || o.multi)) {
    return absl::InvalidArgumentError(
        "semaphore takes permits instead of locks: not with fenced, fair, rw "
        "or multi");
  }
  if (o.redlock != 0 &&
      (o.redlock < 3 || o.redlock > 7 || o.redlock % 2 == 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "redlock must be an odd number of masters in [3, 7], not ", o.redlock));
  }
  if (o.redlock > 0 && (o.cluster || o.sentinel || o.fenced || o.fair || o.rw ||
                        o.multi || o.semaphore > 0)) {
    return absl::InvalidArgumentError(
        "redlock runs RedlockLocks on independent masters: not with cluster, "
        "sentinel, fenced, fair, rw, multi or semaphore (RedlockClient has "
        "no such locks)");
  }
  if (o.redlock > 0 && o.netns == NetnsMode::kOn) {
    return absl::InvalidArgumentError(
        "redlock runs have no network namespaces (no partition faults): not "
        "with netns on");
  }
  return absl::OkStatus();
}

absl::Duration KillReacquireBound(const HarnessOptions& o) {
  return o.lease + o.max_kill_reacquire_extra +
         (o.fair ? FairQueueWait(o.lease) : absl::ZeroDuration());
}

absl::StatusOr<Report> RunHarness(const HarnessOptions& options) {
  return internal_harness::Coordinator(options).Run();
}

}  // namespace harness
}  // namespace relock
