// relock::CountDownLatch on real redis-servers: set, count down, reuse;
// every waiter in every process wakes at zero (2 processes x 3 threads, a
// second client's threads and asynchronous waiters, all woken by one
// message); Redisson's own latch scripts as a peer on the same key, both
// ways; the asynchronous call and Close(); bad input and a name holding
// something else; the channel and key in the name's cluster slot.

#include <atomic>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "relock/relock.h"
#include "tests/cluster_test_util.h"
#include "tests/redisson_scripts.h"
#include "tests/test_util.h"
#include "tests/testing/child_process.h"
#include "tests/testing/raw_connection.h"
#include "tests/testing/redis_cluster.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace {

using ::relock::testing::ChildProcess;
using ::relock::testing::JoiningThread;
using ::relock::testing::kRedissonLatchCountDown;
using ::relock::testing::kRedissonLatchTrySetCount;
using ::relock::testing::MustConnect;
using ::relock::testing::RawConnection;
using ::relock::testing::RedisValue;
using ::relock::testing::Stopwatch;
using ::relock::testing::TestLockName;
using ::relock::testing::WaitUntilWaiting;
using ::testing::HasSubstr;

// Redisson's latch channel (RedissonCountDownLatch.getChannelName), written
// out here independently of relock's code: braces around the whole name,
// also when it contains "{" (unlike its prefixName()).
std::string LatchChannel(const std::string& name) {
  return "redisson_countdownlatch__channel__{" + name + "}";
}

// A waiter that nothing but a message can wake sooner re-checks after 30 s.
constexpr absl::Duration kWokenByMessage = absl::Seconds(20);

class CountDownLatchTest : public testing::RedisClientTest {
 protected:
  // Redisson's trySetCount (1: set) or countDown, by EVAL.
  int64_t RedissonTrySetCount(const std::string& name, int64_t count) {
    absl::StatusOr<RedisValue> v = redis().Command(
        {"EVAL", kRedissonLatchTrySetCount, "2", name, LatchChannel(name), "1",
         absl::StrCat(count), "PUBLISH"});
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() && v->is_integer() ? v->integer : -1;
  }
  void RedissonCountDown(const std::string& name) {
    EXPECT_TRUE(redis()
                    .Command({"EVAL", kRedissonLatchCountDown, "2", name,
                              LatchChannel(name), "0", "PUBLISH"})
                    .ok());
  }
  bool Exists(const std::string& key) {
    return redis().Command({"EXISTS", key})->integer == 1;
  }
};

TEST_F(CountDownLatchTest, CountsDownToOpenAndCanBeArmedAgain) {
  CountDownLatch latch = client_->GetCountDownLatch(TestLockName());
  EXPECT_THAT(latch.GetCount(), testing::IsOkAndHolds(0));
  ASSERT_OK(latch.Await(absl::ZeroDuration()));  // open
  EXPECT_THAT(latch.TrySetCount(2), testing::IsOkAndHolds(true));
  EXPECT_THAT(latch.TrySetCount(5), testing::IsOkAndHolds(false));
  EXPECT_EQ(redis().Command({"GET", latch.name()})->str, "2");
  EXPECT_THAT(latch.Await(absl::Milliseconds(50)),
              testing::StatusIs(absl::StatusCode::kDeadlineExceeded,
                                HasSubstr("did not reach zero")));
  ASSERT_OK(latch.CountDown());
  EXPECT_THAT(latch.GetCount(), testing::IsOkAndHolds(1));
  ASSERT_OK(latch.CountDown());
  EXPECT_FALSE(Exists(latch.name()));
  ASSERT_OK(latch.Await(absl::ZeroDuration()));
  ASSERT_OK(latch.CountDown());  // open: nothing changes
  EXPECT_FALSE(Exists(latch.name()));
  EXPECT_THAT(latch.TrySetCount(1), testing::IsOkAndHolds(true));
  EXPECT_THAT(latch.GetCount(), testing::IsOkAndHolds(1));
}

