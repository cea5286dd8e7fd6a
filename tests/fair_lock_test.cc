// relock::FairLock on a real redis-server: strict arrival order across 3
// processes x 4 threads; one release wakes exactly one waiter; a killed
// queued waiter holds up the queue only until its deadline; a waiter that
// gives up leaves the queue at once; try_lock never queues; Redisson's own
// fair lock scripts as a peer in the same queue (exclusion and wake-ups both
// ways); the asynchronous calls; bad input.

#include <atomic>
#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/lock/lock_scripts.h"
#include "relock/relock.h"
#include "tests/redisson_scripts.h"
#include "tests/test_util.h"
#include "tests/testing/child_process.h"
#include "tests/testing/raw_connection.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace {

using ::relock::testing::Calls;
using ::relock::testing::ChildProcess;
using ::relock::testing::Eventually;
using ::relock::testing::kRedissonFairAcquire;
using ::relock::testing::kRedissonFairAcquireFailed;
using ::relock::testing::kRedissonFairUnlock;
using ::relock::testing::MustConnect;
using ::relock::testing::RawConnection;
using ::relock::testing::RedisValue;
using ::relock::testing::Stopwatch;
using ::relock::testing::TestLockName;
using ::testing::HasSubstr;

std::string QueueKey(const std::string& name) {
  return absl::StrCat("redisson_lock_queue:{", name, "}");
}
std::string TimeoutKey(const std::string& name) {
  return absl::StrCat("redisson_lock_timeout:{", name, "}");
}
std::string Channel(const std::string& name) {
  return absl::StrCat("redisson_lock__channel:{", name, "}");
}

// The next message `sub` (subscribed) receives is on `channel`.
void ExpectMessageOn(RawConnection& sub, const std::string& channel,
                     const std::string& what) {
  absl::StatusOr<RedisValue> m = sub.NextReply();
  ASSERT_OK(m) << what;
  ASSERT_EQ(m->elements.size(), 3u) << what << ": " << *m;
  EXPECT_EQ(m->elements[1].str, channel) << what;
}

class FairLockTest : public testing::RedisTest {
 protected:
  int64_t Integer(std::vector<std::string> argv) {
    absl::StatusOr<RedisValue> v = redis().Command(std::move(argv));
    return v.ok() && v->is_integer() ? v->integer : -1;
  }
  // The server's clock (TIME), in whole seconds; -1 on failure.
  int64_t ServerSeconds() {
    absl::StatusOr<RedisValue> time = redis().Command({"TIME"});
    int64_t s = -1;
    if (!time.ok() || time->elements.size() != 2 ||
        !absl::SimpleAtoi(time->elements[0].str, &s)) {
      return -1;
    }
    return s;
  }
  // A connection of its own, subscribed to `channel`.
  absl::StatusOr<RawConnection> SubscribedTo(const std::string& channel) {
    absl::StatusOr<RawConnection> sub = RawConnection::Connect(redis().port());
    if (!sub.ok()) return sub.status();
    if (absl::Status s = sub->Command({"SUBSCRIBE", channel}).status();
        !s.ok()) {
      return s;
    }
    return sub;
  }
  int64_t QueueLength(const std::string& name) {
    return Integer({"LLEN", QueueKey(name)});
  }
  std::vector<std::string> List(const std::string& key) {
    std::vector<std::string> out;
    absl::StatusOr<RedisValue> v = redis().Command({"LRANGE", key, "0", "-1"});
    if (v.ok()) {
      for (const RedisValue& e : v->elements) out.push_back(e.str);
    }
    return out;
  }
  int64_t Score(const std::string& name, const std::string& owner) {
    absl::StatusOr<RedisValue> v =
        redis().Command({"ZSCORE", TimeoutKey(name), owner});
    int64_t n = -1;
    if (v.ok() && v->is_string()) (void)absl::SimpleAtoi(v->str, &n);
    return n;
  }
  // The futile attempts so far: the fair acquire script calls LPOS once in
  // each attempt that did not get the lock (and in no other case).
  int64_t FutileAttempts() { return Calls(redis(), "lpos"); }
};

