// What a client tells its operator, against a real redis-server: the
// metrics (exact counts after known workloads, blocking and asynchronous),
// the per-hold loss callbacks (watchdog losses and explicit leases that run
// out; never after a release), the logger hook (events, lost and reopened
// connections), and the Prometheus text.

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/common/mutex.h"
#include "relock/relock.h"
#include "tests/test_util.h"
#include "tests/testing/notification.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace {

using ::relock::testing::EventLog;
using ::relock::testing::JoiningThread;
using ::relock::testing::MustConnect;
using ::relock::testing::TestLockName;
using ::testing::HasSubstr;

// Records what a loss callback or the logger got.
class Recorder {
 public:
  std::function<void(const LockEvent&)> Callback(std::string tag) {
    return [this, tag = std::move(tag)](const LockEvent& e) {
      MutexLock lock(&mu_);
      seen_.push_back(absl::StrCat(tag, " ", e.lock_name, " ", e.owner, " ",
                                   e.status.ToString()));
    };
  }
  std::function<void(absl::LogSeverity, absl::string_view)> Logger() {
    return [this](absl::LogSeverity severity, absl::string_view message) {
      MutexLock lock(&mu_);
      seen_.push_back(
          absl::StrCat(absl::LogSeverityName(severity), " ", message));
    };
  }
  std::vector<std::string> seen() const {
    MutexLock lock(&mu_);
    return seen_;
  }
  size_t size() const { return seen().size(); }
  // Whether some line has `text`, waiting up to a minute.
  bool WaitFor(absl::string_view text) const {
    return testing::Eventually([&] {
      for (const std::string& line : seen()) {
        if (absl::StrContains(line, text)) return true;
      }
      return false;
    });
  }

 private:
  mutable Mutex mu_;
  std::vector<std::string> seen_ ABSL_GUARDED_BY(mu_);
};

class ObservabilityTest : public testing::RedisTest {
 protected:
  // Subscribers of `name`'s unlock channel (a waiter waits there).
  int64_t Waiters(const std::string& name) {
    return testing::Subscribers(redis(), testing::LockChannel(name))
        .value_or(-1);
  }
};

