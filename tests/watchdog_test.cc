// The lease watchdog on a real redis-server: what needs Redis. A renewal
// sets the TTL, explicit leases are not renewed and end in Redis, renewal
// stops at the outermost release (also on the wire), lost locks are reported
// (key deleted, FLUSHALL, a restart, at once on the reconnect, Redis paused
// past the lease, holder process killed), many locks are renewed in one round
// trip, and Close() stops renewal. Round scheduling, cadence, retries and loss
// detection are proven on a fake clock in watchdog_fake_clock_test.cc.

#include "lib/watchdog/watchdog.h"

#include <csignal>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/api/client_access.h"
#include "lib/lock/owner.h"
#include "lib/watchdog/hold_registry.h"
#include "relock/relock.h"
#include "tests/test_util.h"
#include "tests/testing/child_process.h"
#include "tests/testing/eventually.h"
#include "tests/testing/raw_connection.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace {

using ::relock::testing::ChildProcess;
using ::relock::testing::EventLog;
using ::relock::testing::MustConnect;
using ::relock::testing::RedisServer;
using ::relock::testing::Stopwatch;
using ::relock::testing::TestLockName;
using ::testing::HasSubstr;

// Short leases keep the tests quick; bounds stay generous for a loaded CI box.
constexpr absl::Duration kLease = absl::Milliseconds(600);

// args: url, lock name, watchdog ms. Acquires with the watchdog lease, prints
// "locked", then waits to be killed.
RELOCK_CHILD_MAIN(HoldWithWatchdog) {
  ClientOptions options;
  options.url = args[0];
  int64_t ms = 0;
  if (!absl::SimpleAtoi(args[2], &ms)) return 2;
  options.lock_watchdog_timeout = absl::Milliseconds(ms);
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  if (!client.ok()) return 3;
  Lock lock = (*client)->GetLock(args[1]);
  if (!lock.Acquire().ok()) return 4;
  std::cout << "locked" << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  return 0;
}

class WatchdogTest : public testing::RedisTest {
 protected:
  void SetUp() override {
    RedisTest::SetUp();
    client_ = Connect(redis().url());
    ASSERT_NE(client_, nullptr);
  }
  std::unique_ptr<Client> Connect(const std::string& url) {
    return MustConnect(url, [this](ClientOptions& o) {
      o.lock_watchdog_timeout = kLease;
      o.command_timeout = absl::Milliseconds(200);
      o.connect_timeout = absl::Milliseconds(200);
      o.on_lock_event = events_.Callback();
    });
  }
  int LostEvents() const {
    int n = 0;
    for (const LockEvent& e : events_.events()) {
      n += e.type == LockEventType::kLockLost;
    }
    return n;
  }
  EventLog events_;
  std::unique_ptr<Client> client_;
};

// The renewal cadence over many leases is proven on the fake clock above;
// here, that a round's renewal really sets the lease in Redis.
TEST_F(WatchdogTest, ARenewalRoundSetsTheLeaseInRedis) {
  Lock lock = client_->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire());
  internal::ClientCore& core = internal::ClientAccess::Core(*client_);
  core.watchdog().Stop();  // no round runs but ours from here on
  // Take the TTL off by hand: only a renewal sets it again.
  ASSERT_EQ(redis().Command({"PERSIST", lock.name()})->integer, 1);
  ASSERT_EQ(redis().Command({"PTTL", lock.name()})->integer, -1);
  const watchdog::RoundStats stats = core.watchdog().RunRound(/*all=*/true);
  EXPECT_FALSE(stats.failed);
  EXPECT_EQ(stats.renewed, 1u);
  const int64_t pttl = redis().Command({"PTTL", lock.name()})->integer;
  EXPECT_GT(pttl, 0) << "the renewal set no TTL";
  EXPECT_LE(pttl, absl::ToInt64Milliseconds(kLease));
  EXPECT_EQ(*lock.HoldCount(), 1);
  EXPECT_OK(lock.Release());
  EXPECT_EQ(LostEvents(), 0);
}