// A child: `threads` threads each take the fair lock once with lock(),
// append their owner field (read from the lock's hash while holding it) to
// the list `order_key`, and unlock.
RELOCK_CHILD_MAIN(FairWaiters) {
  int port = 0, threads = 0;
  if (args.size() != 5 || !absl::SimpleAtoi(args[1], &port) ||
      !absl::SimpleAtoi(args[4], &threads)) {
    return 2;
  }
  ClientOptions options;
  options.url = args[0];
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  if (!client.ok()) return 3;
  FairLock lock = (*client)->GetFairLock(args[2]);
  std::atomic<int> failures{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      std::lock_guard<FairLock> guard(lock);
      absl::StatusOr<RedisValue> fields =
          testing::CommandOnPort(port, {"HKEYS", args[2]});
      if (!fields.ok() || fields->elements.size() != 1) {
        ++failures;
        return;
      }
      if (!testing::CommandOnPort(port,
                                  {"RPUSH", args[3], fields->elements[0].str})
               .ok()) {
        ++failures;
      }
      absl::SleepFor(absl::Milliseconds(2));  // held a while
    });
  }
  for (std::thread& w : workers) w.join();
  std::cout << "done" << std::endl;
  return failures.load() == 0 ? 0 : 4;
}

// Twelve waiters in three processes queue behind a holder; once it
// releases, they get the lock in exactly the order in which they joined the
// queue, and each release wakes exactly one waiter, which takes the lock:
// no waiter makes an attempt in vain.
TEST_F(FairLockTest, StrictArrivalOrderAcrossProcessesOneWakeUpPerRelease) {
  constexpr int kChildren = 3;
  constexpr int kThreads = 4;
  constexpr int kWaiters = kChildren * kThreads;
  std::unique_ptr<Client> client = MustConnect(redis().url());
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  const std::string order_key = TestLockName("order");
  FairLock lock = client->GetFairLock(name);
  ASSERT_OK(lock.Acquire());
  const int64_t futile_before = FutileAttempts();
  std::vector<std::unique_ptr<ChildProcess>> children;
  for (int i = 0; i < kChildren; ++i) {
    absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Spawn(
        "FairWaiters", {redis().url(), absl::StrCat(redis().port()), name,
                        order_key, absl::StrCat(kThreads)});
    ASSERT_OK(child);
    children.push_back(*std::move(child));
  }
  // Every waiter joined the queue (one futile attempt) and, once its
  // subscription was confirmed, re-checked (another): then all of them sleep
  // (until a message, or their 30 s re-check).
  ASSERT_TRUE(Eventually([&] {
    return FutileAttempts() - futile_before >= 2 * kWaiters;
  })) << FutileAttempts() - futile_before;
  const std::vector<std::string> arrival = List(QueueKey(name));
  ASSERT_EQ(arrival.size(), size_t{kWaiters});
  const int64_t futile_at_release = FutileAttempts();
  ASSERT_OK(lock.Release());
  testing::ExpectChildrenDone(children);
  EXPECT_EQ(List(order_key), arrival);
  // Each of the 12 releases woke exactly the next waiter, whose one attempt
  // took the lock (a waiter woken in vain would have made a futile one).
  EXPECT_EQ(FutileAttempts(), futile_at_release);
  EXPECT_EQ(QueueLength(name), 0);
  EXPECT_EQ(Integer({"EXISTS", TimeoutKey(name)}), 0);
  EXPECT_FALSE(lock.IsLocked().value_or(true));
}

// A child that queues for the fair lock (queue wait `args[2]` ms) and never
// gets it before it is killed.
RELOCK_CHILD_MAIN(FairQueuedWaiter) {
  int64_t wait_ms = 0;
  if (args.size() != 3 || !absl::SimpleAtoi(args[2], &wait_ms)) return 2;
  ClientOptions options;
  options.url = args[0];
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  if (!client.ok()) return 3;
  FairLockOptions fair;
  fair.queue_wait = absl::Milliseconds(wait_ms);
  FairLock lock = (*client)->GetFairLock(args[1], fair);
  std::cout << "waiting" << std::endl;
  return lock.Acquire().ok() ? 0 : 4;
}

