// The lease watchdog on a fake clock, without Redis: a Watchdog on a
// FakeClock with a fake RenewFn, so round scheduling, renewal cadence,
// retries and loss detection are proven on events and counts, never on real
// time: rounds every lease/12, every lease renewed before a third of it is
// gone, failed rounds retried until the lease runs out and then reported
// lost, missing owner fields reported once, no renewal after the outermost
// release began, nothing after Stop() (WatchdogFakeClockTest); a holder
// whose renewal hangs is told at its safe end, and the loss check follows
// the earliest safe end (WatchdogLossTest). What needs a real redis-server
// is in watchdog_test.cc.

#include <algorithm>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/common/clock.h"
#include "lib/common/deadline.h"
#include "lib/common/mutex.h"
#include "lib/timer/timer_thread.h"
#include "lib/watchdog/hold_registry.h"
#include "lib/watchdog/watchdog.h"
#include "tests/testing/eventually.h"
#include "tests/testing/notification.h"
#include "tests/testing/run_due_timers.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace {

using ::relock::testing::RunDueTimers;

using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

// The default lease. Rounds run every lease/12 (2.5 s); a lease is renewed
// once a third of it (10 s) is gone; a failed round is retried after
// min(lease/12, 500 ms) (watchdog.cc).
constexpr absl::Duration kFakeLease = absl::Seconds(30);
const absl::Duration kInterval = kFakeLease / 12;
const absl::Duration kPeriod = kFakeLease / 3;
constexpr absl::Duration kRetry = absl::Milliseconds(500);
constexpr uint64_t kThread = 1;
constexpr char kOwner[] = "client:1";

// A Watchdog on a FakeClock, its registry and timer thread as in a client,
// and a fake RenewFn that records each batch and answers as told. Holds are
// watchdog holds only, so the timer thread's pending timers are the next
// round (Watchdog::round_scheduled()) and the loss check.
class WatchdogFakeClockTest : public ::testing::Test {
 protected:
  struct RenewCall {
    SteadyClock::time_point at;  // fake time the batch was sent
    std::vector<std::string> names;
  };
  struct Loss {
    std::string name;
    absl::Status why;
    SteadyClock::time_point at;  // fake time it was reported
  };

  ~WatchdogFakeClockTest() override {
    watchdog_.Stop();
    timers_.Shutdown();
  }

  // The fake clock's time `d` after the test started, and back.
  SteadyClock::time_point At(absl::Duration d) const {
    return start_ + absl::ToChronoNanoseconds(d);
  }
  absl::Duration Now() const { return absl::FromChrono(clock_.Now() - start_); }

  // What Acquire() records for a watchdog hold.
  void Acquire(const std::string& name) {
    const SteadyClock::time_point now = clock_.Now();
    holds_.OnAcquired(name, kThread, kOwner, /*watchdog=*/true, kFakeLease,
                      now);
    watchdog_.Activate(now);
    if (std::find(names_.begin(), names_.end(), name) == names_.end()) {
      names_.push_back(name);
    }
  }
  // What the outermost Release() does around its script.
  void BeginRelease(const std::string& name) {
    ASSERT_TRUE(holds_.BeginRelease(name, kThread).has_value()) << name;
  }
  void Released(const std::string& name) {
    holds_.OnReleased(name, kThread, /*freed=*/true);
  }
  watchdog::Hold MustFind(const std::string& name) const {
    absl::optional<watchdog::Hold> h = holds_.Find(name, kThread);
    EXPECT_TRUE(h.has_value()) << name << " is not in the registry";
    return h.value_or(watchdog::Hold());
  }

