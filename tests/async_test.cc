// The asynchronous calls (Lock::AcquireAsync, TryAcquireAsync, ReleaseAsync)
// on a real redis-server: completion on the loop thread, a waiter woken by
// the unlock notification, a thousand concurrent acquires from a handful of
// threads, owner tokens across threads, Close() cancelling pending waits,
// and the misuses that must fail instead of deadlocking: blocking calls and
// Future::Get() inside a callback, Close() or destruction inside one, a
// callback that throws, Future::WaitFor's extreme timeouts.

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "relock/relock.h"
#include "tests/test_util.h"
#include "tests/testing/notification.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace {

using ::relock::testing::EventLog;
using ::relock::testing::Eventually;
using ::relock::testing::MustConnect;
using ::relock::testing::Stopwatch;
using ::relock::testing::TestLockName;

constexpr absl::Duration kLong = absl::Seconds(30);  // a result that must come
// A refusal that must come at once: far below the 4 s a blocking call took
// on the loop thread before it failed, with slack for a loaded machine.
constexpr absl::Duration kAtOnce = absl::Seconds(2);

// Collects the lines of a ClientOptions::logger.
class LogLines {
 public:
  std::function<void(absl::LogSeverity, absl::string_view)> Logger() {
    return [this](absl::LogSeverity severity, absl::string_view line) {
      MutexLock lock(&mu_);
      if (severity == absl::LogSeverity::kError) lines_.emplace_back(line);
    };
  }
  // Whether an error line containing `text` was logged within kLong.
  bool SawError(absl::string_view text) const {
    MutexLock lock(&mu_);
    auto seen = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      for (const std::string& line : lines_) {
        if (absl::StrContains(line, text)) return true;
      }
      return false;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&seen), kLong);
  }

 private:
  mutable Mutex mu_;
  std::vector<std::string> lines_ ABSL_GUARDED_BY(mu_);
};

class AsyncTest : public testing::RedisClientTest {
 protected:
  // Waits for `f` (generously) and returns its value.
  static absl::Status Await(Future<absl::Status> f) {
    if (!f.WaitFor(kLong))
      return absl::DeadlineExceededError("test: no result");
    return f.Get();
  }
};