// A queued waiter is killed while the lock is held: once the holder
// releases (waking the dead waiter), the waiter behind it gets the lock at
// the dead one's deadline (the holder's lease end plus the queue wait, as it
// was when it joined), on its own re-check.
TEST_F(FairLockTest, AKilledQueuedWaiterHoldsUpTheQueueOnlyUntilItsDeadline) {
  std::unique_ptr<Client> client = MustConnect(redis().url());
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  FairLockOptions fair;
  fair.queue_wait = absl::Seconds(1);
  FairLock lock = client->GetFairLock(name, fair);
  ASSERT_OK(lock.Acquire(absl::Seconds(8)));
  absl::StatusOr<std::unique_ptr<ChildProcess>> dead =
      ChildProcess::Spawn("FairQueuedWaiter", {redis().url(), name, "1000"});
  ASSERT_OK(dead);
  ASSERT_TRUE(Eventually([&] { return QueueLength(name) == 1; }));
  const std::string dead_owner = List(QueueKey(name)).at(0);
  ASSERT_TRUE((*dead)->Signal(SIGKILL).ok());
  ASSERT_TRUE((*dead)->Wait(absl::Seconds(30)).ok());
  // Its deadline: at most the lease left (8 s) plus the queue wait (1 s)
  // after it joined.
  const int64_t deadline_ms = Score(name, dead_owner);
  ASSERT_GT(deadline_ms, 0);

  testing::BackgroundWaiter behind(client->GetFairLock(name, fair),
                                   absl::Seconds(60));
  ASSERT_TRUE(Eventually([&] { return QueueLength(name) == 2; }));
  // Wakes the dead waiter only. (On a very slow machine the 8 s lease may
  // have run out already: the scenario is the same, a free lock promised
  // to a dead waiter.)
  const absl::Status released = lock.Release();
  EXPECT_TRUE(released.ok() || released.code() == absl::StatusCode::kAborted)
      << released;
  EXPECT_TRUE(behind.Join());
  // Not before the dead waiter's deadline (on the server's clock, which the
  // deadline is on: now is past it).
  absl::StatusOr<RedisValue> time = redis().Command({"TIME"});
  ASSERT_TRUE(time.ok() && time->elements.size() == 2);
  int64_t seconds = 0;
  ASSERT_TRUE(absl::SimpleAtoi(time->elements[0].str, &seconds));
  EXPECT_GE(seconds * 1000 + 1000, deadline_ms);
  EXPECT_EQ(QueueLength(name), 0);
}

