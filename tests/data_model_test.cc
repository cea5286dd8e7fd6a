// The Redis-side data model, checked with plain commands, and
// interoperability with Redisson: a peer that runs Redisson's own lock and
// unlock scripts (RedissonLock.tryLockInnerAsync / unlockInnerAsync, as
// published in Redisson 3.x) with its own "<uuid>:<threadId>" owner must
// exclude relock and be excluded by it, and its unlock must wake relock's
// waiters.

#include <atomic>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/lock/lock_scripts.h"
#include "relock/relock.h"
#include "tests/redisson_scripts.h"
#include "tests/test_util.h"
#include "tests/testing/raw_connection.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace {

using ::relock::testing::kRedissonLock;
using ::relock::testing::LockChannel;
using ::relock::testing::MustConnect;
using ::relock::testing::RawConnection;
using ::relock::testing::RedisValue;
using ::relock::testing::Stopwatch;
using ::relock::testing::TestLockName;
using ::relock::testing::WaitUntilWaiting;
using ::testing::MatchesRegex;

// Redisson 3.x RedissonLock scripts as the interop peer: its lock script
// (tests/redisson_scripts.h) and the older form of its unlock script, which
// always PUBLISHes.
constexpr char kRedissonUnlockAlwaysPublishing[] =
    "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end; "
    "local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); "
    "if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); return 0; "
    "else redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], "
    "ARGV[1]); return 1; end; return nil;";
constexpr char kRedissonOwner[] = "0b6b2f6e-1c54-4a3c-9d7e-3f1f0c2a9e11:77";

// A plain lock name and one with a hash tag, as Redis Cluster users write.
std::vector<std::string> NamesToTry() {
  return {TestLockName(), TestLockName("order:{42}")};
}

class DataModelTest : public testing::RedisClientTest {
 protected:
  RedisValue Must(const std::vector<std::string>& argv) {
    absl::StatusOr<RedisValue> v = redis().Command(argv);
    EXPECT_OK(v);
    return v.ok() ? *v : RedisValue();
  }
  RedisValue RedissonLock(const std::string& name) {
    return Must({"EVAL", kRedissonLock, "1", name, "30000", kRedissonOwner});
  }
  RedisValue RedissonUnlock(const std::string& name) {
    return Must({"EVAL", kRedissonUnlockAlwaysPublishing, "2", name,
                 LockChannel(name), "0", "30000", kRedissonOwner});
  }
};

TEST_F(DataModelTest, LockIsAHashWithOneOwnerFieldHoldingTheCount) {
  Lock lock = client_->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire());
  // A thread's re-entry of its watchdog hold is counted in the client (no
  // round trip): the hash still says 1, HoldCount() says 2.
  ASSERT_OK(lock.Acquire());
  EXPECT_EQ(Must({"TYPE", lock.name()}).str, "hash");
  RedisValue all = Must({"HGETALL", lock.name()});
  ASSERT_EQ(all.elements.size(), 2u) << all.DebugString();
  const std::string field = all.elements[0].str;
  EXPECT_EQ(all.elements[1].str, "1");
  EXPECT_EQ(lock.HoldCount().value_or(-1), 2);
  // A re-entry with an explicit lease goes to Redis (HINCRBY).
  ASSERT_OK(lock.Acquire(absl::Seconds(10)));
  EXPECT_EQ(Must({"HGET", lock.name(), field}).str, "2");
  EXPECT_EQ(lock.HoldCount().value_or(-1), 3);
  std::vector<std::string> parts = absl::StrSplit(field, ':');
  ASSERT_EQ(parts.size(), 2u) << field;
  EXPECT_EQ(parts[0], client_->id());
  EXPECT_THAT(parts[0], MatchesRegex("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-"
                                     "[89ab][0-9a-f]{3}-[0-9a-f]{12}"));
  EXPECT_THAT(parts[1], MatchesRegex("[0-9]+"));
  const int64_t pttl = Must({"PTTL", lock.name()}).integer;
  EXPECT_GT(pttl, 25000);
  EXPECT_LE(pttl, 30000);
  // The local re-entry is released locally first, then Redis counts down.
  ASSERT_OK(lock.Release());
  EXPECT_EQ(Must({"HGET", lock.name(), field}).str, "2");
  ASSERT_OK(lock.Release());
  EXPECT_EQ(Must({"HGET", lock.name(), field}).str, "1");
  ASSERT_OK(lock.Release());
  EXPECT_EQ(Must({"EXISTS", lock.name()}).integer, 0);
}

