// What this client believes its threads hold: per (lock name, thread), the
// hold count and whether the lease is the watchdog's. Redis stays the truth;
// the registry lets a release keep an explicit lease, lets Release() tell a
// lost lease from a non-owner, and lets Close() release what is still held.

#ifndef RELOCK_LIB_LOCK_HOLD_REGISTRY_H_
#define RELOCK_LIB_LOCK_HOLD_REGISTRY_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/optional.h"

namespace relock {
namespace lock {

struct Hold {
  int64_t count = 0;
  bool watchdog = true;  // lease is lock_watchdog_timeout (else explicit)
};

class HoldRegistry {
 public:
  using Key = std::pair<std::string, uint64_t>;  // (lock name, thread)

  void OnAcquired(const std::string& name, uint64_t thread, bool watchdog);
  // `freed`: Redis said the lock is now free.
  void OnReleased(const std::string& name, uint64_t thread, bool freed);
  absl::optional<Hold> Find(const std::string& name, uint64_t thread) const;
  // Removes the entry; returns whether there was one.
  bool Forget(const std::string& name, uint64_t thread);
  std::vector<std::pair<Key, Hold>> TakeAll();

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<Key, Hold> holds_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lock
}  // namespace relock

#endif  // RELOCK_LIB_LOCK_HOLD_REGISTRY_H_