// Through the client's own Acquire()/Release(): a renewal round after an
// inner release still renews the lock, one after the outermost does not.
TEST_F(WatchdogTest, NestedHoldsKeepRenewingUntilTheOutermostRelease) {
  Lock lock = client_->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire());
  ASSERT_OK(lock.Acquire());
  ASSERT_OK(lock.Release());
  internal::ClientCore& core = internal::ClientAccess::Core(*client_);
  watchdog::RoundStats stats = core.watchdog().RunRound(/*all=*/true);
  EXPECT_EQ(stats.renewing, 1u) << "renewal stopped at an inner release";
  EXPECT_EQ(stats.renewed, 1u);
  EXPECT_EQ(*lock.HoldCount(), 1);
  ASSERT_OK(lock.Release());
  EXPECT_EQ(*lock.IsLocked(), false);
  stats = core.watchdog().RunRound(/*all=*/true);
  EXPECT_EQ(stats.renewing, 0u) << "still renewed after the outermost release";
  EXPECT_EQ(stats.renewed, 0u);
  EXPECT_EQ(LostEvents(), 0);
}

TEST_F(WatchdogTest, ExplicitLeasesAreNotRenewed) {
  Lock lock = client_->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire(absl::Milliseconds(500)));
  internal::ClientCore& core = internal::ClientAccess::Core(*client_);
  EXPECT_EQ(core.watchdog().RunRound(/*all=*/true).renewed, 0u)
      << "an explicit lease was renewed";
  // Redis ends it by itself.
  EXPECT_TRUE(testing::Eventually([&] {
    absl::StatusOr<testing::RedisValue> exists =
        redis().Command({"EXISTS", lock.name()});
    return exists.ok() && exists->integer == 0;
  })) << "the explicit lease never ended";
  EXPECT_EQ(*lock.IsLocked(), false);
  EXPECT_EQ(lock.Release().code(), absl::StatusCode::kAborted);
}

TEST_F(WatchdogTest, NoRenewalReachesRedisAfterUnlock) {
  // Keep another lock renewing, so rounds keep running, and watch every
  // command Redis executes (MONITOR shows script calls and their keys).
  Lock keeper = client_->GetLock(TestLockName("keeper"));
  Lock released = client_->GetLock(TestLockName("released"));
  ASSERT_OK(keeper.Acquire());
  ASSERT_OK(released.Acquire());
  ASSERT_OK(released.Acquire());
  internal::ClientCore& core = internal::ClientAccess::Core(*client_);
  // Wait until the watchdog thread has renewed it: its renewal was running
  // when it is released.
  const uint64_t thread = lock::CurrentThreadNumber();
  absl::optional<watchdog::Hold> acquired =
      core.holds().Find(released.name(), thread);
  ASSERT_TRUE(acquired.has_value());
  ASSERT_TRUE(testing::Eventually([&] {
    absl::optional<watchdog::Hold> h =
        core.holds().Find(released.name(), thread);
    return h.has_value() && h->acked_at > acquired->acked_at;
  })) << "never renewed";
  ASSERT_OK(released.Release());
  ASSERT_OK(released.Release());
  // A round in flight at the release may still reach Redis after it (and
  // find the owner field gone: watchdog.h); only rounds that start after the
  // release must leave the lock alone. Wait until the next round completes:
  // rounds run one at a time, so one in flight now has completed by then.
  const uint64_t rounds_at_release = core.watchdog().rounds();
  ASSERT_TRUE(testing::Eventually(
      [&] { return core.watchdog().rounds() > rounds_at_release; }));

  // Up to 10 s per reply: renewals come every lease/4 or so.
  testing::RawConnectionOptions ten_seconds;
  ten_seconds.command_timeout = absl::Seconds(10);
  absl::StatusOr<testing::RawConnection> monitor =
      testing::RawConnection::Connect(redis().port(), ten_seconds);
  ASSERT_OK(monitor);
  ASSERT_OK(monitor->Command({"MONITOR"}));
  // Three more renewal round trips of the watchdog thread, then a marker:
  // every command of the first two (at least) is shown before the marker.
  const uint64_t trips = core.renew_round_trips();
  ASSERT_TRUE(testing::Eventually(
      [&] { return core.renew_round_trips() >= trips + 3; }));
  const std::string marker = TestLockName("end-of-watch");
  ASSERT_OK(redis().Command({"ECHO", marker}));
  int keeper_lines = 0, released_lines = 0;
  while (true) {
    absl::StatusOr<testing::RedisValue> line = monitor->NextReply();
    ASSERT_OK(line) << "MONITOR";
    const std::string& text = line->str;
    if (absl::StrContains(text, marker)) break;
    keeper_lines += absl::StrContains(text, keeper.name());
    released_lines += absl::StrContains(text, released.name());
  }
  EXPECT_GT(keeper_lines, 0) << "no renewal seen at all: the check is blind";
  EXPECT_EQ(released_lines, 0) << "a renewal was sent after the final release";
  EXPECT_EQ(redis().Command({"EXISTS", released.name()})->integer, 0);
  EXPECT_OK(keeper.Release());
}

