// relock::Semaphore on real redis-servers: permits taken and given back;
// never more than N holders across 3 processes x 3 threads; a release wakes
// a waiter of another client by its message (not a re-check), and every
// waiter at once; Redisson's own semaphore scripts as a peer on the same
// key, both ways; the asynchronous calls and Close(); bad input and a name
// holding something else; the channel and key in the name's cluster slot.

#include <atomic>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/api/client_access.h"
#include "relock/relock.h"
#include "tests/cluster_test_util.h"
#include "tests/redisson_scripts.h"
#include "tests/test_util.h"
#include "tests/testing/child_process.h"
#include "tests/testing/eventually.h"
#include "tests/testing/raw_connection.h"
#include "tests/testing/redis_cluster.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace {

using ::relock::testing::ChildProcess;
using ::relock::testing::JoiningThread;
using ::relock::testing::kRedissonSemaphoreRelease;
using ::relock::testing::kRedissonSemaphoreTryAcquire;
using ::relock::testing::kRedissonSemaphoreTrySetPermits;
using ::relock::testing::MustConnect;
using ::relock::testing::RawConnection;
using ::relock::testing::RedisServer;
using ::relock::testing::RedisValue;
using ::relock::testing::SemaphoreChannel;
using ::relock::testing::Stopwatch;
using ::relock::testing::TestLockName;
using ::relock::testing::WaitUntilWaiting;
using ::testing::HasSubstr;

// A waiter that nothing but a message can wake sooner re-checks after 30 s:
// a wake-up well within this came from the release.
constexpr absl::Duration kWokenByMessage = absl::Seconds(20);

class SemaphoreTest : public testing::RedisClientTest {
 protected:
  int64_t Eval(const char* script, const std::string& name,
               const std::string& arg, bool with_channel = true) {
    std::vector<std::string> argv = {"EVAL", script, with_channel ? "2" : "1",
                                     name};
    if (with_channel) argv.push_back(SemaphoreChannel(name));
    argv.push_back(arg);
    absl::StatusOr<RedisValue> v = redis().Command(argv);
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() && v->is_integer() ? v->integer : -1;
  }
  std::string Get(const std::string& key) {
    absl::StatusOr<RedisValue> v = redis().Command({"GET", key});
    return v.ok() ? v->str : "?";
  }
};