// A waiter whose wait runs out leaves the queue before TryAcquire returns;
// the waiter behind it moves up a place (its deadline one queue wait
// earlier). try_lock() and TryAcquire(0) fail while others wait, even on a
// free lock, and do not queue.
TEST_F(FairLockTest, AWaiterThatGivesUpLeavesAtOnceAndTryLockNeverQueues) {
  std::unique_ptr<Client> client = MustConnect(redis().url());
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  FairLock lock = client->GetFairLock(name);
  ASSERT_OK(lock.Acquire());

  testing::JoiningThread first([&] {
    FairLock mine = client->GetFairLock(name);
    absl::Status s = mine.TryAcquire(absl::Seconds(10));
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    // Gone from the queue (the leave was sent before TryAcquire returned;
    // without it, the entry would stay until its deadline, minutes away).
    EXPECT_TRUE(
        Eventually([&] { return QueueLength(name) == 1; }, absl::Seconds(10)));
  });
  ASSERT_TRUE(Eventually([&] { return QueueLength(name) == 1; }));
  const std::string first_owner = List(QueueKey(name)).at(0);
  testing::BackgroundWaiter second(client->GetFairLock(name),
                                   absl::Seconds(60));
  ASSERT_TRUE(Eventually([&] { return QueueLength(name) == 2; }));
  const std::string second_owner = List(QueueKey(name)).at(1);
  const int64_t before = Score(name, second_owner);
  first.join();
  EXPECT_EQ(List(QueueKey(name)), std::vector<std::string>{second_owner});
  EXPECT_EQ(Score(name, first_owner), -1);
  EXPECT_EQ(Score(name, second_owner),
            before - absl::ToInt64Milliseconds(absl::Minutes(5)));

  // Held, with a waiter: the one-attempt calls fail and leave no trace.
  testing::JoiningThread try_locker([&] {
    FairLock mine = client->GetFairLock(name);
    EXPECT_FALSE(mine.try_lock());
    // Its number is a lease or a queue deadline: no "lease left" (a review
    // found a free lock's queue deadline reported as the holder's lease).
    EXPECT_THAT(mine.TryAcquire(absl::ZeroDuration()),
                testing::StatusIs(absl::StatusCode::kDeadlineExceeded,
                                  HasSubstr("promised to the waiters")));
  });
  try_locker.join();
  EXPECT_EQ(QueueLength(name), 1);
  ASSERT_OK(lock.Release());
  EXPECT_TRUE(second.Join());
  EXPECT_EQ(QueueLength(name), 0);
}

// The holder re-enters without queueing; the std surface; queries.
// A fair lock's re-entry that finds its hold gone is Aborted (NOTHELD) and
// writes nothing (it once took the lock anew, or queued behind another
// owner, for a re-entry: see lua/acquire.lua).
TEST_F(FairLockTest, AReentryAfterTheHoldWasLostIsAborted) {
  std::unique_ptr<Client> client = MustConnect(redis().url());
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  FairLock lock = client->GetFairLock(name);
  ASSERT_OK(lock.Acquire(absl::Seconds(30)));
  ASSERT_OK(redis().Command({"DEL", name}));
  const absl::Status s = lock.Acquire(absl::Seconds(30));
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("NOTHELD"));
  EXPECT_EQ(redis().Command({"EXISTS", name})->integer, 0);
  EXPECT_EQ(QueueLength(name), 0);
  EXPECT_EQ(lock.Release().code(), absl::StatusCode::kAborted);
  ASSERT_OK(lock.Acquire(absl::Seconds(30)));
  ASSERT_OK(lock.Release());
}

TEST_F(FairLockTest, ReentersAndWorksWithTheStdSurface) {
  std::unique_ptr<Client> client = MustConnect(redis().url());
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  FairLock lock = client->GetFairLock(name);
  {
    std::lock_guard<FairLock> outer(lock);
    std::unique_lock<FairLock> inner(lock);
    EXPECT_TRUE(lock.try_lock());
    EXPECT_EQ(lock.HoldCount().value_or(-1), 3);
    EXPECT_TRUE(lock.IsHeldByCurrentThread().value_or(false));
    lock.unlock();
    EXPECT_EQ(QueueLength(name), 0);
  }
  EXPECT_FALSE(lock.IsLocked().value_or(true));
  EXPECT_EQ(lock.Release().code(), absl::StatusCode::kFailedPrecondition);
}

// The asynchronous calls queue and hand off in order too.
TEST_F(FairLockTest, AsynchronousWaitersGetTheLockInArrivalOrder) {
  std::unique_ptr<Client> client = MustConnect(redis().url());
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  FairLock lock = client->GetFairLock(name);
  ASSERT_OK(lock.Acquire());
  constexpr int kWaiters = 5;
  std::vector<Owner> owners;
  std::vector<Future<absl::Status>> done;
  for (int i = 0; i < kWaiters; ++i) {
    owners.push_back(Owner::New());
    done.push_back(lock.AcquireAsync(owners.back()));
    ASSERT_TRUE(Eventually([&] { return QueueLength(name) == i + 1; }));
  }
  ASSERT_OK(lock.Release());
  for (int i = 0; i < kWaiters; ++i) {
    ASSERT_TRUE(done[i].WaitFor(absl::Seconds(60))) << i;
    EXPECT_OK(done[i].Get());
    EXPECT_TRUE(lock.IsHeldBy(owners[i]).value_or(false)) << i;
    // The next one waits for this one's release.
    if (i + 1 < kWaiters) {
      EXPECT_FALSE(done[i + 1].WaitFor(absl::ZeroDuration()));
    }
    ASSERT_OK(lock.Release(owners[i]));
  }
  EXPECT_EQ(QueueLength(name), 0);
}

