// Client::GetSpinLock() (Redisson's RSpinLock) and ClientOptions::pubsub
// false on a real redis-server: a spin lock is the reentrant lock's data
// model and waits by backoff, never subscribing; Redisson's lock scripts
// exclude it and hand it over both ways; a backoff that gives up ends the
// wait; a client whose ACL user may use no channel (as a server that
// refuses SUBSCRIBE) waits for locks, permits and latches by backoff, and
// its releases succeed although their PUBLISH is refused.

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "relock/relock.h"
#include "tests/redisson_scripts.h"
#include "tests/test_util.h"
#include "tests/testing/child_process.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace {

using ::relock::testing::Calls;
using ::relock::testing::Eventually;
using ::relock::testing::JoiningThread;
using ::relock::testing::kRedissonLock;
using ::relock::testing::kRedissonUnlock;
using ::relock::testing::LockChannel;
using ::relock::testing::MustConnect;
using ::relock::testing::RedisValue;
using ::relock::testing::SemaphoreChannel;
using ::relock::testing::Subscribers;
using ::relock::testing::TestLockName;

constexpr char kRedissonOwner[] = "0b6b2f6e-1c54-4a3c-9d7e-3f1f0c2a9e11:77";

class SpinLockTest : public testing::RedisClientTest {
 protected:
  // The script calls so far (every acquire attempt is one).
  int64_t Attempts() { return Calls(redis(), "evalsha"); }
  // Waits until at least `n` attempts were made after `since`, and checks
  // that nobody listens on `channel` meanwhile.
  void ExpectSpinning(int64_t since, const std::string& channel) {
    EXPECT_TRUE(Eventually([&] { return Attempts() - since >= 3; }))
        << Attempts() - since;
    EXPECT_THAT(Subscribers(redis(), channel), testing::IsOkAndHolds(0));
  }
};

TEST_F(SpinLockTest, SharesTheLocksDataModelAndReentry) {
  const std::string name = TestLockName();
  Lock spin = client_->GetSpinLock(name);
  EXPECT_EQ(spin.name(), name);
  ASSERT_OK(spin.Acquire());
  ASSERT_OK(spin.Acquire());
  EXPECT_THAT(spin.HoldCount(), testing::IsOkAndHolds(2));
  absl::StatusOr<RedisValue> fields = redis().Command({"HGETALL", name});
  ASSERT_OK(fields);
  ASSERT_EQ(fields->elements.size(), 2u);
  EXPECT_THAT(fields->elements[0].str, ::testing::StartsWith(client_->id()));
  // The plain lock of the name is the same lock.
  absl::Status other;
  JoiningThread([&] {
    other = client_->GetLock(name).TryAcquire(absl::ZeroDuration());
  }).join();
  EXPECT_THAT(other, testing::StatusIs(absl::StatusCode::kDeadlineExceeded));
  ASSERT_OK(spin.Release());
  ASSERT_OK(spin.Release());
  EXPECT_EQ(redis().Command({"EXISTS", name})->integer, 0);
}

TEST_F(SpinLockTest, AWaiterTakesOverByBackoffWithoutSubscribing) {
  const std::string name = TestLockName();
  Lock holder = client_->GetLock(name);
  ASSERT_OK(holder.Acquire());
  std::unique_ptr<Client> other = MustConnect(redis().url());
  ASSERT_NE(other, nullptr);
  ASSERT_TRUE(redis().Command({"CONFIG", "RESETSTAT"}).ok());
  const int64_t before = Attempts();
  std::atomic<bool> got{false};
  JoiningThread waiter([&] {
    Lock spin = other->GetSpinLock(name);
    got = spin.TryAcquire(absl::Seconds(30)).ok();
    if (got) {
      EXPECT_OK(spin.Release());
    }
  });
  ExpectSpinning(before, LockChannel(name));
  EXPECT_FALSE(got.load());
  ASSERT_OK(holder.Release());
  waiter.join();
  EXPECT_TRUE(got.load());
}

TEST_F(SpinLockTest, RedissonLockScriptsHandOverBothWays) {
  const std::string name = TestLockName();
  Lock spin = client_->GetSpinLock(name);
  auto redisson_lock = [&] {
    return *redis().Command(
        {"EVAL", kRedissonLock, "1", name, "30000", kRedissonOwner});
  };
  // Redisson holds; the spin lock waits and takes over at its unlock.
  ASSERT_TRUE(redisson_lock().is_nil());
  EXPECT_THAT(spin.TryAcquire(absl::ZeroDuration()),
              testing::StatusIs(absl::StatusCode::kDeadlineExceeded));
  // (An explicit owner: this thread releases what the waiter takes.)
  const Owner owner = Owner::New();
  std::atomic<bool> got{false};
  JoiningThread waiter(
      [&] { got = spin.TryAcquire(owner, absl::Seconds(30)).ok(); });
  ASSERT_TRUE(redis().Command({"CONFIG", "RESETSTAT"}).ok());
  ExpectSpinning(Attempts(), LockChannel(name));
  ASSERT_TRUE(
      redis()
          .Command({"EVAL", kRedissonUnlock, "2", name, LockChannel(name), "0",
                    "30000", kRedissonOwner, "PUBLISH"})
          .ok());
  waiter.join();
  ASSERT_TRUE(got.load());
  // relock's spin lock holds; Redisson's lock finds it held, and gets it
  // once released.
  EXPECT_TRUE(redisson_lock().is_integer());
  ASSERT_OK(spin.Release(owner));
  EXPECT_TRUE(redisson_lock().is_nil());
}