TEST_F(SemaphoreTest, PermitsAreTakenAndGivenBack) {
  Semaphore sem = client_->GetSemaphore(TestLockName());
  EXPECT_THAT(sem.AvailablePermits(), testing::IsOkAndHolds(0));
  EXPECT_THAT(sem.TrySetPermits(3), testing::IsOkAndHolds(true));
  EXPECT_THAT(sem.TrySetPermits(5), testing::IsOkAndHolds(false));
  EXPECT_EQ(Get(sem.name()), "3");
  ASSERT_OK(sem.Acquire());
  ASSERT_OK(sem.TryAcquire(2, absl::ZeroDuration()));
  EXPECT_THAT(sem.AvailablePermits(), testing::IsOkAndHolds(0));
  EXPECT_THAT(sem.TryAcquire(1, absl::Milliseconds(50)),
              testing::StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(sem.TryAcquire(1, absl::Milliseconds(50)),
              testing::StatusIs(absl::StatusCode::kDeadlineExceeded,
                                HasSubstr("too few permits")));
  ASSERT_OK(sem.Release(2));
  EXPECT_THAT(sem.AvailablePermits(), testing::IsOkAndHolds(2));
  ASSERT_OK(sem.AddPermits(-3));
  EXPECT_THAT(sem.AvailablePermits(), testing::IsOkAndHolds(-1));
  ASSERT_OK(sem.AddPermits(6));
  EXPECT_THAT(sem.Drain(), testing::IsOkAndHolds(5));
  EXPECT_EQ(Get(sem.name()), "0");
  EXPECT_THAT(sem.Drain(), testing::IsOkAndHolds(0));
  // A release needs no acquire (no owner), and creates the count.
  Semaphore fresh = client_->GetSemaphore(TestLockName("fresh"));
  ASSERT_OK(fresh.Release());
  EXPECT_EQ(Get(fresh.name()), "1");
  // Drain() of a name without a count leaves it without one.
  Semaphore none = client_->GetSemaphore(TestLockName("none"));
  EXPECT_THAT(none.Drain(), testing::IsOkAndHolds(0));
  EXPECT_EQ(redis().Command({"EXISTS", none.name()})->integer, 0);
  // On a single server every name works, a "}" included (not on a cluster:
  // SemaphoreClusterTest).
  Semaphore brace = client_->GetSemaphore(TestLockName("jobs}a"));
  EXPECT_THAT(brace.TrySetPermits(1), testing::IsOkAndHolds(true));
  ASSERT_OK(brace.Acquire());
}

TEST_F(SemaphoreTest, DrainKeepsTheKeysTtl) {
  Semaphore sem = client_->GetSemaphore(TestLockName());
  ASSERT_OK(sem.TrySetPermits(4));
  ASSERT_TRUE(redis().Command({"PEXPIRE", sem.name(), "600000"}).ok());
  EXPECT_THAT(sem.Drain(), testing::IsOkAndHolds(4));
  EXPECT_GT(redis().Command({"PTTL", sem.name()})->integer, 0);
}

TEST_F(SemaphoreTest, AReleaseWakesAWaiterOfAnotherClientByItsMessage) {
  const std::string name = TestLockName();
  Semaphore sem = client_->GetSemaphore(name);
  ASSERT_OK(sem.TrySetPermits(0));
  std::unique_ptr<Client> other = MustConnect(redis().url());
  ASSERT_NE(other, nullptr);
  std::atomic<bool> got{false};
  JoiningThread waiter([&] {
    got = other->GetSemaphore(name).TryAcquire(2, absl::Seconds(60)).ok();
  });
  ASSERT_OK(WaitUntilWaiting(redis(), SemaphoreChannel(name), *other));
  ASSERT_OK(sem.Release());  // one is not enough
  ASSERT_OK(WaitUntilWaiting(redis(), SemaphoreChannel(name), *other));
  EXPECT_FALSE(got.load());
  Stopwatch since_release;
  ASSERT_OK(sem.Release());
  waiter.join();
  EXPECT_TRUE(got.load());
  EXPECT_LT(since_release.Elapsed(), kWokenByMessage);
  EXPECT_THAT(sem.AvailablePermits(), testing::IsOkAndHolds(0));
}

TEST_F(SemaphoreTest, OneReleaseWakesEveryWaiterOfEveryClient) {
  const std::string name = TestLockName();
  Semaphore sem = client_->GetSemaphore(name);
  std::unique_ptr<Client> a = MustConnect(redis().url());
  std::unique_ptr<Client> b = MustConnect(redis().url());
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  constexpr int kPerClient = 2;
  std::atomic<int> got{0};
  std::vector<JoiningThread> waiters;
  for (Client* c : {a.get(), b.get()}) {
    for (int i = 0; i < kPerClient; ++i) {
      waiters.emplace_back([&got, c, name] {
        if (c->GetSemaphore(name).TryAcquire(1, absl::Seconds(60)).ok()) ++got;
      });
    }
  }
  ASSERT_OK(testing::WaitForSubscribers(redis(), SemaphoreChannel(name), 2));
  ASSERT_OK(testing::WaitUntilIdle(*a));
  ASSERT_OK(testing::WaitUntilIdle(*b));
  Stopwatch since_release;
  ASSERT_OK(sem.Release(2 * kPerClient));  // one message
  for (JoiningThread& w : waiters) w.join();
  EXPECT_EQ(got.load(), 2 * kPerClient);
  EXPECT_LT(since_release.Elapsed(), kWokenByMessage);
  EXPECT_THAT(sem.AvailablePermits(), testing::IsOkAndHolds(0));
}

// A child: `threads` threads each take a permit `rounds` times, and while
// holding it count themselves in `active` (recording the most seen in
// `most`) for 2 ms.
RELOCK_CHILD_MAIN(SemaphoreHolders) {
  int port = 0, threads = 0, rounds = 0;
  if (args.size() != 6 || !absl::SimpleAtoi(args[1], &port) ||
      !absl::SimpleAtoi(args[4], &threads) ||
      !absl::SimpleAtoi(args[5], &rounds)) {
    return 2;
  }
  std::unique_ptr<Client> client = testing::MustConnect(args[0]);
  if (client == nullptr) return 3;
  Semaphore sem = client->GetSemaphore(args[2]);
  const std::string active = args[3] + ":active", most = args[3] + ":most";
  static constexpr char kEnter[] =
      "local v = redis.call('incr', KEYS[1]); "
      "if v > tonumber(redis.call('get', KEYS[2]) or '0') then "
      "redis.call('set', KEYS[2], v) end; return v";
  std::atomic<int> failures{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      for (int r = 0; r < rounds; ++r) {
        if (!sem.Acquire().ok()) {
          ++failures;
          return;
        }
        if (!testing::CommandOnPort(port, {"EVAL", kEnter, "2", active, most})
                 .ok()) {
          ++failures;
        }
        absl::SleepFor(absl::Milliseconds(2));
        if (!testing::CommandOnPort(port, {"DECR", active}).ok()) ++failures;
        if (!sem.Release().ok()) ++failures;
      }
    });
  }
  for (std::thread& w : workers) w.join();
  std::cout << "done" << std::endl;
  return failures.load() == 0 ? 0 : 4;
}

