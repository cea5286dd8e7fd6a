// relock's safety harness (harness.h): the fault kinds a run may ask for,
// and RunHarness(), which hands the run to the coordinator (coordinator.h).

#include "tools/harness/harness.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_split.h"
#include "tools/harness/coordinator.h"

namespace relock {
namespace harness {

std::vector<FaultKind> SupportedFaultKinds(bool cluster, bool netns) {
  std::vector<FaultKind> kinds =
      cluster ? ClusterFaultKinds() : SingleNodeFaultKinds();
  kinds.push_back(FaultKind::kPauseHolder);
  if (netns && !cluster) {
    kinds.insert(kinds.end(),
                 {FaultKind::kPartition, FaultKind::kPartitionRequests,
                  FaultKind::kPartitionReplies});
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

absl::Duration KillReacquireBound(const HarnessOptions& o) {
  return o.lease + o.max_kill_reacquire_extra +
         (o.fair ? FairQueueWait(o.lease) : absl::ZeroDuration());
}

absl::StatusOr<Report> RunHarness(const HarnessOptions& options) {
  return internal_harness::Coordinator(options).Run();
}

}  // namespace harness
}  // namespace relock
