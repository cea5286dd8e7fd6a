// Pure logic: the hold registry on a fake clock. Explicit leases end and are
// dropped when the TimerThread's FakeClock reaches them; Sweep() and
// ApplyRenewals() are given their times. No redis-server, no sleeping: every
// wait is for an event (a barrier timer running), bounded only to turn a hang
// into a failure.

#include "lib/watchdog/hold_registry.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "gtest/gtest.h"
#include "lib/common/deadline.h"
#include "lib/timer/timer_thread.h"
#include "tests/testing/run_due_timers.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace watchdog {
namespace {

using ::relock::testing::RunDueTimers;

constexpr uint64_t kThread = 7;
constexpr char kOwner[] = "client:7";
constexpr absl::Duration kRetention = absl::Seconds(60);

class HoldRegistryTest : public ::testing::Test {
 protected:
  ~HoldRegistryTest() override { timers_.Shutdown(); }

  // The fake clock's time `d` after the test started.
  SteadyClock::time_point At(absl::Duration d) const {
    return start_ + absl::ToChronoNanoseconds(d);
  }
  // Moves the fake clock to `d` after the start and runs the timers due.
  void AdvanceTo(absl::Duration d) {
    ASSERT_GE(At(d), clock_.Now());
    clock_.Advance(absl::FromChrono(At(d) - clock_.Now()));
    RunDueTimers(timers_);
  }
  void AcquireExplicit(const std::string& name, absl::Duration lease) {
    holds_.OnAcquired(name, kThread, kOwner, /*watchdog=*/false, lease,
                      clock_.Now());
  }
  void AcquireWatchdog(const std::string& name, absl::Duration lease,
                       SteadyClock::time_point sent_at) {
    holds_.OnAcquired(name, kThread, kOwner, /*watchdog=*/true, lease, sent_at);
  }
  Hold MustFind(const std::string& name) const {
    absl::optional<Hold> h = holds_.Find(name, kThread);
    EXPECT_TRUE(h.has_value()) << name << " is not in the registry";
    return h.value_or(Hold());
  }