TEST_F(SemaphoreTest, NeverMoreThanNHoldersAcrossProcesses) {
  constexpr int kPermits = 2, kChildren = 3, kThreads = 3, kRounds = 8;
  const std::string name = TestLockName();
  const std::string stats = TestLockName("stats");
  ASSERT_THAT(client_->GetSemaphore(name).TrySetPermits(kPermits),
              testing::IsOkAndHolds(true));
  std::vector<std::unique_ptr<ChildProcess>> children;
  for (int i = 0; i < kChildren; ++i) {
    absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Spawn(
        "SemaphoreHolders",
        {redis().url(), absl::StrCat(redis().port()), name, stats,
         absl::StrCat(kThreads), absl::StrCat(kRounds)});
    ASSERT_OK(child);
    children.push_back(*std::move(child));
  }
  testing::ExpectChildrenDone(children);
  int64_t most = 0;
  ASSERT_TRUE(absl::SimpleAtoi(Get(stats + ":most"), &most));
  EXPECT_LE(most, kPermits);
  EXPECT_GE(most, 1);
  EXPECT_EQ(Get(stats + ":active"), "0");
  EXPECT_EQ(Get(name), absl::StrCat(kPermits));
}

TEST_F(SemaphoreTest, RedissonScriptsShareThePermitsBothWays) {
  const std::string name = TestLockName();
  Semaphore sem = client_->GetSemaphore(name);
  // Redisson sets and takes; relock sees it and excludes.
  EXPECT_EQ(Eval(kRedissonSemaphoreTrySetPermits, name, "1"), 1);
  EXPECT_THAT(sem.TrySetPermits(9), testing::IsOkAndHolds(false));
  EXPECT_THAT(sem.AvailablePermits(), testing::IsOkAndHolds(1));
  EXPECT_EQ(Eval(kRedissonSemaphoreTryAcquire, name, "1", false), 1);
  EXPECT_THAT(sem.TryAcquire(1, absl::ZeroDuration()),
              testing::StatusIs(absl::StatusCode::kDeadlineExceeded));
  // Redisson's release wakes a relock waiter.
  std::atomic<bool> got{false};
  JoiningThread waiter(
      [&] { got = sem.TryAcquire(1, absl::Seconds(60)).ok(); });
  ASSERT_OK(WaitUntilWaiting(redis(), SemaphoreChannel(name), *client_));
  Stopwatch since_release;
  Eval(kRedissonSemaphoreRelease, name, "1");
  waiter.join();
  EXPECT_TRUE(got.load());
  EXPECT_LT(since_release.Elapsed(), kWokenByMessage);
  EXPECT_EQ(Eval(kRedissonSemaphoreTryAcquire, name, "1", false), 0);
  // relock's release gives Redisson the permit and publishes the new count
  // where Redisson's waiters listen.
  absl::StatusOr<RawConnection> listener =
      RawConnection::Connect(redis().port());
  ASSERT_OK(listener);
  ASSERT_OK(listener->Command({"SUBSCRIBE", SemaphoreChannel(name)}));
  ASSERT_OK(sem.Release());
  absl::StatusOr<RedisValue> message = listener->NextReply();
  ASSERT_OK(message);
  ASSERT_EQ(message->elements.size(), 3u) << *message;
  EXPECT_EQ(message->elements[0].str, "message");
  EXPECT_EQ(message->elements[2].str, "1");
  EXPECT_EQ(Eval(kRedissonSemaphoreTryAcquire, name, "1", false), 1);
  EXPECT_THAT(sem.AvailablePermits(), testing::IsOkAndHolds(0));
}