TEST_F(WatchdogTest, DeletedKeyIsReportedLostWithinARenewalPeriod) {
  Lock lock = client_->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire());
  ASSERT_OK(redis().Command({"DEL", lock.name()}));
  Stopwatch watch;
  LockEvent event;
  ASSERT_TRUE(
      events_.WaitFor(LockEventType::kLockLost, absl::Seconds(5), &event));
  EXPECT_LT(watch.Elapsed(), kLease / 3 + absl::Seconds(1));
  // SafeUntil() ended when the loss was found, before the lease would have.
  EXPECT_LE(event.safe_until, std::chrono::steady_clock::now());
  EXPECT_GT(event.safe_until, std::chrono::steady_clock::time_point());
  EXPECT_EQ(event.lock_name, lock.name());
  EXPECT_EQ(event.status.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(event.status.message()), HasSubstr("gone"));
  EXPECT_THAT(event.owner, HasSubstr(client_->id()));
  EXPECT_EQ(*lock.IsHeldByCurrentThread(), false);
  EXPECT_EQ(lock.SafeUntil().status().code(), absl::StatusCode::kAborted);
  absl::Status s = lock.Release();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(s.message()), HasSubstr("lease lost"));
}

TEST_F(WatchdogTest, FlushAllIsReportedLost) {
  Lock a = client_->GetLock(TestLockName("a"));
  Lock b = client_->GetLock(TestLockName("b"));
  ASSERT_OK(a.Acquire());
  ASSERT_OK(b.Acquire(absl::Seconds(60)));  // explicit: not watched
  ASSERT_OK(redis().FlushAll());
  ASSERT_TRUE(events_.WaitFor(LockEventType::kLockLost, absl::Seconds(5)));
  // Later rounds find nothing more to report: `a` was reported once, and
  // the watchdog does not watch `b`.
  internal::ClientCore& core = internal::ClientAccess::Core(*client_);
  const watchdog::RoundStats stats = core.watchdog().RunRound(/*all=*/true);
  EXPECT_EQ(stats.lost, 0u);
  EXPECT_EQ(stats.renewing, 0u);
  EXPECT_EQ(LostEvents(), 1);
  EXPECT_EQ(a.Release().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(b.Release().code(), absl::StatusCode::kAborted);
}

// A restart without persistence loses every lock; the client hears of it
// when its connections open again (the pub/sub connection at once), and
// renews every lease then: the loss is reported within about a reconnect,
// not at the lock's next renewal (a third of the lease later, 30 s here).
TEST_F(WatchdogTest, ALossInARestartIsReportedWhenTheClientReconnects) {
  absl::StatusOr<std::unique_ptr<RedisServer>> server = RedisServer::Start();
  ASSERT_OK(server);
  std::unique_ptr<Client> client =
      MustConnect((*server)->url(), [this](ClientOptions& o) {
        o.lock_watchdog_timeout = absl::Seconds(90);
        o.on_lock_event = events_.Callback();
      });
  ASSERT_NE(client, nullptr);
  Lock lock = client->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire());
  ASSERT_OK((*server)->Restart());
  Stopwatch watch;
  LockEvent event;
  ASSERT_TRUE(
      events_.WaitFor(LockEventType::kLockLost, absl::Seconds(60), &event));
  // The first renewal of a 90 s lease comes about 22 s after the acquire.
  EXPECT_LT(watch.Elapsed(), absl::Seconds(12));
  EXPECT_EQ(event.lock_name, lock.name());
  EXPECT_THAT(std::string(event.status.message()), HasSubstr("gone"));
  EXPECT_GE(client->Metrics().reconnects, 1u);
  EXPECT_EQ(lock.Release().code(), absl::StatusCode::kAborted);
}