  FakeClock clock_;
  const SteadyClock::time_point start_ = clock_.Now();
  timer::TimerThread timers_{&clock_};
  HoldRegistry holds_{&timers_, kRetention};
};

// --- Explicit leases on the fake clock

// --- Local re-entry

TEST_F(HoldRegistryTest, ALiveWatchdogHoldIsReenteredAndReleasedLocally) {
  const absl::Duration lease = absl::Seconds(30);
  EXPECT_FALSE(holds_.TryLocalReentry("lock", kThread, clock_.Now(),
                                      absl::Milliseconds(2)))
      << "no hold yet";
  AcquireWatchdog("lock", lease, clock_.Now());
  ASSERT_TRUE(holds_.TryLocalReentry("lock", kThread, clock_.Now(),
                                     absl::Milliseconds(2)));
  ASSERT_TRUE(holds_.TryLocalReentry("lock", kThread, clock_.Now(),
                                     absl::Milliseconds(2)));
  EXPECT_EQ(MustFind("lock").count, 3);
  EXPECT_EQ(MustFind("lock").local, 2);
  // A re-entry through Redis counts there: local stays.
  AcquireWatchdog("lock", lease, clock_.Now());
  EXPECT_EQ(MustFind("lock").count, 4);
  EXPECT_EQ(MustFind("lock").local, 2);
  // Releases take the local ones first, never the last hold.
  EXPECT_TRUE(holds_.TryLocalRelease("lock", kThread));
  EXPECT_TRUE(holds_.TryLocalRelease("lock", kThread));
  EXPECT_FALSE(holds_.TryLocalRelease("lock", kThread));
  EXPECT_EQ(MustFind("lock").count, 2);
  EXPECT_EQ(MustFind("lock").local, 0);
}

TEST_F(HoldRegistryTest, NoLocalReentryUnlessTheLeaseIsKnownCurrent) {
  const absl::Duration lease = absl::Seconds(30);
  const absl::Duration drift = absl::Milliseconds(302);
  AcquireWatchdog("lock", lease, clock_.Now());
  // The lease (less the drift allowance) ends at 29.698 s.
  EXPECT_TRUE(
      holds_.TryLocalReentry("lock", kThread, At(absl::Seconds(29)), drift));
  EXPECT_FALSE(holds_.TryLocalReentry("lock", kThread,
                                      At(absl::Milliseconds(29698)), drift));
  // Explicit-lease holds, ended holds and final releases go to Redis.
  AcquireExplicit("explicit", lease);
  EXPECT_FALSE(holds_.TryLocalReentry("explicit", kThread, clock_.Now(),
                                      absl::Milliseconds(2)));
  AcquireWatchdog("releasing", lease, clock_.Now());
  ASSERT_TRUE(holds_.BeginRelease("releasing", kThread).has_value());
  EXPECT_FALSE(holds_.TryLocalReentry("releasing", kThread, clock_.Now(),
                                      absl::Milliseconds(2)))
      << "re-entered a hold whose final release is on its way";
  AdvanceTo(lease + absl::Seconds(1));
  EXPECT_TRUE(MustFind("explicit").expired());
  EXPECT_FALSE(holds_.TryLocalRelease("explicit", kThread));
}

TEST_F(HoldRegistryTest, ExplicitLeaseEndMarksTheHoldExpired) {
  AcquireExplicit("a", absl::Seconds(10));
  Hold h = MustFind("a");
  EXPECT_FALSE(h.watchdog);
  EXPECT_FALSE(h.renewing());
  EXPECT_EQ(h.lease_end(), At(absl::Seconds(10)));

  AdvanceTo(absl::Seconds(10) - absl::Milliseconds(1));
  EXPECT_FALSE(MustFind("a").expired()) << "expired before its lease end";

  AdvanceTo(absl::Seconds(10));
  h = MustFind("a");
  EXPECT_TRUE(h.expired());
  EXPECT_TRUE(h.ended());
  EXPECT_FALSE(h.lost()) << "an explicit lease that ran out is not lost";
  EXPECT_EQ(h.count, 1) << "kept for Release() to say the lease ran out";
  // Close() releases only what is held.
  EXPECT_TRUE(holds_.TakeAll().empty());
  EXPECT_EQ(holds_.size(), 0u);
}

TEST_F(HoldRegistryTest, ExpiredHoldIsDroppedWhenTheRetentionEnds) {
  AcquireExplicit("a", absl::Seconds(10));
  AcquireWatchdog("w", absl::Seconds(30), clock_.Now());
  AdvanceTo(absl::Seconds(10));
  ASSERT_TRUE(MustFind("a").expired());

  AdvanceTo(absl::Seconds(10) + kRetention - absl::Milliseconds(1));
  EXPECT_TRUE(holds_.Find("a", kThread).has_value())
      << "dropped before the retention ended";

  AdvanceTo(absl::Seconds(10) + kRetention);
  EXPECT_FALSE(holds_.Find("a", kThread).has_value());
  EXPECT_EQ(holds_.size(), 1u) << "only the watchdog hold is left";
  EXPECT_EQ(timers_.pending(), 0u);
}

TEST_F(HoldRegistryTest, TimersThatRunLateStillExpireThenDropTheHold) {
  // The timer thread sees the lease end and the retention end in one step.
  AcquireExplicit("a", absl::Seconds(10));
  AdvanceTo(absl::Seconds(10) + kRetention + absl::Seconds(5));
  EXPECT_EQ(holds_.size(), 0u);
  EXPECT_EQ(timers_.pending(), 0u);
}

TEST_F(HoldRegistryTest, ReentryWithALaterEndMovesTheLeaseEnd) {
  AcquireExplicit("a", absl::Seconds(10));
  AdvanceTo(absl::Seconds(5));
  AcquireExplicit("a", absl::Seconds(10));  // ends at 15 s
  EXPECT_EQ(MustFind("a").count, 2);
  EXPECT_EQ(MustFind("a").lease_end(), At(absl::Seconds(15)));

  AdvanceTo(absl::Seconds(10));
  EXPECT_FALSE(MustFind("a").expired()) << "the first lease's timer fired";
  AdvanceTo(absl::Seconds(15));
  EXPECT_TRUE(MustFind("a").expired());
}

TEST_F(HoldRegistryTest, ReentryWithAnEarlierEndDoesNotShortenTheHold) {
  AcquireExplicit("a", absl::Seconds(10));
  AdvanceTo(absl::Seconds(1));
  AcquireExplicit("a", absl::Seconds(2));  // would end at 3 s
  EXPECT_EQ(MustFind("a").lease_end(), At(absl::Seconds(10)));

  AdvanceTo(absl::Seconds(9));
  EXPECT_FALSE(MustFind("a").expired());
  AdvanceTo(absl::Seconds(10));
  EXPECT_TRUE(MustFind("a").expired());
}

TEST_F(HoldRegistryTest, AReleasedHoldsTimerNeitherFiresNorTouchesTheNextHold) {
  AcquireExplicit("a", absl::Seconds(10));
  ASSERT_EQ(timers_.pending(), 1u);
  AdvanceTo(absl::Seconds(5));
  ASSERT_TRUE(holds_.BeginRelease("a", kThread).has_value());
  holds_.OnReleased("a", kThread, /*freed=*/true);
  EXPECT_EQ(holds_.size(), 0u);
  EXPECT_EQ(timers_.pending(), 0u) << "the lease-end timer was not cancelled";

  AcquireExplicit("a", absl::Seconds(100));  // a new hold, ends at 105 s
  AdvanceTo(absl::Seconds(10));
  EXPECT_FALSE(MustFind("a").expired());
  AdvanceTo(absl::Seconds(105));
  EXPECT_TRUE(MustFind("a").expired());
}

// An acquire looks at the hold with FindFactsExpiringDue(): a hold whose
// lease end has passed is expired then, whether or not its timer ran, and
// reported once; it is dropped at the end of its retention as ever.
TEST_F(HoldRegistryTest, AnAcquireExpiresAHoldWhoseLeaseEndPassed) {
  std::vector<std::string> expired;
  holds_.set_expiry_handler(
      [&expired](const LostHold& hold) { expired.push_back(hold.name); });
  holds_.OnAcquired("a", kThread, kOwner, /*watchdog=*/false, absl::Seconds(10),
                    clock_.Now(), LockKind::kReentrant,
                    [](const absl::Status&) {});
  AcquireWatchdog("w", absl::Seconds(30), clock_.Now());
  absl::optional<HoldFacts> facts = holds_.FindFactsExpiringDue("a", kThread);
  ASSERT_TRUE(facts.has_value());
  EXPECT_FALSE(facts->ended()) << "before its lease end";
  // The lease ends; the timer thread is not told (no Poke()).
  clock_.Advance(absl::Seconds(10));
  facts = holds_.FindFactsExpiringDue("a", kThread);
  ASSERT_TRUE(facts.has_value());
  EXPECT_TRUE(facts->expired());
  EXPECT_EQ(expired, std::vector<std::string>{"a"});
  // A watchdog hold's lease end is the watchdog's business.
  EXPECT_FALSE(holds_.FindFactsExpiringDue("w", kThread)->ended());
  // The timers after it neither report it again nor drop it early.
  AdvanceTo(absl::Seconds(10) + kRetention - absl::Milliseconds(1));
  EXPECT_TRUE(MustFind("a").expired());
  EXPECT_EQ(expired.size(), 1u);
  AdvanceTo(absl::Seconds(10) + kRetention);
  EXPECT_FALSE(holds_.Find("a", kThread).has_value());
}

TEST_F(HoldRegistryTest, AcquiringOverAnExpiredHoldStartsAFreshOne) {
  AcquireExplicit("a", absl::Seconds(10));
  const uint64_t first_id = MustFind("a").hold_id;
  AdvanceTo(absl::Seconds(10));
  ASSERT_TRUE(MustFind("a").expired());

  AcquireExplicit("a", absl::Seconds(10));  // ends at 20 s
  Hold h = MustFind("a");
  EXPECT_FALSE(h.expired());
  EXPECT_EQ(h.count, 1) << "the expired hold's count was carried over";
  EXPECT_NE(h.hold_id, first_id);
  // The first hold's retention timer must not drop the new one.
  AdvanceTo(absl::Seconds(19));
  EXPECT_FALSE(MustFind("a").expired());
  AdvanceTo(absl::Seconds(20));
  EXPECT_TRUE(MustFind("a").expired());
}

TEST_F(HoldRegistryTest, ExtendTurnsAWatchdogHoldIntoAnExplicitOne) {
  AcquireWatchdog("a", absl::Seconds(30), clock_.Now());
  EXPECT_EQ(timers_.pending(), 0u) << "watchdog holds need no timer";
  AdvanceTo(absl::Seconds(1));
  ASSERT_TRUE(holds_.OnExtended("a", kThread, absl::Seconds(5), clock_.Now()));
  Hold h = MustFind("a");
  EXPECT_FALSE(h.watchdog);
  EXPECT_FALSE(h.renewing());
  EXPECT_EQ(h.lease_end(), At(absl::Seconds(6)));

  AdvanceTo(absl::Seconds(6));
  EXPECT_TRUE(MustFind("a").expired());
  EXPECT_FALSE(holds_.OnExtended("a", kThread, absl::Seconds(5), clock_.Now()))
      << "extended a hold that had ended";
}

TEST(HoldRegistryWithoutTimersTest, ExplicitHoldsNeverExpireByThemselves) {
  HoldRegistry holds;  // no TimerThread
  holds.OnAcquired("a", kThread, kOwner, /*watchdog=*/false, absl::Seconds(1),
                   SteadyClock::time_point());
  absl::optional<Hold> h = holds.Find("a", kThread);
  ASSERT_TRUE(h.has_value());
  EXPECT_FALSE(h->expired());
  EXPECT_EQ(h->timer, timer::TimerId{0});
  EXPECT_EQ(holds.TakeAll().size(), 1u);
}

// --- Releases and renewal

TEST_F(HoldRegistryTest, OnlyTheOutermostReleaseStopsRenewal) {
  AcquireWatchdog("a", absl::Seconds(30), clock_.Now());
  AcquireWatchdog("a", absl::Seconds(30), clock_.Now());
  absl::optional<HoldFacts> before = holds_.BeginRelease("a", kThread);
  ASSERT_TRUE(before.has_value());
  EXPECT_EQ(before->count, 2);
  EXPECT_TRUE(MustFind("a").renewing()) << "an inner release stopped renewal";
  holds_.OnReleased("a", kThread, /*freed=*/false);
  EXPECT_EQ(MustFind("a").count, 1);
  EXPECT_TRUE(MustFind("a").renewing());

  // The final release stops renewal before it is sent.
  ASSERT_TRUE(holds_.BeginRelease("a", kThread).has_value());
  EXPECT_FALSE(MustFind("a").renewing());
  std::vector<RenewItem> due;
  std::vector<LostHold> lost;
  EXPECT_EQ(
      holds_.Sweep({At(absl::Seconds(20)), /*due_by=*/At(absl::Seconds(25)),
                    /*period=*/absl::Seconds(10), /*all=*/true},
                   &due, &lost),
      0u);
  EXPECT_TRUE(due.empty()) << "a renewal would follow the final release";
  EXPECT_TRUE(lost.empty());

  // Redis says holds remain (the local count was stale): renew again.
  holds_.OnReleased("a", kThread, /*freed=*/false);
  EXPECT_EQ(MustFind("a").count, 1);
  EXPECT_TRUE(MustFind("a").renewing());
}

// Close() waits (AwaitReleases) for the final releases in flight before it
// takes the holds (TakeAll), so that each gets its own answer: inner
// releases do not count, nor does a final release whose last step failed;
// a lease that ends meanwhile does not end the wait. Calls in flight count.
TEST_F(HoldRegistryTest, CloseWaitsForTheFinalReleasesInFlight) {
  AcquireWatchdog("a", absl::Seconds(30), clock_.Now());
  AcquireWatchdog("b", absl::Seconds(30), clock_.Now());
  AcquireWatchdog("b", absl::Seconds(30), clock_.Now());
  AcquireExplicit("c", absl::Seconds(10));
  EXPECT_TRUE(holds_.AwaitReleases(absl::ZeroDuration()));
  ASSERT_TRUE(holds_.BeginRelease("b", kThread).has_value());  // inner
  EXPECT_TRUE(holds_.AwaitReleases(absl::ZeroDuration()));
  holds_.OnReleased("b", kThread, /*freed=*/false);

  ASSERT_TRUE(holds_.BeginRelease("a", kThread).has_value());  // final
  // (Time that must pass without the release ending the wait.)
  EXPECT_FALSE(holds_.AwaitReleases(absl::Milliseconds(10)));
  std::thread answer([this] { holds_.OnReleased("a", kThread, true); });
  EXPECT_TRUE(holds_.AwaitReleases(absl::Seconds(60)));
  answer.join();

  ASSERT_TRUE(holds_.BeginRelease("b", kThread).has_value());  // final
  EXPECT_FALSE(holds_.AwaitReleases(absl::ZeroDuration()));
  holds_.OnReleaseFailed("b", kThread);
  EXPECT_TRUE(holds_.AwaitReleases(absl::ZeroDuration()));
  EXPECT_TRUE(MustFind("b").releasing());

  ASSERT_TRUE(holds_.BeginRelease("c", kThread).has_value());  // final
  AdvanceTo(absl::Seconds(10));  // its lease ends meanwhile
  ASSERT_TRUE(MustFind("c").expired());
  EXPECT_FALSE(holds_.AwaitReleases(absl::ZeroDuration()));
  ASSERT_TRUE(holds_.Forget("c", kThread).has_value());  // the answer: gone
  EXPECT_TRUE(holds_.AwaitReleases(absl::ZeroDuration()));

  // An acquire call or give-back in flight counts too, until it ends.
  holds_.BeginInFlight();
  EXPECT_FALSE(holds_.AwaitReleases(absl::ZeroDuration()));
  holds_.EndInFlight();
  EXPECT_TRUE(holds_.AwaitReleases(absl::ZeroDuration()));

  const std::vector<std::pair<HoldRegistry::Key, Hold>> taken =
      holds_.TakeAll();
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].first.first, "b");
  EXPECT_TRUE(holds_.TakenOnClose("b", kThread));
  EXPECT_FALSE(holds_.TakenOnClose("a", kThread));
  EXPECT_FALSE(holds_.TakenOnClose("c", kThread));
}