// A child: `threads` threads each Await() the latch (60 s); prints "done"
// and exits 0 when every one saw it open.
RELOCK_CHILD_MAIN(LatchWaiters) {
  int threads = 0;
  if (args.size() != 3 || !absl::SimpleAtoi(args[2], &threads)) return 2;
  std::unique_ptr<Client> client = testing::MustConnect(args[0]);
  if (client == nullptr) return 3;
  CountDownLatch latch = client->GetCountDownLatch(args[1]);
  std::atomic<int> failures{0};
  std::vector<std::thread> waiters;
  for (int t = 0; t < threads; ++t) {
    waiters.emplace_back([&] {
      if (!latch.Await(absl::Seconds(60)).ok()) ++failures;
    });
  }
  for (std::thread& w : waiters) w.join();
  std::cout << "done" << std::endl;
  return failures.load() == 0 ? 0 : 4;
}

TEST_F(CountDownLatchTest, EveryWaiterInEveryProcessWakesAtZero) {
  constexpr int kChildren = 2, kThreads = 3, kAsync = 3, kOtherThreads = 2;
  const std::string name = TestLockName();
  CountDownLatch latch = client_->GetCountDownLatch(name);
  ASSERT_THAT(latch.TrySetCount(1), testing::IsOkAndHolds(true));
  std::vector<std::unique_ptr<ChildProcess>> children;
  for (int i = 0; i < kChildren; ++i) {
    absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Spawn(
        "LatchWaiters", {redis().url(), name, absl::StrCat(kThreads)});
    ASSERT_OK(child);
    children.push_back(*std::move(child));
  }
  std::vector<Future<absl::Status>> async;
  for (int i = 0; i < kAsync; ++i) {
    async.push_back(latch.AwaitAsync(absl::Seconds(60)));
  }
  std::unique_ptr<Client> other = MustConnect(redis().url());
  ASSERT_NE(other, nullptr);
  std::atomic<int> woken{0};
  std::vector<JoiningThread> threads;
  for (int i = 0; i < kOtherThreads; ++i) {
    threads.emplace_back([&] {
      if (other->GetCountDownLatch(name).Await(absl::Seconds(60)).ok()) {
        ++woken;
      }
    });
  }
  // Every client listens (each counts once), and this process's have no
  // request in flight: their waiters sleep until a message.
  ASSERT_OK(
      testing::WaitForSubscribers(redis(), LatchChannel(name), kChildren + 2));
  ASSERT_OK(testing::WaitUntilIdle(*client_));
  ASSERT_OK(testing::WaitUntilIdle(*other));
  for (const Future<absl::Status>& f : async) EXPECT_FALSE(f.Ready());
  Stopwatch since_zero;
  ASSERT_OK(latch.CountDown());
  for (Future<absl::Status>& f : async) EXPECT_OK(f.Get());
  for (JoiningThread& t : threads) t.join();
  EXPECT_EQ(woken.load(), kOtherThreads);
  testing::ExpectChildrenDone(children, absl::Seconds(60));
  EXPECT_LT(since_zero.Elapsed(), kWokenByMessage);
}

TEST_F(CountDownLatchTest, RedissonScriptsShareTheLatchBothWays) {
  // Review finding: for a name with "{" relock published on another
  // channel than Redisson's ("...__job:{42}" for "...__{job:{42}}").
  for (const std::string& name : {TestLockName(), TestLockName("job:{42}")}) {
    SCOPED_TRACE(name);
    CountDownLatch latch = client_->GetCountDownLatch(name);
    // Redisson sets and counts down; relock waits and wakes.
    EXPECT_EQ(RedissonTrySetCount(name, 2), 1);
    EXPECT_THAT(latch.TrySetCount(7), testing::IsOkAndHolds(false));
    EXPECT_THAT(latch.GetCount(), testing::IsOkAndHolds(2));
    std::atomic<bool> open{false};
    JoiningThread waiter([&] { open = latch.Await(absl::Seconds(60)).ok(); });
    ASSERT_OK(WaitUntilWaiting(redis(), LatchChannel(name), *client_));
    RedissonCountDown(name);
    ASSERT_OK(WaitUntilWaiting(redis(), LatchChannel(name), *client_));
    EXPECT_FALSE(open.load());
    Stopwatch since_zero;
    RedissonCountDown(name);
    waiter.join();
    EXPECT_TRUE(open.load());
    EXPECT_LT(since_zero.Elapsed(), kWokenByMessage);
    // relock sets and counts down where Redisson's waiters listen: "1" for a
    // new count, "0" at zero.
    absl::StatusOr<RawConnection> listener =
        RawConnection::Connect(redis().port());
    ASSERT_OK(listener);
    ASSERT_OK(listener->Command({"SUBSCRIBE", LatchChannel(name)}));
    ASSERT_THAT(latch.TrySetCount(1), testing::IsOkAndHolds(true));
    EXPECT_EQ(RedissonTrySetCount(name, 3), 0);
    for (const char* expected : {"1", "0"}) {
      if (std::string(expected) == "0") {
        ASSERT_OK(latch.CountDown());
      }
      absl::StatusOr<RedisValue> message = listener->NextReply();
      ASSERT_OK(message);
      ASSERT_EQ(message->elements.size(), 3u) << *message;
      EXPECT_EQ(message->elements[2].str, expected);
    }
    EXPECT_FALSE(Exists(name));  // Redisson's getCount: 0
  }
}