// Redisson's own fair lock scripts, run with EVAL as a foreign owner, share
// the queue with relock: a Redisson waiter that joined first gets the lock
// first (woken on its own channel by relock's release), and its release
// wakes the relock waiter behind it.
TEST_F(FairLockTest, RedissonsFairScriptsShareTheQueueInOrder) {
  std::unique_ptr<Client> client = MustConnect(redis().url());
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  const std::string redisson = "7f1c0d52-5e1a-4c3b-9d2e-0a1b2c3d4e5f:42";
  const std::string wait_ms = "300000";
  auto now_ms = [] { return absl::StrCat(absl::ToUnixMillis(absl::Now())); };
  auto redisson_acquire = [&] {
    return redis().Command({"EVAL", kRedissonFairAcquire, "3", name,
                            QueueKey(name), TimeoutKey(name), "30000", redisson,
                            wait_ms, now_ms()});
  };
  FairLock lock = client->GetFairLock(name);
  ASSERT_OK(lock.Acquire());

  // The Redisson owner queues first and listens on its own channel.
  absl::StatusOr<RawConnection> sub = RawConnection::Connect(redis().port());
  ASSERT_OK(sub);
  const std::string redisson_channel = Channel(name) + ":" + redisson;
  ASSERT_OK(sub->Command({"SUBSCRIBE", redisson_channel}));
  absl::StatusOr<RedisValue> queued = redisson_acquire();
  ASSERT_TRUE(queued.ok() && queued->is_integer()) << queued.status();

  // A relock waiter queues behind it.
  auto steady_ms = [] {
    return absl::ToInt64Milliseconds(
        absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch()));
  };
  std::atomic<bool> relock_got{false};
  std::atomic<int64_t> redisson_released_at{0}, relock_got_at{0};
  testing::JoiningThread relock_waiter([&] {
    FairLock mine = client->GetFairLock(name);
    const absl::Status got = mine.TryAcquire(absl::Seconds(90));
    relock_got = got.ok();
    relock_got_at = steady_ms();
    // Exclusion: never before the Redisson owner let go.
    EXPECT_NE(redisson_released_at.load(), 0) << got;
    if (relock_got) {
      EXPECT_OK(mine.Release());
    }
  });
  ASSERT_TRUE(Eventually([&] { return QueueLength(name) == 2; }));
  EXPECT_EQ(List(QueueKey(name)).at(0), redisson);

  // relock's release wakes the Redisson owner (the head) on its channel...
  ASSERT_OK(lock.Release());
  absl::StatusOr<RedisValue> woken = sub->NextReply();
  ASSERT_OK(woken);
  ASSERT_EQ(woken->elements.size(), 3u) << *woken;
  EXPECT_EQ(woken->elements[1].str, redisson_channel);
  EXPECT_EQ(woken->elements[2].str, "0");
  // ... which takes it (the relock waiter, behind it, does not).
  absl::StatusOr<RedisValue> taken = redisson_acquire();
  ASSERT_TRUE(taken.ok() && taken->is_nil()) << taken.status();
  // Time passes on purpose: the relock waiter must NOT get the lock in it.
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_FALSE(relock_got.load());

  // The Redisson owner's release wakes the relock waiter on its channel: it
  // takes the lock well within its 30 s re-check (the wake-up did it).
  redisson_released_at = steady_ms();
  absl::StatusOr<RedisValue> released = redis().Command(
      {"EVAL", kRedissonFairUnlock, "4", name, QueueKey(name), TimeoutKey(name),
       Channel(name), "0", "30000", redisson, now_ms()});
  ASSERT_TRUE(released.ok() && released->is_integer() && released->integer == 1)
      << released.status();
  relock_waiter.join();
  EXPECT_TRUE(relock_got.load());
  EXPECT_LT(relock_got_at.load() - redisson_released_at.load(), 20000);
  EXPECT_EQ(QueueLength(name), 0);

  // A Redisson waiter that gives up (acquireFailed) leaves relock's queue
  // consistent: relock takes the lock at once afterwards.
  ASSERT_OK(redis().Command(
      {"HSET", name, "5e5e5e5e-0000-4000-8000-000000000001:1", "1"}));
  ASSERT_OK(redisson_acquire());
  ASSERT_EQ(QueueLength(name), 1);
  ASSERT_OK(
      redis().Command({"EVAL", kRedissonFairAcquireFailed, "2", QueueKey(name),
                       TimeoutKey(name), redisson, wait_ms}));
  EXPECT_EQ(QueueLength(name), 0);
  ASSERT_OK(redis().Command({"DEL", name}));
  EXPECT_TRUE(lock.try_lock());
  lock.unlock();
}