TEST_F(HoldRegistryTest, AnAcquireAfterAnUnfinishedFinalReleaseIsRenewedAgain) {
  // The final release began (renewal stopped) but never finished: on one
  // node, its release-all failed, and nothing told the registry. The owner
  // acquires again (a re-entry: the hold has not ended): it is renewed
  // again, as a hold that is held must be, not left to run out unreported.
  AcquireWatchdog("a", absl::Seconds(30), clock_.Now());
  ASSERT_TRUE(holds_.BeginRelease("a", kThread).has_value());
  ASSERT_FALSE(MustFind("a").renewing());
  AcquireWatchdog("a", absl::Seconds(30), clock_.Now());
  EXPECT_TRUE(MustFind("a").renewing());
  EXPECT_FALSE(MustFind("a").releasing());
  std::vector<RenewItem> due;
  std::vector<LostHold> lost;
  EXPECT_EQ(
      holds_.Sweep({At(absl::Seconds(20)), /*due_by=*/At(absl::Seconds(25)),
                    /*period=*/absl::Seconds(10), /*all=*/true},
                   &due, &lost),
      1u);
  EXPECT_EQ(due.size(), 1u);
}

TEST_F(HoldRegistryTest, SweepCollectsHoldsDueBeforeTheNextRound) {
  constexpr absl::Duration kLease = absl::Seconds(30);
  const absl::Duration kPeriod = kLease / 3;
  AcquireWatchdog("at0", kLease, At(absl::Seconds(0)));
  AcquireWatchdog("at12.5", kLease, At(absl::Seconds(12.5)));  // due at 22.5
  AcquireWatchdog("at13", kLease, At(absl::Seconds(13)));      // due at 23
  AcquireExplicit("explicit", absl::Hours(1));

  std::vector<RenewItem> due;
  std::vector<LostHold> lost;
  // A round at 20 s collects what is due before the next one, at 22.5 s.
  EXPECT_EQ(
      holds_.Sweep({At(absl::Seconds(20)), /*due_by=*/At(absl::Seconds(22.5)),
                    /*period=*/kPeriod, /*all=*/false},
                   &due, &lost),
      3u);
  ASSERT_EQ(due.size(), 2u);
  std::vector<std::string> names = {due[0].name, due[1].name};
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"at0", "at12.5"}));
  for (const RenewItem& item : due) {
    EXPECT_EQ(item.owner, kOwner);
    EXPECT_EQ(item.thread, kThread);
    EXPECT_EQ(item.hold_id, MustFind(item.name).hold_id);
  }
  EXPECT_TRUE(lost.empty());

  // `all` collects every renewing hold, never an explicit one.
  due.clear();
  EXPECT_EQ(
      holds_.Sweep({At(absl::Seconds(20)), /*due_by=*/At(absl::Seconds(22.5)),
                    /*period=*/kPeriod, /*all=*/true},
                   &due, &lost),
      3u);
  EXPECT_EQ(due.size(), 3u);
  for (const RenewItem& item : due) EXPECT_NE(item.name, "explicit");
}