TEST_F(SpinLockTest, ABackoffThatGivesUpEndsTheWait) {
  const std::string name = TestLockName();
  std::unique_ptr<Client> client =
      MustConnect(redis().url(), [](ClientOptions& o) {
        o.spin_backoff =
            *ListBackoff({absl::Milliseconds(1), absl::Milliseconds(1)});
      });
  ASSERT_NE(client, nullptr);
  ASSERT_OK(client_->GetLock(name).Acquire());
  absl::Status waited;
  JoiningThread([&] {
    waited = client->GetSpinLock(name).TryAcquire(absl::Seconds(60));
  }).join();
  EXPECT_THAT(waited, testing::StatusIs(absl::StatusCode::kDeadlineExceeded,
                                        ::testing::HasSubstr("held")));
}

// A child: connects to args[0] with a spin backoff of 2 s, waits for the
// spin lock args[1] (held by the parent) on a thread once the parent writes
// a line, and closes its client at the next line. Prints the wait's status code
// once it ended, or "hung" if it had not ended 30 s after Close() (then exits
// without joining the thread, which would block for good).
RELOCK_CHILD_MAIN(SpinWaiterOfAClosedClient) {
  if (args.size() != 2) return 2;
  std::unique_ptr<Client> client = MustConnect(args[0], [](ClientOptions& o) {
    o.spin_backoff = *ConstantBackoff(absl::Seconds(2));
  });
  if (client == nullptr) return 3;
  std::cout << "connected" << std::endl;
  std::string line;
  if (!std::getline(std::cin, line)) return 4;
  struct Wait {
    std::atomic<bool> done{false};
    std::atomic<int> code{-1};
  };
  auto wait = std::make_shared<Wait>();
  std::thread waiter([wait, lock = client->GetSpinLock(args[1])]() mutable {
    wait->code = static_cast<int>(lock.TryAcquire(absl::Minutes(5)).code());
    wait->done = true;
  });
  if (!std::getline(std::cin, line)) return 4;
  client->Close();
  if (!Eventually([&] { return wait->done.load(); }, absl::Seconds(30))) {
    std::cout << "hung" << std::endl;
    waiter.detach();
    std::_Exit(0);
  }
  waiter.join();
  std::cout << absl::StatusCodeToString(
                   static_cast<absl::StatusCode>(wait->code.load()))
            << std::endl;
  return 0;
}

// Review finding: Close() woke the waits that listen for messages, but not
// a spinning one (a spin lock's, or any wait of a client without pub/sub):
// its next re-check was a timer on the event loop that Close() stops, which
// never fired, and the blocked call never returned (its handle keeps the
// client's loop, and so that timer, alive).
TEST_F(SpinLockTest, CloseCancelsASpinningWaiter) {
  const std::string name = TestLockName();
  ASSERT_OK(client_->GetLock(name).Acquire());
  absl::StatusOr<std::unique_ptr<testing::ChildProcess>> child =
      testing::ChildProcess::Spawn("SpinWaiterOfAClosedClient",
                                   {redis().url(), name});
  ASSERT_OK(child);
  ASSERT_THAT((*child)->ReadLine(absl::Seconds(60)),
              testing::IsOkAndHolds(std::string("connected")));
  ASSERT_TRUE(redis().Command({"CONFIG", "RESETSTAT"}).ok());
  const int64_t before = Attempts();
  ASSERT_OK((*child)->WriteLine("wait"));
  // Its first attempt found the lock held: it spins (2 s to the next).
  ASSERT_TRUE(Eventually([&] { return Attempts() - before >= 1; }));
  ASSERT_OK((*child)->WriteLine("close"));
  EXPECT_THAT((*child)->ReadLine(absl::Seconds(90)),
              testing::IsOkAndHolds(std::string("CANCELLED")));
  EXPECT_THAT((*child)->Wait(absl::Seconds(30)), testing::IsOkAndHolds(0));
}