TEST_F(AsyncTest, AFreeLockIsAcquiredAndReleased) {
  Lock lock = client_->GetLock(TestLockName());
  const Owner task = Owner::New();
  ASSERT_OK(Await(lock.AcquireAsync(task)));
  EXPECT_EQ(*lock.HoldCount(task), 1);
  ASSERT_OK(Await(lock.AcquireAsync(task)));  // re-entry
  EXPECT_EQ(*lock.HoldCount(task), 2);
  ASSERT_OK(Await(lock.ReleaseAsync(task)));
  ASSERT_OK(Await(lock.ReleaseAsync(task)));
  EXPECT_EQ(*lock.IsLocked(), false);
  EXPECT_EQ(Await(lock.ReleaseAsync(task)).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(AsyncTest, CallbacksRunOnTheClientsLoopThreadNotTheCaller) {
  Lock lock = client_->GetLock(TestLockName());
  const Owner task = Owner::New();
  std::atomic<bool> on_caller{true};
  testing::Notification done;
  const std::thread::id caller = std::this_thread::get_id();
  lock.AcquireAsync(task, [&](absl::Status s) {
    EXPECT_OK(s);
    on_caller = std::this_thread::get_id() == caller;
    done.Notify();
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(kLong));
  EXPECT_FALSE(on_caller.load());
  ASSERT_OK(lock.Release(task));
}

TEST_F(AsyncTest, AnAsyncWaiterIsWokenByTheUnlockNotification) {
  Lock lock = client_->GetLock(TestLockName());
  // The holder's explicit lease is a minute: only the unlock message can
  // end the wait in time.
  ASSERT_OK(lock.Acquire(absl::Seconds(60)));
  const Owner task = Owner::New();
  Future<absl::Status> waiting = lock.TryAcquireAsync(task, absl::Seconds(50));
  EXPECT_FALSE(waiting.WaitFor(absl::Milliseconds(200)));  // held
  Stopwatch watch;
  ASSERT_OK(lock.Release());
  ASSERT_OK(Await(waiting));
  EXPECT_LT(watch.Elapsed(), absl::Seconds(20));
  EXPECT_EQ(*lock.HoldCount(task), 1);
  ASSERT_OK(Await(lock.ReleaseAsync(task)));
}

TEST_F(AsyncTest, AWaitThatRunsOutIsDeadlineExceeded) {
  Lock lock = client_->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire(absl::Seconds(60)));
  Stopwatch watch;
  absl::Status s =
      Await(lock.TryAcquireAsync(Owner::New(), absl::Milliseconds(300)));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_GE(watch.Elapsed(), absl::Milliseconds(290));
  ASSERT_OK(lock.Release());
}

// A thousand acquires in flight at once on one client, started from four
// threads, on ten locks: every one completes, and no two holders of a lock
// overlap. A holder keeps its lock across a round trip (it re-enters), then
// releases twice, all from its callbacks: while it holds, no other task's
// acquire of that lock may complete.
TEST_F(AsyncTest, AThousandConcurrentAcquiresFromAHandfulOfThreads) {
  constexpr int kLocks = 10;
  constexpr int kTasks = 1000;
  constexpr int kThreads = 4;
  std::vector<Lock> locks;
  for (int i = 0; i < kLocks; ++i) {
    locks.push_back(client_->GetLock(TestLockName(absl::StrCat(i))));
  }
  // Per lock, the task holding it (0: none). Callbacks all run on the
  // loop thread; atomics keep the test thread's final reads simple.
  std::vector<std::atomic<uint64_t>> holder(kLocks);
  std::atomic<int> overlaps{0}, failures{0}, finished{0};
  testing::Notification all_finished;
  auto finish = [&] {
    if (finished.fetch_add(1) + 1 == kTasks) all_finished.Notify();
  };
  auto start = [&](int t) {
    Lock& lock = locks[t % kLocks];
    std::atomic<uint64_t>& held_by = holder[t % kLocks];
    const Owner task = Owner::New();
    lock.AcquireAsync(task, [&, task](absl::Status s) {
      if (!s.ok()) {
        failures.fetch_add(1);
        return finish();
      }
      if (held_by.exchange(task.number()) != 0) overlaps.fetch_add(1);
      lock.AcquireAsync(task, [&, task](absl::Status again) {
        if (!again.ok()) failures.fetch_add(1);
        if (held_by.exchange(0) != task.number()) overlaps.fetch_add(1);
        lock.ReleaseAsync(task, [&, task](absl::Status r1) {
          if (!r1.ok()) failures.fetch_add(1);
          lock.ReleaseAsync(task, [&](absl::Status r2) {
            if (!r2.ok()) failures.fetch_add(1);
            finish();
          });
        });
      });
    });
  };
  std::vector<std::thread> threads;
  for (int k = 0; k < kThreads; ++k) {
    threads.emplace_back([&, k] {
      for (int t = k; t < kTasks; t += kThreads) start(t);
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_TRUE(all_finished.WaitForNotificationWithTimeout(absl::Seconds(120)))
      << finished.load() << " of " << kTasks << " done";
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(failures.load(), 0);
  for (Lock& lock : locks) EXPECT_EQ(*lock.IsLocked(), false);
}

TEST_F(AsyncTest, ATokenAcquiredAsynchronouslyIsReleasedOnAnyThread) {
  Lock lock = client_->GetLock(TestLockName());
  const Owner task = Owner::New();
  ASSERT_OK(Await(lock.AcquireAsync(task)));
  std::thread([&] { EXPECT_OK(lock.Release(task)); }).join();
  EXPECT_EQ(*lock.IsLocked(), false);
}

TEST_F(AsyncTest, CloseCancelsPendingWaits) {
  std::unique_ptr<Client> other = MustConnect(redis().url());
  ASSERT_NE(other, nullptr);
  Lock held = other->GetLock(TestLockName());
  ASSERT_OK(held.Acquire(absl::Seconds(60)));
  Lock lock = client_->GetLock(held.name());
  std::vector<Future<absl::Status>> waits;
  for (int i = 0; i < 5; ++i) waits.push_back(lock.AcquireAsync(Owner::New()));
  EXPECT_FALSE(waits[0].WaitFor(absl::Milliseconds(200)));
  Stopwatch watch;
  client_->Close();
  for (Future<absl::Status>& w : waits) {
    absl::Status s = Await(w);
    EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  }
  EXPECT_LT(watch.Elapsed(), absl::Seconds(10));
  ASSERT_OK(held.Release());
}

TEST_F(AsyncTest, AThreadOwnerIsRefusedAtOnce) {
  Lock lock = client_->GetLock(TestLockName());
  Future<absl::Status> f = lock.AcquireAsync(Owner::ThisThread());
  ASSERT_TRUE(f.Ready());  // on the calling thread, before returning
  EXPECT_EQ(f.Get().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lock.AcquireAsync(Owner()).Get().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lock.TryAcquireAsync(Owner::New(), absl::Seconds(-1)).Get().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*lock.IsLocked(), false);
}

TEST_F(AsyncTest, ABlockingCallInACallbackFailsInsteadOfDeadlocking) {
  Lock lock = client_->GetLock(TestLockName());
  const Owner task = Owner::New();
  Future<absl::Status> nested;
  testing::Notification done;
  absl::Status inner;
  lock.AcquireAsync(task, [&](absl::Status s) {
    EXPECT_OK(s);
    inner = lock.Release(task);  // blocking, on the loop thread
    done.Notify();
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(kLong));
  EXPECT_EQ(inner.code(), absl::StatusCode::kFailedPrecondition) << inner;
  ASSERT_OK(lock.Release(task));
}

// Issue 23, item 4: every blocking call from a callback on the loop thread
// (queries, ForceRelease, tokens, Ping, inspection, the other lock types)
// waited 4 s for answers only that thread could read, then failed with
// Unavailable. Each is refused at once now; the local queries still work.
TEST_F(AsyncTest, EveryBlockingCallInACallbackIsRefusedAtOnce) {
  std::unique_ptr<RedlockClient> redlock = [this] {
    RedlockOptions options;
    options.urls = {redis().url()};
    absl::StatusOr<std::unique_ptr<RedlockClient>> c =
        RedlockClient::Connect(options);
    EXPECT_OK(c);
    return c.ok() ? *std::move(c) : nullptr;
  }();
  ASSERT_NE(redlock, nullptr);
  Lock lock = client_->GetLock(TestLockName());
  FencedLock fenced = client_->GetFencedLock(TestLockName("fenced"));
  ReadWriteLock rw = client_->GetReadWriteLock(TestLockName("rw"));
  RedlockLock red = redlock->GetLock(TestLockName("red"));
  MultiLock multi(client_->GetLock(TestLockName("m1")),
                  client_->GetLock(TestLockName("m2")));
  const Owner task = Owner::New();
  struct Outcome {
    std::string call;
    absl::Status status;
    absl::Duration took;
  };
  std::vector<Outcome> outcomes;
  absl::Status safe_until;
  testing::Notification done;
  lock.AcquireAsync(task, [&](absl::Status s) {
    EXPECT_OK(s);
    auto check = [&](const std::string& call, auto&& fn) {
      Stopwatch watch;
      absl::Status status = fn();
      outcomes.push_back({call, std::move(status), watch.Elapsed()});
    };
    auto status_of = [](const auto& result) {
      if constexpr (std::is_same_v<std::decay_t<decltype(result)>,
                                   absl::Status>) {
        return result;
      } else {
        return result.status();
      }
    };
#define RELOCK_CHECK_CALL(expr) check(#expr, [&] { return status_of(expr); })
    RELOCK_CHECK_CALL(lock.IsLocked());
    RELOCK_CHECK_CALL(lock.HoldCount(task));
    RELOCK_CHECK_CALL(lock.IsHeldBy(task));
    RELOCK_CHECK_CALL(lock.IsHeldByCurrentThread());
    RELOCK_CHECK_CALL(lock.RemainingLease());
    RELOCK_CHECK_CALL(lock.ForceRelease());
    RELOCK_CHECK_CALL(lock.Acquire(task));
    RELOCK_CHECK_CALL(lock.TryAcquire(Owner::New(), absl::ZeroDuration()));
    RELOCK_CHECK_CALL(lock.Release(task));
    RELOCK_CHECK_CALL(fenced.GetToken());
    RELOCK_CHECK_CALL(fenced.TryLockAndGetToken(absl::ZeroDuration()));
    RELOCK_CHECK_CALL(rw.ReadLock().IsLocked());
    RELOCK_CHECK_CALL(rw.WriteLock().TryAcquire(absl::ZeroDuration()));
    RELOCK_CHECK_CALL(multi.TryAcquire(Owner::New(), absl::ZeroDuration()));
    RELOCK_CHECK_CALL(client_->Ping());
    RELOCK_CHECK_CALL(client_->InspectLock(lock.name()));
    RELOCK_CHECK_CALL(client_->ListLocks());
#undef RELOCK_CHECK_CALL
    // Local, no round trip: allowed on the loop thread.
    safe_until = lock.SafeUntil(task).status();
    done.Notify();
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(120)));
  for (const Outcome& o : outcomes) {
    EXPECT_EQ(o.status.code(), absl::StatusCode::kFailedPrecondition)
        << o.call << ": " << o.status;
    EXPECT_TRUE(absl::StrContains(o.status.message(), "event loop thread"))
        << o.call << ": " << o.status;
    EXPECT_LT(o.took, kAtOnce) << o.call;
  }
  EXPECT_OK(safe_until);
  // Redlock's client has a loop of its own: the same refusals there.
  std::vector<absl::Status> red_outcomes;
  testing::Notification red_done;
  red.AcquireAsync(task, [&](absl::Status s) {
    EXPECT_OK(s);
    red_outcomes.push_back(red.TryAcquire(Owner::New(), absl::ZeroDuration()));
    red_outcomes.push_back(red.Release(task));
    red_outcomes.push_back(red.Extend(absl::Seconds(10)));
    red_done.Notify();
  });
  ASSERT_TRUE(red_done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  for (const absl::Status& s : red_outcomes) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  }
  ASSERT_OK(red.Release(task));
  // Nothing was done by the refused calls: the task still holds the lock
  // once.
  EXPECT_EQ(*lock.HoldCount(task), 1);
  ASSERT_OK(lock.Release(task));
  EXPECT_EQ(*fenced.IsLocked(), false);
  EXPECT_OK(client_->Ping());
}

// Issue 23, item 5: Future::Get() in a callback waited for the loop thread
// it ran on, for good. It is FailedPrecondition at once now (README), and
// Wait() / WaitFor() do not wait there either.
TEST_F(AsyncTest, FutureGetInACallbackIsFailedPreconditionNotADeadlock) {
  Lock lock = client_->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire(absl::Seconds(60)));  // held: no value soon
  const Owner task = Owner::New();
  Lock other = client_->GetLock(TestLockName("other"));
  absl::Status got, got_ready;
  bool waited_for = true;
  Future<absl::Status> pending;
  Stopwatch watch;
  testing::Notification done;
  other.AcquireAsync(task, [&](absl::Status s) {
    EXPECT_OK(s);
    pending = lock.TryAcquireAsync(Owner::New(), kLong);
    got = pending.Get();
    pending.Wait();
    waited_for = pending.WaitFor(kLong);
    got_ready = Future<absl::Status>(other.ReleaseAsync(task)).Get();
    done.Notify();
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_LT(watch.Elapsed(), absl::Seconds(20));
  EXPECT_EQ(got.code(), absl::StatusCode::kFailedPrecondition) << got;
  EXPECT_FALSE(waited_for);
  // A value that is not there cannot be had on the loop thread either (the
  // release needs a round trip).
  EXPECT_EQ(got_ready.code(), absl::StatusCode::kFailedPrecondition)
      << got_ready;
  // The client works on: the pending acquire gets the lock once it is free.
  ASSERT_OK(lock.Release());
  ASSERT_OK(Await(pending));
  EXPECT_EQ(*other.IsLocked(), false);
}

// Issue 23, item 6: Close() (or destroying the client) in a callback waited
// for the release round's answers on the loop thread that had to read them:
// 6 s, then "released-on-close: UNAVAILABLE" for every lock, and the locks
// and the info record stayed. Now it releases as from any other thread,
// once the callback has returned.
void CloseInACallbackReleases(testing::RedisServer& redis, Client& observer,
                              bool destroy) {
  EventLog events;
  // The callback is the only one to touch the client after the locks are
  // taken (when `destroy`, it destroys it).
  auto client = std::make_shared<std::unique_ptr<Client>>(
      MustConnect(redis.url(), [&](ClientOptions& o) {
        o.on_lock_event = events.Callback();
        o.publish_client_info = true;
      }));
  ASSERT_NE(*client, nullptr);
  const std::string info_key = absl::StrCat("relock:client:", (*client)->id());
  auto info_records = [&] {
    absl::StatusOr<testing::RedisValue> n = redis.Command({"EXISTS", info_key});
    return n.ok() ? n->integer : -1;
  };
  ASSERT_TRUE(Eventually([&] { return info_records() == 1; }));
  Lock held = (*client)->GetLock(TestLockName("held"));
  ASSERT_OK(held.Acquire());  // this thread's, with the watchdog
  Lock lock = (*client)->GetLock(TestLockName());
  const Owner task = Owner::New();
  testing::Notification returned;
  lock.AcquireAsync(task, [&, client](absl::Status s) {
    EXPECT_OK(s);
    if (destroy) {
      client->reset();
    } else {
      (*client)->Close();
    }
    returned.Notify();
  });
  ASSERT_TRUE(returned.WaitForNotificationWithTimeout(kLong));
  ASSERT_TRUE(Eventually([&] { return events.events().size() >= 2; }, kLong));
  for (const LockEvent& e : events.events()) {
    EXPECT_EQ(e.type, LockEventType::kReleasedOnClose);
    EXPECT_OK(e.status) << e.lock_name << ": " << e.status;
  }
  EXPECT_EQ(events.events().size(), 2);
  EXPECT_EQ(*observer.GetLock(held.name()).IsLocked(), false);
  EXPECT_EQ(*observer.GetLock(lock.name()).IsLocked(), false);
  EXPECT_TRUE(Eventually([&] { return info_records() == 0; }, kLong))
      << info_key << " stayed";
  EXPECT_EQ(held.Acquire().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(AsyncTest, CloseInACallbackReleasesTheLocks) {
  CloseInACallbackReleases(redis(), *client_, /*destroy=*/false);
}

TEST_F(AsyncTest, DestroyingTheClientInACallbackReleasesTheLocks) {
  CloseInACallbackReleases(redis(), *client_, /*destroy=*/true);
}

// Issue 23, item 7: WaitFor(InfiniteDuration()) and timeouts beyond about
// 292 years returned false at once (steady_clock::now() + the timeout
// overflowed). They wait for the value now; negative ones do not wait.
TEST_F(AsyncTest, WaitForAnInfiniteOrCenturiesLongTimeoutWaitsForTheValue) {
  Lock lock = client_->GetLock(TestLockName());
  for (absl::Duration timeout :
       {absl::InfiniteDuration(), absl::Hours(24 * 365 * 300),
        absl::Hours(24 * 365 * 100)}) {
    // The holder's explicit lease ends in a moment: only then can the
    // waiter's value arrive. A new holder each time: the waiter may take the
    // lock (Redis's lease end) before this client's timer marks the last
    // hold expired, and the same owner's Acquire() would then be a re-entry
    // of a hold that is gone (Aborted, NOTHELD; failed once under load).
    ASSERT_OK(lock.Acquire(Owner::New(), absl::Milliseconds(500)));
    const Owner task = Owner::New();
    Future<absl::Status> f = lock.TryAcquireAsync(task, kLong);
    EXPECT_TRUE(f.WaitFor(timeout)) << absl::FormatDuration(timeout);
    EXPECT_TRUE(f.Ready());
    ASSERT_OK(f.Get());
    ASSERT_OK(lock.Release(task));
  }
}

TEST_F(AsyncTest, WaitForANegativeOrZeroTimeoutDoesNotWait) {
  Lock lock = client_->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire(absl::Seconds(60)));
  Future<absl::Status> f = lock.TryAcquireAsync(Owner::New(), kLong);
  Stopwatch watch;
  EXPECT_FALSE(f.WaitFor(-absl::InfiniteDuration()));
  EXPECT_FALSE(f.WaitFor(absl::Seconds(-5)));
  EXPECT_FALSE(f.WaitFor(absl::ZeroDuration()));
  EXPECT_LT(watch.Elapsed(), kAtOnce);
  ASSERT_OK(lock.Release());
  ASSERT_OK(Await(f));
  EXPECT_TRUE(f.WaitFor(absl::Seconds(-5)));  // there: true, without waiting
  EXPECT_TRUE(f.WaitFor(-absl::InfiniteDuration()));
}

// Issue 23, item 8: a callback that threw ended the process
// (std::terminate from the loop thread, the event thread, or unlock(),
// which is noexcept). Relock catches it, logs it at kError and goes on.
TEST_F(AsyncTest, ACallbackThatThrowsIsLoggedAndTheLoopGoesOn) {
  LogLines log;
  std::unique_ptr<Client> client = MustConnect(
      redis().url(), [&](ClientOptions& o) { o.logger = log.Logger(); });
  ASSERT_NE(client, nullptr);
  Lock lock = client->GetLock(TestLockName());
  const Owner task = Owner::New();
  lock.AcquireAsync(task, [](absl::Status) {
    throw std::runtime_error("thrown by the acquire callback");
  });
  EXPECT_TRUE(log.SawError("thrown by the acquire callback"));
  // Then() on a call still pending (the lock is `task`'s) runs on the loop
  // thread when the call completes there. (A call that completed before
  // Then() was attached would run it on this thread: see below.)
  const Owner waiter = Owner::New();
  lock.AcquireAsync(waiter).Then([](absl::Status s) {
    if (s.ok()) throw std::runtime_error("thrown by Then()");
  });
  ASSERT_OK(Await(lock.ReleaseAsync(task)));
  EXPECT_TRUE(log.SawError("thrown by Then()"));
  ASSERT_OK(Await(lock.ReleaseAsync(waiter)));
  // The loop goes on: the next calls complete.
  ASSERT_OK(Await(lock.AcquireAsync(task)));
  ASSERT_OK(Await(lock.ReleaseAsync(task)));
  // Then() on a future already complete runs on the calling thread: caught
  // there too (written to stderr; no client is known there).
  Future<absl::Status> ready = lock.ReleaseAsync(task);
  ASSERT_FALSE(Await(ready).ok());
  ready.Then([](absl::Status) { throw 42; });
  // An immediate failure on the calling thread (a negative wait).
  lock.TryAcquireAsync(task, absl::Seconds(-1), [](absl::Status) {
    throw std::runtime_error("thrown at once");
  });
  EXPECT_EQ(*lock.IsLocked(), false);
}

TEST_F(AsyncTest, AnEventOrLossCallbackThatThrowsIsLoggedAndTheClientGoesOn) {
  LogLines log;
  std::unique_ptr<Client> client =
      MustConnect(redis().url(), [&](ClientOptions& o) {
        o.logger = log.Logger();
        o.on_lock_event = [](const LockEvent& e) {
          throw std::runtime_error(absl::StrCat("thrown by on_lock_event for ",
                                                LockEventTypeName(e.type)));
        };
      });
  ASSERT_NE(client, nullptr);
  // kUnlockFailed, on this thread, inside unlock() (noexcept).
  Lock lock = client->GetLock(TestLockName());
  lock.unlock();
  EXPECT_TRUE(log.SawError("thrown by on_lock_event for unlock-failed"));
  // A loss callback, on the event thread: an explicit lease that runs out.
  LockOptions options;
  options.on_lost = [](const LockEvent&) {
    throw std::runtime_error("thrown by on_lost");
  };
  Lock short_lease = client->GetLock(TestLockName("lease"), options);
  ASSERT_OK(short_lease.Acquire(absl::Milliseconds(50)));
  EXPECT_TRUE(log.SawError("thrown by on_lost"));
  // The event thread goes on: the next event is delivered (and caught).
  lock.unlock();
  ASSERT_OK(lock.Acquire());
  lock.unlock();
  EXPECT_EQ(*lock.IsLocked(), false);
}

TEST_F(AsyncTest, ALoggerThatThrowsDoesNotEndTheProcess) {
  std::atomic<int> calls{0};
  std::unique_ptr<Client> client =
      MustConnect(redis().url(), [&](ClientOptions& o) {
        o.logger = [&calls](absl::LogSeverity, absl::string_view) {
          calls.fetch_add(1);
          throw std::runtime_error("thrown by the logger");
        };
      });
  ASSERT_NE(client, nullptr);
  Lock lock = client->GetLock(TestLockName());
  lock.unlock();  // kUnlockFailed, written to the logger inside unlock()
  EXPECT_GE(calls.load(), 1);
  ASSERT_OK(lock.Acquire());
  lock.unlock();
}

}  // namespace
}  // namespace relock