TEST_F(HoldRegistryTest, SweepMarksAHoldLostOnceWhenItsLeaseRanOut) {
  AcquireWatchdog("short", absl::Seconds(10), At(absl::Seconds(0)));
  AcquireWatchdog("long", absl::Seconds(30), At(absl::Seconds(0)));
  std::vector<RenewItem> due;
  std::vector<LostHold> lost;

  // Just before its lease end the hold is due, not lost.
  EXPECT_EQ(holds_.Sweep({At(absl::Seconds(10)) - std::chrono::nanoseconds(1),
                          /*due_by=*/At(absl::Seconds(12)),
                          /*period=*/absl::Seconds(3), /*all=*/false},
                         &due, &lost),
            2u);
  EXPECT_TRUE(lost.empty());
  EXPECT_EQ(due.size(), 2u);

  // At its lease end it is lost (and no longer due).
  due.clear();
  EXPECT_EQ(
      holds_.Sweep({At(absl::Seconds(10)), /*due_by=*/At(absl::Seconds(12)),
                    /*period=*/absl::Seconds(3), /*all=*/false},
                   &due, &lost),
      1u);
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].name, "short");
  EXPECT_EQ(lost[0].thread, kThread);
  EXPECT_EQ(lost[0].acked_at, At(absl::Seconds(0)));
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].name, "long");
  Hold h = MustFind("short");
  EXPECT_TRUE(h.lost());
  EXPECT_FALSE(h.renewing());

  // Reported once only.
  lost.clear();
  holds_.Sweep({At(absl::Seconds(20)), /*due_by=*/At(absl::Seconds(22)),
                /*period=*/absl::Seconds(3), /*all=*/true},
               &due, &lost);
  EXPECT_TRUE(lost.empty());
  // Kept, so that Release() can say the lease was lost; Close() skips it.
  std::vector<std::pair<HoldRegistry::Key, Hold>> all = holds_.TakeAll();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].first.first, "long");
}

