#include "lib/lock/hold_registry.h"

namespace relock {
namespace lock {

void HoldRegistry::OnAcquired(const std::string& name, uint64_t thread,
                              bool watchdog) {
  absl::MutexLock lock(&mu_);
  Hold& h = holds_[Key(name, thread)];
  ++h.count;
  h.watchdog = watchdog;  // Redis keeps the lease of the latest acquire
}

void HoldRegistry::OnReleased(const std::string& name, uint64_t thread,
                              bool freed) {
  absl::MutexLock lock(&mu_);
  auto it = holds_.find(Key(name, thread));
  if (it == holds_.end()) return;
  if (freed || --it->second.count <= 0) holds_.erase(it);
}

absl::optional<Hold> HoldRegistry::Find(const std::string& name,
                                        uint64_t thread) const {
  absl::MutexLock lock(&mu_);
  auto it = holds_.find(Key(name, thread));
  if (it == holds_.end()) return absl::nullopt;
  return it->second;
}

bool HoldRegistry::Forget(const std::string& name, uint64_t thread) {
  absl::MutexLock lock(&mu_);
  return holds_.erase(Key(name, thread)) > 0;
}

std::vector<std::pair<HoldRegistry::Key, Hold>> HoldRegistry::TakeAll() {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<Key, Hold>> all(holds_.begin(), holds_.end());
  holds_.clear();
  return all;
}

}  // namespace lock
}  // namespace relock
