// relock::PermitExpirableSemaphore on a real redis-server: permits by id;
// a permit of a kill -9'd process returns at its lease end and wakes a
// waiter; the watchdog mode keeps a live holder's permit and reports one
// removed behind its back; Redisson's own scripts as a peer, both ways; bad
// input and a name holding something else.

#include <atomic>
#include <csignal>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "relock/relock.h"
#include "tests/redisson_scripts.h"
#include "tests/test_util.h"
#include "tests/testing/child_process.h"
#include "tests/testing/eventually.h"
#include "tests/testing/raw_connection.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace {

using ::relock::testing::ChildProcess;
using ::relock::testing::JoiningThread;
using ::relock::testing::kRedissonPermitTryAcquire;
using ::relock::testing::kRedissonPermitTryRelease;
using ::relock::testing::RedisValue;
using ::relock::testing::SemaphoreChannel;
using ::relock::testing::TestLockName;
using ::relock::testing::WaitUntilWaiting;

// Redisson's suffixName(N, "timeout").
std::string PermitSemaphoreTimeoutKey(const std::string& name) {
  return absl::StrContains(name, "{") ? name + ":timeout"
                                      : "{" + name + "}:timeout";
}

class PermitSemaphoreTest : public testing::RedisClientTest {
 protected:
  absl::StatusOr<RedisValue> Command(const std::vector<std::string>& argv) {
    return redis().Command(argv);
  }
  // Redisson's tryAcquire of permit `hex` with a lease end of `lease_end`
  // epoch ms: true when taken.
  bool RedissonAcquire(const std::string& name, const std::string& hex,
                       int64_t lease_end) {
    absl::StatusOr<RedisValue> v = Command(
        {"EVAL", kRedissonPermitTryAcquire, "3", name,
         PermitSemaphoreTimeoutKey(name), SemaphoreChannel(name), "1",
         absl::StrCat(lease_end), absl::StrCat(absl::ToUnixMillis(absl::Now())),
         "922337203685477", "publish", absl::HexStringToBytes(hex)});
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() && v->str == "OK";
  }
  int64_t RedissonRelease(const std::string& name, const std::string& hex) {
    absl::StatusOr<RedisValue> v = Command(
        {"EVAL", kRedissonPermitTryRelease, "3", name, SemaphoreChannel(name),
         PermitSemaphoreTimeoutKey(name), absl::HexStringToBytes(hex), "1",
         absl::StrCat(absl::ToUnixMillis(absl::Now())), "publish"});
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() && v->is_integer() ? v->integer : -1;
  }
  // A fresh semaphore of 2 permits, both taken by `holder` (connected:
  // non-null): `released` for the test to release, `kept` so that the
  // holder's renewal rounds go on.
  struct Taken {
    std::string name, released, kept;
  };
  void TakeBoth(Client* holder, Taken* taken) {
    ASSERT_NE(holder, nullptr);
    taken->name = TestLockName();
    ASSERT_THAT(
        client_->GetPermitExpirableSemaphore(taken->name).TrySetPermits(2),
        testing::IsOkAndHolds(true));
    PermitExpirableSemaphore sem =
        holder->GetPermitExpirableSemaphore(taken->name);
    absl::StatusOr<std::string> first = sem.Acquire();
    ASSERT_OK(first);
    taken->released = *first;
    absl::StatusOr<std::string> second = sem.Acquire();
    ASSERT_OK(second);
    taken->kept = *second;
  }
  // Waits for `rounds` more renewal rounds of `holder`, then expects that
  // nothing was reported of permit `id` in `events`.
  static void ExpectNothingReportedOf(Client& holder,
                                      const testing::EventLog& events,
                                      const std::string& id, uint64_t rounds) {
    const uint64_t from = holder.Metrics().renew_rounds;
    ASSERT_TRUE(testing::Eventually(
        [&] { return holder.Metrics().renew_rounds >= from + rounds; }));
    for (const LockEvent& e : events.events()) {
      EXPECT_NE(e.owner, id) << LockEventTypeName(e.type) << ": " << e.status;
    }
  }
};

