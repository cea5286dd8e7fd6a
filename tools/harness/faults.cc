// The safety harness's fault injections (coordinator.h): kills and pauses of
// holders and of Redis, restarts, failovers, reshards, client kills, SCRIPT
// FLUSH, partitions and split brains.

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

namespace {

// The server's clock (TIME) in epoch ms; nullopt if it cannot say.
absl::optional<int64_t> ServerTimeMs(RedisServer& node) {
  absl::StatusOr<RedisValue> time = node.Command({"TIME"});
  int64_t secs = 0, micros = 0;
  if (!time.ok() || time->elements.size() != 2 ||
      !absl::SimpleAtoi(time->elements[0].str, &secs) ||
      !absl::SimpleAtoi(time->elements[1].str, &micros)) {
    return absl::nullopt;
  }
  return secs * 1000 + micros / 1000;
}

}  // namespace

absl::optional<std::map<std::string, int64_t>> Coordinator::PermitsOut(int k) {
  RedisServer* node = LockNode(k);
  if (node == nullptr) return absl::nullopt;
  absl::StatusOr<RedisValue> v = node->Command(
      {"ZRANGE", PermitsOutKey(kPrefix, k), "0", "-1", "WITHSCORES"});
  if (!v.ok() || !v->is_array()) return absl::nullopt;
  std::map<std::string, int64_t> out;
  for (size_t i = 0; i + 1 < v->elements.size(); i += 2) {
    int64_t score = 0;
    if (absl::SimpleAtoi(v->elements[i + 1].str, &score)) {
      out[absl::BytesToHexString(v->elements[i].str)] = score;
    }
  }
  return out;
}

std::vector<std::string> Coordinator::Owners(int k) {
  std::vector<std::string> owners;
  if (o_.semaphore > 0) {
    const std::map<std::string, int64_t> out =
        PermitsOut(k).value_or(std::map<std::string, int64_t>{});
    for (const WorkerProc& w : workers_) {
      if (w.killed) continue;
      const WorkerLog log = ParseWorkerLog(w.index, w.log_path);
      for (const Hold& h : log.holds) {
        auto owner = log.owners.find(h.thread);
        if (h.open && h.lock == k && h.release_start == 0 &&
            out.count(h.permit) != 0 && owner != log.owners.end()) {
          owners.push_back(owner->second);
        }
      }
    }
    return owners;
  }
  std::vector<RedisServer*> nodes = {LockNode(k)};
  if (o_.redlock > 0) nodes = DataNodes();
  for (RedisServer* node : nodes) {
    if (node == nullptr) continue;
    absl::StatusOr<RedisValue> v =
        node->Command({"HKEYS", LockName(kPrefix, k)});
    if (!v.ok() || !v->is_array()) continue;
    for (const RedisValue& e : v->elements) {
      std::string owner = e.str;
      // rw runs: the writers (whose holds the workers record), under the
      // thread's own field; not "mode" nor the readers.
      if (o_.rw && !absl::EndsWith(owner, ":write")) continue;
      if (o_.rw) owner.resize(owner.size() - std::string(":write").size());
      owners.push_back(std::move(owner));
    }
  }
  // Redlock runs: a holder's field is on a majority of the masters.
  std::sort(owners.begin(), owners.end());
  owners.erase(std::unique(owners.begin(), owners.end()), owners.end());
  return owners;
}

