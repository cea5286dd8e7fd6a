// The lease watchdog: keeps the leases of watchdog-held locks alive and
// reports the ones that are lost.
//
// Every lock acquired without an explicit lease is in the client's
// HoldRegistry with renewing = true from before Acquire() returns until just
// before its final release is sent. The watchdog runs renewal rounds on its
// own thread, scheduled on the client's timer wheel every
// `round_interval` = lease / 12 (2.5 s for the default 30 s lease). A round
//   1. marks lost every renewing hold whose lease, less the drift allowance
//      (the end SafeUntil() gives), ran out without a successful renewal
//      (acked_at + lease - drift <= now);
//   2. collects every renewing hold due before the next round
//      (acked_at + lease/3 <= now + round_interval), so each lease is renewed
//      about every lease/3, in as few, as large batches as possible;
//   3. renews them through `renew` (the client sends one script call per
//      `keys_per_call` locks, all pipelined on one connection: one round trip);
//   4. marks lost the holds whose owner field was gone (deleted, FLUSHALL,
//      restart, expired while Redis was paused) and passes each lost hold to
//      `on_lost` (which must not block: the client queues the event).
// A failed round (timeout, reconnect) is retried after `retry_interval` until
// the lease would have run out, when step 1 reports the loss. After a
// connection to Redis opened again, or a new master took over
// (RenewAllSoon(): the server may have restarted or failed over and lost
// its locks), a round runs at once and renews every renewing hold
// acknowledged before then, so that such a loss is reported within a round
// trip, not at each hold's next renewal (up to lease/3 later); a hold whose
// renewal failed is in every round until renewed.
//
// A loss is reported on time even while a round waits for its renewals (up
// to the command timeout, during a network partition): a loss check, a
// timer at the earliest safe end of a renewing hold, runs step 1 on the
// timer thread. Without it the holder was told up to a round (plus a
// command timeout) after its lease had ended on the server, when another
// owner may already hold the lock (found by the safety harness's partition
// fault: tools/harness/README.md).
//
// No renewal is ever sent for a hold after its final release began; a round
// already in flight may still reach Redis after the release, where the renew
// script finds the owner field gone and does nothing.
//
// Time comes only from the timer wheel's clock (timers->clock()): rounds are
// scheduled on it, and a round reads it for `now` and for when its renewal
// was sent. The HoldRegistry's times must be on the same clock. Tests drive
// a watchdog with a FakeClock and a fake RenewFn.

#ifndef RELOCK_LIB_WATCHDOG_WATCHDOG_H_
#define RELOCK_LIB_WATCHDOG_WATCHDOG_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/common/mutex.h"
#include "lib/timer/timer_thread.h"
#include "lib/watchdog/hold_registry.h"

namespace relock {
namespace watchdog {

// What one renewal batch found: one Renewal per item, in order (or none at
// all when the batch failed as a whole), and why items are undecided (OK
// when none is).
struct RenewResult {
  std::vector<Renewal> items;
  absl::Status error;
};
// Sends one renewal batch. An item whose node did not answer is undecided;
// the others are applied (one master of a cluster down does not hold back
// the renewals of the others).
using RenewFn =
    std::function<RenewResult(const std::vector<watchdog::RenewItem>& items)>;
using LostFn = std::function<void(const watchdog::LostHold& hold,
                                  const absl::Status& why)>;

struct RoundStats {
  size_t renewing = 0;  // renewing holds after the round
  size_t renewed = 0;
  size_t lost = 0;
  bool failed = false;
  absl::Duration wall;  // whole round, on the injected clock
  absl::Duration cpu;   // CPU time of the thread that ran it
};

class Watchdog {
 public:
  // `holds` and `timers` (not null) must outlive the watchdog; `timers`
  // must be constructed already (its clock is read here). `renew` is called
  // on the watchdog's thread or on the caller's in RunRound(); `on_lost` on
  // those or on the timer thread (the loss check), one call at a time, and
  // possibly while a `renew` is under way. `on_lost` must not call Stop()
  // (it would wait for the loss check that called it).
  // `drift`: how much earlier than acked_at + lease a hold stops being safe
  // (lib/lock/lock_env.h's LockPolicy::Drift), and is reported lost.
  Watchdog(absl::Duration lease, watchdog::HoldRegistry* holds,
           timer::TimerThread* timers, RenewFn renew, LostFn on_lost,
           absl::Duration drift = absl::ZeroDuration());
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // A watchdog hold acknowledged at `acked_at` (its Hold::acked_at) was
  // registered: makes sure rounds are scheduled and the loss check is armed
  // no later than the hold's safe end. O(1): no scan of the registry.
  void Activate(SteadyClock::time_point acked_at);
  // A connection to Redis opened again (or a new master took over): every
  // renewing hold acknowledged before now is renewed by a round that runs
  // at once, on the watchdog's thread, and by the rounds after it until
  // renewed (see the banner). At most one such round at once per retry
  // interval. Does not block: any thread, the event loop's too.
  void RenewAllSoon();
  // Stops rounds and joins the thread (waiting for a round in flight, which
  // is bounded by the command timeout). Idempotent.
  void Stop();