TEST_F(HoldRegistryTest, ApplyRenewalsMovesAckedAtToWhenTheRenewalWasSent) {
  AcquireWatchdog("a", absl::Seconds(30), At(absl::Seconds(0)));
  AcquireWatchdog("b", absl::Seconds(30), At(absl::Seconds(0)));
  std::vector<RenewItem> due;
  std::vector<LostHold> lost;
  holds_.Sweep({At(absl::Seconds(8)), /*due_by=*/At(absl::Seconds(10)),
                /*period=*/absl::Seconds(10), /*all=*/false},
               &due, &lost);
  ASSERT_EQ(due.size(), 2u);
  constexpr Renewal kR = Renewal::kRenewed, kG = Renewal::kGone;
  const std::vector<Renewal> renewed = {due[0].name == "a" ? kR : kG,
                                        due[0].name != "a" ? kR : kG};
  holds_.ApplyRenewals(due, renewed, At(absl::Seconds(8)), &lost);

  // `a` was renewed: its lease now counts from when the renewal was sent.
  Hold a = MustFind("a");
  EXPECT_EQ(a.acked_at, At(absl::Seconds(8)));
  EXPECT_EQ(a.lease_end(), At(absl::Seconds(38)));
  EXPECT_TRUE(a.renewing());
  // `b`'s owner field was gone: lost, reported once, renewed no more.
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].name, "b");
  EXPECT_EQ(lost[0].acked_at, At(absl::Seconds(0)));
  EXPECT_TRUE(MustFind("b").lost());
  EXPECT_FALSE(MustFind("b").renewing());

  // A renewal sent before the last acknowledged one never moves it back.
  lost.clear();
  holds_.ApplyRenewals(due, {kR, kR}, At(absl::Seconds(5)), &lost);
  EXPECT_EQ(MustFind("a").acked_at, At(absl::Seconds(8)));
  EXPECT_TRUE(lost.empty()) << "a lost hold was reported twice";
  EXPECT_TRUE(MustFind("b").lost()) << "a renewal revived a lost hold";
}

