// relock::FencedLock on a real redis-server: tokens that grow with every
// acquisition (re-entries and the inherited Lock calls included), across
// processes in acquisition order; a resource that checks tokens refuses a
// holder whose lease ran out while it was paused; Redisson's own fenced
// acquire script as a peer on the same lock and counter; the asynchronous
// calls; bad input.

#include <iostream>
#include <limits>
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
#include "tests/testing/status_matchers.h"

namespace relock {
namespace {

using ::relock::testing::ChildProcess;
using ::relock::testing::kRedissonFencedAcquire;
using ::relock::testing::kRedissonUnlock;
using ::relock::testing::LockChannel;
using ::relock::testing::MustConnect;
using ::relock::testing::RedisValue;
using ::relock::testing::Stopwatch;
using ::relock::testing::TestLockName;
using ::relock::testing::WaitUntilWaiting;
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
  for (int i = 0; i < 3; ++i) EXPECT_OK(lock.Release());
  EXPECT_FALSE(lock.IsLocked().value_or(true));
  // Releases leave the counter alone; it keeps counting.
  EXPECT_EQ(lock.GetToken().value_or(-1), 3);
  EXPECT_EQ(lock.TryLockAndGetToken(absl::ZeroDuration()).value_or(-1), 4);
  EXPECT_EQ(lock.TryLockAndGetToken(absl::ZeroDuration(), absl::Seconds(5))
                .value_or(-1),
            5);
  EXPECT_OK(lock.Release());
  EXPECT_OK(lock.Release());
  // The counter is a plain integer with no TTL, in Redisson's key.
  absl::StatusOr<RedisValue> ttl = redis().Command({"PTTL", TokenKey(name)});
  ASSERT_OK(ttl);
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
  ASSERT_OK(plain.Acquire(holder));
  absl::StatusOr<int64_t> refused =
      fenced.TryLockAndGetToken(absl::ZeroDuration());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(Counter(name), -1) << "a refused acquire took a token";
  std::thread release([&] {
    // Once the fenced lock waits for it.
    EXPECT_OK(WaitUntilWaiting(redis(), LockChannel(name), *b));
    EXPECT_OK(plain.Release(holder));
  });
  Stopwatch waited;
  absl::StatusOr<int64_t> token = fenced.TryLockAndGetToken(absl::Seconds(20));
  release.join();
  ASSERT_OK(token);
  EXPECT_EQ(*token, 1);
  EXPECT_LT(waited.Elapsed(), absl::Seconds(10));  // woken, not the lease
  EXPECT_OK(fenced.Release());
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
    ASSERT_OK(child);
    children.push_back(*std::move(child));
  }
  std::map<int64_t, int64_t> token_by_order;
  for (auto& child : children) {
    while (true) {
      absl::StatusOr<std::string> line = child->ReadLine(absl::Seconds(120));
      ASSERT_OK(line);
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
    ASSERT_OK(code);
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
  ASSERT_OK(old_token);
  // "Paused" past its lease: the next holder gets in.
  FencedLock next = b->GetFencedLock(name);
  absl::StatusOr<int64_t> new_token =
      next.TryLockAndGetToken(absl::Seconds(10));
  ASSERT_OK(new_token);
  EXPECT_GT(*new_token, *old_token);
  EXPECT_TRUE(write(*new_token, "from the current holder"));
  EXPECT_FALSE(write(*old_token, "from the stale holder"))
      << "the resource accepted the stale holder's token";
  EXPECT_EQ(redis().Command({"GET", value})->str, "from the current holder");
  EXPECT_FALSE(stale.SafeUntil().ok());  // it could have known
  EXPECT_FALSE(stale.Release().ok());
  EXPECT_OK(next.Release());
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
  ASSERT_OK(taken);
  ASSERT_EQ(taken->elements.size(), 2u) << taken->DebugString();
  EXPECT_EQ(taken->elements[0].integer, -1);
  EXPECT_EQ(taken->elements[1].integer, 1);
  EXPECT_EQ(lock.TryLockAndGetToken(absl::ZeroDuration()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  absl::StatusOr<int64_t> got;
  const Owner waiter_owner = Owner::New();  // holds beyond its thread
  std::thread waiter(
      [&] { got = lock.TryLockAndGetToken(waiter_owner, absl::Seconds(20)); });
  EXPECT_OK(WaitUntilWaiting(redis(), channel, *client));
  Stopwatch since_unlock;
  absl::StatusOr<RedisValue> unlocked =
      redis().Command({"EVAL", kRedissonUnlock, "2", name, channel, "0",
                       "30000", kPeer, "PUBLISH"});
  ASSERT_TRUE(unlocked.ok() && unlocked->integer == 1) << unlocked.status();
  waiter.join();
  ASSERT_OK(got);
  EXPECT_EQ(*got, 2);
  EXPECT_LT(since_unlock.Elapsed(), absl::Seconds(10));

  // relock holds: Redisson is refused and takes no token.
  absl::StatusOr<RedisValue> refused =
      redis().Command({"EVAL", kRedissonFencedAcquire, "2", name,
                       TokenKey(name), "30000", kPeer});
  ASSERT_OK(refused);
  ASSERT_EQ(refused->elements.size(), 2u) << refused->DebugString();
  EXPECT_GT(refused->elements[0].integer, 0);  // the holder's PTTL
  EXPECT_EQ(refused->elements[1].integer, -1);
  EXPECT_EQ(Counter(name), 2);
  EXPECT_OK(lock.Release(waiter_owner));
}

TEST_F(FencedLockTest, AsynchronousCallsHandOutTokens) {
  std::unique_ptr<Client> client = MustConnect(redis().url());
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  FencedLock lock = client->GetFencedLock(name);
  const Owner first = Owner::New();
  const Owner second = Owner::New();
  absl::StatusOr<int64_t> token = lock.LockAndGetTokenAsync(first).Get();
  ASSERT_OK(token);
  EXPECT_EQ(*token, 1);
  EXPECT_EQ(lock.TryLockAndGetTokenAsync(second, absl::ZeroDuration())
                .Get()
                .status()
                .code(),
            absl::StatusCode::kDeadlineExceeded);
  Future<absl::StatusOr<int64_t>> waiting =
      lock.TryLockAndGetTokenAsync(second, absl::Seconds(20));
  EXPECT_OK(lock.ReleaseAsync(first).Get());
  ASSERT_TRUE(waiting.WaitFor(absl::Seconds(15)));
  EXPECT_EQ(waiting.Get().value_or(-1), 2);
  // A thread owner cannot wait asynchronously.
  EXPECT_EQ(
      lock.LockAndGetTokenAsync(Owner::ThisThread()).Get().status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_OK(lock.Release(second));
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
  ASSERT_OK(redis().Command({"SET", TokenKey(name), "not-a-number"}));
  absl::StatusOr<int64_t> token = lock.GetToken();
  EXPECT_EQ(token.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(token.status().message(), HasSubstr("not a count in"));
  absl::StatusOr<int64_t> acquired = lock.TryLockAndGetToken(absl::Seconds(1));
  EXPECT_EQ(acquired.status().code(), absl::StatusCode::kFailedPrecondition)
      << "acquired with a broken counter";
  EXPECT_FALSE(lock.IsLocked().value_or(true))
      << "a failed fenced acquire left the lock held";
}

// Issue 23, defect 2: the acquire script returned the token as a Lua number
// (a double), so tokens beyond 2^53 were rounded: four acquisitions from a
// counter at 1.7e18 all returned the same token, and GetToken() at INT64_MAX
// returned INT64_MIN.
TEST_F(FencedLockTest, TokensBeyond2To53RepeatedAndTheLastOneWrapped) {
  std::unique_ptr<Client> a = MustConnect(redis().url());
  std::unique_ptr<Client> b = MustConnect(redis().url());
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const std::string name = TestLockName();
  FencedLock on_a = a->GetFencedLock(name);
  FencedLock on_b = b->GetFencedLock(name);
  // From a clock-seeded counter: four acquisitions, two per client.
  ASSERT_OK(redis().Command({"SET", TokenKey(name), "1700000000000000000"}));
  for (int64_t i = 1; i <= 4; ++i) {
    FencedLock& lock = i % 2 == 1 ? on_a : on_b;
    absl::StatusOr<int64_t> token = lock.TryLockAndGetToken(absl::Seconds(10));
    ASSERT_OK(token);
    EXPECT_EQ(*token, int64_t{1700000000000000000} + i);
    EXPECT_EQ(lock.GetToken().value_or(-1), *token);
    ASSERT_OK(lock.Release());
  }
  // 2^53 + 1, the first integer a double cannot hold; then the last tokens
  // of the int64 range, and the counter exhausted.
  const int64_t kLast = std::numeric_limits<int64_t>::max();
  for (const int64_t before : {(int64_t{1} << 53), kLast - 2}) {
    ASSERT_OK(redis().Command({"SET", TokenKey(name), absl::StrCat(before)}));
    absl::StatusOr<int64_t> token = on_a.LockAndGetToken();
    ASSERT_OK(token);
    EXPECT_EQ(*token, before + 1);
    absl::StatusOr<int64_t> again = on_a.LockAndGetToken();  // re-entry
    ASSERT_OK(again);
    EXPECT_EQ(*again, before + 2);
    EXPECT_EQ(on_a.GetToken().value_or(-1), before + 2);
    ASSERT_OK(on_a.Release());
    ASSERT_OK(on_a.Release());
  }
  EXPECT_EQ(on_a.GetToken().value_or(-1), kLast);
  // No token is left: nothing is taken, and the counter stays.
  absl::StatusOr<int64_t> none = on_b.TryLockAndGetToken(absl::Seconds(1));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition)
      << none.status();
  EXPECT_THAT(none.status().message(), HasSubstr("9223372036854775807"));
  EXPECT_EQ(redis().Command({"EXISTS", name})->integer, 0);
  EXPECT_EQ(redis().Command({"GET", TokenKey(name)})->str, absl::StrCat(kLast));
}

// Issue 23, defect 3: with a negative counter (someone's SET ... -3) the
// acquire took the lock, read the token -2 as "held by another owner" and
// said DeadlineExceeded, leaving our hold behind until its lease ended; the
// asynchronous form reported that hold lost later, and LockAndGetToken()
// spun while holding it. A counter outside [0, 2^63 - 2] is refused before
// the script writes anything.
TEST_F(FencedLockTest, ANegativeCounterLeftAHoldBehindAFailedAcquire) {
  testing::EventLog events;
  std::unique_ptr<Client> client =
      MustConnect(redis().url(), [&](ClientOptions& options) {
        options.on_lock_event = events.Callback();
      });
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  FencedLock lock = client->GetFencedLock(name);
  for (const char* bad : {"-3", "-1", "007", "9223372036854775807",
                          "99999999999999999999", "1e3", ""}) {
    SCOPED_TRACE(absl::StrCat("counter \"", bad, "\""));
    ASSERT_OK(redis().Command({"SET", TokenKey(name), bad}));
    absl::StatusOr<int64_t> once =
        lock.TryLockAndGetToken(absl::ZeroDuration());
    EXPECT_EQ(once.status().code(), absl::StatusCode::kFailedPrecondition)
        << once.status();
    EXPECT_THAT(once.status().message(), HasSubstr(TokenKey(name)));
    Stopwatch watch;
    absl::StatusOr<int64_t> blocking = lock.LockAndGetToken();
    EXPECT_EQ(blocking.status().code(), absl::StatusCode::kFailedPrecondition)
        << blocking.status();
    EXPECT_LT(watch.Elapsed(), absl::Seconds(10)) << "spun instead of failing";
    // The inherited Lock calls take a token too.
    EXPECT_EQ(lock.TryAcquire(absl::ZeroDuration()).code(),
              absl::StatusCode::kFailedPrecondition);
    const Owner owner = Owner::New();
    absl::StatusOr<int64_t> async =
        lock.TryLockAndGetTokenAsync(owner, absl::ZeroDuration()).Get();
    EXPECT_EQ(async.status().code(), absl::StatusCode::kFailedPrecondition)
        << async.status();
    EXPECT_EQ(redis().Command({"EXISTS", name})->integer, 0)
        << "a failed acquire left a hold behind";
    EXPECT_EQ(redis().Command({"GET", TokenKey(name)})->str, bad);
    EXPECT_EQ(lock.HoldCount().value_or(-1), 0);
    EXPECT_EQ(lock.HoldCount(owner).value_or(-1), 0);
  }
  // A plain lock of the name does not use the counter: it still works.
  Lock plain = client->GetLock(name);
  ASSERT_OK(plain.TryAcquire(absl::ZeroDuration()));
  EXPECT_OK(plain.Release());
  // Repaired, the counter hands out tokens again.
  ASSERT_OK(redis().Command({"SET", TokenKey(name), "0"}));
  EXPECT_EQ(lock.TryLockAndGetToken(absl::ZeroDuration()).value_or(-1), 1);
  EXPECT_OK(lock.Release());
  for (const LockEvent& e : events.events()) {
    ADD_FAILURE() << "unexpected lock event for " << e.lock_name << ": "
                  << static_cast<int>(e.type);
  }
}

}  // namespace
}  // namespace relock