TEST_F(ObservabilityTest, MetricsCountAKnownWorkloadExactly) {
  std::unique_ptr<Client> client = MustConnect(redis().url());
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  Lock lock = client->GetLock(name);

  ASSERT_OK(lock.Acquire());
  ASSERT_OK(lock.Acquire());  // a re-entry, counted locally
  ASSERT_OK(lock.Release());  // released locally
  {
    // Another thread: one attempt that finds it held, then a wait that
    // ends with the lock when this thread releases it.
    JoiningThread other([&] {
      EXPECT_EQ(lock.TryAcquire(absl::ZeroDuration()).code(),
                absl::StatusCode::kDeadlineExceeded);
      EXPECT_OK(lock.TryAcquire(absl::Minutes(1)));
      EXPECT_OK(lock.Release());
    });
    ASSERT_TRUE(testing::Eventually([&] { return Waiters(name) >= 1; }))
        << "the other thread never waited";
    ASSERT_OK(lock.Release());
  }
  EXPECT_EQ(lock.Release().code(), absl::StatusCode::kFailedPrecondition);

  const ClientMetrics m = client->Metrics();
  EXPECT_EQ(m.acquisitions, 3u);
  EXPECT_EQ(m.reentries, 1u);
  EXPECT_EQ(m.local_reentries, 1u);
  EXPECT_EQ(m.acquire_timeouts, 1u);
  EXPECT_EQ(m.acquire_failures, 0u);
  EXPECT_EQ(m.waits, 1u);
  EXPECT_EQ(m.handoffs, 1u);
  EXPECT_EQ(m.releases, 3u);
  EXPECT_EQ(m.unlock_failures, 1u);
  EXPECT_EQ(m.locks_lost, 0u);
  EXPECT_EQ(m.reconnects, 0u);
  EXPECT_EQ(m.held_locks, 0);
  EXPECT_EQ(m.wait_time.count, 1u);
  ASSERT_EQ(m.wait_time.counts.size(), m.wait_time.upper_bounds.size() + 1);
  uint64_t in_buckets = 0;
  for (uint64_t c : m.wait_time.counts) in_buckets += c;
  EXPECT_EQ(in_buckets, 1u);
  EXPECT_GT(m.wait_time.sum, absl::ZeroDuration());
  // Every request was answered (a reading may catch the pub/sub
  // connection's unsubscribe in flight).
  EXPECT_TRUE(testing::Eventually(
      [&] { return client->Metrics().pending_requests == 0; }));

  // A bad lease is an acquire that failed.
  EXPECT_EQ(lock.Acquire(absl::Hours(-1)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->Metrics().acquisitions, 3u);
  EXPECT_EQ(client->Metrics().acquire_failures, 1u);
}

TEST_F(ObservabilityTest, AsynchronousCallsAndHeldLocksCount) {
  std::unique_ptr<Client> client = MustConnect(redis().url());
  ASSERT_NE(client, nullptr);
  Lock a = client->GetLock(TestLockName("a"));
  Lock b = client->GetLock(TestLockName("b"));
  const Owner owner = Owner::New();
  ASSERT_OK(a.AcquireAsync(owner).Get());
  ASSERT_OK(b.Acquire());
  EXPECT_EQ(client->Metrics().held_locks, 2);
  ASSERT_OK(a.ReleaseAsync(owner).Get());
  EXPECT_EQ(a.ReleaseAsync(owner).Get().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_OK(b.Release());
  const ClientMetrics m = client->Metrics();
  EXPECT_EQ(m.acquisitions, 2u);
  EXPECT_EQ(m.releases, 2u);
  EXPECT_EQ(m.unlock_failures, 1u);
  EXPECT_EQ(m.held_locks, 0);
}

TEST_F(ObservabilityTest, AWatchdogLossReachesTheHoldsCallbacksOnce) {
  EventLog events;
  Recorder lost;
  std::unique_ptr<Client> client =
      MustConnect(redis().url(), [&](ClientOptions& o) {
        // Renewed every second: a stall of the test long enough to lose the
        // hold before the DEL would take seconds.
        o.lock_watchdog_timeout = absl::Seconds(3);
        o.on_lock_event = events.Callback();
      });
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  LockOptions options;
  options.on_lost = lost.Callback("handle");
  Lock lock = client->GetLock(name, options);
  ASSERT_OK(lock.Acquire());
  ASSERT_OK(lock.Acquire());  // a re-entry adds no second callback
  ASSERT_OK(lock.OnLost(lost.Callback("registered")));

  ASSERT_OK(redis().Command({"DEL", name}));
  ASSERT_TRUE(events.WaitFor(LockEventType::kLockLost, absl::Minutes(1)));
  ASSERT_TRUE(testing::Eventually([&] { return lost.size() >= 2; }));
  const std::string owner = absl::StrCat(client->id(), ":");
  const std::vector<std::string> seen = lost.seen();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_THAT(seen[0], HasSubstr(absl::StrCat("handle ", name, " ", owner)));
  EXPECT_THAT(seen[1],
              HasSubstr(absl::StrCat("registered ", name, " ", owner)));

  const ClientMetrics m = client->Metrics();
  EXPECT_EQ(m.locks_lost, 1u);
  EXPECT_GE(m.renew_rounds, 1u);
  EXPECT_GE(m.renew_round_trips, m.renew_rounds);
  // A lost hold takes no callback.
  EXPECT_EQ(lock.OnLost(lost.Callback("late")).code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(lock.Release().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(lost.size(), 2u);
}

TEST_F(ObservabilityTest, AnExplicitLeaseRunningOutReachesOnlyTheHold) {
  EventLog events;
  Recorder lost;
  std::unique_ptr<Client> client = MustConnect(
      redis().url(),
      [&](ClientOptions& o) { o.on_lock_event = events.Callback(); });
  ASSERT_NE(client, nullptr);
  Lock released = client->GetLock(TestLockName("released"));
  Lock expiring = client->GetLock(TestLockName("expiring"));
  // Registered, then released in time (seconds to spare): never called.
  ASSERT_OK(released.Acquire(absl::Seconds(2)));
  ASSERT_OK(released.OnLost(lost.Callback("released")));
  ASSERT_OK(released.Release());
  // Its lease ends later than the released one's would have, on the same
  // timer thread: once it is reported, the other would have been too.
  ASSERT_OK(expiring.Acquire(absl::Milliseconds(2500)));
  ASSERT_OK(expiring.OnLost(lost.Callback("expiring")));
  ASSERT_TRUE(lost.WaitFor("expiring"));
  const std::vector<std::string> seen = lost.seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_THAT(seen[0], HasSubstr("DEADLINE_EXCEEDED"));
  EXPECT_THAT(seen[0], HasSubstr("explicit lease ran out"));
  // Not a client-wide event: an explicit lease may be meant to run out.
  for (const LockEvent& e : events.events()) {
    EXPECT_NE(e.type, LockEventType::kLockLost) << e.lock_name;
  }
  EXPECT_EQ(client->Metrics().locks_lost, 0u);
}

TEST_F(ObservabilityTest, OnLostRefusesWhatItCannotWatch) {
  std::unique_ptr<Client> client = MustConnect(redis().url());
  ASSERT_NE(client, nullptr);
  Recorder lost;
  Lock lock = client->GetLock(TestLockName());
  EXPECT_EQ(lock.OnLost(lost.Callback("x")).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_OK(lock.Acquire());
  EXPECT_EQ(lock.OnLost(nullptr).code(), absl::StatusCode::kInvalidArgument);
  const Owner other = Owner::New();
  EXPECT_EQ(lock.OnLost(other, lost.Callback("other")).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_OK(lock.Release());
  EXPECT_EQ(Lock().OnLost(lost.Callback("unbound")).code(),
            absl::StatusCode::kFailedPrecondition);
  client->Close();
  EXPECT_EQ(lock.OnLost(lost.Callback("closed")).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(lost.size(), 0u);
}

TEST_F(ObservabilityTest, TheLoggerGetsEventsAndConnectionNews) {
  Recorder log;
  std::unique_ptr<Client> client = MustConnect(
      redis().url(), [&](ClientOptions& o) { o.logger = log.Logger(); });
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  // Without on_lock_event, events are log lines.
  client->GetLock(name).unlock();
  ASSERT_TRUE(log.WaitFor(absl::StrCat("WARNING unlock-failed \"", name,
                                       "\": FAILED_PRECONDITION")));

  // A dropped connection: one warning, then (on the next call) the reopened
  // connection, counted.
  ASSERT_OK(redis().Command({"CLIENT", "KILL", "TYPE", "normal"}));
  ASSERT_TRUE(testing::Eventually([&] { return client->Ping().ok(); }));
  ASSERT_TRUE(log.WaitFor("lost"));
  ASSERT_TRUE(log.WaitFor("INFO connection to Redis at "));
  ASSERT_TRUE(log.WaitFor(" open again"));
  EXPECT_GE(client->Metrics().reconnects, 1u);
}

TEST(PrometheusTextTest, WritesEveryMetricWithLabelsAndCumulativeBuckets) {
  ClientMetrics m;
  m.acquisitions = 7;
  m.pending_requests = 2;
  m.wait_time.upper_bounds = {0.5, 1};
  m.wait_time.counts = {1, 2, 3};
  m.wait_time.count = 6;
  m.wait_time.sum = absl::Milliseconds(7500);
  const std::string text =
      PrometheusText(m, {{"client", "a\"b\\c\nd"}, {"zone", "eu"}});
  const std::string labels = "client=\"a\\\"b\\\\c\\nd\",zone=\"eu\"";
  EXPECT_THAT(text, HasSubstr("# HELP relock_acquisitions_total "));
  EXPECT_THAT(text, HasSubstr("# TYPE relock_acquisitions_total counter\n"));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("relock_acquisitions_total{", labels,
                                           "} 7\n")));
  EXPECT_THAT(text, HasSubstr("# TYPE relock_pending_requests gauge\n"));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("relock_pending_requests{", labels,
                                           "} 2\n")));
  EXPECT_THAT(text, HasSubstr("# TYPE relock_wait_seconds histogram\n"));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("relock_wait_seconds_bucket{",
                                           labels, ",le=\"0.5\"} 1\n")));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("relock_wait_seconds_bucket{",
                                           labels, ",le=\"1\"} 3\n")));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("relock_wait_seconds_bucket{",
                                           labels, ",le=\"+Inf\"} 6\n")));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("relock_wait_seconds_sum{", labels,
                                           "} 7.5\n")));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("relock_wait_seconds_count{", labels,
                                           "} 6\n")));
  // Without labels, bare samples; every line is a comment or a sample.
  const std::string bare = PrometheusText(ClientMetrics());
  EXPECT_THAT(bare, HasSubstr("\nrelock_locks_lost_total 0\n"));
  EXPECT_THAT(bare, HasSubstr("\nrelock_wait_seconds_bucket{le=\"+Inf\"} 0\n"));
  for (absl::string_view line : absl::StrSplit(bare, '\n', absl::SkipEmpty())) {
    EXPECT_TRUE(absl::StartsWith(line, "# ") ||
                absl::StartsWith(line, "relock_"))
        << line;
  }
  EXPECT_EQ(WaitTimeBuckets().size(), 14u);
  EXPECT_EQ(WaitTimeBuckets().front(), 0.001);
  EXPECT_EQ(WaitTimeBuckets().back(), 60);
}

}  // namespace
}  // namespace relock