  // Advances the fake clock by `d`, lets the round that came due (if any)
  // run on the watchdog thread, and waits until that thread is idle again:
  // the next round scheduled, or nothing left to renew. Returns the rounds
  // run: 0 or 1 (the next round is scheduled only after one has run).
  int Advance(absl::Duration d) {
    const bool scheduled = watchdog_.round_scheduled();
    const uint64_t rounds = watchdog_.rounds();
    clock_.Advance(d);
    RunDueTimers(timers_);
    if (!scheduled) return 0;
    // Not due: still pending, and no round ran. (pending() first: a round
    // that ran may have scheduled the next already.)
    if (watchdog_.round_scheduled() && watchdog_.rounds() == rounds) return 0;
    EXPECT_TRUE(testing::Eventually([&] {
      return watchdog_.rounds() > rounds;
    })) << "the round that came due did not run";
    EXPECT_TRUE(testing::Eventually([&] {
      return watchdog_.round_scheduled() || !AnyRenewing();
    })) << "no next round was scheduled";
    return static_cast<int>(watchdog_.rounds() - rounds);
  }
  bool AnyRenewing() const {
    for (const std::string& name : names_) {
      absl::optional<watchdog::Hold> h = holds_.Find(name, kThread);
      if (h.has_value() && h->renewing() && !h->ended()) return true;
    }
    return false;
  }

  // The fake RenewFn's answers.
  void SetGone(const std::string& name, bool gone) {
    MutexLock lock(&mu_);
    if (gone) {
      gone_.insert(name);
    } else {
      gone_.erase(name);
    }
  }
  // `name`'s renewals are undecided (its node does not answer), the others'
  // not.
  void SetUndecided(const std::string& name) {
    MutexLock lock(&mu_);
    undecided_.insert(name);
  }
  void FailRenewals(int times, absl::Status why) {
    MutexLock lock(&mu_);
    failures_left_ = times;
    failure_ = std::move(why);
  }
  // Runs once, on the watchdog thread, while the next batch is in flight.
  // (It must not call Activate(): Advance() counts on the round to schedule.)
  void DuringNextRenewal(std::function<void()> hook) {
    MutexLock lock(&mu_);
    during_renewal_ = std::move(hook);
  }
  void SetRoundTrip(absl::Duration d) {
    MutexLock lock(&mu_);
    round_trip_ = d;
  }

  std::vector<RenewCall> calls() const {
    MutexLock lock(&mu_);
    return calls_;
  }
  std::vector<Loss> losses() const {
    MutexLock lock(&mu_);
    return losses_;
  }
  // Fake times at which `name` was sent for renewal.
  std::vector<SteadyClock::time_point> RenewalsOf(const std::string& name,
                                                  size_t from_call = 0) const {
    std::vector<SteadyClock::time_point> at;
    const std::vector<RenewCall> all = calls();
    for (size_t i = from_call; i < all.size(); ++i) {
      const std::vector<std::string>& names = all[i].names;
      if (std::find(names.begin(), names.end(), name) != names.end()) {
        at.push_back(all[i].at);
      }
    }
    return at;
  }

  FakeClock clock_;
  const SteadyClock::time_point start_ = clock_.Now();
  timer::TimerThread timers_{&clock_};
  watchdog::HoldRegistry holds_{&timers_};
  std::vector<std::string> names_;  // every hold acquired (test thread only)

 private:
  watchdog::RenewResult Renew(const std::vector<watchdog::RenewItem>& items) {
    std::function<void()> hook;
    absl::Duration trip;
    {
      MutexLock lock(&mu_);
      RenewCall call{clock_.Now(), {}};
      for (const watchdog::RenewItem& item : items) {
        EXPECT_EQ(item.owner, kOwner);
        call.names.push_back(item.name);
      }
      calls_.push_back(std::move(call));
      hook = std::exchange(during_renewal_, nullptr);
      trip = round_trip_;
    }
    if (hook) hook();
    clock_.Advance(trip);
    MutexLock lock(&mu_);
    if (failures_left_ > 0) {
      --failures_left_;
      return watchdog::RenewResult{{}, failure_};
    }
    watchdog::RenewResult result;
    for (const watchdog::RenewItem& item : items) {
      if (undecided_.contains(item.name)) {
        result.items.push_back(watchdog::Renewal::kUndecided);
        result.error = absl::UnavailableError("its master does not answer");
      } else {
        result.items.push_back(gone_.contains(item.name)
                                   ? watchdog::Renewal::kGone
                                   : watchdog::Renewal::kRenewed);
      }
    }
    return result;
  }
  void OnLost(const watchdog::LostHold& hold, const absl::Status& why) {
    EXPECT_EQ(hold.thread, kThread);
    MutexLock lock(&mu_);
    losses_.push_back({hold.name, why, clock_.Now()});
  }

