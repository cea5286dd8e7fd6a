#include "lib/watchdog/hold_registry.h"

#include <algorithm>
#include <utility>

namespace relock {
namespace watchdog {

void HoldRegistry::ArmLeaseEnd(const Key& key, Hold& h) {
  Disarm(h);
  if (timers_ == nullptr || h.watchdog) return;
  h.timer = timers_->ScheduleAt(h.lease_end(), [this, key, id = h.hold_id] {
    OnTimer(key, id, /*retention_end=*/false);
  });
}

void HoldRegistry::Disarm(Hold& h) {
  if (h.timer != 0) timers_->Cancel(h.timer);
  h.timer = 0;
}

void HoldRegistry::OnTimer(const Key& key, uint64_t hold_id,
                           bool retention_end) {
  LostHold expired;
  {
    MutexLock lock(&mu_);
    auto it = holds_.find(key);
    if (it == holds_.end() || it->second.hold_id != hold_id) return;
    Hold& h = it->second;
    if (retention_end) {
      if (h.expired()) holds_.erase(it);
      return;
    }
    // Expired already (FindFactsExpiringDue()): its retention timer runs.
    // Or re-armed for a later end (OnExtended(), a re-entry with a longer
    // lease) after this callback was due: that timer owns the hold. (Timers
    // round up, so a callback for the current end never sees it ahead.)
    if (h.expired() || h.lease_end() > timers_->clock()->Now()) return;
    h.timer = 0;
    if (!ExpireLocked(key, h, &expired)) return;
  }
  on_expired_(expired);
}

bool HoldRegistry::ExpireLocked(const Key& key, Hold& h, LostHold* report) {
  if (h.watchdog || h.lost()) return false;
  // A final release under way when the lease ends: its answer tells the
  // holder (OK if it beat the lease, Aborted if not); no callback.
  if (h.releasing()) h.on_lost = nullptr;
  h.state = HoldState::kExpired;
  h.timer =
      timers_->ScheduleAt(h.lease_end() + absl::ToChronoNanoseconds(retention_),
                          [this, key, hold_id = h.hold_id] {
                            OnTimer(key, hold_id, /*retention_end=*/true);
                          });
  if (h.on_lost == nullptr || !on_expired_) return false;
  *report = {key.first, key.second, h.acked_at, std::move(h.on_lost),
             h.owner,   h.lease};
  return true;
}

absl::optional<HoldFacts> HoldRegistry::FindFactsExpiringDue(
    const std::string& name, uint64_t thread) {
  LostHold expired;
  bool report = false;
  absl::optional<HoldFacts> facts;
  {
    MutexLock lock(&mu_);
    auto it = holds_.find(KeyView(name, thread));
    if (it == holds_.end()) return absl::nullopt;
    Hold& h = it->second;
    if (timers_ != nullptr && !h.watchdog && !h.ended() &&
        h.lease_end() <= timers_->clock()->Now()) {
      Disarm(h);
      report = ExpireLocked(it->first, h, &expired);
    }
    facts = h;
  }
  if (report) on_expired_(expired);
  return facts;
}

absl::Status HoldRegistry::AddLossCallback(const std::string& name,
                                           uint64_t thread, LossFn fn) {
  MutexLock lock(&mu_);
  auto it = holds_.find(KeyView(name, thread));
  if (it == holds_.end() || it->second.count <= 0) {
    return absl::FailedPreconditionError("the owner does not hold the lock");
  }
  Hold& h = it->second;
  if (h.ended()) {
    return absl::AbortedError(h.lost() ? "the hold was lost already"
                                       : "the hold's lease ran out already");
  }
  if (h.on_lost == nullptr) h.on_lost = std::make_shared<LossFns>();
  h.on_lost->push_back(std::move(fn));
  return absl::OkStatus();
}

size_t HoldRegistry::live() const {
  MutexLock lock(&mu_);
  return static_cast<size_t>(
      std::count_if(holds_.begin(), holds_.end(),
                    [](const auto& e) { return !e.second.ended(); }));
}

bool HoldRegistry::OnAcquired(const std::string& name, uint64_t thread,
                              absl::string_view owner, bool watchdog,
                              absl::Duration lease,
                              SteadyClock::time_point sent_at, LockKind kind,
                              LossFn on_lost, ReplicaAck ack, bool reentry) {
  MutexLock lock(&mu_);
  // Looked up without copying the name; only a new entry copies it.
  auto it = holds_.find(KeyView(name, thread));
  if (reentry && it != holds_.end() && it->second.lost()) return false;
  if (it == holds_.end()) it = holds_.try_emplace(Key(name, thread)).first;
  const Key& key = it->first;
  Hold& h = it->second;
  const bool adds = h.count > 0 && !h.ended();
  if (!adds) {
    Disarm(h);
    h = Hold();
    h.owner = std::string(owner);
    h.hold_id = next_hold_id_++;
    h.kind = kind;
    if (on_lost) {
      h.on_lost = std::make_shared<LossFns>();
      h.on_lost->push_back(std::move(on_lost));
    }
  }
  ++h.count;
  h.ack.replicas = std::max(h.ack.replicas, ack.replicas);
  h.ack.timeout = std::max(h.ack.timeout, ack.timeout);
  const SteadyClock::time_point end =
      sent_at + absl::ToChronoNanoseconds(lease);
  if (watchdog || !adds || end > h.lease_end()) {
    h.lease = lease;
    h.acked_at = sent_at;
  }
  h.watchdog = watchdog;
  // An acquire means no release is under way: a final release that never
  // finished (its release-all failed) leaves the hold renewed again.
  if (h.releasing()) h.state = HoldState::kHeld;
  ArmLeaseEnd(key, h);
  return true;
}

bool HoldRegistry::TryLocalReentry(const std::string& name, uint64_t thread,
                                   SteadyClock::time_point safe_after,
                                   absl::Duration drift) {
  MutexLock lock(&mu_);
  auto it = holds_.find(KeyView(name, thread));
  if (it == holds_.end()) return false;
  Hold& h = it->second;
  if (h.count <= 0 || !h.renewing() ||
      h.lease_end() - absl::ToChronoNanoseconds(drift) <= safe_after) {
    return false;
  }
  ++h.count;
  ++h.local;
  return true;
}

bool HoldRegistry::TryLocalRelease(const std::string& name, uint64_t thread) {
  MutexLock lock(&mu_);
  auto it = holds_.find(KeyView(name, thread));
  if (it == holds_.end()) return false;
  Hold& h = it->second;
  if (h.ended() || h.local <= 0 || h.count <= 1) return false;
  --h.count;
  --h.local;
  return true;
}

absl::optional<HoldFacts> HoldRegistry::BeginRelease(const std::string& name,
                                                     uint64_t thread) {
  MutexLock lock(&mu_);
  auto it = holds_.find(KeyView(name, thread));
  if (it == holds_.end()) return absl::nullopt;
  const HoldFacts before = it->second;
  if (it->second.count <= 1 && it->second.state == HoldState::kHeld) {
    it->second.state = HoldState::kReleasing;
    it->second.release_in_flight = true;
  }
  return before;
}

void HoldRegistry::OnReleased(const std::string& name, uint64_t thread,
                              bool freed) {
  MutexLock lock(&mu_);
  auto it = holds_.find(KeyView(name, thread));
  if (it == holds_.end()) return;
  Hold& h = it->second;
  if (freed) {
    Disarm(h);
    holds_.erase(it);
    return;
  }
  // Holds remain in Redis: keep the local count at least 1 and renew again
  // if BeginRelease stopped it on a stale count.
  h.count = std::max<int64_t>(1, h.count - 1);
  h.release_in_flight = false;
  if (h.releasing()) h.state = HoldState::kHeld;
}

void HoldRegistry::OnReleaseFailed(const std::string& name, uint64_t thread) {
  MutexLock lock(&mu_);
  auto it = holds_.find(KeyView(name, thread));
  if (it != holds_.end()) it->second.release_in_flight = false;
}

bool HoldRegistry::OnExtended(const std::string& name, uint64_t thread,
                              absl::Duration lease,
                              SteadyClock::time_point sent_at) {
  const Key key(name, thread);
  MutexLock lock(&mu_);
  auto it = holds_.find(key);
  if (it == holds_.end() || it->second.ended()) return false;
  Hold& h = it->second;
  h.lease = lease;
  h.acked_at = sent_at;
  h.watchdog = false;  // no longer renewed
  ArmLeaseEnd(key, h);
  return true;
}

absl::optional<Hold> HoldRegistry::Forget(const std::string& name,
                                          uint64_t thread) {
  MutexLock lock(&mu_);
  auto it = holds_.find(KeyView(name, thread));
  if (it == holds_.end()) return absl::nullopt;
  Hold h = std::move(it->second);
  Disarm(h);
  holds_.erase(it);
  return h;
}

absl::optional<LostHold> HoldRegistry::MarkLost(const std::string& name,
                                                uint64_t thread) {
  MutexLock lock(&mu_);
  auto it = holds_.find(KeyView(name, thread));
  if (it == holds_.end() || it->second.ended()) return absl::nullopt;
  Hold& h = it->second;
  Disarm(h);
  h.state = HoldState::kLost;
  return LostHold{name,    thread, h.acked_at, std::move(h.on_lost),
                  h.owner, h.lease};
}

absl::optional<Hold> HoldRegistry::Find(const std::string& name,
                                        uint64_t thread) const {
  MutexLock lock(&mu_);
  auto it = holds_.find(KeyView(name, thread));
  if (it == holds_.end()) return absl::nullopt;
  return it->second;
}

absl::optional<HoldFacts> HoldRegistry::FindFacts(const std::string& name,
                                                  uint64_t thread) const {
  MutexLock lock(&mu_);
  auto it = holds_.find(KeyView(name, thread));
  if (it == holds_.end()) return absl::nullopt;
  return it->second;
}

template <class Pred>
std::vector<std::pair<HoldRegistry::Key, Hold>> HoldRegistry::TakeIf(
    Pred take, bool on_close) {
  std::vector<std::pair<Key, Hold>> taken;
  MutexLock lock(&mu_);
  for (auto it = holds_.begin(); it != holds_.end();) {
    if (!take(it->first, it->second)) {
      ++it;
      continue;
    }
    Disarm(it->second);
    if (!it->second.ended()) {
      if (on_close) taken_on_close_.insert(it->first);
      taken.emplace_back(it->first, it->second);
    }
    holds_.erase(it++);
  }
  return taken;
}

bool HoldRegistry::AwaitReleases(absl::Duration timeout) {
  auto none_releasing = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (in_flight_.load(std::memory_order_seq_cst) > 0) return false;
    for (const auto& [key, h] : holds_) {
      if (h.release_in_flight) return false;
    }
    return true;
  };
  MutexLock lock(&mu_);
  ++awaiting_;
  const bool none =
      mu_.AwaitWithTimeout(absl::Condition(&none_releasing), timeout);
  --awaiting_;
  return none;
}

// Atomic, so that an acquire's count costs no lock on the registry; the
// last EndInFlight() while a close waits takes the mutex, whose release
// makes the waiter look again. (seq_cst: whichever of a count's change and
// the waiter's awaiting_ comes first, the other sees it.)
void HoldRegistry::BeginInFlight() {
  in_flight_.fetch_add(1, std::memory_order_seq_cst);
}

void HoldRegistry::EndInFlight() {
  if (in_flight_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
      awaiting_.load(std::memory_order_seq_cst) > 0) {
    MutexLock lock(&mu_);
  }
}

std::vector<std::pair<HoldRegistry::Key, Hold>> HoldRegistry::TakeAll() {
  return TakeIf([](const Key&, const Hold&) { return true; },
                /*on_close=*/true);
}

bool HoldRegistry::TakenOnClose(const std::string& name,
                                uint64_t thread) const {
  MutexLock lock(&mu_);
  return taken_on_close_.contains(KeyView(name, thread));
}

std::vector<std::pair<HoldRegistry::Key, Hold>> HoldRegistry::TakeThread(
    uint64_t thread) {
  return TakeIf(
      [thread](const Key& key, const Hold&) { return key.second == thread; },
      /*on_close=*/false);
}

size_t HoldRegistry::size() const {
  MutexLock lock(&mu_);
  return holds_.size();
}

absl::optional<SteadyClock::time_point> HoldRegistry::EarliestSafeEnd(
    absl::Duration drift) const {
  absl::optional<SteadyClock::time_point> earliest;
  MutexLock lock(&mu_);
  for (const auto& [key, h] : holds_) {
    if (!h.renewing()) continue;
    const SteadyClock::time_point end =
        h.lease_end() - absl::ToChronoNanoseconds(drift);
    if (!earliest.has_value() || end < *earliest) earliest = end;
  }
  return earliest;
}

size_t HoldRegistry::Sweep(const SweepRound& round, std::vector<RenewItem>* due,
                           std::vector<LostHold>* lost) {
  const auto period_ns = absl::ToChronoNanoseconds(round.period);
  size_t renewing = 0;
  MutexLock lock(&mu_);
  for (auto& [key, h] : holds_) {
    if (!h.renewing()) continue;
    if (round.now >= h.lease_end() - absl::ToChronoNanoseconds(round.drift)) {
      h.state = HoldState::kLost;
      lost->push_back({key.first, key.second, h.acked_at, std::move(h.on_lost),
                       h.owner, h.lease});
      continue;
    }
    ++renewing;
    if (due != nullptr &&
        (round.all || h.acked_at + period_ns <= round.due_by ||
         h.acked_at < round.acked_before)) {
      due->push_back(
          {key.first, h.owner, key.second, h.hold_id, h.kind, h.ack});
    }
  }
  return renewing;
}

void HoldRegistry::ApplyRenewals(const std::vector<RenewItem>& due,
                                 const std::vector<Renewal>& renewed,
                                 SteadyClock::time_point sent_at,
                                 std::vector<LostHold>* lost) {
  MutexLock lock(&mu_);
  for (size_t i = 0; i < due.size(); ++i) {
    auto it = holds_.find(KeyView(due[i].name, due[i].thread));
    if (it == holds_.end()) continue;
    Hold& h = it->second;
    if (h.hold_id != due[i].hold_id || h.ended()) continue;
    if (renewed[i] == Renewal::kRenewed) {
      if (sent_at > h.acked_at) h.acked_at = sent_at;
    } else if (renewed[i] == Renewal::kGone && h.renewing()) {
      h.state = HoldState::kLost;
      lost->push_back({due[i].name, due[i].thread, h.acked_at,
                       std::move(h.on_lost), h.owner, h.lease});
    }
  }
}

}  // namespace watchdog
}  // namespace relock