  // Runs one round on the calling thread (renewing every renewing hold when
  // `all`). For benchmarks and tests; the watchdog thread runs the others.
  RoundStats RunRound(bool all);

  absl::Duration round_interval() const { return round_interval_; }
  // Whether the next round's timer is pending (for tests: the loss check's
  // timer may be pending beside it).
  bool round_scheduled() const;
  // When the next round's timer fires, if it is pending (for tests).
  absl::optional<SteadyClock::time_point> round_at() const;
  // When the loss check fires next, if it is armed (for tests).
  absl::optional<SteadyClock::time_point> loss_check_at() const;
  // Rounds run and failed so far.
  uint64_t rounds() const;
  uint64_t failed_rounds() const;

 private:
  void Run();
  void ScheduleRound(absl::Duration delay)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->mu);
  // Arms the loss check at `at` unless it is armed for no later already (it
  // then re-arms when it fires); nullopt (nothing renewing) cancels it.
  void ArmLossCheckAt(absl::optional<SteadyClock::time_point> at)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->mu);
  // Arms the loss check at the earliest safe end of a renewing hold. The
  // registry is scanned (EarliestSafeEnd()) before state_->mu is taken, so
  // that an acquire's Activate() never waits for a scan; a scan that an
  // Activate() followed may have missed its hold, and its nullopt then
  // cancels nothing (Activate() armed the check for that hold).
  void ArmLossCheck() ABSL_LOCKS_EXCLUDED(state_->mu);
  // The loss check (on the timer thread): step 1 of a round, then re-arms.
  void CheckLosses();
  // Marks lost the renewing holds past their safe end at `sweep.now` and
  // reports them (how many in *lost_count); the renewals due by
  // `sweep.due_by` in *due (if not null). Returns how many holds are still
  // renewing.
  size_t SweepAndReport(const watchdog::SweepRound& sweep,
                        std::vector<watchdog::RenewItem>* due,
                        size_t* lost_count);

  const absl::Duration lease_;
  const absl::Duration drift_;
  const absl::Duration period_;          // lease / 3
  const absl::Duration round_interval_;  // lease / 12
  const absl::Duration retry_interval_;
  watchdog::HoldRegistry* const holds_;
  timer::TimerThread* const timers_;
  const Clock* const clock_;  // timers_->clock()
  const RenewFn renew_;
  const LostFn on_lost_;

  Mutex round_mu_;  // one round at a time
  Mutex lost_mu_;   // on_lost_ called by one thread at a time
  absl::Status last_error_ ABSL_GUARDED_BY(lost_mu_);

  // Shared with the timer callback, which may run after Stop() cancelled it
  // too late; it then touches only this.
  struct State {
    Mutex mu;
    bool stop ABSL_GUARDED_BY(mu) = false;
    bool due ABSL_GUARDED_BY(mu) = false;          // a round should run now
    timer::TimerId timer ABSL_GUARDED_BY(mu) = 0;  // next round, if scheduled
    SteadyClock::time_point timer_at ABSL_GUARDED_BY(mu);  // ... its time
    uint64_t timer_generation ABSL_GUARDED_BY(mu) = 0;     // ... and its own
    // The last RenewAllSoon(): holds acknowledged before are renewed.
    SteadyClock::time_point reconnected_at ABSL_GUARDED_BY(mu) =
        SteadyClock::time_point::min();
    // When RenewAllSoon() last made a round run at once.
    SteadyClock::time_point renewed_all_at ABSL_GUARDED_BY(mu) =
        SteadyClock::time_point::min();
    timer::TimerId loss_timer ABSL_GUARDED_BY(mu) = 0;    // the loss check
    SteadyClock::time_point loss_at ABSL_GUARDED_BY(mu);  // when it fires
    uint64_t loss_generation ABSL_GUARDED_BY(mu) = 0;     // of the latest one
    bool checking ABSL_GUARDED_BY(mu) = false;     // a loss check is running
    uint64_t activations ABSL_GUARDED_BY(mu) = 0;  // Activate() calls
    uint64_t rounds ABSL_GUARDED_BY(mu) = 0;
    uint64_t failed_rounds ABSL_GUARDED_BY(mu) = 0;
  };
  const std::shared_ptr<State> state_ = std::make_shared<State>();
  Mutex join_mu_;
  std::thread thread_ ABSL_GUARDED_BY(join_mu_);
};

}  // namespace watchdog
}  // namespace relock

#endif  // RELOCK_LIB_WATCHDOG_WATCHDOG_H_