  mutable Mutex mu_;
  std::vector<RenewCall> calls_ ABSL_GUARDED_BY(mu_);
  std::vector<Loss> losses_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> gone_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> undecided_ ABSL_GUARDED_BY(mu_);
  int failures_left_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  std::function<void()> during_renewal_ ABSL_GUARDED_BY(mu_);
  absl::Duration round_trip_ ABSL_GUARDED_BY(mu_);

 protected:
  // Last: its thread calls the members above until Stop().
  watchdog::Watchdog watchdog_{
      kFakeLease, &holds_, &timers_,
      [this](const std::vector<watchdog::RenewItem>& items) {
        return Renew(items);
      },
      [this](const watchdog::LostHold& hold, const absl::Status& why) {
        OnLost(hold, why);
      }};
};

TEST_F(WatchdogFakeClockTest, RoundsRunEveryTwelfthOfTheLease) {
  EXPECT_EQ(watchdog_.round_interval(), kInterval);
  EXPECT_EQ(Advance(kInterval), 0) << "a round ran with nothing held";
  Acquire("a");
  EXPECT_EQ(Advance(kInterval - absl::Milliseconds(1)), 0);
  EXPECT_EQ(Advance(absl::Milliseconds(1)), 1);
  EXPECT_EQ(Advance(kInterval - absl::Milliseconds(1)), 0);
  EXPECT_EQ(Advance(absl::Milliseconds(1)), 1);
  EXPECT_EQ(watchdog_.rounds(), 2u);
  EXPECT_TRUE(calls().empty()) << "renewed before a third of the lease";
}

TEST_F(WatchdogFakeClockTest,
       KeepsEveryLeaseAtLeastTwoThirdsFullForManyLeases) {
  // 40 holds acquired over the first ten rounds, four per round.
  for (int i = 0; i < 40; ++i) {
    Acquire(absl::StrCat("h", i));
    ASSERT_EQ(Advance(kInterval / 4), i % 4 == 3 ? 1 : 0) << "step " << i;
  }
  // Then ten leases of rounds.
  const SteadyClock::time_point until =
      clock_.Now() + absl::ToChronoNanoseconds(10 * kFakeLease);
  while (clock_.Now() < until) {
    ASSERT_EQ(Advance(kInterval), 1);
    for (const std::string& name : names_) {
      const watchdog::Hold h = MustFind(name);
      ASSERT_FALSE(h.ended()) << name;
      ASSERT_GE(absl::FromChrono(h.lease_end() - clock_.Now()),
                kFakeLease - kPeriod)
          << name << " at " << Now();
    }
  }
  EXPECT_TRUE(losses().empty());
  // One batch per round at most, and each hold renewed about every third of
  // its lease: never later, never more than a round early.
  EXPECT_LE(calls().size(), watchdog_.rounds());
  for (size_t i = 0; i < names_.size(); ++i) {
    const std::vector<SteadyClock::time_point> renewals = RenewalsOf(names_[i]);
    ASSERT_GE(renewals.size(), 30u) << names_[i];
    for (size_t k = 1; k < renewals.size(); ++k) {
      const absl::Duration gap =
          absl::FromChrono(renewals[k] - renewals[k - 1]);
      EXPECT_LE(gap, kPeriod) << names_[i];
      EXPECT_GE(gap, kPeriod - kInterval) << names_[i];
    }
  }
}

TEST_F(WatchdogFakeClockTest, ARoundRenewsEveryHoldDueBeforeTheNextInOneBatch) {
  // No Activate(): the watchdog thread stays idle, rounds run here.
  for (int i = 0; i < 50; ++i) {
    holds_.OnAcquired(absl::StrCat("early", i), kThread, kOwner,
                      /*watchdog=*/true, kFakeLease, clock_.Now());
  }
  clock_.Advance(absl::Seconds(1));
  holds_.OnAcquired("late", kThread, kOwner, /*watchdog=*/true, kFakeLease,
                    clock_.Now());
  // At 7.5 s the early holds fall due before the next round (at 10 s), the
  // late one after it (at 11 s).
  clock_.Advance(absl::Milliseconds(6500));
  watchdog::RoundStats stats = watchdog_.RunRound(/*all=*/false);
  EXPECT_FALSE(stats.failed);
  EXPECT_EQ(stats.renewing, 51u);
  EXPECT_EQ(stats.renewed, 50u);
  EXPECT_EQ(stats.lost, 0u);
  ASSERT_EQ(calls().size(), 1u);
  std::vector<std::string> sent = calls()[0].names;
  EXPECT_EQ(sent.size(), 50u);
  EXPECT_EQ(std::count(sent.begin(), sent.end(), "late"), 0);

  // `all` renews every renewing hold, still in one batch.
  stats = watchdog_.RunRound(/*all=*/true);
  EXPECT_EQ(stats.renewed, 51u);
  ASSERT_EQ(calls().size(), 2u);
  EXPECT_EQ(calls()[1].names.size(), 51u);
}

