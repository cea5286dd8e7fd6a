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

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
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
  RedisValue RedissonLock(const std::string& name,
                          const std::string& owner = kRedissonOwner) {
    return Must({"EVAL", kRedissonLock, "1", name, "30000", owner});
  }
  RedisValue RedissonUnlock(const std::string& name,
                            const std::string& owner = kRedissonOwner) {
    return Must({"EVAL", kRedissonUnlockAlwaysPublishing, "2", name,
                 LockChannel(name), "0", "30000", owner});
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

// Redisson's thread id is any Java long its caller passes (lockAsync(...,
// threadId)), negative ones too: such a holder is a holder, for every lock
// type on the plain lock's model and for inspection.
TEST_F(DataModelTest, RedissonHolderExcludesRelock) {
  const std::string negative = "0b6b2f6e-1c54-4a3c-9d7e-3f1f0c2a9e11:-7";
  for (const std::string& owner : {std::string(kRedissonOwner), negative}) {
    SCOPED_TRACE(owner);
    Lock lock = client_->GetLock(TestLockName());
    ASSERT_TRUE(RedissonLock(lock.name(), owner).is_nil());
    absl::Status s = lock.TryAcquire(absl::Milliseconds(100));
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_EQ(lock.Release().code(), absl::StatusCode::kFailedPrecondition);
    FairLock fair = client_->GetFairLock(lock.name());
    s = fair.TryAcquire(absl::ZeroDuration());
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    FencedLock fenced = client_->GetFencedLock(lock.name());
    s = fenced.TryLockAndGetToken(absl::ZeroDuration()).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    absl::StatusOr<LockInfo> info = client_->InspectLock(lock.name());
    ASSERT_OK(info);
    ASSERT_EQ(info->holders.size(), 1u);
    EXPECT_EQ(info->holders[0].owner, owner);
    EXPECT_EQ(RedissonUnlock(lock.name(), owner).integer, 1);
  }
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

// The watchdog's renewal batch is collected, then sent: one collected just
// before an explicit extension to a longer lease (Redlock's Extend(), a
// permit's UpdateLeaseTime()) may reach Redis after it. It must not cut that
// lease short, since the watchdog no longer renews the hold: a renewal only
// raises a lease; an extension ("set") sets it, shorter or not.
TEST_F(DataModelTest, ARenewalNeverShortensALeaseAnExtensionSets) {
  const std::vector<redis::ScriptSource> scripts = internal::LockScripts();
  const std::string renew(scripts[internal::kRenewScript].source);
  const std::string name = TestLockName();
  const std::string owner = "c0ffee00-0000-4000-8000-000000000001:1";
  Must({"HSET", name, owner, "1"});
  Must({"PEXPIRE", name, "600000"});  // extended to 10 minutes
  // The late renewal of a 30 s watchdog lease: the hold counts as renewed,
  // and keeps its 10 minutes.
  RedisValue renewed = Must({"EVAL", renew, "1", name, "30000", owner});
  ASSERT_EQ(renewed.elements.size(), 1u);
  EXPECT_EQ(renewed.elements[0].integer, 1);
  EXPECT_GT(Must({"PTTL", name}).integer, 300000);
  // An extension sets the lease it is given.
  Must({"EVAL", renew, "1", name, "30000", owner, "set"});
  EXPECT_LE(Must({"PTTL", name}).integer, 30000);
  // A renewal raises a shorter lease, and gives one to a key without a TTL.
  Must({"PEXPIRE", name, "1000"});
  Must({"EVAL", renew, "1", name, "30000", owner});
  EXPECT_GT(Must({"PTTL", name}).integer, 1000);
  Must({"PERSIST", name});
  Must({"EVAL", renew, "1", name, "30000", owner});
  EXPECT_GT(Must({"PTTL", name}).integer, 0);
  // Another owner's renewal finds the hold lost and changes nothing.
  renewed = Must({"EVAL", renew, "1", name, "30000", "x:2"});
  ASSERT_EQ(renewed.elements.size(), 1u);
  EXPECT_EQ(renewed.elements[0].integer, 0);

  // A permit's: the "{N}:timeout" sorted set scores each permit (16 bytes,
  // passed as hex) by its lease end in epoch ms.
  const std::string permit_renew(scripts[internal::kPermitRenewScript].source);
  const std::string timeouts = "{" + name + "}:timeout";
  const std::string hex = "00112233445566778899aabbccddeeff";
  const int64_t now_ms = absl::ToUnixMillis(absl::Now());
  const int64_t updated_end = now_ms + 600000;  // UpdateLeaseTime(10 min)
  Must({"ZADD", timeouts, absl::StrCat(updated_end),
        absl::HexStringToBytes(hex)});
  renewed = Must({"EVAL", permit_renew, "1", timeouts, "30000", hex});
  ASSERT_EQ(renewed.elements.size(), 1u);
  EXPECT_EQ(renewed.elements[0].integer, 1);
  EXPECT_EQ(Must({"ZSCORE", timeouts, absl::HexStringToBytes(hex)}).str,
            absl::StrCat(updated_end));
  // A shorter lease is renewed as before.
  Must({"ZADD", timeouts, absl::StrCat(now_ms + 1000),
        absl::HexStringToBytes(hex)});
  Must({"EVAL", permit_renew, "1", timeouts, "30000", hex});
  int64_t score = 0;
  ASSERT_TRUE(absl::SimpleAtoi(
      Must({"ZSCORE", timeouts, absl::HexStringToBytes(hex)}).str, &score));
  EXPECT_GE(score, now_ms + 30000);
}

}  // namespace
}  // namespace relock