TEST_F(HoldRegistryTest, ApplyRenewalsIgnoresHoldsReleasedOrRestartedSince) {
  AcquireWatchdog("restarted", absl::Seconds(30), At(absl::Seconds(0)));
  AcquireWatchdog("releasing", absl::Seconds(30), At(absl::Seconds(0)));
  std::vector<RenewItem> due;
  std::vector<LostHold> lost;
  holds_.Sweep({At(absl::Seconds(8)), /*due_by=*/At(absl::Seconds(10)),
                /*period=*/absl::Seconds(10), /*all=*/false},
               &due, &lost);
  ASSERT_EQ(due.size(), 2u);

  // While the renewal is in flight: one hold is released and acquired again,
  // the other's final release is in flight too.
  ASSERT_TRUE(holds_.BeginRelease("restarted", kThread).has_value());
  holds_.OnReleased("restarted", kThread, /*freed=*/true);
  AcquireWatchdog("restarted", absl::Seconds(30), At(absl::Seconds(9)));
  ASSERT_TRUE(holds_.BeginRelease("releasing", kThread).has_value());

  // The renewal found both owner fields gone (each was released first).
  holds_.ApplyRenewals(due, {Renewal::kGone, Renewal::kGone},
                       At(absl::Seconds(8)), &lost);
  EXPECT_TRUE(lost.empty());
  EXPECT_FALSE(MustFind("restarted").lost()) << "the new hold was marked lost";
  EXPECT_FALSE(MustFind("releasing").lost()) << "a released hold was lost";

  // Nor does a success for the old hold move the new hold's lease.
  holds_.ApplyRenewals(due, {Renewal::kRenewed, Renewal::kRenewed},
                       At(absl::Seconds(10)), &lost);
  EXPECT_EQ(MustFind("restarted").acked_at, At(absl::Seconds(9)));
}

