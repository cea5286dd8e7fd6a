#include "lib/lock/hold_registry.h"

namespace relock {
namespace lock {

void HoldRegistry::OnAcquired(const std::string& name, uint64_t thread,
                              const std::string& owner, bool watchdog,
                              absl::Duration lease,
                              SteadyClock::time_point sent_at) {
  MutexLock lock(&mu_);
  Hold& h = holds_[Key(name, thread)];
  if (h.count == 0 || h.lost) {
    h = Hold();
    h.owner = owner;
    h.hold_id = next_hold_id_++;
  }
  ++h.count;
  h.watchdog = watchdog;  // Redis keeps the lease of the latest acquire
  h.renewing = watchdog;
  h.lease = lease;
  h.acked_at = sent_at;
}

absl::optional<Hold> HoldRegistry::BeginRelease(const std::string& name,
                                                uint64_t thread) {
  MutexLock lock(&mu_);
  auto it = holds_.find(Key(name, thread));
  if (it == holds_.end()) return absl::nullopt;
  Hold before = it->second;
  if (it->second.count <= 1) it->second.renewing = false;
  return before;
}

void HoldRegistry::OnReleased(const std::string& name, uint64_t thread,
                              bool freed) {
  MutexLock lock(&mu_);
  auto it = holds_.find(Key(name, thread));
  if (it == holds_.end()) return;
  Hold& h = it->second;
  if (freed) {
    holds_.erase(it);
    return;
  }
  // Holds remain in Redis: keep the local count at least 1 and renew again
  // if BeginRelease stopped it on a stale count.
  h.count = std::max<int64_t>(1, h.count - 1);
  h.renewing = h.watchdog && !h.lost;
}

bool HoldRegistry::OnExtended(const std::string& name, uint64_t thread,
                              absl::Duration lease,
                              SteadyClock::time_point sent_at) {
  MutexLock lock(&mu_);
  auto it = holds_.find(Key(name, thread));
  if (it == holds_.end() || it->second.lost) return false;
  it->second.lease = lease;
  it->second.acked_at = sent_at;
  it->second.watchdog = false;
  it->second.renewing = false;
  return true;
}

absl::optional<Hold> HoldRegistry::Forget(const std::string& name,
                                          uint64_t thread) {
  MutexLock lock(&mu_);
  auto it = holds_.find(Key(name, thread));
  if (it == holds_.end()) return absl::nullopt;
  Hold h = std::move(it->second);
  holds_.erase(it);
  return h;
}

absl::optional<Hold> HoldRegistry::Find(const std::string& name,
                                        uint64_t thread) const {
  MutexLock lock(&mu_);
  auto it = holds_.find(Key(name, thread));
  if (it == holds_.end()) return absl::nullopt;
  return it->second;
}

std::vector<std::pair<HoldRegistry::Key, Hold>> HoldRegistry::TakeAll() {
  MutexLock lock(&mu_);
  std::vector<std::pair<Key, Hold>> all(holds_.begin(), holds_.end());
  holds_.clear();
  return all;
}

size_t HoldRegistry::Sweep(SteadyClock::time_point now,
                           SteadyClock::time_point due_by,
                           absl::Duration period, bool all,
                           std::vector<RenewItem>* due,
                           std::vector<LostHold>* lost) {
  const auto period_ns = absl::ToChronoNanoseconds(period);
  size_t renewing = 0;
  MutexLock lock(&mu_);
  for (auto& [key, h] : holds_) {
    if (!h.renewing || h.lost) continue;
    if (now >= h.acked_at + absl::ToChronoNanoseconds(h.lease)) {
      h.lost = true;
      h.renewing = false;
      lost->push_back({key.first, key.second, h.acked_at});
      continue;
    }
    ++renewing;
    if (all || h.acked_at + period_ns <= due_by) {
      due->push_back({key.first, h.owner, key.second, h.hold_id});
    }
  }
  return renewing;
}

void HoldRegistry::ApplyRenewals(const std::vector<RenewItem>& due,
                                 const std::vector<bool>& renewed,
                                 SteadyClock::time_point sent_at,
                                 std::vector<LostHold>* lost) {
  MutexLock lock(&mu_);
  for (size_t i = 0; i < due.size(); ++i) {
    auto it = holds_.find(Key(due[i].name, due[i].thread));
    if (it == holds_.end()) continue;
    Hold& h = it->second;
    if (h.hold_id != due[i].hold_id || h.lost) continue;
    if (renewed[i]) {
      if (sent_at > h.acked_at) h.acked_at = sent_at;
    } else if (h.renewing) {
      h.lost = true;
      h.renewing = false;
      lost->push_back({due[i].name, due[i].thread, h.acked_at});
    }
  }
}

}  // namespace lock
}  // namespace relock
