// Explicit owners (relock::Owner) on a real redis-server: a token's hold
// belongs to the token, whichever thread calls; tokens, threads and other
// tokens exclude each other; the owner field is Redisson's; a token's hold
// outlives the thread that took it.

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/api/client_access.h"
#include "relock/relock.h"
#include "tests/test_util.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace {

using ::relock::testing::TestLockName;

class OwnerTest : public testing::RedisClientTest {};

TEST(OwnerTokenTest, TokensAreDistinctFromEachOtherAndFromThreads) {
  const Owner a = Owner::New();
  const Owner b = Owner::New();
  EXPECT_TRUE(a.valid());
  EXPECT_FALSE(a.is_thread());
  EXPECT_NE(a, b);
  EXPECT_NE(a, Owner::ThisThread());
  EXPECT_EQ(Owner::ThisThread(), Owner::ThisThread());
  EXPECT_TRUE(Owner::ThisThread().is_thread());
  Owner other_thread;
  std::thread([&] { other_thread = Owner::ThisThread(); }).join();
  EXPECT_NE(other_thread, Owner::ThisThread());
  const Owner copy = a;
  EXPECT_EQ(copy, a);
  EXPECT_FALSE(Owner().valid());
}

TEST_F(OwnerTest, ATokenTakenOnOneThreadIsReleasedOnAnother) {
  Lock lock = client_->GetLock(TestLockName());
  const Owner task = Owner::New();
  std::thread([&] { EXPECT_OK(lock.Acquire(task)); }).join();
  EXPECT_EQ(*lock.HoldCount(task), 1);
  EXPECT_EQ(*lock.IsHeldBy(task), true);
  EXPECT_EQ(*lock.IsHeldByCurrentThread(), false);
  std::thread([&] { EXPECT_OK(lock.Release(task)); }).join();
  EXPECT_EQ(*lock.IsLocked(), false);
}

TEST_F(OwnerTest, ATokenReentersFromAnyThread) {
  Lock lock = client_->GetLock(TestLockName());
  const Owner task = Owner::New();
  ASSERT_OK(lock.Acquire(task));
  // Another thread, on the token's behalf: a re-entry, not a wait.
  std::thread([&] {
    EXPECT_OK(lock.TryAcquire(task, absl::ZeroDuration()));
  }).join();
  EXPECT_EQ(*lock.HoldCount(task), 2);
  std::thread([&] { EXPECT_OK(lock.Release(task)); }).join();
  EXPECT_EQ(*lock.IsLocked(), true);
  ASSERT_OK(lock.Release(task));
  EXPECT_EQ(*lock.IsLocked(), false);
  EXPECT_EQ(lock.Release(task).code(), absl::StatusCode::kFailedPrecondition);
}

// A token's re-entries of its watchdog hold, blocking or asynchronous, are
// counted in the client: Redis sees one acquire and one release script for
// a nested chain of depth 5 (Redis's count stays 1), and the asynchronous
// ones still complete on the event loop thread, not the caller's.
TEST_F(OwnerTest, ATokenReentersWithoutARoundTrip) {
  // A lease long enough that no renewal runs during the test.
  std::unique_ptr<Client> client = testing::MustConnect(
      redis().url(),
      [](ClientOptions& o) { o.lock_watchdog_timeout = absl::Minutes(10); });
  ASSERT_NE(client, nullptr);
  Lock lock = client->GetLock(TestLockName());
  const Owner task = Owner::New();
  ASSERT_OK(redis().Command({"CONFIG", "RESETSTAT"}));
  ASSERT_OK(lock.Acquire(task));
  for (int i = 0; i < 2; ++i) ASSERT_OK(lock.Acquire(task));
  const std::thread::id caller = std::this_thread::get_id();
  for (int i = 0; i < 2; ++i) {
    // The callbacks: each on the loop thread, never the caller's.
    std::atomic<int> done{0}, on_caller{0};
    auto callback = [&](absl::Status s) {
      EXPECT_OK(s);
      on_caller += std::this_thread::get_id() == caller ? 1 : 0;
      ++done;
    };
    lock.AcquireAsync(task, callback);
    ASSERT_TRUE(testing::Eventually([&] { return done.load() == 1; }));
    lock.ReleaseAsync(task, callback);
    ASSERT_TRUE(testing::Eventually([&] { return done.load() == 2; }));
    lock.AcquireAsync(task, callback);
    ASSERT_TRUE(testing::Eventually([&] { return done.load() == 3; }));
    EXPECT_EQ(on_caller.load(), 0);
  }
  EXPECT_EQ(*lock.HoldCount(task), 5);
  absl::StatusOr<testing::RedisValue> count = redis().Command(
      {"HGET", lock.name(), absl::StrCat(client->id(), ":", task.number())});
  ASSERT_OK(count);
  EXPECT_EQ(count->str, "1");
  for (int i = 0; i < 4; ++i) ASSERT_OK(lock.Release(task));
  EXPECT_TRUE(*lock.IsLocked());
  ASSERT_OK(lock.ReleaseAsync(task).Get());
  EXPECT_FALSE(*lock.IsLocked());
  // One acquire and one release script in all (plus the queries).
  EXPECT_EQ(testing::Calls(redis(), "evalsha"), 2 + 3);
}