TEST_F(WatchdogFakeClockTest, AMissingOwnerFieldIsReportedLostOnce) {
  Acquire("gone");
  Acquire("kept");
  SetGone("gone", true);  // deleted, FLUSHALL, restart...
  while (losses().empty()) {
    ASSERT_LT(Now(), kFakeLease) << "no loss reported";
    ASSERT_EQ(Advance(kInterval), 1);
  }
  std::vector<Loss> lost = losses();
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].name, "gone");
  EXPECT_EQ(lost[0].why.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(lost[0].why.message()), HasSubstr("gone"));
  ASSERT_EQ(calls().size(), 1u);
  EXPECT_EQ(lost[0].at, calls()[0].at)
      << "not reported by the round whose renewal found it gone";
  EXPECT_TRUE(MustFind("gone").lost());
  EXPECT_FALSE(MustFind("gone").renewing());

  // Two more leases: never renewed nor reported again; the other lives on.
  const size_t calls_at_loss = calls().size();
  for (int i = 0; i < 24; ++i) ASSERT_EQ(Advance(kInterval), 1);
  EXPECT_EQ(losses().size(), 1u);
  EXPECT_TRUE(RenewalsOf("gone", calls_at_loss).empty());
  EXPECT_GE(RenewalsOf("kept", calls_at_loss).size(), 6u);
  EXPECT_FALSE(MustFind("kept").ended());
}

TEST_F(WatchdogFakeClockTest, FailedRoundsAreRetriedUntilTheLeaseRunsOut) {
  FailRenewals(std::numeric_limits<int>::max(),
               absl::UnavailableError("connection refused"));
  Acquire("a");
  // Rounds at the usual interval until the first renewal falls due...
  for (int i = 0; i < 3; ++i) ASSERT_EQ(Advance(kInterval), 1);
  ASSERT_EQ(calls().size(), 1u);
  EXPECT_EQ(calls()[0].at, At(kPeriod - kInterval));
  EXPECT_EQ(watchdog_.failed_rounds(), 1u);
  // ...then retried at the retry interval...
  EXPECT_EQ(Advance(kRetry - absl::Milliseconds(1)), 0);
  EXPECT_EQ(Advance(absl::Milliseconds(1)), 1);
  // ...until the lease has run out, when the next round reports the loss.
  while (losses().empty()) {
    ASSERT_LT(Now(), kFakeLease + kRetry) << "no loss reported";
    ASSERT_EQ(Advance(kRetry), 1);
  }
  std::vector<Loss> lost = losses();
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].name, "a");
  EXPECT_GE(lost[0].at, At(kFakeLease)) << "reported before the lease ended";
  EXPECT_LT(lost[0].at, At(kFakeLease + kRetry)) << "reported a retry late";
  EXPECT_EQ(lost[0].why.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(lost[0].why.message()), HasSubstr("no renewal"));
  EXPECT_THAT(std::string(lost[0].why.message()),
              HasSubstr("connection refused"));
  // Every round that sent a renewal failed; the last one sent none.
  EXPECT_EQ(watchdog_.failed_rounds(), calls().size());
  EXPECT_EQ(RenewalsOf("a").size(), calls().size());
  EXPECT_TRUE(MustFind("a").lost());
  // Nothing is left to renew: no round is scheduled.
  EXPECT_EQ(timers_.pending(), 0u);
  EXPECT_EQ(Advance(kFakeLease), 0);
}

