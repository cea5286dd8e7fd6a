#include "lib/watchdog/watchdog.h"

#include <time.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace relock {
namespace watchdog {
namespace {

absl::Duration ThreadCpuTime() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return absl::DurationFromTimespec(ts);
}

}  // namespace

Watchdog::Watchdog(absl::Duration lease, watchdog::HoldRegistry* holds,
                   timer::TimerThread* timers, RenewFn renew, LostFn on_lost,
                   absl::Duration drift)
    : lease_(lease),
      drift_(drift),
      period_(lease / 3),
      round_interval_(lease / 12),
      retry_interval_(std::min(lease / 12, absl::Milliseconds(500))),
      holds_(holds),
      timers_(timers),
      clock_(timers->clock()),
      renew_(std::move(renew)),
      on_lost_(std::move(on_lost)) {
  MutexLock lock(&join_mu_);
  thread_ = std::thread([this] { Run(); });
}

Watchdog::~Watchdog() { Stop(); }

void Watchdog::ScheduleRound(absl::Duration delay) {
  if (state_->stop) return;
  const SteadyClock::time_point at =
      clock_->Now() + absl::ToChronoNanoseconds(delay);
  if (state_->timer != 0) {
    // A round pending for no later stays; a later one (after a round that
    // ran out of turn, RenewAllSoon()) is moved here.
    if (state_->timer_at <= at) return;
    timers_->Cancel(state_->timer);
  }
  // A callback cancelled too late finds another generation and does nothing.
  const uint64_t generation = ++state_->timer_generation;
  state_->timer_at = at;
  state_->timer = timers_->ScheduleAt(at, [state = state_, generation] {
    MutexLock lock(&state->mu);
    if (generation != state->timer_generation) return;
    state->timer = 0;
    state->due = true;
  });
}

void Watchdog::ArmLossCheck() {
  uint64_t activations = 0;
  {
    MutexLock lock(&state_->mu);
    activations = state_->activations;
  }
  const absl::optional<SteadyClock::time_point> at =
      holds_->EarliestSafeEnd(drift_);
  MutexLock lock(&state_->mu);
  // A hold registered after the scan began was activated after it too.
  if (at.has_value() || state_->activations == activations) {
    ArmLossCheckAt(at);
  }
}

void Watchdog::ArmLossCheckAt(absl::optional<SteadyClock::time_point> at) {
  if (state_->stop) return;
  if (state_->loss_timer != 0) {
    // Armed for no later: it fires first, and re-arms.
    if (at.has_value() && *at >= state_->loss_at) return;
    timers_->Cancel(state_->loss_timer);
    state_->loss_timer = 0;
  }
  if (!at.has_value()) return;
  // A callback cancelled too late finds another generation and does nothing.
  const uint64_t generation = ++state_->loss_generation;
  state_->loss_at = *at;
  state_->loss_timer =
      timers_->ScheduleAt(*at, [this, state = state_, generation] {
        {
          MutexLock lock(&state->mu);
          if (state->stop || generation != state->loss_generation) return;
          state->loss_timer = 0;
          state->checking = true;
        }
        // Not stopped: Stop() waits for `checking` to clear.
        CheckLosses();
        ArmLossCheck();
        MutexLock lock(&state->mu);
        state->checking = false;
      });
}

void Watchdog::CheckLosses() {
  watchdog::SweepRound sweep;
  sweep.now = clock_->Now();
  sweep.due_by = sweep.now;
  sweep.period = period_;
  sweep.drift = drift_;
  size_t lost = 0;
  SweepAndReport(sweep, /*due=*/nullptr, &lost);
}

size_t Watchdog::SweepAndReport(const watchdog::SweepRound& sweep,
                                std::vector<watchdog::RenewItem>* due,
                                size_t* lost_count) {
  std::vector<watchdog::LostHold> lost;
  const size_t renewing = holds_->Sweep(sweep, due, &lost);
  *lost_count = lost.size();
  if (lost.empty()) return renewing;
  MutexLock lock(&lost_mu_);
  for (const watchdog::LostHold& h : lost) {
    on_lost_(
        h,
        absl::AbortedError(absl::StrCat(
            "lease lost: no renewal succeeded within the ",
            absl::FormatDuration(lease_),
            " lease, less the drift allowance (SafeUntil() has ended)",
            last_error_.ok()
                ? std::string()
                : absl::StrCat(" (last error: ", last_error_.message(), ")"))));
  }
  return renewing;
}

bool Watchdog::round_scheduled() const {
  MutexLock lock(&state_->mu);
  return state_->timer != 0;
}

void Watchdog::Activate(SteadyClock::time_point acked_at) {
  MutexLock lock(&state_->mu);
  ++state_->activations;
  // (A round pending is due no later than a round interval from now.)
  if (state_->timer == 0) ScheduleRound(round_interval_);
  // The new hold's safe end: a check armed for no later stays (it was armed
  // at the earliest of the others'), so an acquire never scans the registry.
  ArmLossCheckAt(acked_at + absl::ToChronoNanoseconds(lease_ - drift_));
}

