// The safety harness's worker process (worker.h): its configuration, passed
// on its command line (WorkerConfig), and the names of the run's keys.

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/base/log_severity.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/types/optional.h"
#include "tools/harness/checker.h"
#include "tools/harness/netns.h"
#include "tools/harness/worker.h"

namespace relock {
namespace harness {

absl::Duration FairQueueWait(absl::Duration lease) { return 2 * lease; }

std::string LockName(const std::string& prefix, int k) {
  return absl::StrCat(prefix, "lock:", k);
}

std::string CounterName(const std::string& prefix, int k) {
  return absl::StrCat(prefix, "counter:", k);
}

std::string PermitsOutKey(const std::string& prefix, int k) {
  return absl::StrCat("{", LockName(prefix, k), "}:timeout");
}

std::vector<std::string> WorkerConfig::ToArgs() const {
  return {absl::StrCat("worker=", worker),
          absl::StrCat("url=", url),
          absl::StrCat("host=", host),
          absl::StrCat("port=", port),
          absl::StrCat("keys_host=", keys_host),
          absl::StrCat("keys_port=", keys_port),
          absl::StrCat("keys_sentinels=", keys_sentinels),
          absl::StrCat("keys_master=", keys_master),
          absl::StrCat("redlock_masters=", redlock_masters),
          absl::StrCat("threads=", threads),
          absl::StrCat("locks=", locks),
          absl::StrCat("fenced=", fenced ? 1 : 0),
          absl::StrCat("fair=", fair ? 1 : 0),
          absl::StrCat("rw=", rw ? 1 : 0),
          absl::StrCat("multi=", multi ? 1 : 0),
          absl::StrCat("permits=", permits),
          absl::StrCat("replica_sync=", replica_sync),
          absl::StrCat("replica_sync_timeout_ms=", replica_sync_timeout_ms),
          absl::StrCat("prefix=", prefix),
          absl::StrCat("lease_ms=", lease_ms),
          absl::StrCat("wait_ms=", wait_ms),
          absl::StrCat("connect_timeout_ms=", connect_timeout_ms),
          absl::StrCat("command_timeout_ms=", command_timeout_ms),
          absl::StrCat("raw_timeout_ms=", raw_timeout_ms),
          absl::StrCat("hold_min_us=", hold_min_us),
          absl::StrCat("hold_max_us=", hold_max_us),
          absl::StrCat("think_max_us=", think_max_us),
          absl::StrCat("long_hold_ms=", long_hold_ms),
          absl::StrCat("hard_end_ns=", hard_end_ns),
          absl::StrCat("seed=", seed),
          absl::StrCat("log_path=", log_path),
          absl::StrCat("netns=", netns)};
}

absl::Status WorkerConfig::FromArgs(const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    const size_t eq = arg.find('=');
    if (eq == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("bad argument ", arg));
    }
    const std::string key = arg.substr(0, eq);
    const std::string value = arg.substr(eq + 1);
    bool ok = true;
    if (key == "worker") {
      ok = absl::SimpleAtoi(value, &worker);
    } else if (key == "url") {
      url = value;
    } else if (key == "host") {
      host = value;
    } else if (key == "port") {
      ok = absl::SimpleAtoi(value, &port);
    } else if (key == "keys_host") {
      keys_host = value;
    } else if (key == "keys_port") {
      ok = absl::SimpleAtoi(value, &keys_port);
    } else if (key == "keys_sentinels") {
      keys_sentinels = value;
    } else if (key == "keys_master") {
      keys_master = value;
    } else if (key == "redlock_masters") {
      redlock_masters = value;
    } else if (key == "threads") {
      ok = absl::SimpleAtoi(value, &threads);
    } else if (key == "locks") {
      ok = absl::SimpleAtoi(value, &locks);
    } else if (key == "fenced") {
      fenced = value == "1";
      ok = value == "0" || value == "1";
    } else if (key == "fair") {
      fair = value == "1";
      ok = value == "0" || value == "1";
    } else if (key == "rw") {
      rw = value == "1";
      ok = value == "0" || value == "1";
    } else if (key == "multi") {
      multi = value == "1";
      ok = value == "0" || value == "1";
    } else if (key == "permits") {
      ok = absl::SimpleAtoi(value, &permits) && permits >= 0;
    } else if (key == "replica_sync") {
      ok = absl::SimpleAtoi(value, &replica_sync) && replica_sync >= 0 &&
           replica_sync <= 64;
    } else if (key == "replica_sync_timeout_ms") {
      ok = absl::SimpleAtoi(value, &replica_sync_timeout_ms);
    } else if (key == "prefix") {
      prefix = value;
    } else if (key == "lease_ms") {
      ok = absl::SimpleAtoi(value, &lease_ms);
    } else if (key == "wait_ms") {
      ok = absl::SimpleAtoi(value, &wait_ms);
    } else if (key == "connect_timeout_ms") {
      ok = absl::SimpleAtoi(value, &connect_timeout_ms);
    } else if (key == "command_timeout_ms") {
      ok = absl::SimpleAtoi(value, &command_timeout_ms);
    } else if (key == "raw_timeout_ms") {
      ok = absl::SimpleAtoi(value, &raw_timeout_ms);
    } else if (key == "hold_min_us") {
      ok = absl::SimpleAtoi(value, &hold_min_us);
    } else if (key == "hold_max_us") {
      ok = absl::SimpleAtoi(value, &hold_max_us);
    } else if (key == "think_max_us") {
      ok = absl::SimpleAtoi(value, &think_max_us);
    } else if (key == "long_hold_ms") {
      ok = absl::SimpleAtoi(value, &long_hold_ms);
    } else if (key == "hard_end_ns") {
      ok = absl::SimpleAtoi(value, &hard_end_ns);
    } else if (key == "seed") {
      ok = absl::SimpleAtoi(value, &seed);
    } else if (key == "log_path") {
      log_path = value;
    } else if (key == "netns") {
      netns = value;
    } else {
      ok = false;
    }
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat("bad argument ", arg));
    }
  }
  if ((url.empty() && redlock_masters.empty()) || port <= 0 || threads < 1 ||
      locks < 1 || log_path.empty() || hold_max_us < hold_min_us) {
    return absl::InvalidArgumentError("incomplete worker arguments");
  }
  if (keys_port <= 0) {
    keys_host = host;
    keys_port = port;
  }
  return absl::OkStatus();
}

}  // namespace harness
}  // namespace relock