TEST_F(HoldRegistryTest, AnUndecidedRenewalLeavesTheHoldAsItWas) {
  AcquireWatchdog("a", absl::Seconds(30), At(absl::Seconds(0)));
  std::vector<RenewItem> due;
  std::vector<LostHold> lost;
  holds_.Sweep({At(absl::Seconds(8)), /*due_by=*/At(absl::Seconds(10)),
                /*period=*/absl::Seconds(10), /*all=*/false},
               &due, &lost);
  ASSERT_EQ(due.size(), 1u);
  holds_.ApplyRenewals(due, {Renewal::kUndecided}, At(absl::Seconds(8)), &lost);
  EXPECT_TRUE(lost.empty());
  Hold a = MustFind("a");
  EXPECT_EQ(a.acked_at, At(absl::Seconds(0)));  // not renewed
  EXPECT_TRUE(a.renewing());                    // not lost either
  EXPECT_FALSE(a.lost());
}

// Loss callbacks: handed out once, in the LostHold that reports the loss.
TEST_F(HoldRegistryTest, LossCallbacksGoOutOnceWithTheLoss) {
  int called = 0;
  auto count = [&called](const absl::Status&) { ++called; };
  AcquireWatchdog("swept", absl::Seconds(10), At(absl::Seconds(0)));
  AcquireWatchdog("gone", absl::Seconds(30), At(absl::Seconds(0)));
  ASSERT_OK(holds_.AddLossCallback("swept", kThread, count));
  ASSERT_OK(holds_.AddLossCallback("swept", kThread, count));
  ASSERT_OK(holds_.AddLossCallback("gone", kThread, count));

  std::vector<RenewItem> due;
  std::vector<LostHold> lost;
  holds_.Sweep({At(absl::Seconds(10)), /*due_by=*/At(absl::Seconds(12)),
                /*period=*/absl::Seconds(3), /*all=*/true},
               &due, &lost);
  ASSERT_EQ(lost.size(), 1u);
  ASSERT_NE(lost[0].on_lost, nullptr);
  EXPECT_EQ(lost[0].on_lost->size(), 2u);
  for (const LossFn& fn : *lost[0].on_lost) fn(absl::OkStatus());
  EXPECT_EQ(called, 2);
  // A lost hold takes no more.
  EXPECT_EQ(holds_.AddLossCallback("swept", kThread, count).code(),
            absl::StatusCode::kAborted);

  ASSERT_EQ(due.size(), 1u);  // "gone"
  lost.clear();
  holds_.ApplyRenewals(due, {Renewal::kGone}, At(absl::Seconds(10)), &lost);
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].name, "gone");
  ASSERT_NE(lost[0].on_lost, nullptr);
  EXPECT_EQ(lost[0].on_lost->size(), 1u);
  EXPECT_EQ(MustFind("gone").on_lost, nullptr);  // handed out, not kept
}