// A connection opened again (RenewAllSoon(): the server may have restarted):
// a round runs at once and renews every hold acknowledged before, due or
// not, so that a lock lost in the restart is reported now; a failed one is
// retried at the retry interval, with every hold not renewed since. A
// connection that keeps opening again makes at most one such round per
// retry interval.
TEST_F(WatchdogFakeClockTest, AReconnectRenewsEveryHoldAtOnce) {
  Acquire("a");
  Acquire("b");
  SetGone("a", true);  // restarted without persistence
  FailRenewals(1, absl::UnavailableError("connection reset"));
  clock_.Advance(absl::Milliseconds(1));
  watchdog_.RenewAllSoon();
  // Failed, it is retried at the retry interval (the next regular round
  // was later: it is moved).
  ASSERT_TRUE(testing::Eventually([&] {
    return watchdog_.round_at() == At(absl::Milliseconds(1) + kRetry);
  })) << "no retry scheduled";
  ASSERT_EQ(watchdog_.failed_rounds(), 1u);
  ASSERT_EQ(calls().size(), 1u);
  EXPECT_EQ(calls()[0].at, At(absl::Milliseconds(1)));
  EXPECT_THAT(calls()[0].names, UnorderedElementsAre("a", "b"));
  ASSERT_EQ(Advance(kRetry), 1);
  ASSERT_EQ(calls().size(), 2u);
  EXPECT_EQ(calls()[1].at, At(absl::Milliseconds(1) + kRetry));
  EXPECT_THAT(calls()[1].names, UnorderedElementsAre("a", "b"));
  ASSERT_EQ(losses().size(), 1u);
  EXPECT_EQ(losses()[0].name, "a");
  // Then as usual: nothing is renewed before it is due.
  ASSERT_EQ(Advance(kInterval), 1);
  EXPECT_EQ(calls().size(), 2u);

  // Twice in a row: the first runs a round at once, the second none until
  // a retry interval after the first.
  const uint64_t rounds = watchdog_.rounds();
  watchdog_.RenewAllSoon();
  // (Its round done, not only sent: Advance() counts the rounds that end.)
  ASSERT_TRUE(testing::Eventually([&] {
    return watchdog_.rounds() == rounds + 1 && watchdog_.round_scheduled();
  }));
  ASSERT_EQ(calls().size(), 3u);
  const SteadyClock::time_point first = clock_.Now();
  clock_.Advance(absl::Milliseconds(1));
  watchdog_.RenewAllSoon();
  EXPECT_EQ(watchdog_.round_at(), first + absl::ToChronoNanoseconds(kRetry));
  EXPECT_EQ(Advance(kRetry - absl::Milliseconds(2)), 0);
  EXPECT_EQ(Advance(absl::Milliseconds(1)), 1);
  ASSERT_EQ(calls().size(), 4u);
  EXPECT_THAT(calls()[3].names, UnorderedElementsAre("b"));
  EXPECT_FALSE(MustFind("b").ended());
}

// One master of a cluster down: its lock's renewals are undecided, the
// others' succeed and keep their locks; the undecided one is retried at the
// retry interval and lost only when its own lease runs out.
TEST_F(WatchdogFakeClockTest, AnUndecidedItemDoesNotHoldBackTheOthers) {
  SetUndecided("down");
  Acquire("down");
  Acquire("up");
  while (losses().empty()) {
    ASSERT_LT(Now(), kFakeLease + kRetry) << "no loss reported";
    Advance(kRetry);
  }
  std::vector<Loss> lost = losses();
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].name, "down");
  EXPECT_GE(lost[0].at, At(kFakeLease)) << "reported before the lease ended";
  EXPECT_THAT(std::string(lost[0].why.message()),
              HasSubstr("its master does not answer"));
  // "up" was renewed all along: its lease counts from a recent renewal.
  EXPECT_FALSE(MustFind("up").ended());
  EXPECT_GT(MustFind("up").acked_at, At(kFakeLease - kPeriod));
  for (int i = 0; i < 12; ++i) Advance(kInterval);
  EXPECT_EQ(losses().size(), 1u);
  EXPECT_FALSE(MustFind("up").lost());
}