void Watchdog::RenewAllSoon() {
  const SteadyClock::time_point now = clock_->Now();
  MutexLock lock(&state_->mu);
  if (state_->stop) return;
  // Every hold acknowledged before now is renewed by the rounds from here
  // on, until each was renewed since (a failed round's retry too).
  state_->reconnected_at = std::max(state_->reconnected_at, now);
  // At most one such round per retry interval (a connection that keeps
  // dropping and opening again): later ones wait for the next.
  const SteadyClock::time_point next =
      state_->renewed_all_at + absl::ToChronoNanoseconds(retry_interval_);
  if (state_->renewed_all_at == SteadyClock::time_point::min() || now >= next) {
    state_->renewed_all_at = now;
    state_->due = true;
  } else {
    ScheduleRound(absl::FromChrono(next - now));
  }
}

void Watchdog::Stop() {
  {
    MutexLock lock(&state_->mu);
    state_->stop = true;
    if (state_->timer != 0) timers_->Cancel(state_->timer);
    state_->timer = 0;
    if (state_->loss_timer != 0) timers_->Cancel(state_->loss_timer);
    state_->loss_timer = 0;
    // A loss check that began before `stop` was set ends first.
    auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(state_->mu) {
      return !state_->checking;
    };
    state_->mu.Await(absl::Condition(&idle));
  }
  MutexLock lock(&join_mu_);
  if (thread_.joinable()) thread_.join();
}

absl::optional<SteadyClock::time_point> Watchdog::round_at() const {
  MutexLock lock(&state_->mu);
  if (state_->timer == 0) return absl::nullopt;
  return state_->timer_at;
}

absl::optional<SteadyClock::time_point> Watchdog::loss_check_at() const {
  MutexLock lock(&state_->mu);
  if (state_->loss_timer == 0) return absl::nullopt;
  return state_->loss_at;
}

uint64_t Watchdog::rounds() const {
  MutexLock lock(&state_->mu);
  return state_->rounds;
}

uint64_t Watchdog::failed_rounds() const {
  MutexLock lock(&state_->mu);
  return state_->failed_rounds;
}

RoundStats Watchdog::RunRound(bool all) {
  MutexLock round_lock(&round_mu_);
  RoundStats stats;
  const SteadyClock::time_point start = clock_->Now();
  const absl::Duration cpu_start = ThreadCpuTime();
  std::vector<watchdog::RenewItem> due;
  std::vector<watchdog::LostHold> lost;
  watchdog::SweepRound sweep;
  sweep.now = start;
  sweep.due_by = start + absl::ToChronoNanoseconds(round_interval_);
  sweep.period = period_;
  sweep.drift = drift_;
  sweep.all = all;
  {
    MutexLock lock(&state_->mu);
    sweep.acked_before = state_->reconnected_at;
  }
  stats.renewing = SweepAndReport(sweep, &due, &stats.lost);
  if (!due.empty()) {
    const SteadyClock::time_point sent_at = clock_->Now();
    RenewResult renewed = renew_(due);
    if (renewed.items.size() == due.size()) {
      lost.clear();
      holds_->ApplyRenewals(due, renewed.items, sent_at, &lost);
      MutexLock report_lock(&lost_mu_);
      for (const watchdog::LostHold& h : lost) {
        on_lost_(h, absl::AbortedError(
                        "lease lost: the hold is gone from Redis (the lock's "
                        "owner field, or the permit; expired, deleted, "
                        "FLUSHALL or a restart without persistence)"));
      }
      stats.lost += lost.size();
      stats.renewed = static_cast<size_t>(std::count(
          renewed.items.begin(), renewed.items.end(), Renewal::kRenewed));
      stats.renewing -= lost.size();
      // Undecided items: retried soon, lost only when their lease runs out.
      stats.failed = std::find(renewed.items.begin(), renewed.items.end(),
                               Renewal::kUndecided) != renewed.items.end();
    } else {
      stats.failed = true;
      if (renewed.error.ok()) {
        renewed.error = absl::InternalError("short renew reply");
      }
    }
    MutexLock error_lock(&lost_mu_);
    last_error_ = stats.failed ? renewed.error : absl::OkStatus();
  }
  stats.wall = absl::FromChrono(clock_->Now() - start);
  stats.cpu = ThreadCpuTime() - cpu_start;
  ArmLossCheck();
  MutexLock lock(&state_->mu);
  ++state_->rounds;
  if (stats.failed) ++state_->failed_rounds;
  return stats;
}

void Watchdog::Run() {
  while (true) {
    {
      MutexLock lock(&state_->mu);
      auto woken = [this]() ABSL_SHARED_LOCKS_REQUIRED(state_->mu) {
        return state_->due || state_->stop;
      };
      state_->mu.Await(absl::Condition(&woken));
      if (state_->stop) return;
      state_->due = false;
    }
    RoundStats stats = RunRound(/*all=*/false);
    MutexLock lock(&state_->mu);
    if (stats.renewing > 0) {
      ScheduleRound(stats.failed ? retry_interval_ : round_interval_);
    }
  }
}

}  // namespace watchdog
}  // namespace relock
