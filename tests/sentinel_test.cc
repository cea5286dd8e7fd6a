// relock on a real Sentinel group (1 primary, 2 replicas and 3 sentinels,
// started by the fixture: tests/testing/redis_sentinel.h) through
// `redis-sentinel://` URLs: locks on the primary the sentinels name,
// exclusion and wake-ups between clients, the asynchronous calls, both kinds
// of failover (SENTINEL FAILOVER with a replicated lock that survives it; a
// killed primary whose lock never reached a replica, reported lost while a
// waiter re-checks against the new primary at once), and the errors of
// Connect() (unknown master, no sentinel, the sentinels' own password).

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/common/mutex.h"
#include "relock/relock.h"
#include "tests/test_util.h"
#include "tests/testing/redis_sentinel.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace {

using ::relock::testing::BackgroundWaiter;
using ::relock::testing::EventLog;
using ::relock::testing::LockChannel;
using ::relock::testing::MustConnect;
using ::relock::testing::RedisSentinelGroup;
using ::relock::testing::RedisSentinelOptions;
using ::relock::testing::RedisServer;
using ::relock::testing::RedisValue;
using ::relock::testing::Stopwatch;
using ::relock::testing::TestLockName;
using ::relock::testing::WaitUntilWaiting;
using ::testing::HasSubstr;

// The primary that the sentinels name now.
RedisServer& Primary(RedisSentinelGroup& group) {
  absl::StatusOr<size_t> i = group.PrimaryIndex();
  EXPECT_OK(i);
  return group.node(i.ok() ? *i : 0);
}

// Tests that leave the group as they found it share one.
class SentinelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::unique_ptr<RedisSentinelGroup>> group =
        RedisSentinelGroup::Start();
    ASSERT_OK(group);
    group_ = group->release();
  }
  static void TearDownTestSuite() {
    delete group_;
    group_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(group_, nullptr); }

  static RedisSentinelGroup* group_;
};

RedisSentinelGroup* SentinelTest::group_ = nullptr;

TEST_F(SentinelTest, LocksLiveOnThePrimaryTheSentinelsName) {
  std::unique_ptr<Client> client = MustConnect(group_->url());
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  Lock lock = client->GetLock(name);
  ASSERT_OK(lock.Acquire());
  absl::StatusOr<RedisValue> fields =
      Primary(*group_).Command({"HGETALL", name});
  ASSERT_OK(fields);
  ASSERT_EQ(fields->elements.size(), 2u) << fields->DebugString();
  EXPECT_THAT(fields->elements[0].str, HasSubstr(client->id()));
  EXPECT_EQ(fields->elements[1].str, "1");
  EXPECT_OK(lock.Release());
  absl::StatusOr<RedisValue> exists =
      Primary(*group_).Command({"EXISTS", name});
  ASSERT_OK(exists);
  EXPECT_EQ(exists->integer, 0);
}

TEST_F(SentinelTest, TwoClientsExcludeAndAReleaseWakesTheWaiter) {
  std::unique_ptr<Client> a = MustConnect(group_->url());
  std::unique_ptr<Client> b = MustConnect(group_->url());
  ASSERT_TRUE(a != nullptr && b != nullptr);
  const std::string name = TestLockName();
  Lock held = a->GetLock(name);
  // An explicit 60 s lease: only the unlock message can end the wait early.
  ASSERT_OK(held.Acquire(absl::Seconds(60)));
  Lock wanted = b->GetLock(name);
  EXPECT_EQ(wanted.TryAcquire(absl::ZeroDuration()).code(),
            absl::StatusCode::kDeadlineExceeded);
  BackgroundWaiter waiter(wanted, absl::Seconds(30));
  ASSERT_OK(WaitUntilWaiting(Primary(*group_), LockChannel(name), *b));
  EXPECT_FALSE(waiter.got());
  Stopwatch since_release;
  ASSERT_OK(held.Release());
  EXPECT_TRUE(waiter.Join());
  EXPECT_LT(since_release.Elapsed(), absl::Seconds(20));
}

TEST_F(SentinelTest, AsynchronousCallsGoToThePrimary) {
  std::unique_ptr<Client> client = MustConnect(group_->url());
  ASSERT_NE(client, nullptr);
  Lock lock = client->GetLock(TestLockName());
  const Owner owner = Owner::New();
  EXPECT_OK(lock.AcquireAsync(owner).Get());
  EXPECT_EQ(lock.HoldCount(owner).value_or(-1), 1);
  EXPECT_OK(lock.ReleaseAsync(owner).Get());
  EXPECT_FALSE(lock.IsLocked().value_or(true));
}

TEST_F(SentinelTest, AnUnknownMasterNameIsNotFound) {
  ClientOptions options;
  const std::string url = group_->url();
  options.url = url.substr(0, url.find('#')) + "#no-such-master";
  const absl::Status s = testing::ConnectError(options);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(s.message(), HasSubstr("no-such-master"));
}