TEST_F(PermitSemaphoreTest, PermitsAreTakenByIdAndGivenBack) {
  PermitExpirableSemaphore sem =
      client_->GetPermitExpirableSemaphore(TestLockName());
  EXPECT_THAT(sem.AvailablePermits(), testing::IsOkAndHolds(0));
  EXPECT_THAT(sem.TrySetPermits(2), testing::IsOkAndHolds(true));
  EXPECT_THAT(sem.TrySetPermits(5), testing::IsOkAndHolds(false));
  absl::StatusOr<std::string> a = sem.Acquire(absl::Seconds(30));
  ASSERT_OK(a);
  absl::StatusOr<std::string> b = sem.TryAcquire(absl::ZeroDuration());
  ASSERT_OK(b);
  EXPECT_EQ(a->size(), 32u);
  EXPECT_NE(*a, *b);
  EXPECT_THAT(sem.AvailablePermits(), testing::IsOkAndHolds(0));
  EXPECT_THAT(sem.TryAcquire(absl::Milliseconds(50), absl::Seconds(5)),
              testing::StatusIs(absl::StatusCode::kDeadlineExceeded));
  absl::StatusOr<RedisValue> card =
      Command({"ZCARD", PermitSemaphoreTimeoutKey(sem.name())});
  ASSERT_OK(card);
  EXPECT_EQ(card->integer, 2);
  ASSERT_OK(sem.UpdateLeaseTime(*a, absl::Seconds(60)));
  ASSERT_OK(sem.Release(*a));
  EXPECT_THAT(sem.Release(*a), testing::StatusIs(absl::StatusCode::kNotFound));
  ASSERT_OK(sem.ReleaseAsync(*b).Get());
  EXPECT_THAT(sem.AvailablePermits(), testing::IsOkAndHolds(2));
  absl::StatusOr<std::string> c = sem.AcquireAsync(absl::Seconds(5)).Get();
  ASSERT_OK(c);
  ASSERT_OK(sem.Release(*c));
}