// Review finding: a client without pub/sub (ClientOptions::pubsub false)
// published nothing, so the waiters of clients that rely on messages
// (Redisson's, relock's with pub/sub) slept on. It publishes as any other.
TEST_F(SemaphoreTest, AClientWithoutPubSubStillPublishesItsChanges) {
  const std::string name = TestLockName();
  std::unique_ptr<Client> polling =
      MustConnect(redis().url(), [](ClientOptions& o) { o.pubsub = false; });
  ASSERT_NE(polling, nullptr);
  Semaphore sem = polling->GetSemaphore(name);
  absl::StatusOr<RawConnection> listener =
      RawConnection::Connect(redis().port());
  ASSERT_OK(listener);
  ASSERT_OK(listener->Command({"SUBSCRIBE", SemaphoreChannel(name)}));
  EXPECT_THAT(sem.TrySetPermits(0), testing::IsOkAndHolds(true));
  ASSERT_OK(sem.Release(2));
  ASSERT_OK(sem.AddPermits(3));
  for (const char* count : {"0", "2", "5"}) {
    absl::StatusOr<RedisValue> message = listener->NextReply();
    ASSERT_OK(message);
    ASSERT_EQ(message->elements.size(), 3u) << *message;
    EXPECT_EQ(message->elements[0].str, "message");
    EXPECT_EQ(message->elements[2].str, count);
  }
  // A waiter of a client with pub/sub wakes by the message.
  ASSERT_OK(sem.TryAcquire(5, absl::ZeroDuration()));
  std::atomic<bool> got{false};
  JoiningThread waiter([&] {
    got = client_->GetSemaphore(name).TryAcquire(1, absl::Seconds(60)).ok();
  });
  // Two subscribers: the listener above, and the waiting client.
  ASSERT_OK(WaitUntilWaiting(redis(), SemaphoreChannel(name), *client_,
                             /*subscribers=*/2));
  Stopwatch since_release;
  ASSERT_OK(sem.Release());
  waiter.join();
  EXPECT_TRUE(got.load());
  EXPECT_LT(since_release.Elapsed(), kWokenByMessage);
}