TEST_F(SentinelTest, NoSentinelAnsweringIsUnavailableNamingThem) {
  ClientOptions options;
  options.url = "redis-sentinel://127.0.0.1:1,127.0.0.1:2#mymaster";
  options.connect_timeout = absl::Milliseconds(200);
  const absl::Status s = testing::ConnectError(options);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("127.0.0.1:1"));
  EXPECT_THAT(s.message(), HasSubstr("127.0.0.1:2"));
}

TEST_F(SentinelTest, SentinelOptionsWithAnotherUrlAreInvalid) {
  ClientOptions options;
  options.url = "redis://127.0.0.1:1";
  options.sentinel.password = "x";
  const absl::Status s = testing::ConnectError(options);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("sentinel"));
}

// Sentinels with a password of their own, data nodes with another one: the
// URL's password goes to the data nodes, ClientOptions::sentinel's to the
// sentinels; without it the sentinels refuse the client.
TEST(SentinelAuthTest, SentinelsAndDataNodesTakeTheirOwnPasswords) {
  RedisSentinelOptions group_options;
  group_options.requirepass = "data-secret";
  group_options.sentinel_pass = "sentinel-secret";
  absl::StatusOr<std::unique_ptr<RedisSentinelGroup>> group =
      RedisSentinelGroup::Start(group_options);
  ASSERT_OK(group);

  ClientOptions options;
  options.url = (*group)->url();  // carries the data nodes' password
  absl::StatusOr<std::unique_ptr<Client>> refused = Client::Connect(options);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated)
      << refused.status();

  options.sentinel.password = "sentinel-secret";
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  ASSERT_OK(client);
  Lock lock = (*client)->GetLock(TestLockName());
  EXPECT_OK(lock.Acquire());
  EXPECT_OK(lock.Release());
}

// Failovers, each on a group of its own: two clients with a 6 s watchdog
// lease (renewed every 2 s; the sentinels fail a dead primary over after
// down-after-milliseconds (1 s here) plus an election).
class SentinelFailoverTest : public ::testing::Test {
 protected:
  static constexpr absl::Duration kLease = absl::Seconds(6);

  void SetUp() override {
    absl::StatusOr<std::unique_ptr<RedisSentinelGroup>> group =
        RedisSentinelGroup::Start();
    ASSERT_OK(group);
    group_ = *std::move(group);
    auto options = [&](ClientOptions& o) {
      o.lock_watchdog_timeout = kLease;
      o.connect_timeout = absl::Milliseconds(500);
      o.command_timeout = absl::Milliseconds(500);
      o.on_lock_event = events_.Callback();
      o.logger = [this](absl::LogSeverity severity, absl::string_view m) {
        MutexLock lock(&log_mu_);
        log_.push_back(absl::StrCat(absl::LogSeverityName(severity), " ", m));
      };
    };
    holder_client_ = MustConnect(group_->url(), options);
    other_client_ = MustConnect(group_->url(), options);
    ASSERT_TRUE(holder_client_ != nullptr && other_client_ != nullptr);
  }

  // Whether the clients logged a line with `text`.
  bool Logged(const std::string& text) {
    MutexLock lock(&log_mu_);
    for (const std::string& line : log_) {
      if (absl::StrContains(line, text)) return true;
    }
    return false;
  }

  std::unique_ptr<RedisSentinelGroup> group_;
  EventLog events_;
  Mutex log_mu_;
  std::vector<std::string> log_ ABSL_GUARDED_BY(log_mu_);
  std::unique_ptr<Client> holder_client_;
  std::unique_ptr<Client> other_client_;
};

