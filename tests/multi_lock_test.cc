// relock::MultiLock against real redis-servers: all or nothing over locks on
// two servers (two clients), one deadline for the whole call, a server down
// part-way leaves nothing held, two multi-locks over overlapping sets given
// in different orders from many threads never deadlock and exclude each
// other, re-entry of a component held alone, the asynchronous calls, bad
// input.

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "relock/relock.h"
#include "tests/test_util.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace {

using ::relock::testing::MustConnect;
using ::relock::testing::RedisServer;
using ::relock::testing::StatusIs;
using ::relock::testing::Stopwatch;
using ::relock::testing::TestLockName;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class MultiLockTest : public testing::RedisTest {
 protected:
  void SetUp() override {
    RedisTest::SetUp();
    absl::StatusOr<std::unique_ptr<RedisServer>> other = RedisServer::Start();
    ASSERT_OK(other);
    other_ = *std::move(other);
    auto fast = [](ClientOptions& o) {
      o.connect_timeout = absl::Milliseconds(300);
      o.command_timeout = absl::Milliseconds(300);
    };
    here_ = MustConnect(redis().url(), fast);
    there_ = MustConnect(other_->url(), fast);
    ASSERT_TRUE(here_ != nullptr && there_ != nullptr);
  }

  bool Held(Lock& lock) { return lock.IsLocked().value_or(true); }

  std::unique_ptr<RedisServer> other_;
  std::unique_ptr<Client> here_;   // on redis()
  std::unique_ptr<Client> there_;  // on other_
};

TEST_F(MultiLockTest, TakesEveryLockAndReleasesEveryLock) {
  Lock a = here_->GetLock(TestLockName("a"));
  Lock b = there_->GetLock(TestLockName("b"));
  MultiLock both(b, a);
  EXPECT_THAT(both.names(), ElementsAre(a.name(), b.name()));  // by name
  ASSERT_OK(both.Acquire());
  EXPECT_EQ(a.HoldCount().value_or(-1), 1);
  EXPECT_EQ(b.HoldCount().value_or(-1), 1);
  ASSERT_OK(both.Release());
  EXPECT_FALSE(Held(a));
  EXPECT_FALSE(Held(b));
  {
    std::lock_guard<MultiLock> guard(both);
    EXPECT_TRUE(Held(a) && Held(b));
  }
  EXPECT_FALSE(Held(a) || Held(b));
}

TEST_F(MultiLockTest, OneDeadlineForTheWholeCallAndNothingLeftHeld) {
  Lock a = here_->GetLock(TestLockName("a"));
  Lock b = there_->GetLock(TestLockName("b"));
  std::unique_ptr<Client> rival = MustConnect(other_->url());
  ASSERT_NE(rival, nullptr);
  Lock b_by_rival = rival->GetLock(b.name());
  const Owner rival_owner = Owner::New();  // released from another thread
  ASSERT_OK(b_by_rival.Acquire(rival_owner));
  MultiLock both(a, b);
  Stopwatch took;
  absl::Status s = both.TryAcquire(absl::Milliseconds(300));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_LT(took.Elapsed(), absl::Seconds(5));
  EXPECT_FALSE(Held(a)) << "a was taken and kept";
  EXPECT_FALSE(both.try_lock());
  EXPECT_FALSE(Held(a));
  // Once the rival lets go, a waiting multi-lock gets both.
  std::thread release([&] {
    // Once the multi-lock waits for b.
    EXPECT_OK(testing::WaitUntilWaiting(*other_, testing::LockChannel(b.name()),
                                        *there_));
    EXPECT_OK(b_by_rival.Release(rival_owner));
  });
  EXPECT_OK(both.TryAcquire(absl::Seconds(20)));
  release.join();
  EXPECT_OK(both.Release());
}

// The second server stops after the clients connected: the lock on it
// fails, and the one taken before it (on the first server: its name sorts
// first) is released before the call returns.
TEST_F(MultiLockTest, AServerDownPartWayLeavesNothingHeld) {
  Lock a = here_->GetLock(TestLockName("a"));
  Lock b = there_->GetLock(TestLockName("b"));
  MultiLock both(a, b);
  ASSERT_OK(other_->Stop());
  absl::Status s = both.TryAcquire(absl::Seconds(2));
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(b.name()));
  EXPECT_FALSE(Held(a)) << "a stayed held after b failed";
  EXPECT_EQ(redis().Command({"EXISTS", a.name()})->integer, 0);
}