// A held key overwritten by another type (a string here) is that lock's
// loss alone: the renewal batch it shares with other locks still renews
// them (a WRONGTYPE failed the whole batch, and every lock in it ran out),
// and its release says Aborted ("lease lost"), not Redis's WRONGTYPE.
TEST_F(WatchdogTest, AKeyOverwrittenByAnotherTypeLosesOnlyItsOwnLock) {
  Lock a = client_->GetLock(TestLockName("a"));
  Lock b = client_->GetLock(TestLockName("b"));
  ASSERT_OK(a.Acquire());
  ASSERT_OK(b.Acquire());
  ASSERT_OK(redis().Command({"SET", a.name(), "hello"}));
  LockEvent lost;
  ASSERT_TRUE(
      events_.WaitFor(LockEventType::kLockLost, absl::Seconds(10), &lost));
  EXPECT_EQ(lost.lock_name, a.name());
  EXPECT_THAT(std::string(lost.status.message()), HasSubstr("gone"));
  // Three more leases of renewals: b is kept.
  internal::ClientCore& core = internal::ClientAccess::Core(*client_);
  const uint64_t rounds = core.watchdog().rounds();
  ASSERT_TRUE(testing::Eventually(
      [&] { return core.watchdog().rounds() >= rounds + 3 * 12; },
      absl::Seconds(30)));
  EXPECT_EQ(LostEvents(), 1);
  EXPECT_TRUE(*b.IsHeldByCurrentThread());
  EXPECT_OK(b.Release());
  absl::Status s = a.Release();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("lease lost"));
}

TEST_F(WatchdogTest, RedisPausedPastTheLeaseIsReportedLost) {
  absl::StatusOr<std::unique_ptr<RedisServer>> server = RedisServer::Start();
  ASSERT_OK(server);
  std::unique_ptr<Client> client = Connect((*server)->url());
  Lock lock = client->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire());
  absl::StatusOr<std::chrono::steady_clock::time_point> safe = lock.SafeUntil();
  ASSERT_OK(safe);
  ASSERT_TRUE((*server)->Pause().ok());
  LockEvent event;
  const bool lost =
      events_.WaitFor(LockEventType::kLockLost, absl::Seconds(10), &event);
  const auto reported_at = std::chrono::steady_clock::now();
  ASSERT_TRUE((*server)->Resume().ok());
  ASSERT_TRUE(lost) << "no loss reported while Redis was paused";
  // The lease ended about at SafeUntil(); the report must follow within one
  // renewal period (lease/3) plus slack for a loaded machine.
  EXPECT_LT(absl::FromChrono(reported_at - *safe),
            kLease / 3 + absl::Seconds(1));
  EXPECT_THAT(std::string(event.status.message()), HasSubstr("no renewal"));
  // The event gives the end of SafeUntil() (LockEvent::safe_until): no
  // earlier than the one read after the acquire (renewals may have moved
  // it on), and already passed when the event came.
  EXPECT_GE(event.safe_until, *safe);
  EXPECT_LE(event.safe_until, reported_at);
  // The report comes when SafeUntil() ends, the drift allowance before the
  // lease ends in Redis: a release right after it may still find the owner
  // field there and free the lock (OK), or find it gone (Aborted).
  const absl::StatusCode released = lock.Release().code();
  EXPECT_TRUE(released == absl::StatusCode::kOk ||
              released == absl::StatusCode::kAborted)
      << absl::StatusCodeToString(released);
}

TEST_F(WatchdogTest, TransientErrorsAreRetriedWithoutLosingTheLock) {
  Lock lock = client_->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire());
  for (int i = 0; i < 6; ++i) {  // kill every pooled connection repeatedly
    ASSERT_OK(redis().Command({"CLIENT", "KILL", "TYPE", "normal"}));
    // Time passes on purpose: the kills span several renewal periods.
    absl::SleepFor(kLease / 4);
  }
  EXPECT_EQ(*lock.HoldCount(), 1);
  EXPECT_OK(lock.Release());
  EXPECT_EQ(LostEvents(), 0);
}