TEST_F(WatchdogFakeClockTest, ATransientFailureIsRetriedAndTheHoldKept) {
  FailRenewals(3, absl::UnavailableError("connection reset"));
  Acquire("a");
  // The third round sends the first renewal: it fails, and so do the first
  // two retries; the third retry succeeds.
  for (int i = 0; i < 3; ++i) ASSERT_EQ(Advance(kInterval), 1);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(Advance(kRetry), 1);
  EXPECT_EQ(calls().size(), 4u);
  EXPECT_EQ(watchdog_.failed_rounds(), 3u);
  EXPECT_TRUE(losses().empty());
  // The lease counts from the renewal that succeeded.
  EXPECT_EQ(MustFind("a").acked_at, At(kPeriod - kInterval + 3 * kRetry));
  // Back to the usual interval.
  EXPECT_EQ(Advance(kRetry), 0);
  EXPECT_EQ(Advance(kInterval - kRetry), 1);
}

TEST_F(WatchdogFakeClockTest, RenewalStopsWhenTheOutermostReleaseBegins) {
  Acquire("keeper");
  Acquire("nested");
  Acquire("nested");
  // An inner release keeps renewing.
  ASSERT_TRUE(holds_.BeginRelease("nested", kThread).has_value());
  holds_.OnReleased("nested", kThread, /*freed=*/false);
  for (int i = 0; i < 12; ++i) ASSERT_EQ(Advance(kInterval), 1);
  EXPECT_GE(RenewalsOf("nested").size(), 3u) << "renewal stopped too early";

  // The outermost release is sent; its script has not answered yet.
  BeginRelease("nested");
  const size_t calls_at_release = calls().size();
  for (int i = 0; i < 12; ++i) ASSERT_EQ(Advance(kInterval), 1);
  EXPECT_EQ(watchdog_.RunRound(/*all=*/true).renewed, 1u);  // the keeper
  EXPECT_TRUE(RenewalsOf("nested", calls_at_release).empty())
      << "a renewal was sent after the final release began";
  EXPECT_GE(RenewalsOf("keeper", calls_at_release).size(), 3u)
      << "no renewal at all: the check is blind";
  Released("nested");

  // With nothing left to renew, rounds stop.
  BeginRelease("keeper");
  Released("keeper");
  EXPECT_EQ(Advance(kInterval), 1);  // the round already scheduled
  EXPECT_EQ(timers_.pending(), 0u);
  EXPECT_EQ(Advance(kFakeLease), 0);
  EXPECT_TRUE(losses().empty());
}

TEST_F(WatchdogFakeClockTest, AnAnswerForAReleasedHoldLeavesTheNextHoldAlone) {
  Acquire("a");
  // While the renewal is in flight, the thread releases the lock and takes
  // it again; Redis ran the renewal after the release: the field was gone.
  SetGone("a", true);
  DuringNextRenewal([this] {
    ASSERT_TRUE(holds_.BeginRelease("a", kThread).has_value());
    holds_.OnReleased("a", kThread, /*freed=*/true);
    holds_.OnAcquired("a", kThread, kOwner, /*watchdog=*/true, kFakeLease,
                      clock_.Now());
  });
  for (int i = 0; i < 3; ++i) ASSERT_EQ(Advance(kInterval), 1);
  ASSERT_EQ(calls().size(), 1u);
  EXPECT_TRUE(losses().empty()) << "the new hold was reported lost";
  watchdog::Hold h = MustFind("a");
  EXPECT_FALSE(h.lost());
  EXPECT_TRUE(h.renewing());
  EXPECT_EQ(h.acked_at, calls()[0].at) << "the new hold's lease was moved";

  // The new hold is renewed as usual.
  SetGone("a", false);
  for (int i = 0; i < 12; ++i) ASSERT_EQ(Advance(kInterval), 1);
  EXPECT_GE(RenewalsOf("a").size(), 4u);
  EXPECT_TRUE(losses().empty());
}

