// relock::FencedLock on a real redis-server: tokens that grow with every
// acquisition (re-entries and the inherited Lock calls included), across
// processes in acquisition order; a resource that checks tokens refuses a
// holder whose lease ran out while it was paused; Redisson's own fenced
// acquire script as a peer on the same lock and counter; the asynchronous
// calls; bad input.

#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "relock/relock.h"
#include "tests/redisson_scripts.h"
#include "tests/test_util.h"
#include "tests/testing/child_process.h"

namespace relock {
namespace {

using ::relock::testing::ChildProcess;
using ::relock::testing::kRedissonFencedAcquire;
using ::relock::testing::kRedissonUnlock;
using ::relock::testing::MustConnect;
using ::relock::testing::RedisValue;
using ::relock::testing::Stopwatch;
using ::relock::testing::TestLockName;
using ::testing::HasSubstr;

// A resource guarded by fencing tokens, as the README shows: a write is
// accepted only with a token at least as large as the largest seen (1), else
// refused (0). KEYS[1] the largest token seen, KEYS[2] the value; ARGV[1]
// the token, ARGV[2] the value.
constexpr char kGuardedWrite[] =
    "local seen = tonumber(redis.call('get', KEYS[1]) or '0') "
    "local token = tonumber(ARGV[1]) "
    "if token < seen then return 0 end "
    "redis.call('set', KEYS[1], ARGV[1]) "
    "redis.call('set', KEYS[2], ARGV[2]) "
    "return 1";

class FencedLockTest : public testing::RedisTest {
 protected:
  std::string TokenKey(const std::string& name) {
    return absl::StrCat("redisson_lock_token:{", name, "}");
  }
  int64_t Counter(const std::string& name) {
    absl::StatusOr<RedisValue> v = redis().Command({"GET", TokenKey(name)});
    int64_t n = -1;
    if (v.ok() && v->is_string()) (void)absl::SimpleAtoi(v->str, &n);
    return n;
  }
};

TEST_F(FencedLockTest, EveryAcquisitionTakesTheNextToken) {
  std::unique_ptr<Client> client = MustConnect(redis().url());
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  FencedLock lock = client->GetFencedLock(name);
  EXPECT_EQ(lock.GetToken().value_or(-1), 0);

  EXPECT_EQ(lock.LockAndGetToken().value_or(-1), 1);
  EXPECT_EQ(lock.LockAndGetToken().value_or(-1), 2);  // re-entry
  // The inherited calls take tokens too (Redisson's RFencedLock.lock()).
  lock.lock();
  EXPECT_EQ(lock.GetToken().value_or(-1), 3);
  EXPECT_EQ(lock.HoldCount().value_or(-1), 3);
  EXPECT_EQ(Counter(name), 3);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(lock.Release().ok());
  EXPECT_FALSE(lock.IsLocked().value_or(true));
  // Releases leave the counter alone; it keeps counting.
  EXPECT_EQ(lock.GetToken().value_or(-1), 3);
  EXPECT_EQ(lock.TryLockAndGetToken(absl::ZeroDuration()).value_or(-1), 4);
  EXPECT_EQ(lock.TryLockAndGetToken(absl::ZeroDuration(), absl::Seconds(5))
                .value_or(-1),
            5);
  EXPECT_TRUE(lock.Release().ok());
  EXPECT_TRUE(lock.Release().ok());
  // The counter is a plain integer with no TTL, in Redisson's key.
  absl::StatusOr<RedisValue> ttl = redis().Command({"PTTL", TokenKey(name)});
  ASSERT_TRUE(ttl.ok());
  EXPECT_EQ(ttl->integer, -1);
}

TEST_F(FencedLockTest, ALockAndAFencedLockOfOneNameAreOneLock) {
  std::unique_ptr<Client> a = MustConnect(redis().url());
  std::unique_ptr<Client> b = MustConnect(redis().url());
  ASSERT_TRUE(a != nullptr && b != nullptr);
  const std::string name = TestLockName();
  Lock plain = a->GetLock(name);
  FencedLock fenced = b->GetFencedLock(name);
  const Owner holder = Owner::New();  // released from another thread
  ASSERT_TRUE(plain.Acquire(holder).ok());
  absl::StatusOr<int64_t> refused =
      fenced.TryLockAndGetToken(absl::ZeroDuration());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(Counter(name), -1) << "a refused acquire took a token";
  std::thread release([&] {
    absl::SleepFor(absl::Milliseconds(200));
    EXPECT_TRUE(plain.Release(holder).ok());
  });
  Stopwatch waited;
  absl::StatusOr<int64_t> token = fenced.TryLockAndGetToken(absl::Seconds(20));
  release.join();
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, 1);
  EXPECT_LT(waited.Elapsed(), absl::Seconds(10));  // woken, not the lease
  EXPECT_TRUE(fenced.Release().ok());
}

// args: url, port, lock name, order key, iterations. Each iteration takes
// the lock with LockAndGetToken(), INCRs the order key inside the hold (the
// acquisition order, since holds exclude each other) and prints
// "<order> <token>"; then "done".
RELOCK_CHILD_MAIN(TakeTokens) {
  int port = 0, iterations = 0;
  if (args.size() != 5 || !absl::SimpleAtoi(args[1], &port) ||
      !absl::SimpleAtoi(args[4], &iterations)) {
    return 2;
  }
  ClientOptions options;
  options.url = args[0];
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  if (!client.ok()) return 3;
  FencedLock lock = (*client)->GetFencedLock(args[2]);
  for (int i = 0; i < iterations; ++i) {
    absl::StatusOr<int64_t> token = lock.LockAndGetToken();
    if (!token.ok()) {
      std::cerr << "child: " << token.status() << std::endl;
      return 4;
    }
    absl::StatusOr<RedisValue> order =
        testing::CommandOnPort(port, {"INCR", args[3]});
    if (!order.ok() || !order->is_integer()) return 5;
    std::cout << order->integer << " " << *token << std::endl;
    if (!lock.Release().ok()) return 6;
  }
  std::cout << "done" << std::endl;
  return 0;
}

// Three processes take the lock 40 times each: in acquisition order, the
// tokens strictly increase, and none repeats.
TEST_F(FencedLockTest, TokensGrowAcrossProcessesInAcquisitionOrder) {
  constexpr int kChildren = 3;
  constexpr int kIterations = 40;
  const std::string name = TestLockName();
  const std::string order_key = TestLockName("order");
  std::vector<std::unique_ptr<ChildProcess>> children;
  for (int i = 0; i < kChildren; ++i) {
    absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Spawn(
        "TakeTokens", {redis().url(), absl::StrCat(redis().port()), name,
                       order_key, absl::StrCat(kIterations)});
    ASSERT_TRUE(child.ok()) << child.status();
    children.push_back(*std::move(child));
  }
  std::map<int64_t, int64_t> token_by_order;
  for (auto& child : children) {
    while (true) {
      absl::StatusOr<std::string> line = child->ReadLine(absl::Seconds(120));
      ASSERT_TRUE(line.ok()) << line.status();
      if (*line == "done") break;
      std::vector<std::string> f = absl::StrSplit(*line, ' ');
      int64_t order = 0, token = 0;
      ASSERT_TRUE(f.size() == 2 && absl::SimpleAtoi(f[0], &order) &&
                  absl::SimpleAtoi(f[1], &token))
          << *line;
      EXPECT_TRUE(token_by_order.emplace(order, token).second)
          << "order " << order << " twice: two holders at once";
    }
    absl::StatusOr<int> code = child->Wait(absl::Seconds(30));
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 0);
  }
  ASSERT_EQ(token_by_order.size(), size_t{kChildren * kIterations});
  int64_t previous = 0;
  for (const auto& [order, token] : token_by_order) {
    EXPECT_GT(token, previous) << "acquisition " << order;
    previous = token;
  }
  EXPECT_EQ(previous, kChildren * kIterations);  // one token per acquisition
}

