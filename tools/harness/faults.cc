// The safety harness's fault injections (coordinator.h): Inject(), which
// runs every kind, and the faults aimed at Redis: pauses, restarts,
// failovers, split brains, reshards, client kills, SCRIPT FLUSH.
// holder_faults.cc has those aimed at a lock's holder (kill -9, pause,
// partition) and the search for holders.

#include <signal.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/types/optional.h"
#include "tools/harness/coordinator.h"
#include "tools/harness/record.h"
#include "tools/harness/worker.h"

namespace relock {
namespace harness {
namespace internal_harness {

bool WaitStopped(pid_t pid, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
    std::string stat((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
    const char state = stat[paren + 2];
    if (state == 'T' || state == 't') return true;
    if (state == 'Z' || state == 'X') return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return false;
}

RedisServer* Coordinator::Target(Fault* f, size_t* index) {
  if (o_.sentinel) {
    RefreshPrimary();
    if (index != nullptr) *index = primary_;
    f->detail = absl::StrCat("primary ", primary_, " (port ",
                             sentinel_->node(primary_).port(), "): ");
    return &sentinel_->node(primary_);
  }
  if (o_.redlock > 0) return RandomMaster(f);
  if (!o_.cluster) return LockServer();
  std::uniform_int_distribution<int> pick(0, o_.locks - 1);
  absl::StatusOr<size_t> master =
      cluster_->NodeForKey(LockName(kPrefix, pick(rng_)));
  if (!master.ok()) {
    f->detail = master.status().ToString();
    return nullptr;
  }
  for (int k = 0; k < o_.locks; ++k) {
    absl::StatusOr<size_t> node = cluster_->NodeForKey(LockName(kPrefix, k));
    if (node.ok() && *node == *master) f->locks.push_back(k);
  }
  if (index != nullptr) *index = *master;
  f->detail = absl::StrCat("master ", *master, " (port ",
                           cluster_->node(*master).port(), ", locks ",
                           absl::StrJoin(f->locks, ","), "): ");
  return &cluster_->node(*master);
}

RedisServer* Coordinator::RandomMaster(Fault* f) {
  std::uniform_int_distribution<size_t> pick(0, masters_.size() - 1);
  const size_t i = pick(rng_);
  f->detail = absl::StrCat("master ", i, " of ", masters_.size(), " (port ",
                           masters_[i]->port(), "): ");
  return masters_[i].get();
}

std::vector<RedisServer*> Coordinator::FaultNodes(Fault* f) {
  if (o_.redlock == 0) return DataNodes();
  return {RandomMaster(f)};
}

void Coordinator::Failover(size_t i, Fault* f) {
  const int64_t start = MonotonicNanos();
  absl::Status s = cluster_->Kill(i);
  f->injected = s.ok();
  if (!s.ok()) {
    absl::StrAppend(&f->detail, s.ToString());
    return;
  }
  const absl::Status promoted = cluster_->WaitUntilHealthy(absl::Seconds(30));
  const int64_t promoted_at = MonotonicNanos();
  s = cluster_->Revive(i);
  if (s.ok()) s = cluster_->WaitUntilHealthy(absl::Seconds(60));
  auto secs = [start](int64_t t) {
    return absl::FormatDuration(absl::Nanoseconds(t - start));
  };
  absl::StrAppend(
      &f->detail, "SIGKILL; ",
      promoted.ok()
          ? absl::StrCat("replica promoted after ", secs(promoted_at))
          : absl::StrCat("NO REPLICA PROMOTED: ", promoted.ToString()),
      s.ok() ? absl::StrCat(", the node back as a replica after ",
                            secs(MonotonicNanos()))
             : absl::StrCat(", the node NOT BACK: ", s.ToString()));
}

void Coordinator::RefreshPrimary() {
  absl::StatusOr<size_t> primary = sentinel_->PrimaryIndex();
  if (primary.ok()) primary_ = *primary;
}

void Coordinator::SentinelFailover(Fault* f) {
  const int64_t start = MonotonicNanos();
  const size_t old = primary_;
  absl::StatusOr<size_t> promoted = sentinel_->Failover();
  f->injected = promoted.ok();
  RefreshPrimary();
  absl::StrAppend(&f->detail, "SENTINEL FAILOVER; ",
                  promoted.ok()
                      ? absl::StrCat("node ", *promoted, " promoted, node ",
                                     old, " back as its replica after ",
                                     absl::FormatDuration(absl::Nanoseconds(
                                         MonotonicNanos() - start)))
                      : absl::StrCat("FAILED: ", promoted.status().ToString()));
}

absl::StatusOr<size_t> Coordinator::WaitForClusterPromotion(
    size_t old, const std::vector<int>& locks, absl::Duration timeout) {
  // The replica of `old`, as it says (ROLE: slave of old's port).
  absl::optional<size_t> replica;
  for (size_t i = 0; i < cluster_->size() && !replica.has_value(); ++i) {
    absl::StatusOr<RedisValue> role = cluster_->node(i).Command({"ROLE"});
    if (i != old && role.ok() && role->is_array() &&
        role->elements.size() >= 3 && role->elements[0].str == "slave" &&
        role->elements[2].integer == cluster_->node(old).port()) {
      replica = i;
    }
  }
  if (!replica.has_value() || locks.empty()) {
    return absl::NotFoundError(
        absl::StrCat("master ", old, " has no replica or no lock"));
  }
  absl::StatusOr<RedisValue> slot = cluster_->node(*replica).Command(
      {"CLUSTER", "KEYSLOT", LockName(kPrefix, locks[0])});
  if (!slot.ok() || !slot->is_integer()) {
    return absl::InternalError("CLUSTER KEYSLOT failed");
  }
  // Promoted once every running node but the old master says the replica
  // serves the slot, so that a worker on the majority side is sent there.
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    bool agreed = true;
    for (size_t i = 0; i < cluster_->size() && agreed; ++i) {
      if (i == old || !cluster_->node(i).running()) continue;
      absl::StatusOr<size_t> seen =
          cluster_->NodeForSlotSeenBy(i, static_cast<int>(slot->integer));
      agreed = seen.ok() && *seen == *replica;
    }
    if (agreed) return *replica;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("replica ", *replica, " not promoted within ",
                   absl::FormatDuration(timeout)));
}

void Coordinator::SplitBrain(size_t old, Fault* f) {
  // The old master's locks (cluster mode; every lock in sentinel mode). The
  // fault concerns every lock all the same: the cut-off workers are cut off
  // from the other masters too.
  const std::vector<int> master_locks = f->locks;
  f->locks.clear();
  auto on_master = [&master_locks](int k) {
    return master_locks.empty() ||
           std::find(master_locks.begin(), master_locks.end(), k) !=
               master_locks.end();
  };
  std::vector<WorkerProc*> live;
  for (WorkerProc& w : workers_) {
    if (!w.killed) live.push_back(&w);
  }
  std::shuffle(live.begin(), live.end(), rng_);
  // A worker that holds a lock of the old master goes with it, if one is
  // found: its hold is the one the other side may take.
  for (int k = 0; k < o_.locks; ++k) {
    if (!on_master(k)) continue;
    bool found = false;
    for (const std::string& owner : Owners(k)) {
      WorkerProc* h = OwnerWorker(owner);
      auto it = std::find(live.begin(), live.end(), h);
      if (h != nullptr && it != live.end()) {
        std::iter_swap(live.begin(), it);
        found = true;
        break;
      }
    }
    if (found) break;
  }
  const size_t cut = std::max<size_t>(1, live.size() / 2);
  // The fixtures' host of data node i (RedisCluster names it "node<i>" too).
  std::vector<std::string> side = {o_.sentinel
                                       ? RedisSentinelGroup::NodeHostName(old)
                                       : absl::StrCat("node", old)};
  std::vector<int> cut_workers;
  for (size_t i = 0; i < cut && i < live.size(); ++i) {
    side.push_back(absl::StrCat("w", live[i]->index));
    cut_workers.push_back(live[i]->index);
  }
  f->start = MonotonicNanos();
  absl::Status s = net_->Split(side);
  if (!s.ok()) {
    absl::StrAppend(&f->detail, "split failed: ", s.ToString());
    (void)net_->Heal();
    return;
  }
  auto secs = [f](int64_t t) {
    return absl::FormatDuration(absl::Nanoseconds(t - f->start));
  };
  // Generous: the sentinels (or the cluster's nodes) wait down-after (the
  // node timeout), elect a leader (again after a failed election), and
  // sentinels do not fail one master over twice within two failover
  // timeouts.
  absl::StatusOr<size_t> promoted =
      o_.sentinel
          ? sentinel_->WaitForNewPrimary(
                old, o_.sentinel_down_after + absl::Seconds(60))
          : WaitForClusterPromotion(
                old, master_locks, o_.cluster_node_timeout + absl::Seconds(60));
  const int64_t promoted_at = MonotonicNanos();
  // Both sides go on: the cut-off workers on the old primary, the others on
  // the promoted replica.
  if (promoted.ok()) absl::SleepFor(2 * o_.lease);
  const absl::Status healed = net_->Heal();
  const int64_t healed_at = MonotonicNanos();
  // The old primary becomes a replica of the new one.
  const absl::Status back = o_.sentinel
                                ? sentinel_->WaitUntilHealthy(absl::Seconds(60))
                                : cluster_->WaitUntilHealthy(absl::Seconds(60));
  f->end = MonotonicNanos();
  f->injected = true;
  if (o_.sentinel) RefreshPrimary();
  absl::StrAppend(
      &f->detail, "it and workers ", absl::StrJoin(cut_workers, ","),
      " cut off; ",
      promoted.ok()
          ? absl::StrCat("node ", *promoted, " promoted after ",
                         secs(promoted_at))
          : absl::StrCat("NO REPLICA PROMOTED: ", promoted.status().ToString()),
      healed.ok() ? absl::StrCat("; healed after ", secs(healed_at))
                  : absl::StrCat("; HEAL FAILED: ", healed.ToString()),
      back.ok() ? absl::StrCat("; healthy again after ", secs(f->end))
                : absl::StrCat("; NOT HEALTHY: ", back.ToString()));
}

void Coordinator::Reshard(Fault* f) {
  std::uniform_int_distribution<int> pick(0, o_.locks - 1);
  const int k = pick(rng_);
  const std::string name = LockName(kPrefix, k);
  f->locks = {k};
  absl::StatusOr<size_t> from = cluster_->NodeForKey(name);
  absl::StatusOr<RedisValue> slot =
      from.ok() ? cluster_->node(*from).Command({"CLUSTER", "KEYSLOT", name})
                : absl::StatusOr<RedisValue>(from.status());
  if (!slot.ok() || !slot->is_integer()) {
    f->detail = slot.ok() ? slot->DebugString() : slot.status().ToString();
    return;
  }
  std::vector<size_t> others;
  for (size_t i = 0; i < cluster_->size(); ++i) {
    absl::StatusOr<bool> master = cluster_->IsMaster(i);
    if (i != *from && cluster_->node(i).running() && master.ok() && *master) {
      others.push_back(i);
    }
  }
  if (others.empty()) {
    f->detail = "no other master";
    return;
  }
  std::uniform_int_distribution<size_t> to_pick(0, others.size() - 1);
  const size_t to = others[to_pick(rng_)];
  absl::Status s = cluster_->MigrateSlot(static_cast<int>(slot->integer), to);
  f->injected = s.ok();
  f->detail = absl::StrCat("slot ", slot->integer, " (lock ", k,
                           ") from master ", *from, " to master ", to,
                           s.ok() ? "" : absl::StrCat(": ", s.ToString()));
}

Fault Coordinator::Inject(FaultKind kind) {
  Fault f;
  f.kind = kind;
  // The server that a pause, a restart or a failover hits.
  RedisServer* target = nullptr;
  size_t index = 0;
  if (kind == FaultKind::kPauseShort || kind == FaultKind::kPauseLong ||
      kind == FaultKind::kRestart || kind == FaultKind::kFailover ||
      kind == FaultKind::kSplitBrain) {
    target = Target(&f, &index);
    if (target == nullptr) {
      f.start = f.end = MonotonicNanos();
      return f;
    }
  }
  if (kind == FaultKind::kPauseLong || kind == FaultKind::kRestart ||
      kind == FaultKind::kFailover || kind == FaultKind::kSplitBrain) {
    RequestLongHolds(f.locks);
  }
  f.start = MonotonicNanos();
  switch (kind) {
    case FaultKind::kKillHolder:
      KillHolder(&f);
      break;
    case FaultKind::kPauseHolder:
      PauseHolder(&f);
      break;
    case FaultKind::kPartition:
    case FaultKind::kPartitionRequests:
    case FaultKind::kPartitionReplies:
      PartitionWorker(&f);
      break;
    case FaultKind::kPauseShort:
    case FaultKind::kPauseLong: {
      const absl::Duration d = FaultLength(kind);
      absl::Status s = target->Pause();
      if (s.ok()) {
        absl::SleepFor(d);
        s = target->Resume();
      }
      f.injected = s.ok();
      absl::StrAppend(&f.detail, s.ok() ? absl::StrCat("SIGSTOP for ",
                                                       absl::FormatDuration(d))
                                        : s.ToString());
      break;
    }
    case FaultKind::kRestart: {
      absl::Status s = target->Restart();
      f.injected = s.ok();
      absl::StrAppend(&f.detail, s.ok() ? "restarted empty" : s.ToString());
      break;
    }
    case FaultKind::kFailover:
      if (o_.sentinel) {
        SentinelFailover(&f);
      } else {
        Failover(index, &f);
      }
      break;
    case FaultKind::kSplitBrain:
      SplitBrain(index, &f);
      break;
    case FaultKind::kReshard:
      Reshard(&f);
      break;
    case FaultKind::kClientKillNormal:
      KillPoolConnections(&f);
      break;
    case FaultKind::kClientKillPubsub: {
      // A relock subscriber is of type "pubsub" only while some thread
      // waits (is subscribed); retry briefly until one does.
      const std::vector<RedisServer*> nodes = FaultNodes(&f);
      int64_t killed = 0;
      std::string error;
      for (int attempt = 0; attempt < 40 && killed == 0; ++attempt) {
        if (attempt > 0) absl::SleepFor(absl::Milliseconds(50));
        for (RedisServer* node : nodes) {
          absl::StatusOr<RedisValue> v =
              node->Command({"CLIENT", "KILL", "TYPE", "pubsub"});
          if (v.ok() && v->is_integer()) killed += v->integer;
          if (!v.ok()) error = v.status().ToString();
        }
      }
      f.injected = killed > 0;
      absl::StrAppend(&f.detail, "killed ", killed, " pub/sub connections",
                      error.empty() ? "" : "; ", error);
      break;
    }
    case FaultKind::kScriptFlush: {
      int flushed = 0;
      const std::vector<RedisServer*> nodes = FaultNodes(&f);
      for (RedisServer* node : nodes) {
        absl::StatusOr<RedisValue> v = node->Command({"SCRIPT", "FLUSH"});
        flushed += v.ok() && v->is_ok();
        if (!v.ok() || !v->is_ok()) {
          absl::StrAppend(&f.detail,
                          v.ok() ? v->DebugString() : v.status().ToString(),
                          "; ");
        }
      }
      f.injected = flushed == static_cast<int>(nodes.size());
      absl::StrAppend(&f.detail, "flushed on ", flushed, " of ", nodes.size(),
                      " servers");
      break;
    }
  }
  if (f.end == 0) f.end = MonotonicNanos();
  // A fault may have moved the primary (a pause or a restart that the
  // sentinels took for a failure).
  if (o_.sentinel) RefreshPrimary();
  return f;
}

void Coordinator::KillPoolConnections(Fault* f) {
  int killed = 0, spared = 0;
  for (RedisServer* node : FaultNodes(f)) {
    KillPoolConnectionsOn(*node, f, &killed, &spared);
  }
  f->injected = killed > 0;
  absl::StrAppend(&f->detail, "killed ", killed,
                  " relock pool connections (spared ", spared,
                  " counter and lock-reading connections)");
}

void Coordinator::KillPoolConnectionsOn(RedisServer& node, Fault* f,
                                        int* killed, int* spared) {
  absl::StatusOr<RedisValue> list =
      node.Command({"CLIENT", "LIST", "TYPE", "normal"});
  if (!list.ok() || !list->is_string()) {
    absl::StrAppend(&f->detail,
                    list.ok() ? list->DebugString() : list.status().ToString(),
                    "; ");
    return;
  }
  for (absl::string_view line : absl::StrSplit(list->str, '\n')) {
    std::string id, name;
    for (absl::string_view field : absl::StrSplit(line, ' ')) {
      if (absl::StartsWith(field, "id=")) id = std::string(field.substr(3));
      if (absl::StartsWith(field, "name=")) {
        name = std::string(field.substr(5));
      }
    }
    if (id.empty()) continue;
    if (name == kRawClientName) {
      ++*spared;
      continue;
    }
    absl::StatusOr<RedisValue> r = node.Command({"CLIENT", "KILL", "ID", id});
    *killed += r.ok() && r->is_integer() && r->integer == 1;
  }
}

WorkerProc* Coordinator::OwnerWorker(const std::string& owner) {
  const size_t colon = owner.rfind(':');
  if (colon == std::string::npos) return nullptr;
  const std::string id = owner.substr(0, colon);
  for (WorkerProc& w : workers_) {
    if (!w.killed && w.client_id == id) return &w;
  }
  return nullptr;
}

}  // namespace internal_harness
}  // namespace harness
}  // namespace relock
