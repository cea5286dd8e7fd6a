// relock_safety_harness: the safety harness as a stand-alone program, for
// long manual runs (see tools/harness/README.md).
//
//   relock_safety_harness [--processes=3] [--threads=2] [--locks=3]
//       [--duration=30m] [--lease=1.5s] [--wait=5s] [--gap=2.5s]
//       [--warmup=2s] [--tail=3s] [--short_pause=0] [--long_pause=0]
//       [--hold_min=1ms] [--hold_max=5ms] [--think_max=3ms]
//       [--seed=0] [--work_dir=DIR] [--tolerate_ghost_holds] [--quiet]
//       [--cluster] [--cluster_masters=3] [--cluster_node_timeout=D]
//       [--fenced] [--fair] [--rw] [--multi] [--semaphore=N] [--faults=LIST]
//       [--netns=auto|on|off] [--holder_pause=D] [--loss_report_slack=D]
//       [--replica_sync=N] [--sentinel] [--sentinel_down_after=D]
//       [--expect_split_brain_overlaps] [--redlock=N]
//
// --faults: comma-separated fault names (tools/harness/README.md); default
// every fault the mode supports. --netns: run the servers and workers in
// network namespaces of their own (needed by the partition faults; auto =
// when a partition fault is to run and namespaces can be made).
// --replica_sync: the replicas that must acknowledge the workers' acquires
// and renewals (ReplicaSync::replicas); 0 by default, at most 1, and only
// with --cluster or --sentinel (one replica per master): anything else is a
// usage error.
//
// --sentinel: the locks on a Sentinel group (a primary, one replica, three
// sentinels), the workers connecting through the sentinels; its faults add
// `failover` (SENTINEL FAILOVER) and, in network namespaces, `split-brain`
// (the primary and some workers cut off from the rest until the replica is
// promoted, then healed). --sentinel_down_after: the sentinels'
// down-after-milliseconds (default long pause + 2 s).
// --cluster on a private network (network namespaces, by default when they
// can be made) adds `split-brain` too: the master of a random lock and some
// workers cut off from the rest of the cluster until its replica is
// promoted. --expect_split_brain_overlaps: overlaps in a split-brain window
// are reported apart as Redis's documented limit without replica
// acknowledgement and do not fail the run (--cluster or --sentinel,
// replica_sync 0 only).
//
// --semaphore=N: the locks are PermitExpirableSemaphores of N permits (at
// most N holders each at once; on a single server or with --cluster).
//
// --redlock=N: the locks on N independent redis-servers (N odd, 3 to 7; the
// number is required), the workers using a RedlockClient over them; the
// single-server faults (not the partitions) hit one master at a time,
// chosen at random. Not with --cluster, --sentinel, --fenced, --fair, --rw,
// --multi, --semaphore, --replica_sync or --netns=on (usage errors).
//
// Durations in absl::ParseDuration syntax ("90s", "1.5s", "2h30m"). Exits 0
// when the run passes, 1 when the checker found a problem, 2 on bad usage or
// when the harness could not run. Needs redis-server (see
// tests/testing/redis_server.h for how it is found).

#include <iostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/time/time.h"
#include "tests/testing/child_process.h"
#include "tools/harness/harness.h"

// The worker processes: re-executions of this binary.
RELOCK_CHILD_MAIN(SafetyHarnessWorker) {
  return relock::harness::WorkerMain(args);
}