// The fencing pattern: a holder whose lease ran out while it was paused
// comes back and writes with its old token; the resource, having seen the
// next holder's larger token, refuses it.
TEST_F(FencedLockTest, AResourceRefusesAStaleHolderByItsToken) {
  std::unique_ptr<Client> a = MustConnect(redis().url());
  std::unique_ptr<Client> b = MustConnect(redis().url());
  ASSERT_TRUE(a != nullptr && b != nullptr);
  const std::string name = TestLockName();
  const std::string seen = TestLockName("seen");
  const std::string value = TestLockName("value");
  auto write = [&](int64_t token, const std::string& what) {
    absl::StatusOr<RedisValue> r = redis().Command(
        {"EVAL", kGuardedWrite, "2", seen, value, absl::StrCat(token), what});
    return r.ok() && r->is_integer() && r->integer == 1;
  };
  FencedLock stale = a->GetFencedLock(name);
  absl::StatusOr<int64_t> old_token =
      stale.LockAndGetToken(absl::Milliseconds(300));
  ASSERT_TRUE(old_token.ok()) << old_token.status();
  // "Paused" past its lease: the next holder gets in.
  FencedLock next = b->GetFencedLock(name);
  absl::StatusOr<int64_t> new_token =
      next.TryLockAndGetToken(absl::Seconds(10));
  ASSERT_TRUE(new_token.ok()) << new_token.status();
  EXPECT_GT(*new_token, *old_token);
  EXPECT_TRUE(write(*new_token, "from the current holder"));
  EXPECT_FALSE(write(*old_token, "from the stale holder"))
      << "the resource accepted the stale holder's token";
  EXPECT_EQ(redis().Command({"GET", value})->str, "from the current holder");
  EXPECT_FALSE(stale.SafeUntil().ok());  // it could have known
  EXPECT_FALSE(stale.Release().ok());
  EXPECT_TRUE(next.Release().ok());
}