TEST_F(OwnerTest, TokensAndTheCallingThreadExcludeEachOther) {
  Lock lock = client_->GetLock(TestLockName());
  const Owner first = Owner::New();
  const Owner second = Owner::New();
  ASSERT_OK(lock.Acquire(first));
  // Same thread, other owners: excluded.
  EXPECT_EQ(lock.TryAcquire(second, absl::ZeroDuration()).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(lock.TryAcquire(absl::ZeroDuration()).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(lock.Release().code(), absl::StatusCode::kFailedPrecondition);
  absl::Status not_second = lock.Release(second);
  EXPECT_EQ(not_second.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(not_second.message()),
              ::testing::HasSubstr(
                  absl::StrCat("not held by relock::Owner ", second.number())));
  EXPECT_EQ(*lock.IsHeldBy(second), false);
  ASSERT_OK(lock.Release(first));
  // And the other way round: the thread holds it, a token waits.
  ASSERT_OK(lock.Acquire());
  EXPECT_EQ(lock.TryAcquire(first, absl::ZeroDuration()).code(),
            absl::StatusCode::kDeadlineExceeded);
  ASSERT_OK(lock.Release());
}

TEST_F(OwnerTest, TheOwnerFieldIsTheClientIdAndTheOwnerNumber) {
  Lock lock = client_->GetLock(TestLockName());
  const Owner task = Owner::New();
  ASSERT_OK(lock.Acquire(task));
  absl::StatusOr<testing::RedisValue> fields =
      redis().Command({"HGETALL", lock.name()});
  ASSERT_OK(fields);
  ASSERT_EQ(fields->elements.size(), 2u);
  EXPECT_EQ(fields->elements[0].str,
            absl::StrCat(client_->id(), ":", task.number()));
  EXPECT_EQ(fields->elements[1].str, "1");
  ASSERT_OK(lock.Release(task));
}

TEST_F(OwnerTest, ATokensHoldOutlivesTheThreadThatTookIt) {
  Lock by_token = client_->GetLock(TestLockName("token"));
  Lock by_thread = client_->GetLock(TestLockName("thread"));
  const Owner task = Owner::New();
  uint64_t thread_number = 0;
  std::thread([&] {
    EXPECT_OK(by_token.Acquire(task));
    EXPECT_OK(by_thread.Acquire());
    thread_number = Owner::ThisThread().number();
  }).join();
  // The thread's own hold is reported and dropped at its exit (before
  // join() returned); the token's is neither.
  LockEvent event;
  ASSERT_TRUE(events_.WaitFor(LockEventType::kOwnerThreadExited,
                              absl::Seconds(10), &event));
  EXPECT_EQ(event.lock_name, by_thread.name());
  const watchdog::HoldRegistry& holds =
      internal::ClientAccess::Core(*client_).holds();
  EXPECT_FALSE(holds.Find(by_thread.name(), thread_number).has_value());
  absl::optional<watchdog::Hold> kept =
      holds.Find(by_token.name(), task.number());
  ASSERT_TRUE(kept.has_value());
  EXPECT_TRUE(kept->watchdog);  // still renewed
  for (const LockEvent& e : events_.events()) {
    EXPECT_NE(e.lock_name, by_token.name()) << e.status;
  }
  EXPECT_OK(by_token.SafeUntil(task));
  ASSERT_OK(by_token.Release(task));
  ASSERT_OK(by_thread.ForceRelease());
}

TEST_F(OwnerTest, ADefaultConstructedOwnerIsRejected) {
  Lock lock = client_->GetLock(TestLockName());
  const Owner none;
  EXPECT_EQ(lock.Acquire(none).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lock.TryAcquire(none, absl::Seconds(1)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lock.Release(none).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lock.HoldCount(none).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lock.SafeUntil(none).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*lock.IsLocked(), false);
}

// Tasks hop between two worker threads, each task with its own token: the
// lock excludes tasks, not threads.
TEST_F(OwnerTest, TasksThatMoveBetweenThreadsExcludeEachOther) {
  Lock lock = client_->GetLock(TestLockName());
  constexpr int kTasks = 6;
  constexpr int kRounds = 20;
  std::vector<Owner> tasks;
  for (int i = 0; i < kTasks; ++i) tasks.push_back(Owner::New());
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::atomic<int> failures{0};
  std::atomic<int> sections{0};
  // Worker w acquires for the tasks t with t % 2 == w; each release runs on
  // a thread of its own, on the task's behalf.
  auto worker = [&](int w) {
    for (int r = 0; r < kRounds; ++r) {
      for (int t = w; t < kTasks; t += 2) {
        const Owner& task = tasks[t];
        if (!lock.Acquire(task).ok()) {
          failures.fetch_add(1);
          continue;
        }
        if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
        sections.fetch_add(1);
        inside.fetch_sub(1);
        // Released by the other worker, on the task's behalf.
        std::thread([&lock, task, &failures] {
          if (!lock.Release(task).ok()) failures.fetch_add(1);
        }).join();
      }
    }
  };
  std::thread a(worker, 0);
  std::thread b(worker, 1);
  a.join();
  b.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(sections.load(), kTasks * kRounds);
  EXPECT_EQ(*lock.IsLocked(), false);
}

}  // namespace
}  // namespace relock