namespace {

int Usage(const std::string& bad) {
  std::cerr
      << "relock_safety_harness: bad argument \"" << bad << "\"\n"
      << "usage: relock_safety_harness [--processes=N] [--threads=N] "
         "[--locks=N] [--duration=D] [--lease=D] [--wait=D] [--gap=D] "
         "[--warmup=D] [--tail=D] [--short_pause=D] [--long_pause=D] "
         "[--hold_min=D] [--hold_max=D] [--think_max=D] [--seed=N] "
         "[--work_dir=DIR] [--tolerate_ghost_holds] [--quiet] "
         "[--cluster] [--cluster_masters=N] [--cluster_node_timeout=D] "
         "[--fenced] [--fair] [--rw] [--multi] [--semaphore=N] [--faults=LIST] "
         "[--netns=auto|on|off] [--holder_pause=D] "
         "[--loss_report_slack=D] [--replica_sync=N] [--sentinel] "
         "[--sentinel_down_after=D] [--expect_split_brain_overlaps] "
         "[--redlock=N]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (int rc = relock::testing::MaybeRunChildMain(argc, argv); rc >= 0) {
    return rc;
  }
  relock::harness::HarnessOptions o;
  o.duration = absl::Minutes(5);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quiet") {
      o.progress = nullptr;
      continue;
    }
    if (arg == "--tolerate_ghost_holds") {
      o.tolerate_ghost_holds = true;
      continue;
    }
    if (arg == "--cluster") {
      o.cluster = true;
      continue;
    }
    if (arg == "--sentinel") {
      o.sentinel = true;
      continue;
    }
    if (arg == "--expect_split_brain_overlaps") {
      o.expect_split_brain_overlaps = true;
      continue;
    }
    if (arg == "--fenced") {
      o.fenced = true;
      continue;
    }
    if (arg == "--fair") {
      o.fair = true;
      continue;
    }
    if (arg == "--rw") {
      o.rw = true;
      continue;
    }
    if (arg == "--multi") {
      o.multi = true;
      continue;
    }
    const size_t eq = arg.find('=');
    if (!absl::StartsWith(arg, "--") || eq == std::string::npos) {
      return Usage(arg);
    }
    const std::string key = arg.substr(2, eq - 2);
    const std::string value = arg.substr(eq + 1);
    bool ok = true;
    auto duration = [&](absl::Duration* d) {
      ok = absl::ParseDuration(value, d);
    };
    if (key == "processes") {
      ok = absl::SimpleAtoi(value, &o.processes);
    } else if (key == "threads") {
      ok = absl::SimpleAtoi(value, &o.threads);
    } else if (key == "locks") {
      ok = absl::SimpleAtoi(value, &o.locks);
    } else if (key == "duration") {
      duration(&o.duration);
    } else if (key == "lease") {
      duration(&o.lease);
    } else if (key == "wait") {
      duration(&o.acquire_wait);
    } else if (key == "gap") {
      duration(&o.fault_gap);
    } else if (key == "warmup") {
      duration(&o.warmup);
    } else if (key == "tail") {
      duration(&o.tail);
    } else if (key == "short_pause") {
      duration(&o.short_pause);
    } else if (key == "long_pause") {
      duration(&o.long_pause);
    } else if (key == "hold_min") {
      duration(&o.hold_min);
    } else if (key == "hold_max") {
      duration(&o.hold_max);
    } else if (key == "think_max") {
      duration(&o.think_max);
    } else if (key == "seed") {
      ok = absl::SimpleAtoi(value, &o.seed);
    } else if (key == "work_dir") {
      o.work_dir = value;
    } else if (key == "redlock") {
      ok = absl::SimpleAtoi(value, &o.redlock);
    } else if (key == "semaphore") {
      ok = absl::SimpleAtoi(value, &o.semaphore);
    } else if (key == "cluster_masters") {
      ok = absl::SimpleAtoi(value, &o.cluster_masters);
    } else if (key == "cluster_node_timeout") {
      duration(&o.cluster_node_timeout);
    } else if (key == "sentinel_down_after") {
      duration(&o.sentinel_down_after);
    } else if (key == "holder_pause") {
      duration(&o.holder_pause);
    } else if (key == "loss_report_slack") {
      duration(&o.loss_report_slack);
    } else if (key == "replica_sync") {
      ok = absl::SimpleAtoi(value, &o.replica_sync);
    } else if (key == "faults") {
      absl::StatusOr<std::vector<relock::harness::FaultKind>> kinds =
          relock::harness::ParseFaultList(value);
      if (!kinds.ok()) {
        std::cerr << "relock_safety_harness: --faults: "
                  << kinds.status().message() << "\n";
        return 2;
      }
      o.faults = *std::move(kinds);
    } else if (key == "netns") {
      using relock::harness::NetnsMode;
      ok = value == "auto" || value == "on" || value == "off";
      o.netns = value == "on"    ? NetnsMode::kOn
                : value == "off" ? NetnsMode::kOff
                                 : NetnsMode::kAuto;
    } else {
      ok = false;
    }
    if (!ok) return Usage(arg);
  }
  // Flags that only make sense together (--replica_sync with --cluster or
  // --sentinel).
  if (absl::Status v = relock::harness::ValidateHarnessOptions(o); !v.ok()) {
    std::cerr << "relock_safety_harness: " << v.message() << "\n";
    return 2;
  }
  absl::StatusOr<relock::harness::Report> report =
      relock::harness::RunHarness(o);
  if (!report.ok()) {
    std::cerr << "relock_safety_harness: " << report.status() << "\n";
    return 2;
  }
  std::cout << report->text << std::flush;
  return report->ok() ? 0 : 1;
}