// ForceRelease frees the lock and wakes the head waiter; the queue stays.
TEST_F(FairLockTest, ForceReleaseWakesTheHeadWaiter) {
  std::unique_ptr<Client> client = MustConnect(redis().url());
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  FairLock lock = client->GetFairLock(name);
  ASSERT_OK(redis().Command(
      {"HSET", name, "90e0c11e-0000-4000-8000-000000000007:7", "1"}));
  ASSERT_OK(redis().Command({"PEXPIRE", name, "120000"}));
  testing::BackgroundWaiter waiter(client->GetFairLock(name),
                                   absl::Seconds(60));
  ASSERT_TRUE(Eventually([&] { return QueueLength(name) == 1; }));
  Stopwatch watch;
  EXPECT_TRUE(lock.ForceRelease().value_or(false));
  EXPECT_TRUE(waiter.Join());
  // The holder's lease had 2 minutes left: only the wake-up could end the
  // wait this soon (re-checks without a message come every 30 s).
  EXPECT_LT(watch.Elapsed(), absl::Seconds(20));
}

// The scripts wake the next waiter whenever the head of a free lock's
// queue changes without an acquisition: a waiter that leaves (it may have
// been woken by a release), a closing client's release-all of a waiter, a
// leave that removes an orphaned hold, and an acquire that drops a stale
// head. Driven with EVAL on states set up by hand; the next waiter listens
// on its own channel.
TEST_F(FairLockTest, TheNextWaiterIsWokenWhenTheHeadOfAFreeLockChanges) {
  const std::vector<redis::ScriptSource> scripts = internal::LockScripts();
  const std::string acquire(scripts[internal::kFairAcquireScript].source);
  const std::string leave(scripts[internal::kFairLeaveScript].source);
  const std::string release_all(
      scripts[internal::kFairReleaseAllScript].source);
  const std::string name = TestLockName();
  const std::string first = "c1:1", next = "c2:2", late = "c3:3";
  const int64_t now_s = ServerSeconds();
  ASSERT_GT(now_s, 0);
  const std::string future = absl::StrCat((now_s + 600) * 1000);
  const std::string past = absl::StrCat((now_s - 600) * 1000);
  // The queue [first, next], first's deadline `first_deadline`.
  auto queue = [&](const std::string& first_deadline) {
    ASSERT_OK(redis().Command({"DEL", name, QueueKey(name), TimeoutKey(name)}));
    ASSERT_OK(redis().Command({"RPUSH", QueueKey(name), first, next}));
    ASSERT_OK(redis().Command(
        {"ZADD", TimeoutKey(name), first_deadline, first, future, next}));
  };
  const std::string next_channel = Channel(name) + ":" + next;
  absl::StatusOr<RawConnection> sub = SubscribedTo(next_channel);
  ASSERT_OK(sub);
  auto expect_woken = [&](const std::string& what) {
    ExpectMessageOn(*sub, next_channel, what);
    EXPECT_EQ(List(QueueKey(name)).at(0), next) << what;
  };
  const std::vector<std::string> fair_keys = {name, QueueKey(name),
                                              TimeoutKey(name), Channel(name)};
  auto eval = [&](const std::string& script, std::vector<std::string> args) {
    std::vector<std::string> argv = {"EVAL", script, "4"};
    argv.insert(argv.end(), fair_keys.begin(), fair_keys.end());
    argv.insert(argv.end(), args.begin(), args.end());
    return redis().Command(std::move(argv));
  };

  queue(future);  // the head leaves a free lock
  ASSERT_OK(eval(leave, {first, "300000", "0", "publish", "0"}));
  expect_woken("leave");

  queue(future);  // a closing client's waiter at the head
  ASSERT_OK(eval(release_all, {"0", first, "publish"}));
  expect_woken("release_all");

  queue(future);  // a fresh waiter's orphaned hold goes with its leave
  ASSERT_OK(redis().Command({"HSET", name, first, "1"}));
  ASSERT_OK(redis().Command({"LREM", QueueKey(name), "0", first}));
  ASSERT_OK(redis().Command({"ZREM", TimeoutKey(name), first}));
  absl::StatusOr<RedisValue> left =
      eval(leave, {first, "300000", "0", "publish", "1"});
  ASSERT_TRUE(left.ok() && left->is_integer()) << left.status();
  EXPECT_EQ(left->integer, 1);
  EXPECT_EQ(Integer({"EXISTS", name}), 0);
  expect_woken("leave of an orphaned hold");

  queue(past);  // a stale head dropped by a newcomer's attempt
  absl::StatusOr<RedisValue> attempt =
      eval(acquire, {"30000", late, "300000", "1", "1", "publish"});
  ASSERT_TRUE(attempt.ok() && attempt->is_integer()) << attempt.status();
  expect_woken("acquire");
  EXPECT_EQ(List(QueueKey(name)), (std::vector<std::string>{next, late}));
}

