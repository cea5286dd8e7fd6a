// Exclusion across processes: children of this test binary (re-executed via
// /proc/self/exe) contend for locks with relock.

#include <csignal>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "relock/relock.h"
#include "tests/test_util.h"
#include "tests/testing/child_process.h"

namespace relock {
namespace {

using ::relock::testing::ChildProcess;
using ::relock::testing::MustConnect;
using ::relock::testing::Stopwatch;
using ::relock::testing::TestLockName;

std::unique_ptr<Client> ChildConnect(const std::string& url,
                                     absl::Duration watchdog) {
  ClientOptions options;
  options.url = url;
  options.lock_watchdog_timeout = watchdog;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  if (!client.ok()) {
    std::cerr << "child: " << client.status() << std::endl;
    return nullptr;
  }
  return *std::move(client);
}

// args: url, port, lock name, counter key, iterations. Each iteration does
// GET; pause; SET+1 of the counter under the lock, which loses updates unless
// the lock excludes the other processes. Prints "done".
RELOCK_CHILD_MAIN(CountUnderLock) {
  std::unique_ptr<Client> client = ChildConnect(args[0], absl::Seconds(30));
  int port = 0, iterations = 0;
  if (client == nullptr || !absl::SimpleAtoi(args[1], &port) ||
      !absl::SimpleAtoi(args[4], &iterations)) {
    return 2;
  }
  Lock lock = client->GetLock(args[2]);
  for (int i = 0; i < iterations; ++i) {
    std::lock_guard<Lock> guard(lock);
    // Plain commands on their own connections, outside relock.
    absl::StatusOr<testing::RedisValue> value =
        testing::CommandOnPort(port, {"GET", args[3]});
    int64_t n = 0;
    if (!value.ok() ||
        (!value->is_nil() && !absl::SimpleAtoi(value->str, &n))) {
      return 4;
    }
    absl::SleepFor(absl::Microseconds(200));
    if (!testing::CommandOnPort(port, {"SET", args[3], absl::StrCat(n + 1)})
             .ok()) {
      return 5;
    }
  }
  std::cout << "done" << std::endl;
  return 0;
}

// args: url, lock name, lease ("watchdog" or milliseconds), watchdog ms.
// Acquires, prints "locked", then on a stdin line "release" releases and
// prints "released"; exits at EOF.
RELOCK_CHILD_MAIN(HoldLock) {
  int64_t watchdog_ms = 0;
  if (!absl::SimpleAtoi(args[3], &watchdog_ms)) return 2;
  std::unique_ptr<Client> client =
      ChildConnect(args[0], absl::Milliseconds(watchdog_ms));
  if (client == nullptr) return 2;
  Lock lock = client->GetLock(args[1]);
  absl::Status s;
  int64_t lease_ms = 0;
  if (args[2] == "watchdog") {
    s = lock.Acquire();
  } else if (absl::SimpleAtoi(args[2], &lease_ms)) {
    s = lock.Acquire(absl::Milliseconds(lease_ms));
  } else {
    return 2;
  }
  if (!s.ok()) {
    std::cerr << "child: " << s << std::endl;
    return 4;
  }
  std::cout << "locked" << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line == "release") {
      s = lock.Release();
      std::cout << (s.ok() ? "released" : s.ToString()) << std::endl;
    }
  }
  return 0;
}

class MultiProcessTest : public testing::RedisTest {};

TEST_F(MultiProcessTest, ProcessesExcludeEachOther) {
  constexpr int kChildren = 3;
  constexpr int kIterations = 60;
  const std::string name = TestLockName();
  const std::string counter = TestLockName("counter");
  std::vector<std::unique_ptr<ChildProcess>> children;
  for (int i = 0; i < kChildren; ++i) {
    absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Spawn(
        "CountUnderLock", {redis().url(), absl::StrCat(redis().port()), name,
                           counter, absl::StrCat(kIterations)});
    ASSERT_TRUE(child.ok()) << child.status();
    children.push_back(*std::move(child));
  }
  for (auto& child : children) {
    absl::StatusOr<std::string> line = child->ReadLine(absl::Seconds(120));
    EXPECT_TRUE(line.ok() && *line == "done")
        << (line.ok() ? *line : line.status().ToString());
    absl::StatusOr<int> code = child->Wait(absl::Seconds(30));
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 0);
  }
  absl::StatusOr<testing::RedisValue> value = redis().Command({"GET", counter});
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(value->str, absl::StrCat(kChildren * kIterations))
      << "lost updates: two processes were inside the lock at once";
  EXPECT_EQ(redis().Command({"EXISTS", name})->integer, 0);
}

TEST_F(MultiProcessTest, WaiterInThisProcessGetsTheLockWhenAChildReleases) {
  const std::string name = TestLockName();
  absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Spawn(
      "HoldLock", {redis().url(), name, "watchdog", "30000"});
  ASSERT_TRUE(child.ok()) << child.status();
  ASSERT_EQ(*(*child)->ReadLine(absl::Seconds(30)), "locked");
  std::unique_ptr<Client> client = MustConnect(redis().url());
  Lock lock = client->GetLock(name);
  EXPECT_EQ(lock.TryAcquire(absl::Milliseconds(200)).code(),
            absl::StatusCode::kDeadlineExceeded);
  absl::Status acquired, released;
  std::thread waiter([&] {
    acquired = lock.TryAcquire(absl::Seconds(20));
    if (acquired.ok()) released = lock.Release();
  });
  absl::SleepFor(absl::Milliseconds(200));
  Stopwatch watch;
  ASSERT_TRUE((*child)->WriteLine("release").ok());
  waiter.join();
  EXPECT_TRUE(acquired.ok()) << acquired;
  EXPECT_LT(watch.Elapsed(), absl::Seconds(2));
  EXPECT_EQ(*(*child)->ReadLine(absl::Seconds(10)), "released");
  EXPECT_TRUE(released.ok()) << released;
}

TEST_F(MultiProcessTest, LockOfAKilledHolderFreesWhenItsLeaseEnds) {
  const std::string name = TestLockName();
  absl::StatusOr<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Spawn("HoldLock", {redis().url(), name, "1500", "30000"});
  ASSERT_TRUE(child.ok()) << child.status();
  ASSERT_EQ(*(*child)->ReadLine(absl::Seconds(30)), "locked");
  Stopwatch since_kill;
  ASSERT_TRUE((*child)->Signal(SIGKILL).ok());
  EXPECT_EQ(*(*child)->Wait(absl::Seconds(10)), 128 + SIGKILL);
  std::unique_ptr<Client> client = MustConnect(redis().url());
  Lock lock = client->GetLock(name);
  ASSERT_TRUE(lock.TryAcquire(absl::Seconds(20)).ok());
  EXPECT_LT(since_kill.Elapsed(), absl::Seconds(5));
  EXPECT_TRUE(lock.Release().ok());
}

}  // namespace
}  // namespace relock