// Redisson's fenced acquire (RedissonFencedLock's script, returning
// {-1, token} or {pttl, -1}) and its unlock script, run by a foreign owner:
// one counter for both, exclusion both ways, and its unlock wakes relock.
TEST_F(FencedLockTest, RedissonsFencedLockSharesTheLockAndTheCounter) {
  constexpr char kPeer[] = "5d0f8a61-3c1e-4b8e-9a55-0f6c2e7b1d42:91";
  const std::string name = TestLockName();
  const std::string channel =
      absl::StrCat("redisson_lock__channel:{", name, "}");
  std::unique_ptr<Client> client = MustConnect(redis().url());
  ASSERT_NE(client, nullptr);
  FencedLock lock = client->GetFencedLock(name);

  // Redisson takes token 1 and holds (30 s lease).
  absl::StatusOr<RedisValue> taken =
      redis().Command({"EVAL", kRedissonFencedAcquire, "2", name,
                       TokenKey(name), "30000", kPeer});
  ASSERT_TRUE(taken.ok()) << taken.status();
  ASSERT_EQ(taken->elements.size(), 2u) << taken->DebugString();
  EXPECT_EQ(taken->elements[0].integer, -1);
  EXPECT_EQ(taken->elements[1].integer, 1);
  EXPECT_EQ(lock.TryLockAndGetToken(absl::ZeroDuration()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  absl::StatusOr<int64_t> got;
  const Owner waiter_owner = Owner::New();  // holds beyond its thread
  std::thread waiter(
      [&] { got = lock.TryLockAndGetToken(waiter_owner, absl::Seconds(20)); });
  absl::SleepFor(absl::Milliseconds(300));
  Stopwatch since_unlock;
  absl::StatusOr<RedisValue> unlocked =
      redis().Command({"EVAL", kRedissonUnlock, "2", name, channel, "0",
                       "30000", kPeer, "PUBLISH"});
  ASSERT_TRUE(unlocked.ok() && unlocked->integer == 1) << unlocked.status();
  waiter.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, 2);
  EXPECT_LT(since_unlock.Elapsed(), absl::Seconds(10));

  // relock holds: Redisson is refused and takes no token.
  absl::StatusOr<RedisValue> refused =
      redis().Command({"EVAL", kRedissonFencedAcquire, "2", name,
                       TokenKey(name), "30000", kPeer});
  ASSERT_TRUE(refused.ok()) << refused.status();
  ASSERT_EQ(refused->elements.size(), 2u) << refused->DebugString();
  EXPECT_GT(refused->elements[0].integer, 0);  // the holder's PTTL
  EXPECT_EQ(refused->elements[1].integer, -1);
  EXPECT_EQ(Counter(name), 2);
  EXPECT_TRUE(lock.Release(waiter_owner).ok());
}

TEST_F(FencedLockTest, AsynchronousCallsHandOutTokens) {
  std::unique_ptr<Client> client = MustConnect(redis().url());
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  FencedLock lock = client->GetFencedLock(name);
  const Owner first = Owner::New();
  const Owner second = Owner::New();
  absl::StatusOr<int64_t> token = lock.LockAndGetTokenAsync(first).Get();
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, 1);
  EXPECT_EQ(lock.TryLockAndGetTokenAsync(second, absl::ZeroDuration())
                .Get()
                .status()
                .code(),
            absl::StatusCode::kDeadlineExceeded);
  Future<absl::StatusOr<int64_t>> waiting =
      lock.TryLockAndGetTokenAsync(second, absl::Seconds(20));
  EXPECT_TRUE(lock.ReleaseAsync(first).Get().ok());
  ASSERT_TRUE(waiting.WaitFor(absl::Seconds(15)));
  EXPECT_EQ(waiting.Get().value_or(-1), 2);
  // A thread owner cannot wait asynchronously.
  EXPECT_EQ(
      lock.LockAndGetTokenAsync(Owner::ThisThread()).Get().status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(lock.Release(second).ok());
}

TEST_F(FencedLockTest, BadInputIsRefusedClearly) {
  FencedLock unbound;
  EXPECT_EQ(unbound.LockAndGetToken().status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(unbound.GetToken().status().message(),
              HasSubstr("GetFencedLock"));
  std::unique_ptr<Client> client = MustConnect(redis().url());
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  FencedLock lock = client->GetFencedLock(name);
  EXPECT_EQ(lock.TryLockAndGetToken(absl::Milliseconds(-1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lock.LockAndGetToken(absl::ZeroDuration()).status().code(),
            absl::StatusCode::kInvalidArgument);  // lease out of range
  EXPECT_EQ(client->GetFencedLock("").GetToken().status().code(),
            absl::StatusCode::kInvalidArgument);
  // A counter key that holds something else.
  ASSERT_TRUE(redis().Command({"SET", TokenKey(name), "not-a-number"}).ok());
  absl::StatusOr<int64_t> token = lock.GetToken();
  EXPECT_FALSE(token.ok());
  EXPECT_THAT(token.status().message(), HasSubstr("not a fencing token"));
  absl::StatusOr<int64_t> acquired = lock.TryLockAndGetToken(absl::Seconds(1));
  EXPECT_FALSE(acquired.ok()) << "acquired with a broken counter";
  EXPECT_FALSE(lock.IsLocked().value_or(true))
      << "a failed fenced acquire left the lock held";
}

}  // namespace
}  // namespace relock