TEST_F(WatchdogFakeClockTest, TheLeaseCountsFromWhenTheRenewalWasSent) {
  SetRoundTrip(absl::Seconds(2));  // each batch takes 2 s to answer
  Acquire("a");
  for (int i = 0; i < 3; ++i) ASSERT_EQ(Advance(kInterval), 1);
  ASSERT_EQ(calls().size(), 1u);
  EXPECT_EQ(Now(), kPeriod - kInterval + absl::Seconds(2));
  // Redis set the TTL no earlier than the send: acked_at never overstates.
  EXPECT_EQ(MustFind("a").acked_at, calls()[0].at);
  // A round's wall time is on the injected clock too.
  EXPECT_EQ(watchdog_.RunRound(/*all=*/true).wall, absl::Seconds(2));
}

TEST_F(WatchdogFakeClockTest, StopEndsRoundsForGood) {
  Acquire("a");
  ASSERT_EQ(Advance(kInterval), 1);
  watchdog_.Stop();
  EXPECT_EQ(timers_.pending(), 0u) << "Stop() left a round scheduled";
  watchdog_.Activate(clock_.Now());  // an acquire racing with Close()
  EXPECT_EQ(timers_.pending(), 0u) << "Activate() after Stop() scheduled";
  const uint64_t rounds = watchdog_.rounds();
  for (int i = 0; i < 24; ++i) EXPECT_EQ(Advance(kInterval), 0);
  EXPECT_EQ(watchdog_.rounds(), rounds);
  EXPECT_TRUE(calls().empty());
  EXPECT_TRUE(losses().empty()) << "a stopped watchdog reported a loss";
}

// Regression, found by the safety harness's partition fault
// (tools/harness/README.md): a holder cut off from Redis was told its lock
// was lost only by the first round after its lease had ended, a round and a
// command timeout (the renewal that hung) late, when another owner could
// already hold the lock. It is now told at the end SafeUntil() gives,
// acked_at + lease - drift, even while its renewal hangs.
TEST(WatchdogLossTest, ACutOffHolderIsToldAtItsSafeEndWhileARenewalHangs) {
  FakeClock clock;
  timer::TimerThread timers(&clock);
  watchdog::HoldRegistry holds(&timers);
  const absl::Duration drift = kFakeLease / 100 + absl::Milliseconds(2);
  relock::testing::Notification renewing, answer;
  Mutex mu;
  std::vector<SteadyClock::time_point> lost_at;
  watchdog::Watchdog watchdog(
      kFakeLease, &holds, &timers,
      [&](const std::vector<watchdog::RenewItem>&) {
        renewing.Notify();
        answer.WaitForNotification();  // no reply: the link is cut
        return watchdog::RenewResult{{},
                                     absl::DeadlineExceededError("no reply")};
      },
      [&](const watchdog::LostHold&, const absl::Status& why) {
        EXPECT_EQ(why.code(), absl::StatusCode::kAborted);
        MutexLock lock(&mu);
        lost_at.push_back(clock.Now());
      },
      drift);
  // An assertion that fails below returns early: the hanging renewal must
  // end before the watchdog's destructor joins its thread, or the test would
  // hang instead of failing. (Declared after the watchdog: runs before it.)
  absl::Cleanup end_renewal = [&] { answer.Notify(); };
  auto losses = [&] {
    MutexLock lock(&mu);
    return lost_at;
  };
  const SteadyClock::time_point start = clock.Now();
  holds.OnAcquired("a", kThread, kOwner, /*watchdog=*/true, kFakeLease, start);
  watchdog.Activate(start);
  // The round that sends the first renewal (at a third of the lease); it
  // hangs from then on. Each step waits for the watchdog's thread to finish
  // the round that came due and schedule the next one: advancing before then
  // would push the next round past the last step (a slow thread, as under
  // TSan, then never got to the renewal).
  for (int i = 0; i < 4 && !renewing.HasBeenNotified(); ++i) {
    clock.Advance(kInterval);
    RunDueTimers(timers);
    auto idle = [&] {
      return renewing.HasBeenNotified() || watchdog.round_scheduled();
    };
    ASSERT_TRUE(testing::Eventually(idle))
        << "step " << i << ": no renewal sent and no next round scheduled";
  }
  ASSERT_TRUE(renewing.HasBeenNotified());
  const SteadyClock::time_point safe_end =
      start + absl::ToChronoNanoseconds(kFakeLease - drift);
  clock.Advance(absl::FromChrono(safe_end - clock.Now()) -
                absl::Milliseconds(1));
  RunDueTimers(timers);
  EXPECT_TRUE(losses().empty()) << "told before SafeUntil() ended";
  clock.Advance(absl::Milliseconds(1));
  RunDueTimers(timers);
  ASSERT_TRUE(testing::Eventually([&] { return !losses().empty(); }))
      << "not told while the renewal hangs";
  EXPECT_EQ(losses().size(), 1u);
  EXPECT_EQ(losses()[0], safe_end);
  EXPECT_TRUE(holds.Find("a", kThread)->lost());
  answer.Notify();
  watchdog.Stop();
  timers.Shutdown();
}