TEST_F(DataModelTest, EveryThreadHasItsOwnNeverReusedNumber) {
  const std::string name = TestLockName();
  std::set<std::string> fields;
  for (int i = 0; i < 8; ++i) {  // sequential threads: std::thread::id reuses
    std::thread t([&] {
      Lock lock = client_->GetLock(name);
      ASSERT_OK(lock.Acquire());
      RedisValue all = Must({"HGETALL", name});
      ASSERT_EQ(all.elements.size(), 2u);
      fields.insert(all.elements[0].str);
      ASSERT_OK(lock.Release());
    });
    t.join();
  }
  EXPECT_EQ(fields.size(), 8u);
}

TEST_F(DataModelTest, FinalReleasePublishesZeroOnTheRedissonChannel) {
  for (const std::string& name : NamesToTry()) {
    Lock lock = client_->GetLock(name);
    // A plain hiredis subscriber, independent of relock.
    absl::StatusOr<RawConnection> sub = RawConnection::Connect(redis().port());
    ASSERT_OK(sub);
    const std::string channel = LockChannel(lock.name());
    ASSERT_OK(sub->Command({"SUBSCRIBE", channel}));
    ASSERT_OK(lock.Acquire());
    ASSERT_OK(lock.Acquire());
    ASSERT_OK(lock.Release());  // holds remain: no message
    ASSERT_OK(lock.Release());  // free: one message
    absl::StatusOr<RedisValue> message = sub->NextReply();
    ASSERT_OK(message) << name;
    ASSERT_EQ(message->elements.size(), 3u) << *message;
    EXPECT_EQ(message->elements[0].str, "message");
    EXPECT_EQ(message->elements[1].str, channel);
    EXPECT_EQ(message->elements[2].str, "0");
  }
}

// The release scripts publish with the command given as their last argument
// (Redisson passes it the same way): SPUBLISH reaches a sharded subscriber,
// which is what the cluster backend's waiters are; a bad command is refused
// before anything is written.
TEST_F(DataModelTest, ReleaseScriptsPublishWithTheCommandTheyAreGiven) {
  const std::vector<redis::ScriptSource> scripts = internal::LockScripts();
  const std::string release(scripts[internal::kReleaseScript].source);
  const std::string release_all(scripts[internal::kReleaseAllScript].source);
  const std::string force(scripts[internal::kForceReleaseScript].source);
  const std::string name = TestLockName();
  const std::string channel = LockChannel(name);
  const std::string owner = "c0ffee00-0000-4000-8000-000000000001:1";

  absl::StatusOr<RawConnection> sub = RawConnection::Connect(redis().port());
  ASSERT_OK(sub);
  ASSERT_OK(sub->Command({"SSUBSCRIBE", channel}));
  auto expect_smessage = [&](const std::string& what) {
    absl::StatusOr<RedisValue> m = sub->NextReply();
    ASSERT_OK(m) << what;
    ASSERT_EQ(m->elements.size(), 3u) << what << ": " << *m;
    EXPECT_EQ(m->elements[0].str, "smessage") << what;
    EXPECT_EQ(m->elements[1].str, channel);
    EXPECT_EQ(m->elements[2].str, "0") << what;
  };
  auto hold = [&] { Must({"HSET", name, owner, "1"}); };

  hold();
  EXPECT_EQ(
      Must({"EVAL", release, "2", name, channel, "0", "0", owner, "spublish"})
          .integer,
      1);
  expect_smessage("release");
  hold();
  EXPECT_EQ(
      Must({"EVAL", release_all, "2", name, channel, "0", owner, "spublish"})
          .integer,
      1);
  expect_smessage("release_all");
  hold();
  EXPECT_EQ(Must({"EVAL", force, "2", name, channel, "0", "SPUBLISH"}).integer,
            1);
  expect_smessage("force_release");

  // Anything but publish/spublish: an error, and the lock is still held.
  hold();
  for (const std::vector<std::string>& argv :
       {std::vector<std::string>{"EVAL", release, "2", name, channel, "0", "0",
                                 owner, "flushall"},
        std::vector<std::string>{"EVAL", release_all, "2", name, channel, "0",
                                 owner, "del"},
        std::vector<std::string>{"EVAL", force, "2", name, channel, "0",
                                 "SUBSCRIBE"}}) {
    const RedisValue v = Must(argv);
    ASSERT_TRUE(v.is_error()) << v;
    EXPECT_THAT(v.str, ::testing::HasSubstr(
                           "publish command must be publish or spublish"));
    EXPECT_EQ(Must({"HGET", name, owner}).str, "1");
  }
  Must({"DEL", name});
}