// Two multi-locks over overlapping sets, given in different orders, from 8
// threads of two clients: a deadlock would show as waits that time out.
// Shared components exclude (counters never see two holders).
TEST_F(MultiLockTest, OverlappingMultiLocksNeverDeadlock) {
  std::unique_ptr<Client> second = MustConnect(redis().url());
  ASSERT_NE(second, nullptr);
  const std::string a = TestLockName("a"), b = TestLockName("b"),
                    c = TestLockName("c"), d = TestLockName("d");
  MultiLock first_set(here_->GetLock(c), here_->GetLock(a), here_->GetLock(b));
  MultiLock second_set(second->GetLock(d), second->GetLock(b),
                       second->GetLock(c));
  std::atomic<int> inside_b{0}, inside_c{0}, overlaps{0}, failures{0},
      rounds{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      MultiLock& mine = t % 2 == 0 ? first_set : second_set;
      for (int i = 0; i < 15; ++i) {
        absl::Status s = mine.TryAcquire(absl::Seconds(30));
        if (!s.ok()) {
          ++failures;
          continue;
        }
        if (inside_b.fetch_add(1) != 0) ++overlaps;
        if (inside_c.fetch_add(1) != 0) ++overlaps;
        absl::SleepFor(absl::Microseconds(300));  // held a while
        inside_b.fetch_sub(1);
        inside_c.fetch_sub(1);
        if (!mine.Release().ok()) ++failures;
        ++rounds;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(rounds.load(), 8 * 15);
  for (const std::string& name : {a, b, c, d}) {
    EXPECT_EQ(redis().Command({"EXISTS", name})->integer, 0) << name;
  }
}

TEST_F(MultiLockTest, AComponentHeldAloneIsReentered) {
  Lock a = here_->GetLock(TestLockName("a"));
  Lock b = there_->GetLock(TestLockName("b"));
  ASSERT_OK(a.Acquire());
  MultiLock both(a, b);
  ASSERT_OK(both.Acquire());
  EXPECT_EQ(a.HoldCount().value_or(-1), 2);
  ASSERT_OK(both.Release());
  EXPECT_EQ(a.HoldCount().value_or(-1), 1);  // the hold taken alone stays
  EXPECT_FALSE(Held(b));
  EXPECT_OK(a.Release());
}

TEST_F(MultiLockTest, AsynchronousCallsTakeAndReleaseEverything) {
  Lock a = here_->GetLock(TestLockName("a"));
  Lock b = there_->GetLock(TestLockName("b"));
  MultiLock both(a, b);
  const Owner owner = Owner::New();
  ASSERT_OK(both.AcquireAsync(owner).Get());
  EXPECT_TRUE(a.IsHeldBy(owner).value_or(false));
  EXPECT_TRUE(b.IsHeldBy(owner).value_or(false));
  ASSERT_OK(both.ReleaseAsync(owner).Get());
  EXPECT_FALSE(Held(a) || Held(b));

  // b held by someone else: the asynchronous wait ends at its deadline and
  // gives a back first.
  ASSERT_OK(b.Acquire());
  const Owner other = Owner::New();
  absl::Status s = both.TryAcquireAsync(other, absl::Milliseconds(300)).Get();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_FALSE(Held(a));
  EXPECT_OK(b.Release());
}

TEST_F(MultiLockTest, BadInputIsRefusedClearly) {
  MultiLock empty;
  EXPECT_EQ(empty.Acquire().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(empty.Release().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(empty.AcquireAsync(Owner::New()).Get().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THROW(empty.lock(), LockError);
  MultiLock one(here_->GetLock(TestLockName("a")));
  EXPECT_EQ(one.TryAcquire(absl::Milliseconds(-1)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(one.Release().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(one.AcquireAsync(Owner::ThisThread()).Get().code(),
            absl::StatusCode::kInvalidArgument);
  one.unlock();  // not held: reported, never thrown
}

// One lock through two clients of one server: each client is another owner,
// so the set would wait for itself (for ever without a wait). Refused before
// anything is taken; listed twice from one client it is a re-entry.
TEST_F(MultiLockTest, OneLockThroughTwoClientsIsRefused) {
  std::unique_ptr<Client> also_here = MustConnect(redis().url());
  ASSERT_NE(also_here, nullptr);
  const std::string name = TestLockName();
  const std::string first = TestLockName("first");
  MultiLock both(here_->GetLock(first), here_->GetLock(name),
                 also_here->GetLock(name));
  Stopwatch watch;
  EXPECT_THAT(both.Acquire(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                       HasSubstr("through two clients")));
  EXPECT_THAT(both.AcquireAsync(Owner::New()).Get(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("through two clients")));
  EXPECT_LT(watch.Elapsed(), absl::Seconds(5));
  EXPECT_FALSE(here_->GetLock(first).IsLocked().value_or(true));  // none taken
  MultiLock twice(here_->GetLock(name), here_->GetLock(name));
  ASSERT_OK(twice.Acquire());
  EXPECT_EQ(here_->GetLock(name).HoldCount().value_or(-1), 2);
  ASSERT_OK(twice.Release());
  EXPECT_FALSE(here_->GetLock(name).IsLocked().value_or(true));
}

}  // namespace
}  // namespace relock
