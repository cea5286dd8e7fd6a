// The safety harness's faults aimed at holders (coordinator.h): finding who
// holds a lock (in Redis, and in the workers' logs), and killing, pausing
// or cutting off a holder's worker. faults.cc has the faults aimed at Redis.

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