// Review finding: spin_backoff was not validated. A strategy that never
// pauses (a wait would send its re-checks back to back) or that gives a
// negative or infinite delay is refused at Connect(); one that gives up, or
// pauses at some retry, is taken.
TEST_F(SpinLockTest, ClientOptionsRefuseASpinBackoffThatNeverPauses) {
  auto connect = [&](std::shared_ptr<const BackoffStrategy> backoff) {
    ClientOptions options;
    options.url = redis().url();
    options.spin_backoff = std::move(backoff);
    return Client::Connect(options).status();
  };
  EXPECT_THAT(connect(*ZeroBackoff()),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                ::testing::HasSubstr("spin_backoff")));
  // (A custom strategy: the factories never give such delays.)
  class NegativeAtRetry3 : public BackoffStrategy {
   public:
    absl::optional<absl::Duration> NextDelay(int retry) const override {
      return retry == 3 ? absl::Milliseconds(-1) : absl::Milliseconds(1);
    }
  };
  EXPECT_THAT(connect(std::make_shared<NegativeAtRetry3>()),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                ::testing::HasSubstr("retry 3")));
  EXPECT_OK(connect(*ZeroBackoff(5)));
  EXPECT_OK(connect(StopBackoff()));
  EXPECT_OK(
      connect(*ListBackoff({absl::ZeroDuration(), absl::Milliseconds(5)})));
  EXPECT_OK(connect(nullptr));
}

// A client whose ACL user may use no channel: SUBSCRIBE and PUBLISH are
// refused, as on a server without pub/sub.
class NoPubSubTest : public SpinLockTest {
 protected:
  void SetUp() override {
    SpinLockTest::SetUp();
    ASSERT_TRUE(redis()
                    .Command({"ACL", "SETUSER", kUser, "reset", "on", ">secret",
                              "~*", "resetchannels", "+@all"})
                    .ok());
  }
  void TearDown() override { (void)redis().Command({"ACL", "DELUSER", kUser}); }
  std::unique_ptr<Client> ConnectAsUser(bool pubsub) {
    const std::string url = absl::StrReplaceAll(
        redis().url(),
        {{"redis://", absl::StrCat("redis://", kUser, ":secret@")}});
    return MustConnect(url, [pubsub](ClientOptions& o) { o.pubsub = pubsub; });
  }
  static constexpr char kUser[] = "relock-no-pubsub";
};

TEST_F(NoPubSubTest, WithPubSubAWaitFailsWithPermissionDenied) {
  std::unique_ptr<Client> user = ConnectAsUser(/*pubsub=*/true);
  ASSERT_NE(user, nullptr);
  const std::string name = TestLockName();
  ASSERT_OK(client_->GetLock(name).Acquire());
  absl::Status waited;
  JoiningThread([&] {
    waited = user->GetLock(name).TryAcquire(absl::Seconds(30));
  }).join();
  EXPECT_THAT(waited, testing::StatusIs(absl::StatusCode::kPermissionDenied));
}

TEST_F(NoPubSubTest, EveryWaitPollsAndReleasesSucceed) {
  std::unique_ptr<Client> user = ConnectAsUser(/*pubsub=*/false);
  ASSERT_NE(user, nullptr);
  // A lock (a plain one: every wait of the client polls).
  const std::string name = TestLockName("lock");
  Lock holder = client_->GetLock(name);
  ASSERT_OK(holder.Acquire());
  std::atomic<bool> got{false};
  {
    JoiningThread waiter([&] {
      Lock lock = user->GetLock(name);
      got = lock.TryAcquire(absl::Seconds(30)).ok();
      // Its PUBLISH is refused: no error without pub/sub.
      if (got) {
        EXPECT_OK(lock.Release());
      }
    });
    ASSERT_TRUE(redis().Command({"CONFIG", "RESETSTAT"}).ok());
    ExpectSpinning(Attempts(), LockChannel(name));
    ASSERT_OK(holder.Release());
  }
  EXPECT_TRUE(got.load());
  EXPECT_EQ(redis().Command({"EXISTS", name})->integer, 0);

  // A semaphore.
  const std::string sem_name = TestLockName("semaphore");
  Semaphore sem = user->GetSemaphore(sem_name);
  EXPECT_THAT(sem.TrySetPermits(0), testing::IsOkAndHolds(true));
  got = false;
  {
    JoiningThread waiter(
        [&] { got = sem.TryAcquire(1, absl::Seconds(30)).ok(); });
    ASSERT_TRUE(redis().Command({"CONFIG", "RESETSTAT"}).ok());
    ExpectSpinning(Attempts(), SemaphoreChannel(sem_name));
    ASSERT_OK(client_->GetSemaphore(sem_name).Release());
  }
  EXPECT_TRUE(got.load());
  ASSERT_OK(sem.Release());
  EXPECT_THAT(sem.AvailablePermits(), testing::IsOkAndHolds(1));

  // A count-down latch.
  const std::string latch_name = TestLockName("latch");
  CountDownLatch latch = user->GetCountDownLatch(latch_name);
  EXPECT_THAT(latch.TrySetCount(2), testing::IsOkAndHolds(true));
  ASSERT_OK(latch.CountDown());
  got = false;
  {
    JoiningThread waiter([&] { got = latch.Await(absl::Seconds(30)).ok(); });
    ASSERT_TRUE(redis().Command({"CONFIG", "RESETSTAT"}).ok());
    EXPECT_TRUE(Eventually([&] { return Attempts() >= 3; }));
    ASSERT_OK(latch.CountDown());
  }
  EXPECT_TRUE(got.load());
  EXPECT_EQ(redis().Command({"EXISTS", latch_name})->integer, 0);
}

}  // namespace
}  // namespace relock
