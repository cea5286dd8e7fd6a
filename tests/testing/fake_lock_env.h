// A lock::LockEnv for unit tests of the lock engine without Redis or a
// client: a FakeBackend (tests/testing/fake_backend.h) on a FakeClock, a
// real HoldRegistry on a timer thread of that clock, and a LockPolicy the
// test sets (the single-node client's by default; a Redlock's with
// RedlockPolicy()).

#ifndef RELOCK_TESTS_TESTING_FAKE_LOCK_ENV_H_
#define RELOCK_TESTS_TESTING_FAKE_LOCK_ENV_H_

#include <atomic>
#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "lib/backend/backend.h"
#include "lib/common/clock.h"
#include "lib/common/observer.h"
#include "lib/lock/lock_env.h"
#include "lib/lock/owner.h"
#include "lib/timer/timer_thread.h"
#include "lib/watchdog/hold_registry.h"
#include "tests/testing/fake_backend.h"

namespace relock {
namespace testing {

class FakeLockEnv final : public lock::LockEnv {
 public:
  // A client id as Connect() makes them (a UUID).
  static constexpr const char* kClientId =
      "5f0c1e2a-7b3d-4c9e-8a61-0d2f4b6c8e10";

  // `nodes` nodes with quorum `quorum` (0: a majority).
  explicit FakeLockEnv(size_t nodes = 1, size_t quorum = 0)
      : timers_(&clock_), holds_(&timers_), backend_(&clock_, nodes, quorum) {}
  ~FakeLockEnv() { timers_.Shutdown(); }

  FakeClock& fake_clock() { return clock_; }
  FakeBackend& fake() { return backend_; }
  lock::LockPolicy& mutable_policy() { return policy_; }
  // The owner field of thread owner `number` (OwnerId{number, true}).
  std::string Owner(uint64_t number) const {
    return std::string(lock::OwnerField(kClientId, number).wire());
  }
  void set_closed(bool closed) { closed_ = closed; }
  int watchdog_activations() const { return activations_; }
  absl::Duration Elapsed() const {
    return absl::FromChrono(clock_.Now() - start_);
  }

  // --- lock::LockEnv
  const lock::LockPolicy& policy() const override { return policy_; }
  backend::Backend& backend() override { return backend_; }
  const Clock& clock() const override { return clock_; }
  const std::string& id() const override { return id_; }
  absl::Status CheckOpen() const override {
    return closed_ ? absl::FailedPreconditionError("the client is closed")
                   : absl::OkStatus();
  }
  absl::Status CheckBlockingCall() const override { return CheckOpen(); }
  bool closed() const override { return closed_; }
  lock::HoldRegistry& holds() override { return holds_; }
  absl::Duration watchdog_lease() const override { return absl::Seconds(30); }
  absl::Duration confirm_timeout() const override { return absl::Seconds(4); }
  void OnFreshHold() override {}
  void ActivateWatchdog(SteadyClock::time_point /*acked_at*/) override {
    ++activations_;
  }
  Metrics& metrics() override { return metrics_; }
  void ReportLost(const watchdog::LostHold& /*hold*/,
                  const absl::Status& /*why*/) override {
    ++reported_lost_;
  }
  int reported_lost() const { return reported_lost_.load(); }

 private:
  FakeClock clock_;
  const SteadyClock::time_point start_ = clock_.Now();
  timer::TimerThread timers_;
  lock::HoldRegistry holds_;
  lock::LockPolicy policy_;
  const std::string id_ = kClientId;
  Metrics metrics_;
  std::atomic<bool> closed_{false};
  std::atomic<int> activations_{0};
  std::atomic<int> reported_lost_{0};
  // Last: destroyed first, with the loop that may still touch the above.
  FakeBackend backend_;
};

}  // namespace testing
}  // namespace relock

#endif  // RELOCK_TESTS_TESTING_FAKE_LOCK_ENV_H_