// A Redisson latch may count up to Java's Long.MAX_VALUE: GetCount() reads
// it exactly (a Lua number is exact only within 2^53; a review found 2^63 - 1
// read back as -2^63), and so does a semaphore's query and Drain().
TEST_F(CountDownLatchTest, CountsBeyondTwoToThe53AreReadExactly) {
  const std::string name = TestLockName();
  CountDownLatch latch = client_->GetCountDownLatch(name);
  Semaphore semaphore = client_->GetSemaphore(name);
  for (const int64_t count :
       {std::numeric_limits<int64_t>::max(), int64_t{9007199254740993},
        std::numeric_limits<int64_t>::min() + 1}) {
    ASSERT_OK(redis().Command({"SET", name, absl::StrCat(count)}));
    if (count > 0) {
      EXPECT_THAT(latch.GetCount(), testing::IsOkAndHolds(count));
    }
    EXPECT_THAT(semaphore.AvailablePermits(), testing::IsOkAndHolds(count));
    absl::StatusOr<SemaphoreInfo> info = client_->InspectSemaphore(name);
    ASSERT_OK(info);
    EXPECT_EQ(info->available, count);
    EXPECT_THAT(client_->GetPermitExpirableSemaphore(name).AvailablePermits(),
                testing::IsOkAndHolds(count));
    EXPECT_THAT(semaphore.Drain(), testing::IsOkAndHolds(count));
    EXPECT_EQ(redis().Command({"GET", name})->str, "0");
  }
}

// Review finding: a client without pub/sub (ClientOptions::pubsub false)
// published nothing, so Redisson's waiters (which never re-check) slept on.
TEST_F(CountDownLatchTest, AClientWithoutPubSubStillPublishes) {
  const std::string name = TestLockName();
  std::unique_ptr<Client> polling =
      MustConnect(redis().url(), [](ClientOptions& o) { o.pubsub = false; });
  ASSERT_NE(polling, nullptr);
  CountDownLatch latch = polling->GetCountDownLatch(name);
  absl::StatusOr<RawConnection> listener =
      RawConnection::Connect(redis().port());
  ASSERT_OK(listener);
  ASSERT_OK(listener->Command({"SUBSCRIBE", LatchChannel(name)}));
  ASSERT_THAT(latch.TrySetCount(2), testing::IsOkAndHolds(true));
  ASSERT_OK(latch.CountDown());
  ASSERT_OK(latch.CountDown());
  for (const char* expected : {"1", "0"}) {
    absl::StatusOr<RedisValue> message = listener->NextReply();
    ASSERT_OK(message);
    ASSERT_EQ(message->elements.size(), 3u) << *message;
    EXPECT_EQ(message->elements[2].str, expected);
  }
  EXPECT_FALSE(Exists(name));
}