TEST_F(PermitSemaphoreTest, BadInputIsRefusedAndNothingElseIsTouched) {
  const std::string name = TestLockName();
  PermitExpirableSemaphore sem = client_->GetPermitExpirableSemaphore(name);
  ASSERT_THAT(sem.TrySetPermits(1), testing::IsOkAndHolds(true));
  for (int64_t bad :
       {int64_t{-1}, kMaxPermits + 1, std::numeric_limits<int64_t>::max()}) {
    EXPECT_THAT(sem.TrySetPermits(bad),
                testing::StatusIs(absl::StatusCode::kInvalidArgument));
  }
  for (absl::Duration bad : {absl::ZeroDuration(), absl::Milliseconds(-5),
                             kMaxLease + absl::Hours(1)}) {
    EXPECT_THAT(sem.Acquire(bad),
                testing::StatusIs(absl::StatusCode::kInvalidArgument));
  }
  EXPECT_THAT(sem.TryAcquire(absl::Seconds(-1)),
              testing::StatusIs(absl::StatusCode::kInvalidArgument));
  absl::StatusOr<std::string> id = sem.Acquire(absl::Seconds(30));
  ASSERT_OK(id);
  EXPECT_THAT(sem.UpdateLeaseTime(*id, absl::InfiniteDuration()),
              testing::StatusIs(absl::StatusCode::kInvalidArgument));
  for (const std::string& bad :
       std::vector<std::string>{"", "abc", "zz", std::string(66, 'a')}) {
    EXPECT_THAT(sem.Release(bad),
                testing::StatusIs(absl::StatusCode::kInvalidArgument));
  }
  // Our own id in upper case: refused, not released behind the watchdog's
  // back (Redis would decode it to the same bytes, but this client knows its
  // permits by their text).
  const std::string upper = absl::AsciiStrToUpper(*id);
  ASSERT_NE(upper, *id);
  EXPECT_THAT(sem.Release(upper),
              testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(sem.UpdateLeaseTime(upper, absl::Seconds(5)),
              testing::StatusIs(absl::StatusCode::kInvalidArgument));
  const std::string unknown(32, 'f');
  EXPECT_THAT(sem.Release(unknown),
              testing::StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(sem.UpdateLeaseTime(unknown, absl::Seconds(5)),
              testing::StatusIs(absl::StatusCode::kNotFound));
  // Our permit is still out, the count untouched.
  absl::StatusOr<RedisValue> card =
      Command({"ZCARD", PermitSemaphoreTimeoutKey(name)});
  ASSERT_OK(card);
  EXPECT_EQ(card->integer, 1);
  EXPECT_THAT(sem.AvailablePermits(), testing::IsOkAndHolds(0));
  ASSERT_OK(sem.Release(*id));
  // A name holding another type's value.
  const std::string hash = TestLockName("hash");
  ASSERT_OK(Command({"HSET", hash, "f", "v"}));
  PermitExpirableSemaphore other = client_->GetPermitExpirableSemaphore(hash);
  EXPECT_THAT(other.TryAcquire(absl::ZeroDuration(), absl::Seconds(1)),
              testing::StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(other.AvailablePermits(),
              testing::StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(other.Release(unknown),
              testing::StatusIs(absl::StatusCode::kFailedPrecondition));
  absl::StatusOr<RedisValue> type = Command({"TYPE", hash});
  ASSERT_OK(type);
  EXPECT_EQ(type->str, "hash");
}

// A child: takes a permit of `name` with a lease of `lease_ms`, prints
// "held", then waits to be killed.
RELOCK_CHILD_MAIN(PermitSemaphoreHolder) {
  int64_t lease_ms = 0;
  if (args.size() != 3 || !absl::SimpleAtoi(args[2], &lease_ms)) return 2;
  std::unique_ptr<Client> client = testing::MustConnect(args[0]);
  if (client == nullptr) return 3;
  absl::StatusOr<std::string> id =
      client->GetPermitExpirableSemaphore(args[1]).Acquire(
          absl::Milliseconds(lease_ms));
  if (!id.ok()) return 4;
  std::cout << "held" << std::endl;
  absl::SleepFor(absl::Minutes(5));
  return 0;
}

TEST_F(PermitSemaphoreTest, PermitOfAKilledProcessReturnsAtItsLeaseEnd) {
  const std::string name = TestLockName();
  PermitExpirableSemaphore sem = client_->GetPermitExpirableSemaphore(name);
  ASSERT_THAT(sem.TrySetPermits(1), testing::IsOkAndHolds(true));
  absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Spawn(
      "PermitSemaphoreHolder", {redis().url(), name, "1500"});
  ASSERT_OK(child);
  EXPECT_THAT((*child)->ReadLine(absl::Seconds(30)),
              testing::IsOkAndHolds(std::string("held")));
  ASSERT_OK((*child)->Signal(SIGKILL));
  EXPECT_THAT(sem.TryAcquire(absl::ZeroDuration(), absl::Seconds(5)),
              testing::StatusIs(absl::StatusCode::kDeadlineExceeded));
  // A waiter blocked now wakes at the lease end (no release, no message):
  // well within its wait of a minute.
  std::atomic<bool> got{false};
  absl::StatusOr<std::string> id = absl::UnknownError("not yet");
  JoiningThread waiter([&] {
    id = sem.TryAcquire(absl::Seconds(60), absl::Seconds(30));
    got = true;
  });
  waiter.join();
  EXPECT_TRUE(got.load());
  ASSERT_OK(id);
  ASSERT_OK(sem.Release(*id));
  EXPECT_THAT(sem.AvailablePermits(), testing::IsOkAndHolds(1));
}

TEST_F(PermitSemaphoreTest, WatchdogKeepsALiveHoldersPermit) {
  std::unique_ptr<Client> holder =
      testing::MustConnect(redis().url(), [](ClientOptions& o) {
        o.lock_watchdog_timeout = absl::Milliseconds(300);
      });
  ASSERT_NE(holder, nullptr);
  const std::string name = TestLockName();
  PermitExpirableSemaphore mine = holder->GetPermitExpirableSemaphore(name);
  PermitExpirableSemaphore theirs = client_->GetPermitExpirableSemaphore(name);
  ASSERT_THAT(mine.TrySetPermits(1), testing::IsOkAndHolds(true));
  absl::StatusOr<std::string> id = mine.Acquire();
  ASSERT_OK(id);
  // Several lease periods: another client's wait finds no permit.
  EXPECT_THAT(theirs.TryAcquire(absl::Milliseconds(1500), absl::Seconds(5)),
              testing::StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(theirs.AvailablePermits(), testing::IsOkAndHolds(0));
  ASSERT_OK(mine.Release(*id));
  EXPECT_THAT(theirs.AvailablePermits(), testing::IsOkAndHolds(1));
}

TEST_F(PermitSemaphoreTest, PermitRemovedBehindItsBackIsReportedLost) {
  testing::EventLog events;
  std::unique_ptr<Client> holder =
      testing::MustConnect(redis().url(), [&events](ClientOptions& o) {
        o.lock_watchdog_timeout = absl::Milliseconds(300);
        o.on_lock_event = events.Callback();
      });
  ASSERT_NE(holder, nullptr);
  const std::string name = TestLockName();
  PermitExpirableSemaphore sem = holder->GetPermitExpirableSemaphore(name);
  ASSERT_THAT(sem.TrySetPermits(1), testing::IsOkAndHolds(true));
  absl::StatusOr<std::string> id = sem.Acquire();
  ASSERT_OK(id);
  ASSERT_OK(Command(
      {"ZREM", PermitSemaphoreTimeoutKey(name), absl::HexStringToBytes(*id)}));
  LockEvent lost;
  ASSERT_TRUE(
      events.WaitFor(LockEventType::kLockLost, absl::Seconds(30), &lost));
  EXPECT_EQ(lost.lock_name, name);
  EXPECT_EQ(lost.owner, *id);
  EXPECT_THAT(sem.Release(*id), testing::StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(PermitSemaphoreTest, RedissonScriptsShareThePermitsBothWays) {
  const std::string name = TestLockName();
  PermitExpirableSemaphore sem = client_->GetPermitExpirableSemaphore(name);
  ASSERT_THAT(sem.TrySetPermits(1), testing::IsOkAndHolds(true));
  // Redisson's permit (without a lease) blocks relock.
  const std::string redisson_id(32, 'a');
  ASSERT_TRUE(RedissonAcquire(name, redisson_id, 922337203685477));
  EXPECT_THAT(sem.TryAcquire(absl::ZeroDuration(), absl::Seconds(5)),
              testing::StatusIs(absl::StatusCode::kDeadlineExceeded));
  // relock releases Redisson's id, by its hex form.
  ASSERT_OK(sem.Release(redisson_id));
  // relock's permit blocks Redisson; a relock release wakes a waiter on the
  // channel (Redisson's waiters listen there).
  absl::StatusOr<std::string> id = sem.Acquire(absl::Seconds(30));
  ASSERT_OK(id);
  EXPECT_FALSE(RedissonAcquire(name, std::string(32, 'b'),
                               absl::ToUnixMillis(absl::Now()) + 30000));
  {
    absl::StatusOr<testing::RawConnection> sub =
        testing::RawConnection::Connect(redis().port());
    ASSERT_OK(sub);
    ASSERT_OK(sub->Command({"SUBSCRIBE", SemaphoreChannel(name)}));
    ASSERT_OK(sub->SetTimeout(absl::Seconds(10)));
    ASSERT_OK(sem.Release(*id));
    absl::StatusOr<RedisValue> message = sub->NextReply();
    ASSERT_OK(message);  // the release's message, as a Redisson waiter gets it
  }  // unsubscribed: the channel's one subscriber below is the waiter
  // Redisson releases an id relock gave out, and wakes a relock waiter. (A
  // lease far longer than the test: the permit must not come back by
  // itself, however slow the machine.)
  absl::StatusOr<std::string> second = sem.Acquire(absl::Seconds(600));
  ASSERT_OK(second);
  std::atomic<bool> got{false};
  JoiningThread waiter(
      [&] { got = sem.TryAcquire(absl::Seconds(60), absl::Seconds(30)).ok(); });
  ASSERT_OK(WaitUntilWaiting(redis(), SemaphoreChannel(name), *client_));
  EXPECT_EQ(RedissonRelease(name, *second), 1);
  waiter.join();
  EXPECT_TRUE(got.load());
}

// Review finding: an acquire whose reply did not come before its deadline
// (Redis paused or busy) was reported DeadlineExceeded, "no permit was
// available throughout the wait", though its script had reached Redis and
// took a permit once Redis ran it, out for its whole lease (here 10
// minutes) with no holder that knows of it. It is Unavailable, as the
// header says of an acquire whose answer was lost.
TEST_F(PermitSemaphoreTest, AnAcquireCutOffByItsDeadlineMayHaveTakenAPermit) {
  const std::string name = TestLockName();
  PermitExpirableSemaphore sem = client_->GetPermitExpirableSemaphore(name);
  ASSERT_THAT(sem.TrySetPermits(1), testing::IsOkAndHolds(true));
  ASSERT_OK(redis().Pause());  // SIGSTOP: the attempt waits in the socket
  const absl::StatusOr<std::string> id =
      sem.TryAcquire(absl::Milliseconds(300), absl::Minutes(10));
  ASSERT_OK(redis().Resume());
  // Redis, resumed, runs the attempt it had received: the permit is out.
  EXPECT_TRUE(testing::Eventually([&] {
    absl::StatusOr<RedisValue> out =
        Command({"ZCARD", PermitSemaphoreTimeoutKey(name)});
    return out.ok() && out->integer == 1;
  }));
  EXPECT_THAT(id, testing::StatusIs(absl::StatusCode::kUnavailable,
                                    ::testing::HasSubstr("may")));
}

// Review finding: a Release() whose PUBLISH Redis refused (an ACL user
// without the channel) gave the permit back, as its PermissionDenied says,
// but the client kept it as held: its watchdog renewed it again, found it
// gone and reported it lost (kLockLost) though its holder had released it.
TEST_F(PermitSemaphoreTest, AReleaseWhosePublishWasRefusedEndsTheHold) {
  constexpr char kUser[] = "relock-no-channels";
  ASSERT_OK(Command({"ACL", "SETUSER", kUser, "reset", "on", ">secret", "~*",
                     "resetchannels", "+@all"}));
  testing::EventLog events;
  std::unique_ptr<Client> holder = testing::MustConnect(
      absl::StrReplaceAll(
          redis().url(),
          {{"redis://", absl::StrCat("redis://", kUser, ":secret@")}}),
      [&events](ClientOptions& o) {
        o.lock_watchdog_timeout = absl::Milliseconds(300);
        o.on_lock_event = events.Callback();
      });
  Taken t;
  ASSERT_NO_FATAL_FAILURE(TakeBoth(holder.get(), &t));
  PermitExpirableSemaphore sem = holder->GetPermitExpirableSemaphore(t.name);
  EXPECT_THAT(sem.Release(t.released),
              testing::StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(client_->GetPermitExpirableSemaphore(t.name).AvailablePermits(),
              testing::IsOkAndHolds(1));
  // Several renewal rounds later, nothing was reported of it.
  ExpectNothingReportedOf(*holder, events, t.released, 4);
  (void)Command({"ACL", "DELUSER", kUser});
}

// Review finding: a Release() whose answer was lost (Redis paused past the
// command timeout) put the permit back among the holds the watchdog renews,
// though the release may have run, and here did, once Redis resumed: the
// next renewal found the permit gone and reported it lost (kLockLost) to a
// holder that had released it. As a lock's outermost release does, a
// permit's release with no answer abandons the hold: no longer renewed, the
// permit returns at its lease end at the latest.
TEST_F(PermitSemaphoreTest, AReleaseWhoseAnswerWasLostAbandonsThePermit) {
  testing::EventLog events;
  std::unique_ptr<Client> holder =
      testing::MustConnect(redis().url(), [&events](ClientOptions& o) {
        o.lock_watchdog_timeout = absl::Seconds(3);  // rounds every second
        o.command_timeout = absl::Milliseconds(300);
        o.on_lock_event = events.Callback();
      });
  Taken t;
  ASSERT_NO_FATAL_FAILURE(TakeBoth(holder.get(), &t));
  PermitExpirableSemaphore sem = holder->GetPermitExpirableSemaphore(t.name);
  ASSERT_OK(redis().Pause());  // SIGSTOP: the release waits in the socket
  const absl::Status release = sem.Release(t.released);
  ASSERT_OK(redis().Resume());
  EXPECT_THAT(release, testing::StatusIs(absl::StatusCode::kUnavailable));
  // Redis, resumed, runs the release it had received: the permit is back.
  EXPECT_TRUE(testing::Eventually([&] {
    absl::StatusOr<int64_t> available =
        client_->GetPermitExpirableSemaphore(t.name).AvailablePermits();
    return available.ok() && *available == 1;
  }));
  // Several renewal rounds later, nothing was reported of it.
  ExpectNothingReportedOf(*holder, events, t.released, 3);
  EXPECT_OK(sem.Release(t.kept));
}

TEST_F(PermitSemaphoreTest, UnboundHandleFails) {
  PermitExpirableSemaphore unbound;
  EXPECT_THAT(unbound.Acquire(),
              testing::StatusIs(absl::StatusCode::kFailedPrecondition));
}

}  // namespace
}  // namespace relock