// The loss check is armed at the earliest safe end of a renewing hold: by
// Activate() for a new hold (without a scan), by each round after its
// renewals (from a scan), and disarmed by a round that finds nothing
// renewing.
TEST(WatchdogLossTest, TheLossCheckFollowsTheEarliestSafeEnd) {
  FakeClock clock;
  timer::TimerThread timers(&clock);
  watchdog::HoldRegistry holds(&timers);
  const absl::Duration drift = kFakeLease / 100 + absl::Milliseconds(2);
  watchdog::Watchdog watchdog(
      kFakeLease, &holds, &timers,
      [](const std::vector<watchdog::RenewItem>& due) {
        return watchdog::RenewResult{
            std::vector<watchdog::Renewal>(due.size(),
                                           watchdog::Renewal::kRenewed),
            absl::OkStatus()};
      },
      [](const watchdog::LostHold&, const absl::Status&) {}, drift);
  auto safe_end = [&](SteadyClock::time_point acked_at) {
    return acked_at + absl::ToChronoNanoseconds(kFakeLease - drift);
  };
  EXPECT_EQ(watchdog.loss_check_at(), absl::nullopt);
  const SteadyClock::time_point first = clock.Now();
  holds.OnAcquired("a", kThread, kOwner, /*watchdog=*/true, kFakeLease, first);
  watchdog.Activate(first);
  EXPECT_EQ(watchdog.loss_check_at(), safe_end(first));
  // A later hold leaves the earlier check alone.
  clock.Advance(kInterval);
  const SteadyClock::time_point second = clock.Now();
  holds.OnAcquired("b", kThread, kOwner, /*watchdog=*/true, kFakeLease, second);
  watchdog.Activate(second);
  EXPECT_EQ(watchdog.loss_check_at(), safe_end(first));
  // A round renews both (sent now). The check armed for earlier stays; when
  // it fires it finds nothing lost and moves to their new safe end.
  clock.Advance(kInterval);
  const SteadyClock::time_point renewed = clock.Now();
  EXPECT_EQ(watchdog.RunRound(/*all=*/true).renewed, 2u);
  EXPECT_EQ(watchdog.loss_check_at(), safe_end(first));
  // (The round the first Activate() scheduled fires too, on the watchdog's
  // thread, and may renew them again: their safe end is then later still.)
  clock.Advance(absl::FromChrono(safe_end(first) - clock.Now()));
  RunDueTimers(timers);
  EXPECT_TRUE(testing::Eventually([&] {
    const absl::optional<SteadyClock::time_point> at = watchdog.loss_check_at();
    return at.has_value() && *at >= safe_end(renewed);
  }));
  EXPECT_FALSE(holds.Find("a", kThread)->lost());
  EXPECT_FALSE(holds.Find("b", kThread)->lost());
  // Nothing renewing: a round disarms the check. (A check that was firing
  // meanwhile may arm it once more from its scan before the releases; it
  // then fires, finds nothing and stays disarmed.)
  for (const char* name : {"a", "b"}) {
    ASSERT_TRUE(holds.BeginRelease(name, kThread).has_value());
    holds.OnReleased(name, kThread, /*freed=*/true);
  }
  EXPECT_EQ(watchdog.RunRound(/*all=*/true).renewing, 0u);
  clock.Advance(kFakeLease);
  RunDueTimers(timers);
  EXPECT_TRUE(testing::Eventually(
      [&] { return !watchdog.loss_check_at().has_value(); }));
  watchdog.Stop();
  timers.Shutdown();
}

}  // namespace
}  // namespace relock