TEST_F(WatchdogTest, SafeUntilFollowsTheLastRenewal) {
  Lock lock = client_->GetLock(TestLockName());
  EXPECT_EQ(lock.SafeUntil().status().code(),
            absl::StatusCode::kFailedPrecondition);
  const auto before = std::chrono::steady_clock::now();
  ASSERT_OK(lock.Acquire());
  auto first = lock.SafeUntil();
  ASSERT_OK(first);
  EXPECT_GT(*first, before);
  EXPECT_LE(*first, before + absl::ToChronoNanoseconds(kLease));
  internal::ClientCore& core = internal::ClientAccess::Core(*client_);
  ASSERT_EQ(core.watchdog().RunRound(/*all=*/true).renewed, 1u);
  auto later = lock.SafeUntil();
  ASSERT_OK(later);
  EXPECT_GT(*later, *first) << "the renewal did not move it";
  ASSERT_OK(lock.Release());
}

// Regression (flaky "32 vs 31"): round trips were counted against rounds
// while the watchdog thread ran, and a round counts its round trip before it
// completes, so a sample taken mid-round saw one trip more than rounds. Now
// the rounds run on the test thread with the watchdog thread stopped, so
// each count is exact. (That the thread's rounds batch every due hold and
// keep every lease alive is proven on the fake clock above.)
TEST_F(WatchdogTest, ManyLocksAreRenewedInFewRoundTrips) {
  constexpr int kLocks = 2500;  // three script calls per round
  // Each complete round renews every lock in exactly one round trip. The
  // default 30 s lease: nothing expires while the thread is stopped.
  EventLog events;
  std::unique_ptr<Client> client = MustConnect(
      redis().url(),
      [&events](ClientOptions& o) { o.on_lock_event = events.Callback(); });
  ASSERT_NE(client, nullptr);
  std::vector<Lock> locks;
  for (int i = 0; i < kLocks; ++i) {
    locks.push_back(client->GetLock(TestLockName(absl::StrCat("manual:", i))));
    ASSERT_OK(locks.back().Acquire());
  }
  internal::ClientCore& core = internal::ClientAccess::Core(*client);
  core.watchdog().Stop();  // no round runs but ours from here on
  for (int round = 0; round < 3; ++round) {
    const uint64_t trips_before = core.renew_round_trips();
    const watchdog::RoundStats stats = core.watchdog().RunRound(/*all=*/true);
    EXPECT_FALSE(stats.failed) << "round " << round;
    EXPECT_EQ(stats.renewed, static_cast<size_t>(kLocks)) << "round " << round;
    EXPECT_EQ(core.renew_round_trips() - trips_before, 1u)
        << "round " << round << " took more than one round trip";
  }
  for (Lock& lock : locks) ASSERT_OK(lock.Release());
  EXPECT_TRUE(events.events().empty());
}

TEST_F(WatchdogTest, KilledHoldersLockFreesWithinAboutOneLease) {
  const std::string name = TestLockName();
  absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Spawn(
      "HoldWithWatchdog",
      {redis().url(), name, absl::StrCat(absl::ToInt64Milliseconds(kLease))});
  ASSERT_OK(child);
  ASSERT_EQ(*(*child)->ReadLine(absl::Seconds(30)), "locked");
  // The child's watchdog keeps it past several leases (time passes on
  // purpose).
  absl::SleepFor(kLease * 3);
  Lock lock = client_->GetLock(name);
  EXPECT_EQ(lock.TryAcquire(absl::ZeroDuration()).code(),
            absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE((*child)->Signal(SIGKILL).ok());
  Stopwatch since_kill;
  ASSERT_OK(lock.TryAcquire(absl::Seconds(20)));
  EXPECT_LT(since_kill.Elapsed(), kLease + absl::Seconds(1));
  EXPECT_OK(lock.Release());
}

TEST_F(WatchdogTest, ClosingTheClientStopsRenewalAndReleases) {
  std::unique_ptr<Client> client = Connect(redis().url());
  Lock lock = client->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire());
  internal::ClientCore& core = internal::ClientAccess::Core(*client);
  client->Close();
  const uint64_t trips = core.renew_round_trips();
  // Time passes on purpose: no renewal may happen in a whole lease.
  absl::SleepFor(kLease);
  EXPECT_EQ(core.renew_round_trips(), trips);
  EXPECT_EQ(redis().Command({"EXISTS", lock.name()})->integer, 0);
}

}  // namespace
}  // namespace relock