TEST_F(DataModelTest, RedissonHolderExcludesRelock) {
  Lock lock = client_->GetLock(TestLockName());
  ASSERT_TRUE(RedissonLock(lock.name()).is_nil());
  absl::Status s = lock.TryAcquire(absl::Milliseconds(100));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_EQ(lock.Release().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(RedissonUnlock(lock.name()).integer, 1);
}

TEST_F(DataModelTest, RelockHolderExcludesRedisson) {
  Lock lock = client_->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire());
  RedisValue ttl = RedissonLock(lock.name());
  ASSERT_EQ(ttl.type, RedisValue::Type::kInteger) << ttl.DebugString();
  EXPECT_GT(ttl.integer, 0) << "Redisson must see relock's lease";
  EXPECT_TRUE(RedissonUnlock(lock.name()).is_nil()) << "not Redisson's lock";
  ASSERT_OK(lock.Release());
  EXPECT_TRUE(RedissonLock(lock.name()).is_nil());
  EXPECT_EQ(RedissonUnlock(lock.name()).integer, 1);
}

// Without the notification the waiter would sleep until the Redisson
// holder's 30 s lease ends or its own 20 s wait does: waking within a few
// seconds proves it was woken (the slack is for a loaded machine).
TEST_F(DataModelTest, RedissonUnlockWakesARelockWaiter) {
  for (const std::string& name : NamesToTry()) {
    Lock lock = client_->GetLock(name);
    ASSERT_TRUE(RedissonLock(lock.name()).is_nil());
    std::thread waiter([&] {
      EXPECT_OK(lock.TryAcquire(absl::Seconds(20))) << name;
      EXPECT_OK(lock.Release());
    });
    EXPECT_OK(WaitUntilWaiting(redis(), LockChannel(lock.name()), *client_));
    Stopwatch since_unlock;  // steady clock
    EXPECT_EQ(RedissonUnlock(lock.name()).integer, 1);
    waiter.join();
    EXPECT_LT(since_unlock.Elapsed(), absl::Seconds(5)) << name;
  }
}

// Issue 8, defect 12: for a name with "{", relock used
// "redisson_lock__channel:{N}" while Redisson uses "redisson_lock__channel:N",
// so neither woke the other's waiters.
TEST_F(DataModelTest, BracedNamesShareRedissonsChannelBothWays) {
  const std::string name = TestLockName("order:{42}");
  Lock lock = client_->GetLock(name);
  // Redisson's own unlock script, publishing on Redisson's channel (spelled
  // out here), wakes a relock waiter. The other direction (relock's release
  // publishes there) is FinalReleasePublishesZeroOnTheRedissonChannel.
  ASSERT_TRUE(RedissonLock(name).is_nil());
  absl::Status waited;
  std::thread waiter([&] {
    waited = lock.TryAcquire(absl::Seconds(20));
    if (waited.ok()) {
      EXPECT_OK(lock.Release());
    }
  });
  EXPECT_OK(
      WaitUntilWaiting(redis(), "redisson_lock__channel:" + name, *client_));
  Stopwatch since_unlock;
  EXPECT_EQ(
      Must({"EVAL", kRedissonUnlockAlwaysPublishing, "2", name,
            "redisson_lock__channel:" + name, "0", "30000", kRedissonOwner})
          .integer,
      1);
  waiter.join();
  ASSERT_OK(waited);
  EXPECT_LT(since_unlock.Elapsed(), absl::Seconds(5));
}

}  // namespace
}  // namespace relock