// A waiter that died at the head of the queue (its deadline passed, and no
// fair lock's call dropped it yet) hides no live waiter behind it: a plain
// lock's (or a read-write lock's) acquire of the free name is still refused,
// and a plain lock's release wakes the live waiter, not the dead one.
TEST_F(FairLockTest, ADeadWaiterAtTheHeadHidesNoLiveWaiter) {
  std::unique_ptr<Client> client = MustConnect(redis().url());
  ASSERT_NE(client, nullptr);
  const std::vector<redis::ScriptSource> scripts = internal::LockScripts();
  const std::string release(scripts[internal::kReleaseScript].source);
  const std::string release_all(scripts[internal::kReleaseAllScript].source);
  const std::string name = TestLockName();
  const std::string dead = "c1:1", next = "c2:2", holder = "d4:4";
  const int64_t now_s = ServerSeconds();
  ASSERT_GT(now_s, 0);
  // The queue [dead, next]: dead's deadline passed, next's is to come.
  auto queue = [&] {
    ASSERT_OK(redis().Command({"DEL", name, QueueKey(name), TimeoutKey(name)}));
    ASSERT_OK(redis().Command({"RPUSH", QueueKey(name), dead, next}));
    ASSERT_OK(redis().Command({"ZADD", TimeoutKey(name),
                               absl::StrCat((now_s - 600) * 1000), dead,
                               absl::StrCat((now_s + 600) * 1000), next}));
  };
  queue();
  EXPECT_THAT(client->GetLock(name).TryAcquire(absl::ZeroDuration()),
              testing::StatusIs(absl::StatusCode::kFailedPrecondition,
                                HasSubstr("NOTALOCK")));
  EXPECT_THAT(client->GetReadWriteLock(name).WriteLock().TryAcquire(
                  absl::ZeroDuration()),
              testing::StatusIs(absl::StatusCode::kFailedPrecondition,
                                HasSubstr("NOTALOCK")));
  EXPECT_EQ(Integer({"EXISTS", name}), 0);  // nothing written

  const std::string next_channel = Channel(name) + ":" + next;
  absl::StatusOr<RawConnection> sub = SubscribedTo(next_channel);
  ASSERT_OK(sub);
  auto expect_woken = [&](const std::string& what) {
    ExpectMessageOn(*sub, next_channel, what);
    EXPECT_EQ(Integer({"EXISTS", name}), 0) << what;
  };
  // A plain hold's release, with the queue's key and without it (the
  // script finds the queue itself), and a release-all.
  for (int keys : {3, 2}) {
    queue();
    ASSERT_OK(redis().Command({"HSET", name, holder, "1"}));
    std::vector<std::string> argv = {"EVAL", release, absl::StrCat(keys), name,
                                     Channel(name)};
    if (keys == 3) argv.push_back(QueueKey(name));
    for (const char* arg : {"0", "0"}) argv.push_back(arg);
    argv.push_back(holder);
    argv.push_back("publish");
    absl::StatusOr<RedisValue> released = redis().Command(argv);
    ASSERT_TRUE(released.ok() && released->is_integer()) << released.status();
    EXPECT_EQ(released->integer, 1);
    expect_woken(absl::StrCat("release with ", keys, " keys"));
  }
  queue();
  ASSERT_OK(redis().Command({"HSET", name, holder, "1"}));
  ASSERT_OK(redis().Command({"EVAL", release_all, "3", name, Channel(name),
                             QueueKey(name), "0", holder, "publish"}));
  expect_woken("release_all");

  // An ACL user that may not run TIME: the release, which has freed the
  // lock by then, still answers 1 (the head is woken, not told apart).
  ASSERT_OK(redis().Command(
      {"ACL", "SETUSER", "notime", "on", ">pw", "~*", "&*", "+@all", "-time"}));
  testing::RawConnectionOptions as_notime;
  as_notime.user = "notime";
  as_notime.password = "pw";
  absl::StatusOr<RawConnection> notime =
      RawConnection::Connect(redis().port(), as_notime);
  ASSERT_OK(notime);
  queue();
  ASSERT_OK(redis().Command({"HSET", name, holder, "1"}));
  absl::StatusOr<RedisValue> released =
      notime->Command({"EVAL", release, "3", name, Channel(name),
                       QueueKey(name), "0", "0", holder, "publish"});
  ASSERT_TRUE(released.ok() && released->is_integer()) << released.status();
  EXPECT_EQ(released->integer, 1);
  EXPECT_EQ(Integer({"EXISTS", name}), 0);
  ASSERT_OK(redis().Command({"ACL", "DELUSER", "notime"}));
}

TEST_F(FairLockTest, BadInput) {
  std::unique_ptr<Client> client = MustConnect(redis().url());
  ASSERT_NE(client, nullptr);
  FairLockOptions bad;
  bad.queue_wait = absl::ZeroDuration();
  FairLock lock = client->GetFairLock(TestLockName(), bad);
  absl::Status s = lock.Acquire();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("queue_wait"));
  EXPECT_EQ(lock.IsLocked().status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->GetFairLock("").Acquire().code(),
            absl::StatusCode::kInvalidArgument);
  FairLock unbound;
  EXPECT_EQ(unbound.Acquire().code(), absl::StatusCode::kFailedPrecondition);
  // The queue's key holding something else: a clear error, nothing touched.
  const std::string name = TestLockName("wrongtype");
  ASSERT_OK(redis().Command({"SET", QueueKey(name), "x"}));
  ASSERT_OK(redis().Command({"HSET", name, "other:1", "1"}));
  s = client->GetFairLock(name).TryAcquire(absl::Milliseconds(100));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
}

}  // namespace
}  // namespace relock