TEST_F(CountDownLatchTest, CloseCancelsAPendingAwait) {
  const std::string name = TestLockName();
  CountDownLatch latch = client_->GetCountDownLatch(name);
  ASSERT_OK(latch.TrySetCount(1));
  Future<absl::Status> pending = latch.AwaitAsync(absl::InfiniteDuration());
  ASSERT_OK(WaitUntilWaiting(redis(), LatchChannel(name), *client_));
  client_->Close();
  EXPECT_THAT(pending.Get(), testing::StatusIs(absl::StatusCode::kCancelled));
  EXPECT_THAT(latch.CountDown(),
              testing::StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(redis().Command({"GET", name})->str, "1");
}

TEST_F(CountDownLatchTest, BadInputGetsAPreciseStatusAndChangesNothing) {
  CountDownLatch latch = client_->GetCountDownLatch(TestLockName());
  for (int64_t bad : {int64_t{0}, int64_t{-1}, kMaxCount + 1,
                      std::numeric_limits<int64_t>::max(),
                      std::numeric_limits<int64_t>::min()}) {
    EXPECT_THAT(latch.TrySetCount(bad),
                testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                  HasSubstr("count must be in [1, ")))
        << bad;
  }
  EXPECT_FALSE(Exists(latch.name()));
  EXPECT_THAT(latch.Await(absl::Seconds(-1)),
              testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(latch.AwaitAsync(absl::Seconds(-1)).Get(),
              testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(client_->GetCountDownLatch("").CountDown(),
              testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(CountDownLatch().GetCount(),
              testing::StatusIs(absl::StatusCode::kFailedPrecondition));

  const std::string hash = TestLockName("hash");
  ASSERT_TRUE(redis().Command({"HSET", hash, "a", "1"}).ok());
  const std::string text = TestLockName("text");
  ASSERT_TRUE(redis().Command({"SET", text, "one"}).ok());
  for (const std::string& name : {hash, text}) {
    CountDownLatch other = client_->GetCountDownLatch(name);
    EXPECT_THAT(other.CountDown(),
                testing::StatusIs(absl::StatusCode::kFailedPrecondition,
                                  HasSubstr("NOTALATCH")))
        << name;
    EXPECT_THAT(other.TrySetCount(1),
                testing::StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_THAT(other.GetCount(),
                testing::StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_THAT(other.Await(absl::Seconds(5)),
                testing::StatusIs(absl::StatusCode::kFailedPrecondition));
  }
  EXPECT_EQ(redis().Command({"HGET", hash, "a"})->str, "1");
  EXPECT_EQ(redis().Command({"GET", text})->str, "one");
}

class CountDownLatchClusterTest : public ::testing::Test {};

TEST_F(CountDownLatchClusterTest, KeyAndChannelStayInTheNamesSlot) {
  testing::RedisCluster& cluster = testing::SharedRedisCluster();
  std::unique_ptr<Client> setter = MustConnect(cluster.url());
  std::unique_ptr<Client> waiting = MustConnect(cluster.url());
  ASSERT_NE(setter, nullptr);
  ASSERT_NE(waiting, nullptr);
  for (const std::string& name : testing::NamesOnEveryMaster(cluster, 1)) {
    CountDownLatch latch = setter->GetCountDownLatch(name);
    ASSERT_THAT(latch.TrySetCount(1), testing::IsOkAndHolds(true)) << name;
    testing::RedisServer& master = testing::MasterOf(cluster, name);
    EXPECT_EQ(master.Command({"GET", name})->str, "1") << name;
    std::atomic<bool> open{false};
    JoiningThread waiter([&] {
      open = waiting->GetCountDownLatch(name).Await(absl::Seconds(60)).ok();
    });
    ASSERT_OK(WaitUntilWaiting(master, LatchChannel(name), *waiting, 1,
                               testing::PubSub::kSharded))
        << name;
    Stopwatch since_zero;
    ASSERT_OK(latch.CountDown()) << name;
    waiter.join();
    EXPECT_TRUE(open.load()) << name;
    EXPECT_LT(since_zero.Elapsed(), kWokenByMessage) << name;
  }
  // Review finding: Redisson's latch channel wraps the whole name in braces,
  // so for a name with "}" ("job:{42}", "jobs}a") it lands in another slot
  // (CROSSSLOT). Refused, with nothing written.
  for (const std::string& name :
       {TestLockName("job:{42}"), TestLockName("jobs}a")}) {
    CountDownLatch latch = setter->GetCountDownLatch(name);
    EXPECT_THAT(latch.TrySetCount(1),
                testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                  HasSubstr("another hash slot")))
        << name;
    EXPECT_THAT(latch.CountDown(),
                testing::StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(latch.Await(absl::ZeroDuration()),
                testing::StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_EQ(
        testing::MasterOf(cluster, name).Command({"EXISTS", name})->integer, 0);
  }
}

}  // namespace
}  // namespace relock