TEST_F(SemaphoreTest, AsyncCallsWaitNotifiedAndCloseCancelsThem) {
  const std::string name = TestLockName();
  Semaphore sem = client_->GetSemaphore(name);
  Future<absl::Status> acquired = sem.AcquireAsync(2);
  ASSERT_OK(WaitUntilWaiting(redis(), SemaphoreChannel(name), *client_));
  EXPECT_FALSE(acquired.Ready());
  std::unique_ptr<Client> other = MustConnect(redis().url());
  ASSERT_NE(other, nullptr);
  ASSERT_OK(other->GetSemaphore(name).ReleaseAsync(2).Get());
  ASSERT_OK(acquired.Get());
  EXPECT_THAT(sem.AvailablePermits(), testing::IsOkAndHolds(0));
  EXPECT_THAT(sem.TryAcquireAsync(1, absl::Milliseconds(20)).Get(),
              testing::StatusIs(absl::StatusCode::kDeadlineExceeded));
  Future<absl::Status> pending = sem.AcquireAsync();
  ASSERT_OK(WaitUntilWaiting(redis(), SemaphoreChannel(name), *client_));
  client_->Close();
  EXPECT_THAT(pending.Get(), testing::StatusIs(absl::StatusCode::kCancelled));
  EXPECT_THAT(sem.Acquire(),
              testing::StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(SemaphoreTest, BadInputGetsAPreciseStatusAndChangesNothing) {
  Semaphore sem = client_->GetSemaphore(TestLockName());
  ASSERT_OK(sem.TrySetPermits(1));
  // Redisson's permits are Java ints: 2^31 - 1 at most.
  for (int64_t bad : {int64_t{0}, int64_t{-1}, kMaxPermits + 1,
                      std::numeric_limits<int64_t>::max(),
                      std::numeric_limits<int64_t>::min()}) {
    EXPECT_THAT(sem.Acquire(bad),
                testing::StatusIs(absl::StatusCode::kInvalidArgument))
        << bad;
    EXPECT_THAT(sem.TryAcquire(bad, absl::ZeroDuration()),
                testing::StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(sem.Release(bad),
                testing::StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(sem.AcquireAsync(bad).Get(),
                testing::StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(sem.ReleaseAsync(bad).Get(),
                testing::StatusIs(absl::StatusCode::kInvalidArgument));
  }
  EXPECT_THAT(sem.TrySetPermits(-1),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("permits must be in [0, ")));
  EXPECT_THAT(sem.AddPermits(0),
              testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(sem.AddPermits(-kMaxPermits - 1),
              testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(sem.AddPermits(kMaxPermits + 1),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("2147483647")));
  EXPECT_THAT(sem.TrySetPermits(kMaxPermits + 1),
              testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(sem.TryAcquire(1, absl::Seconds(-1)),
              testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(sem.Release(kMaxPermits),
              testing::StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_EQ(Get(sem.name()), "1");
  EXPECT_THAT(client_->GetSemaphore("").Acquire(),
              testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Semaphore().Release(),
              testing::StatusIs(absl::StatusCode::kFailedPrecondition));

  // Names holding other things: refused, left as they were.
  const std::string hash = TestLockName("hash");
  ASSERT_TRUE(redis().Command({"HSET", hash, "a", "1"}).ok());
  const std::string text = TestLockName("text");
  ASSERT_TRUE(redis().Command({"SET", text, "12abc"}).ok());
  Lock lock = client_->GetLock(TestLockName("lock"));
  ASSERT_OK(lock.Acquire());
  for (const std::string& name : {hash, text, lock.name()}) {
    Semaphore other = client_->GetSemaphore(name);
    EXPECT_THAT(other.Acquire(),
                testing::StatusIs(absl::StatusCode::kFailedPrecondition,
                                  HasSubstr("NOTASEMAPHORE")))
        << name;
    EXPECT_THAT(other.Release(),
                testing::StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_THAT(other.TrySetPermits(1),
                testing::StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_THAT(other.AddPermits(1),
                testing::StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_THAT(other.Drain(),
                testing::StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_THAT(other.AvailablePermits(),
                testing::StatusIs(absl::StatusCode::kFailedPrecondition));
  }
  EXPECT_EQ(redis().Command({"HGET", hash, "a"})->str, "1");
  EXPECT_EQ(Get(text), "12abc");
  EXPECT_THAT(lock.HoldCount(), testing::IsOkAndHolds(1));
  ASSERT_OK(lock.Release());
}

TEST_F(SemaphoreTest, AWaiterThatFindsAnotherTypeStops) {
  const std::string name = TestLockName();
  Semaphore sem = client_->GetSemaphore(name);
  absl::Status waited;
  JoiningThread waiter([&] { waited = sem.TryAcquire(1, absl::Seconds(60)); });
  ASSERT_OK(WaitUntilWaiting(redis(), SemaphoreChannel(name), *client_));
  ASSERT_TRUE(redis().Command({"HSET", name, "x", "1"}).ok());
  ASSERT_TRUE(redis().Command({"PUBLISH", SemaphoreChannel(name), "1"}).ok());
  waiter.join();
  EXPECT_THAT(waited, testing::StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(redis().Command({"HGET", name, "x"})->str, "1");
}

// Review finding: an acquire whose reply did not come before its deadline
// (Redis paused or busy) was reported DeadlineExceeded, "too few permits
// were available throughout the wait", though its script had reached Redis
// and took the permits once Redis ran it: the caller, told it had none,
// never gave them back. It is Unavailable (the permits may have been
// taken), as the header says of a call whose answer was lost.
TEST_F(SemaphoreTest, AnAcquireCutOffByItsDeadlineMayHaveTakenItsPermits) {
  Semaphore sem = client_->GetSemaphore(TestLockName());
  ASSERT_THAT(sem.TrySetPermits(1), testing::IsOkAndHolds(true));
  ASSERT_OK(redis().Pause());  // SIGSTOP: the attempt waits in the socket
  const absl::Status s = sem.TryAcquire(1, absl::Milliseconds(300));
  ASSERT_OK(redis().Resume());
  // Redis, resumed, runs the attempt it had received: the permit is gone.
  EXPECT_TRUE(testing::Eventually([&] { return Get(sem.name()) == "0"; }));
  EXPECT_THAT(
      s, testing::StatusIs(absl::StatusCode::kUnavailable, HasSubstr("may")));
}

// An acquire whose attempt is in flight when Close() runs: Close() waits for
// the call (up to a command timeout), so the grant that comes once Redis
// answers is given back while the connection still runs. (Close() closed the
// connection under it: the call said Unavailable, and Redis, resumed, ran
// the attempt it had received: the permit was gone for good.)
TEST_F(SemaphoreTest, CloseWaitsForAnAcquireInFlightAndGivesItsGrantBack) {
  absl::StatusOr<std::unique_ptr<RedisServer>> server = RedisServer::Start();
  ASSERT_OK(server);
  std::unique_ptr<Client> client =
      MustConnect((*server)->url(), [](ClientOptions& o) {
        o.command_timeout = absl::Seconds(20);
        // Nothing else in flight: the subscriber's pings, the info record.
        o.pubsub = false;
        o.publish_client_info = false;
      });
  ASSERT_NE(client, nullptr);
  Semaphore sem = client->GetSemaphore(TestLockName());
  ASSERT_THAT(sem.TrySetPermits(1), testing::IsOkAndHolds(true));
  ASSERT_OK((*server)->Pause());  // SIGSTOP: the attempt waits in the socket
  absl::Status acquired;
  JoiningThread acquirer([&] { acquired = sem.Acquire(); });
  ASSERT_TRUE(testing::Eventually(
      [&] { return client->Metrics().pending_requests >= 1; }));
  internal::ClientCore& core = internal::ClientAccess::Core(*client);
  JoiningThread closer([&] { client->Close(); });
  ASSERT_TRUE(testing::Eventually([&] { return core.closed(); }));
  ASSERT_OK((*server)->Resume());
  closer.join();
  acquirer.join();
  EXPECT_THAT(acquired, testing::StatusIs(absl::StatusCode::kCancelled,
                                          HasSubstr("given back")));
  absl::StatusOr<RedisValue> left = (*server)->Command({"GET", sem.name()});
  ASSERT_OK(left);
  EXPECT_EQ(left->str, "1");
}

// Review finding: on a client without pub/sub, whose waits re-check on a
// timer, Close() left a waiting AcquireAsync() pending for good (the timer
// never fired on the stopped event loop, and the wait, holding the client,
// was never destroyed: see SpinLockTest.CloseCancelsASpinningWaiter).
TEST_F(SemaphoreTest, CloseCancelsAnAsyncWaitOfAClientWithoutPubSub) {
  std::unique_ptr<Client> polling =
      MustConnect(redis().url(), [](ClientOptions& o) {
        o.pubsub = false;
        o.publish_client_info = false;  // no script calls of its own
        o.spin_backoff = *ConstantBackoff(absl::Seconds(2));
      });
  ASSERT_NE(polling, nullptr);
  ASSERT_TRUE(redis().Command({"CONFIG", "RESETSTAT"}).ok());
  Future<absl::Status> pending =
      polling->GetSemaphore(TestLockName()).AcquireAsync();
  // Its first attempt found no permit: it re-checks in 2 s.
  ASSERT_TRUE(testing::Eventually(
      [&] { return testing::Calls(redis(), "evalsha") >= 1; }));
  polling->Close();
  ASSERT_TRUE(pending.WaitFor(absl::Seconds(30)));
  EXPECT_THAT(pending.Get(), testing::StatusIs(absl::StatusCode::kCancelled));
}

// Review finding: a string that Redis does not read as an integer ("007",
// "-0", one beyond 64 bits) passed for a count: Release(), Acquire() and a
// latch's CountDown() then failed with INTERNAL (their INCRBY's or DECR's
// refusal), Drain() overwrote the value with "0" and AvailablePermits() read
// it. It is no count: FailedPrecondition and left alone, as any other.
TEST_F(SemaphoreTest, AStringRedisReadsAsNoIntegerIsNoCount) {
  for (const std::string value :
       {"007", "-0", "99999999999999999999", "-9223372036854775809"}) {
    const std::string name = TestLockName(value);
    ASSERT_TRUE(redis().Command({"SET", name, value}).ok());
    Semaphore sem = client_->GetSemaphore(name);
    constexpr absl::StatusCode kNotACount =
        absl::StatusCode::kFailedPrecondition;
    EXPECT_THAT(sem.Release(), testing::StatusIs(kNotACount)) << value;
    EXPECT_THAT(sem.TryAcquire(1, absl::ZeroDuration()),
                testing::StatusIs(kNotACount))
        << value;
    EXPECT_THAT(sem.AvailablePermits(), testing::StatusIs(kNotACount)) << value;
    EXPECT_THAT(sem.Drain(), testing::StatusIs(kNotACount)) << value;
    CountDownLatch latch = client_->GetCountDownLatch(name);
    EXPECT_THAT(latch.CountDown(), testing::StatusIs(kNotACount)) << value;
    EXPECT_THAT(latch.GetCount(), testing::StatusIs(kNotACount)) << value;
    EXPECT_THAT(client_->GetPermitExpirableSemaphore(name).AvailablePermits(),
                testing::StatusIs(kNotACount))
        << value;
    EXPECT_EQ(Get(name), value);
  }
  // The extremes of 64 bits are counts (a latch's count is a Java long).
  const std::string top = TestLockName("top");
  ASSERT_TRUE(redis().Command({"SET", top, "9223372036854775807"}).ok());
  ASSERT_OK(client_->GetCountDownLatch(top).CountDown());
  EXPECT_EQ(Get(top), "9223372036854775806");
}

class SemaphoreClusterTest : public ::testing::Test {};

TEST_F(SemaphoreClusterTest, KeyAndChannelStayInTheNamesSlot) {
  testing::RedisCluster& cluster = testing::SharedRedisCluster();
  std::unique_ptr<Client> holder = MustConnect(cluster.url());
  std::unique_ptr<Client> waiting = MustConnect(cluster.url());
  ASSERT_NE(holder, nullptr);
  ASSERT_NE(waiting, nullptr);
  std::vector<std::string> names = testing::NamesOnEveryMaster(cluster, 1);
  names.push_back(TestLockName("{tagged}"));
  for (const std::string& name : names) {
    // (The shared cluster is not flushed between tests, nor repeats.)
    ASSERT_OK(testing::MasterOf(cluster, name).Command({"DEL", name}));
    Semaphore sem = holder->GetSemaphore(name);
    ASSERT_THAT(sem.TrySetPermits(0), testing::IsOkAndHolds(true)) << name;
    std::atomic<bool> got{false};
    JoiningThread waiter([&] {
      got = waiting->GetSemaphore(name).TryAcquire(1, absl::Seconds(60)).ok();
    });
    testing::RedisServer& master = testing::MasterOf(cluster, name);
    ASSERT_OK(WaitUntilWaiting(master, SemaphoreChannel(name), *waiting, 1,
                               testing::PubSub::kSharded))
        << name;
    Stopwatch since_release;
    ASSERT_OK(sem.Release()) << name;
    waiter.join();
    EXPECT_TRUE(got.load()) << name;
    EXPECT_LT(since_release.Elapsed(), kWokenByMessage) << name;
    EXPECT_EQ(master.Command({"GET", name})->str, "0") << name;
  }
  // Review finding: "jobs}a" hashes whole, its channel "redisson_sc:{jobs}a}"
  // by the tag "jobs" (CROSSSLOT); "a{}b" has an empty tag. Refused, with
  // nothing written; on a single server such names work.
  for (const std::string& name :
       {TestLockName("jobs}a"), TestLockName("a{}b")}) {
    Semaphore sem = holder->GetSemaphore(name);
    EXPECT_THAT(sem.TrySetPermits(1),
                testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                  HasSubstr("another hash slot")))
        << name;
    EXPECT_THAT(sem.TryAcquire(1, absl::ZeroDuration()),
                testing::StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(sem.Release(),
                testing::StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(sem.AvailablePermits(),
                testing::StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_EQ(
        testing::MasterOf(cluster, name).Command({"EXISTS", name})->integer, 0);
  }
}

}  // namespace
}  // namespace relock