// SENTINEL FAILOVER with a lock held (and replicated: WAIT says so) and a
// waiter on another client: the holder keeps the lock on the new primary
// (its watchdog renews it there, no loss reported), its release works there,
// the waiter gets the lock, and new locks are taken on the new primary.
TEST_F(SentinelFailoverTest, AReplicatedLockSurvivesSentinelFailover) {
  RedisSentinelGroup& g = *group_;
  const std::string name = TestLockName();
  absl::StatusOr<size_t> old_primary = g.PrimaryIndex();
  ASSERT_OK(old_primary);
  Lock held = holder_client_->GetLock(name);
  ASSERT_OK(held.Acquire());
  absl::StatusOr<RedisValue> acked =
      g.node(*old_primary).Command({"WAIT", "2", "5000"});
  ASSERT_TRUE(acked.ok() && acked->integer == 2) << "not replicated";

  BackgroundWaiter waiter(other_client_->GetLock(name), absl::Seconds(60));
  ASSERT_OK(WaitUntilWaiting(g.node(*old_primary), LockChannel(name),
                             *other_client_));
  absl::StatusOr<size_t> new_primary = g.Failover();
  ASSERT_OK(new_primary);
  ASSERT_NE(*new_primary, *old_primary);

  // More than a lease after the switch (time passes on purpose): only
  // renewals on the new primary kept the lock.
  absl::SleepFor(kLease + absl::Seconds(1));
  absl::StatusOr<RedisValue> fields =
      g.node(*new_primary).Command({"HGETALL", name});
  ASSERT_OK(fields);
  ASSERT_EQ(fields->elements.size(), 2u) << "the lock did not survive";
  EXPECT_THAT(fields->elements[0].str, HasSubstr(holder_client_->id()));
  EXPECT_FALSE(waiter.done());
  for (const LockEvent& e : events_.events()) {
    ADD_FAILURE() << LockEventTypeName(e.type) << " " << e.lock_name << " "
                  << e.status.ToString();
  }

  EXPECT_OK(held.Release());
  EXPECT_TRUE(waiter.Join());
  // The clients told their logger (kInfo) that the master moved.
  EXPECT_TRUE(Logged(
      absl::StrCat("INFO Sentinel master \"", g.master_name(),
                   "\" moved from 127.0.0.1:", g.node(*old_primary).port(),
                   " to 127.0.0.1:", g.node(*new_primary).port())));

  // A new lock goes to the new primary.
  const std::string fresh = TestLockName("fresh");
  Lock lock = holder_client_->GetLock(fresh);
  ASSERT_OK(lock.Acquire());
  absl::StatusOr<RedisValue> exists =
      g.node(*new_primary).Command({"EXISTS", fresh});
  ASSERT_OK(exists);
  EXPECT_EQ(exists->integer, 1);
  EXPECT_OK(lock.Release());
}

// The primary is killed before its replicas saw two acquisitions (both
// replicas paused, their links cut): the sentinels promote a replica that
// has neither lock. The watchdog hold is reported lost (kLockLost) and its
// Release() fails; the waiter on the lock with a 60 s lease re-checks
// against the new primary as soon as the client switches, and gets it long
// before that lease could have run out.
TEST_F(SentinelFailoverTest, AKilledPrimarysUnreplicatedLocksAreReportedLost) {
  RedisSentinelGroup& g = *group_;
  absl::StatusOr<size_t> old_primary = g.PrimaryIndex();
  ASSERT_OK(old_primary);
  RedisServer& primary = g.node(*old_primary);
  std::vector<RedisServer*> replicas;
  for (size_t i = 0; i < g.data_nodes(); ++i) {
    if (i != *old_primary) replicas.push_back(&g.node(i));
  }
  for (RedisServer* r : replicas) ASSERT_OK(r->Pause());
  absl::StatusOr<RedisValue> cut =
      primary.Command({"CLIENT", "KILL", "TYPE", "replica"});
  ASSERT_TRUE(cut.ok() && cut->integer == 2) << cut.status();

  const std::string watched = TestLockName("watchdog");
  const std::string leased = TestLockName("leased");
  Lock held = holder_client_->GetLock(watched);
  ASSERT_OK(held.Acquire());
  Lock held_leased = holder_client_->GetLock(leased);
  ASSERT_OK(held_leased.Acquire(absl::Seconds(60)));

  BackgroundWaiter waiter(other_client_->GetLock(leased), absl::Seconds(50));
  ASSERT_OK(WaitUntilWaiting(primary, LockChannel(leased), *other_client_));
  ASSERT_OK(primary.Kill());
  for (RedisServer* r : replicas) ASSERT_OK(r->Resume());
  absl::StatusOr<size_t> new_primary =
      g.WaitForNewPrimary(*old_primary, absl::Seconds(60));
  ASSERT_OK(new_primary);
  // The watchdog-held lock is not on the new primary. (Not `leased`: the
  // waiter may already have taken it there; that it gets it at all, long
  // before the 60 s lease, shows the holder's hold did not survive.)
  absl::StatusOr<RedisValue> exists =
      g.node(*new_primary).Command({"EXISTS", watched});
  ASSERT_OK(exists);
  ASSERT_EQ(exists->integer, 0) << "the promoted replica has the lock";

  LockEvent lost;
  ASSERT_TRUE(
      events_.WaitFor(LockEventType::kLockLost, absl::Seconds(20), &lost))
      << "the holder was not told";
  EXPECT_EQ(lost.lock_name, watched);
  EXPECT_FALSE(held.Release().ok());

  // Within its 50 s wait: the 60 s lease on the old primary would have
  // kept it out until the end.
  EXPECT_TRUE(waiter.Join());
  Lock other = other_client_->GetLock(watched);
  EXPECT_OK(other.TryAcquire(absl::Seconds(10)));
  EXPECT_OK(other.Release());
}

}  // namespace
}  // namespace relock