WorkerProc* Coordinator::StopAPermitHolder(Fault* f, int* lock) {
  const int64_t give_up = MonotonicNanos() + 5'000'000'000;
  while (MonotonicNanos() < give_up) {
    std::vector<WorkerProc*> live;
    for (WorkerProc& w : workers_) {
      if (!w.killed) live.push_back(&w);
    }
    std::shuffle(live.begin(), live.end(), rng_);
    for (WorkerProc* w : live) {
      if (!w->child->Signal(SIGSTOP).ok()) continue;
      WaitStopped(w->child->pid(), absl::Milliseconds(200));
      for (const Hold& h : ParseWorkerLog(w->index, w->log_path).holds) {
        if (!h.open || h.release_start != 0 || h.permit.empty()) continue;
        const absl::optional<std::map<std::string, int64_t>> out =
            PermitsOut(h.lock);
        if (out.has_value() && out->count(h.permit) != 0) {
          *lock = h.lock;
          return w;
        }
      }
      (void)w->child->Signal(SIGCONT);
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  f->detail = "found no worker holding a permit within 5s";
  return nullptr;
}

WorkerProc* Coordinator::StopAHolder(Fault* f, int* lock) {
  if (o_.semaphore > 0) return StopAPermitHolder(f, lock);
  const int64_t give_up = MonotonicNanos() + 5'000'000'000;
  std::vector<int> order(o_.locks);
  for (int k = 0; k < o_.locks; ++k) order[k] = k;
  while (MonotonicNanos() < give_up) {
    std::shuffle(order.begin(), order.end(), rng_);
    for (int k : order) {
      for (const std::string& owner : Owners(k)) {
        WorkerProc* w = OwnerWorker(owner);
        if (w == nullptr) continue;
        if (!w->child->Signal(SIGSTOP).ok()) continue;
        WaitStopped(w->child->pid(), absl::Milliseconds(200));
        std::vector<std::string> now = Owners(k);
        bool recorded = false;
        for (const Hold& h : ParseWorkerLog(w->index, w->log_path).holds) {
          recorded |= h.open && h.lock == k;
        }
        if (std::find(now.begin(), now.end(), owner) == now.end() ||
            !recorded) {
          (void)w->child->Signal(SIGCONT);
          continue;
        }
        *lock = k;
        return w;
      }
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  f->detail = "found no worker holding a lock within 5s";
  return nullptr;
}

void Coordinator::KillHolder(Fault* f) {
  int k = -1;
  WorkerProc* w = StopAHolder(f, &k);
  if (w == nullptr) return;
  (void)w->child->Signal(SIGKILL);
  f->end = MonotonicNanos();
  w->killed = true;
  (void)w->child->Wait(absl::Seconds(10));
  f->injected = true;
  f->worker = w->index;
  f->detail = absl::StrCat("worker ", w->index, " (pid ", w->child->pid(),
                           ") holding lock ", k);
  if (absl::Status s = SpawnWorker(); !s.ok()) {
    f->detail += absl::StrCat("; replacement failed: ", s.ToString());
  } else {
    f->detail += absl::StrCat("; replaced by worker ", workers_.back().index);
  }
}

WorkerProc* Coordinator::StopAWriter(Fault* f, int* lock) {
  std::vector<WorkerProc*> live;
  for (WorkerProc& w : workers_) {
    if (!w.killed) live.push_back(&w);
  }
  if (live.empty()) {
    f->detail = "no live worker";
    return nullptr;
  }
  std::uniform_int_distribution<size_t> pick(0, live.size() - 1);
  WorkerProc* w = live[pick(rng_)];
  // The worker takes the request within `window`; its line is awaited a
  // second longer, so that a late one is not left unread.
  const absl::Duration window = absl::Seconds(4);
  (void)w->child->WriteLine(
      absl::StrCat("pause-before-write ", absl::ToInt64Milliseconds(window)));
  absl::StatusOr<std::string> line =
      w->child->ReadLine(window + absl::Seconds(1));
  constexpr absl::string_view kSaid = "pausing-before-write ";
  int k = -1;
  if (!line.ok() || !absl::StartsWith(*line, kSaid) ||
      !absl::SimpleAtoi(absl::string_view(*line).substr(kSaid.size()), &k)) {
    (void)w->child->Signal(SIGCONT);
    f->detail = absl::StrCat("worker ", w->index,
                             " did not stop before a write within ",
                             absl::FormatDuration(window), ": ",
                             line.ok() ? *line : line.status().ToString());
    return nullptr;
  }
  if (!WaitStopped(w->child->pid(), absl::Seconds(2))) {
    (void)w->child->Signal(SIGCONT);
    f->detail = absl::StrCat("worker ", w->index,
                             " said it would stop before a write, but did "
                             "not within 2s");
    return nullptr;
  }
  *lock = k;
  return w;
}

void Coordinator::PauseHolder(Fault* f) {
  const bool before_write = o_.fenced && holder_pauses_++ % 2 == 0;
  int k = -1;
  WorkerProc* w = before_write ? StopAWriter(f, &k) : StopAHolder(f, &k);
  if (w == nullptr) return;
  f->start = MonotonicNanos();
  absl::SleepFor(o_.holder_pause);
  const absl::Status s = w->child->Signal(SIGCONT);
  f->end = MonotonicNanos();
  f->injected = s.ok();
  f->worker = w->index;
  f->detail = absl::StrCat(
      "worker ", w->index, " (pid ", w->child->pid(), ") holding lock ", k,
      before_write ? " stopped between its SafeUntil() check and its write"
                   : " stopped",
      " for ", absl::FormatDuration(o_.holder_pause),
      s.ok() ? "" : absl::StrCat(": ", s.ToString()));
}

PermitTally Coordinator::Tally(int k) {
  PermitTally p;
  p.lock = k;
  RedisServer* node = LockNode(k);
  if (node == nullptr) return p;
  absl::StatusOr<RedisValue> count =
      node->Command({"GET", LockName(kPrefix, k)});
  if (count.ok() && count->is_nil()) {
    p.unset = true;
    p.available = 0;
  }
  if (count.ok() && count->is_string() &&
      !absl::SimpleAtoi(count->str, &p.available)) {
    p.available = -1;
  }
  const absl::optional<int64_t> now_ms = ServerTimeMs(*node);
  const absl::optional<std::map<std::string, int64_t>> out = PermitsOut(k);
  if (!now_ms.has_value() || !out.has_value()) return p;
  p.out = static_cast<int64_t>(out->size());
  for (const auto& [id, lease_end_ms] : *out) {
    p.leased += lease_end_ms > *now_ms;
  }
  return p;
}

int64_t Coordinator::LockPttlMs(int k) {
  absl::StatusOr<RedisValue> pttl =
      LockServer()->Command({"PTTL", LockName(kPrefix, k)});
  return pttl.ok() && pttl->is_integer() ? pttl->integer : -1;
}

int64_t Coordinator::PermitLeaseLeftMs(int k, const std::string& permit) {
  const absl::optional<std::map<std::string, int64_t>> out = PermitsOut(k);
  const absl::optional<int64_t> now_ms = ServerTimeMs(*LockServer());
  if (!out.has_value() || !now_ms.has_value()) return -1;
  auto it = out->find(permit);
  return it == out->end() ? -1 : it->second - *now_ms;
}

void Coordinator::PartitionWorker(Fault* f) {
  const absl::Duration length = FaultLength(f->kind);
  if (f->kind == FaultKind::kPartition) ++partitions_;
  std::vector<WorkerProc*> live;
  for (WorkerProc& w : workers_) {
    if (!w.killed) live.push_back(&w);
  }
  if (live.empty()) {
    f->detail = "no live worker";
    return;
  }
  std::uniform_int_distribution<size_t> pick(0, live.size() - 1);
  WorkerProc* w = live[pick(rng_)];
  // Every worker is asked (a worker's threads may be waiting behind
  // another's long hold for a while); the cut falls on one that took it.
  const int64_t asked = MonotonicNanos();
  for (WorkerProc* l : live) (void)l->child->WriteLine("long 3000");
  // A worker in a long hold: its owner field in a lock, and its log shows
  // an open hold of that lock begun since it was asked and over 100 ms ago
  // (not a short one that ends as the cut begins, nor a long one asked for
  // by an earlier fault, nearly over). Its other locks are cut off with it.
  std::vector<int> held;
  std::vector<std::string> permits;  // semaphore runs: held[i]'s permit
  for (int64_t give_up = MonotonicNanos() + 3'500'000'000;
       held.empty() && MonotonicNanos() < give_up;) {
    for (int k = 0; k < o_.locks && held.empty(); ++k) {
      for (const std::string& owner : Owners(k)) {
        WorkerProc* h = OwnerWorker(owner);
        if (h == nullptr) continue;
        const int64_t before = MonotonicNanos() - 100'000'000;
        for (const Hold& open : ParseWorkerLog(h->index, h->log_path).holds) {
          if (open.open && open.attempt_end > asked &&
              open.attempt_end < before) {
            held.push_back(open.lock);
            permits.push_back(open.permit);
          }
        }
        if (!held.empty()) {
          w = h;
          break;
        }
      }
    }
    if (held.empty()) absl::SleepFor(absl::Milliseconds(50));
  }
  const Cut cut = f->kind == FaultKind::kPartitionRequests  ? Cut::kRequests
                  : f->kind == FaultKind::kPartitionReplies ? Cut::kReplies
                                                            : Cut::kBoth;
  f->worker = w->index;
  f->start = MonotonicNanos();
  absl::Status s = lab_->Partition(w->index, cut);
  if (!s.ok()) {
    f->detail = s.ToString();
    return;
  }
  for (size_t i = 0; i < held.size(); ++i) {
    const int k = held[i];
    const int64_t left_ms =
        o_.semaphore > 0 ? PermitLeaseLeftMs(k, permits[i]) : LockPttlMs(k);
    const int64_t now = MonotonicNanos();
    if (left_ms > 0) {
      f->cut_holds.push_back(CutHold{k, now + left_ms * 1'000'000});
    }
  }
  absl::SleepFor(length - absl::Nanoseconds(MonotonicNanos() - f->start));
  s = lab_->Heal(w->index);
  f->end = MonotonicNanos();
  f->injected = true;
  std::vector<std::string> locks;
  for (const CutHold& c : f->cut_holds) {
    locks.push_back(absl::StrCat(c.lock, " (",
                                 (c.server_lease_end - f->start) / 1'000'000,
                                 " ms left)"));
  }
  f->detail = absl::StrCat(
      "worker ", w->index, " (pid ", w->child->pid(), ") for ",
      absl::FormatDuration(length), ", holding ",
      locks.empty() ? std::string("no lock") : absl::StrJoin(locks, ", "),
      s.ok() ? "" : absl::StrCat("; HEAL FAILED: ", s.ToString()));
}

}  // namespace internal_harness
}  // namespace harness
}  // namespace relock