TEST_F(HoldRegistryTest, AnExplicitLeaseEndGoesToTheExpiryHandler) {
  std::vector<std::string> expired;
  holds_.set_expiry_handler([&expired](const LostHold& hold) {
    expired.push_back(hold.name);
    EXPECT_NE(hold.on_lost, nullptr);
  });
  AcquireExplicit("watched", absl::Seconds(10));
  AcquireExplicit("unwatched", absl::Seconds(10));
  AcquireExplicit("released", absl::Seconds(5));
  auto nothing = [](const absl::Status&) {};
  ASSERT_OK(holds_.AddLossCallback("watched", kThread, nothing));
  ASSERT_OK(holds_.AddLossCallback("released", kThread, nothing));
  ASSERT_TRUE(holds_.BeginRelease("released", kThread).has_value());
  holds_.OnReleased("released", kThread, /*freed=*/true);

  AdvanceTo(absl::Seconds(10));
  // The timer thread ran the handler before the barriers.
  EXPECT_EQ(expired, std::vector<std::string>{"watched"});
  EXPECT_TRUE(MustFind("watched").expired());
  EXPECT_EQ(holds_.AddLossCallback("watched", kThread, nothing).code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(holds_.AddLossCallback("released", kThread, nothing).code(),
            absl::StatusCode::kFailedPrecondition);
  // A fresh hold over the expired one starts without callbacks.
  AcquireExplicit("watched", absl::Seconds(10));
  EXPECT_EQ(MustFind("watched").on_lost, nullptr);
  EXPECT_EQ(holds_.live(), 1u);  // "unwatched" expired too
}

TEST_F(HoldRegistryTest, ALeaseEndDuringTheFinalReleaseCallsNoCallback) {
  std::vector<std::string> expired;
  holds_.set_expiry_handler(
      [&expired](const LostHold& hold) { expired.push_back(hold.name); });
  int called = 0;
  // Installed with the hold, before its lease timer can fire.
  holds_.OnAcquired("x", kThread, kOwner, /*watchdog=*/false, absl::Seconds(10),
                    clock_.Now(), LockKind::kReentrant,
                    [&called](const absl::Status&) { ++called; });
  ASSERT_NE(MustFind("x").on_lost, nullptr);
  // A re-entry's callback is ignored (the hold has its own).
  holds_.OnAcquired("x", kThread, kOwner, /*watchdog=*/false, absl::Seconds(10),
                    clock_.Now(), LockKind::kReentrant,
                    [&called](const absl::Status&) { called += 100; });
  EXPECT_EQ(MustFind("x").on_lost->size(), 1u);
  ASSERT_TRUE(holds_.BeginRelease("x", kThread).has_value());
  holds_.OnReleased("x", kThread, /*freed=*/false);            // 2 -> 1
  ASSERT_TRUE(holds_.BeginRelease("x", kThread).has_value());  // the final
  AdvanceTo(absl::Seconds(10));  // the lease ends while it is under way
  EXPECT_TRUE(expired.empty());
  EXPECT_TRUE(MustFind("x").expired());
  EXPECT_EQ(MustFind("x").on_lost, nullptr);
  EXPECT_EQ(called, 0);
}

}  // namespace
}  // namespace watchdog
}  // namespace relock
