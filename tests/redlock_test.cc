// Redlock over five independent redis-servers started by the fixture:
// mutual exclusion (threads and processes), reentrancy, a minority of masters
// down or paused, a majority down, stale keys, validity accounting, Extend,
// automatic extension, waiting by notification, loss reports.

#include "relock/redlock.h"

#include <atomic>
#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "tests/testing/child_process.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace {

using ::relock::testing::ChildProcess;
using ::relock::testing::EventLog;
using ::relock::testing::RedisServer;
using ::relock::testing::Stopwatch;
using ::relock::testing::TestLockName;
using ::testing::HasSubstr;

constexpr int kMasters = 5;

std::vector<std::unique_ptr<RedisServer>>& Servers() {
  static auto* servers = new std::vector<std::unique_ptr<RedisServer>>;
  return *servers;
}

std::vector<std::string> Urls() {
  std::vector<std::string> urls;
  for (auto& s : Servers()) urls.push_back(s->url());
  return urls;
}

absl::StatusOr<std::unique_ptr<RedlockClient>> ConnectRedlock(
    const std::vector<std::string>& urls, EventLog* events = nullptr,
    absl::Duration watchdog = absl::Seconds(30)) {
  RedlockOptions options;
  options.urls = urls;
  options.connection.connect_timeout = absl::Milliseconds(300);
  options.connection.command_timeout = absl::Milliseconds(500);
  options.connection.lock_watchdog_timeout = watchdog;
  if (events != nullptr) options.connection.on_lock_event = events->Callback();
  return RedlockClient::Connect(options);
}

// args: urls (5), counter port, lock name, counter key, iterations.
RELOCK_CHILD_MAIN(RedlockCounter) {
  std::vector<std::string> urls(args.begin(), args.begin() + kMasters);
  int port = 0, iterations = 0;
  if (!absl::SimpleAtoi(args[kMasters], &port) ||
      !absl::SimpleAtoi(args[kMasters + 3], &iterations)) {
    return 2;
  }
  absl::StatusOr<std::unique_ptr<RedlockClient>> client = ConnectRedlock(urls);
  if (!client.ok()) {
    std::cerr << client.status() << std::endl;
    return 3;
  }
  RedlockLock lock = (*client)->GetLock(args[kMasters + 1]);
  const std::string& key = args[kMasters + 2];
  for (int i = 0; i < iterations; ++i) {
    std::lock_guard<RedlockLock> guard(lock);
    absl::StatusOr<testing::RedisValue> v =
        testing::CommandOnPort(port, {"GET", key});
    int64_t n = 0;
    if (!v.ok() || (!v->is_nil() && !absl::SimpleAtoi(v->str, &n))) return 4;
    absl::SleepFor(absl::Microseconds(300));  // a lost update would show
    if (!testing::CommandOnPort(port, {"SET", key, absl::StrCat(n + 1)}).ok()) {
      return 5;
    }
  }
  std::cout << "done" << std::endl;
  return 0;
}

class RedlockTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    while (Servers().size() < kMasters) {
      absl::StatusOr<std::unique_ptr<RedisServer>> s = RedisServer::Start();
      ASSERT_OK(s);
      Servers().push_back(*std::move(s));
    }
  }
  void SetUp() override {
    for (auto& s : Servers()) {
      if (!s->running()) {
        ASSERT_OK(s->Restart());
      }
      ASSERT_OK(s->FlushAll());
    }
    absl::StatusOr<std::unique_ptr<RedlockClient>> c =
        ConnectRedlock(Urls(), &events_);
    ASSERT_OK(c);
    client_ = *std::move(c);
  }
  void TearDown() override {
    for (auto& s : Servers()) {
      if (s->running()) {
        (void)s->Resume();  // in case a test paused it
      }
    }
  }
  int64_t OnMasters(const std::vector<std::string>& argv) {
    int64_t total = 0;
    for (auto& s : Servers()) {
      absl::StatusOr<testing::RedisValue> v = s->Command(argv);
      if (v.ok()) total += v->integer;
    }
    return total;
  }
  EventLog events_;
  std::unique_ptr<RedlockClient> client_;
};

TEST_F(RedlockTest, AcquiresOnEveryMasterWithTheSingleNodeDataModel) {
  RedlockLock lock = client_->GetLock(TestLockName());
  EXPECT_EQ(client_->quorum(), 3);
  ASSERT_OK(lock.Acquire());
  EXPECT_EQ(OnMasters({"EXISTS", lock.name()}), kMasters);
  EXPECT_EQ(OnMasters({"HLEN", lock.name()}), kMasters);
  ASSERT_OK(lock.Release());
  EXPECT_EQ(OnMasters({"EXISTS", lock.name()}), 0);
}

TEST_F(RedlockTest, IsReentrant) {
  RedlockLock lock = client_->GetLock(TestLockName());
  for (int i = 1; i <= 3; ++i) {
    ASSERT_OK(lock.Acquire());
    EXPECT_EQ(lock.LocalHoldCount(), i);
  }
  // The thread's re-entries were counted locally (no round trip): every
  // master still says 1.
  for (auto& s : Servers()) {
    testing::RedisValue all = *s->Command({"HGETALL", lock.name()});
    ASSERT_EQ(all.elements.size(), 2u);
    EXPECT_EQ(all.elements[1].str, "1");
  }
  ASSERT_OK(lock.Release());
  ASSERT_OK(lock.Release());
  EXPECT_EQ(OnMasters({"EXISTS", lock.name()}), kMasters);
  ASSERT_OK(lock.Release());
  EXPECT_EQ(OnMasters({"EXISTS", lock.name()}), 0);
  EXPECT_EQ(lock.Release().code(), absl::StatusCode::kFailedPrecondition);
}

// A re-entry that goes to the masters (an explicit lease) and finds the
// hold gone on a majority is Aborted at once (NOTHELD), not retried into
// Unavailable, and the hold is lost: its release says Aborted too.
TEST_F(RedlockTest, AReentryWhoseHoldIsGoneOnAMajorityIsAborted) {
  RedlockLock lock = client_->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire(absl::Seconds(30)));
  // Gone on enough masters that no quorum has it any more.
  const int gone = kMasters - static_cast<int>(client_->quorum()) + 1;
  for (int i = 0; i < gone; ++i) {
    ASSERT_OK(Servers()[i]->Command({"DEL", lock.name()}));
  }
  const absl::Status s = lock.Acquire(absl::Seconds(30));
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_THAT(s.message(), HasSubstr("NOTHELD"));
  // Nothing written where it was gone; counted down again where it was not.
  EXPECT_EQ(OnMasters({"EXISTS", lock.name()}), kMasters - gone);
  EXPECT_EQ(lock.Release().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(OnMasters({"EXISTS", lock.name()}), 0);
}

TEST_F(RedlockTest, AnExplicitOwnerHoldsAcrossThreads) {
  RedlockLock lock = client_->GetLock(TestLockName());
  const Owner task = Owner::New();
  std::thread([&] { EXPECT_OK(lock.Acquire(task)); }).join();
  for (auto& s : Servers()) {
    testing::RedisValue all = *s->Command({"HGETALL", lock.name()});
    ASSERT_EQ(all.elements.size(), 2u);
    EXPECT_EQ(all.elements[0].str,
              absl::StrCat(client_->id(), ":", task.number()));
  }
  EXPECT_EQ(lock.TryAcquire(absl::ZeroDuration()).code(),
            absl::StatusCode::kDeadlineExceeded);  // this thread is another
  std::thread([&] { EXPECT_OK(lock.Release(task)); }).join();
  EXPECT_EQ(OnMasters({"EXISTS", lock.name()}), 0);
}

TEST_F(RedlockTest, AsynchronousCallsTakeAndFreeEveryMaster) {
  RedlockLock lock = client_->GetLock(TestLockName());
  const Owner task = Owner::New();
  Future<absl::Status> acquired = lock.AcquireAsync(task);
  ASSERT_TRUE(acquired.WaitFor(absl::Seconds(30)));
  ASSERT_OK(acquired.Get());
  EXPECT_EQ(OnMasters({"EXISTS", lock.name()}), kMasters);
  // Another owner waits, asynchronously, and gets it once it is released.
  const Owner next = Owner::New();
  Future<absl::Status> waiting = lock.TryAcquireAsync(next, absl::Seconds(20));
  EXPECT_FALSE(waiting.WaitFor(absl::Milliseconds(200)));
  Future<absl::Status> released = lock.ReleaseAsync(task);
  ASSERT_TRUE(released.WaitFor(absl::Seconds(30)));
  ASSERT_OK(released.Get());
  ASSERT_TRUE(waiting.WaitFor(absl::Seconds(30)));
  ASSERT_OK(waiting.Get());
  ASSERT_OK(lock.Release(next));
  EXPECT_EQ(OnMasters({"EXISTS", lock.name()}), 0);
}

TEST_F(RedlockTest, AsynchronousOwnersExcludeEachOther) {
  RedlockLock lock = client_->GetLock(TestLockName());
  std::atomic<int> inside{0}, overlaps{0}, failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      const Owner task = Owner::New();
      for (int i = 0; i < 25; ++i) {
        Future<absl::Status> acquired = lock.AcquireAsync(task);
        if (!acquired.WaitFor(absl::Seconds(60)) || !acquired.Get().ok()) {
          failures.fetch_add(1);
          return;
        }
        if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
        std::this_thread::yield();
        inside.fetch_sub(1);
        Future<absl::Status> released = lock.ReleaseAsync(task);
        if (!released.WaitFor(absl::Seconds(60)) || !released.Get().ok()) {
          failures.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(failures.load(), 0);
}

TEST_F(RedlockTest, ThreadsExcludeEachOther) {
  RedlockLock lock = client_->GetLock(TestLockName());
  std::atomic<int> inside{0}, overlaps{0};
  int counter = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 25; ++i) {
        std::lock_guard<RedlockLock> guard(lock);
        if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
        int v = counter;
        std::this_thread::yield();
        counter = v + 1;
        inside.fetch_sub(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(counter, 100);
}

TEST_F(RedlockTest, ProcessesExcludeEachOther) {
  const std::string name = TestLockName();
  const std::string counter = TestLockName("counter");
  std::vector<std::unique_ptr<ChildProcess>> children;
  std::vector<std::string> args = Urls();
  args.push_back(absl::StrCat(Servers()[0]->port()));
  args.push_back(name);
  args.push_back(counter);
  args.push_back("40");
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<std::unique_ptr<ChildProcess>> c =
        ChildProcess::Spawn("RedlockCounter", args);
    ASSERT_OK(c);
    children.push_back(*std::move(c));
  }
  for (auto& c : children) {
    EXPECT_EQ(*c->ReadLine(absl::Seconds(120)), "done");
    EXPECT_EQ(*c->Wait(absl::Seconds(30)), 0);
  }
  EXPECT_EQ(Servers()[0]->Command({"GET", counter})->str, "120")
      << "lost updates: two processes held the redlock at once";
}

TEST_F(RedlockTest, TwoMastersDownStillWorks) {
  ASSERT_OK(Servers()[1]->Stop());
  ASSERT_OK(Servers()[3]->Stop());
  RedlockLock lock = client_->GetLock(TestLockName());
  Stopwatch watch;
  ASSERT_OK(lock.Acquire());
  ASSERT_OK(lock.Release());
  EXPECT_LT(watch.Elapsed(), absl::Seconds(3));
  // A client can also start with a minority down.
  absl::StatusOr<std::unique_ptr<RedlockClient>> late = ConnectRedlock(Urls());
  ASSERT_OK(late);
  EXPECT_TRUE(
      (*late)->GetLock(TestLockName()).TryAcquire(absl::Seconds(1)).ok());
}

TEST_F(RedlockTest, ThreeMastersDownFailsFastNamingThem) {
  for (int i : {0, 2, 4}) ASSERT_OK(Servers()[i]->Stop());
  RedlockLock lock = client_->GetLock(TestLockName());
  Stopwatch watch;
  absl::Status s = lock.Acquire();
  EXPECT_LT(watch.Elapsed(), absl::Seconds(3));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("no quorum"));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(absl::StrCat("127.0.0.1:", Servers()[0]->port(),
                                     ": unavailable")));
  EXPECT_THAT(std::string(s.message()), HasSubstr(": acquired"));
  // Nothing is left behind on the masters that granted it.
  EXPECT_EQ(OnMasters({"EXISTS", lock.name()}), 0);
  EXPECT_EQ(ConnectRedlock(Urls()).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(RedlockTest, APausedMasterCostsOnlyThePerMasterTimeout) {
  RedlockLock lock = client_->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire(absl::Seconds(10)));  // warm connections
  ASSERT_OK(lock.Release());
  ASSERT_OK(Servers()[2]->Pause());
  Stopwatch watch;
  // Per-master timeout: 1% of the 10 s lease = 100 ms.
  absl::Status s = lock.Acquire(absl::Seconds(10));
  const absl::Duration took = watch.Elapsed();
  ASSERT_OK(Servers()[2]->Resume());
  EXPECT_OK(s);
  EXPECT_LT(took, absl::Milliseconds(100) + absl::Milliseconds(700));
  EXPECT_OK(lock.Release());
}

TEST_F(RedlockTest, StaleKeysOnAMinorityDoNotBlockButOnAMajorityDo) {
  const std::string name = TestLockName();
  // The owner field of a client that is gone.
  const std::string gone = "90e0c11e-0000-4000-8000-000000000001:1";
  for (int i : {0, 1}) {
    ASSERT_OK(Servers()[i]->Command({"HSET", name, gone, "1"}));
    ASSERT_OK(Servers()[i]->Command({"PEXPIRE", name, "60000"}));
  }
  RedlockLock lock = client_->GetLock(name);
  ASSERT_OK(lock.TryAcquire(absl::ZeroDuration()));
  ASSERT_OK(lock.Release());
  ASSERT_OK(Servers()[2]->Command({"HSET", name, gone, "1"}));
  absl::Status s = lock.TryAcquire(absl::Milliseconds(200));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("held by another owner"));
  // The failed attempts left nothing of ours behind.
  for (auto& srv : Servers()) {
    EXPECT_LE(srv->Command({"HLEN", name})->integer, 1);
  }
}

TEST_F(RedlockTest, ValidityIsLeaseMinusElapsedMinusDrift) {
  RedlockLock lock = client_->GetLock(TestLockName());
  const auto before = std::chrono::steady_clock::now();
  ASSERT_OK(lock.Acquire(absl::Seconds(2)));
  const auto after = std::chrono::steady_clock::now();
  absl::StatusOr<std::chrono::steady_clock::time_point> valid =
      lock.ValidUntil();
  ASSERT_OK(valid);
  const auto lease_minus_drift = std::chrono::milliseconds(2000 - 20 - 2);
  EXPECT_GE(*valid, before + lease_minus_drift);
  EXPECT_LE(*valid, after + lease_minus_drift);
  ASSERT_OK(lock.Release());
  EXPECT_EQ(lock.ValidUntil().status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(RedlockTest, AnAttemptSlowerThanItsLeaseHasNoValidity) {
  // Per-master timeout = the whole lease; one master paused: every attempt
  // waits the full lease for it, so no validity is left.
  RedlockOptions options;
  options.urls = Urls();
  options.timeout_factor = 1.0;
  options.tries = 2;
  absl::StatusOr<std::unique_ptr<RedlockClient>> slow =
      RedlockClient::Connect(options);
  ASSERT_OK(slow);
  RedlockLock lock = (*slow)->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire(absl::Milliseconds(50)));  // warm
  ASSERT_OK(lock.Release());
  ASSERT_OK(Servers()[4]->Pause());
  absl::Status s = lock.Acquire(absl::Milliseconds(50));
  ASSERT_OK(Servers()[4]->Resume());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("validity used up"));
}

TEST_F(RedlockTest, ExtendRenewsAnExplicitLease) {
  RedlockLock lock = client_->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire(absl::Milliseconds(800)));
  ASSERT_OK(lock.Extend(absl::Seconds(5)));
  // Time passes on purpose: past the first lease, within the extended one.
  absl::SleepFor(absl::Milliseconds(1200));
  EXPECT_EQ(OnMasters({"EXISTS", lock.name()}), kMasters);
  EXPECT_GT(*lock.ValidUntil(), std::chrono::steady_clock::now());
  ASSERT_OK(lock.Release());
  EXPECT_EQ(lock.Extend(absl::Seconds(1)).code(),
            absl::StatusCode::kFailedPrecondition);
}

// Extend() sets the lease it is given, shorter or not (the watchdog's
// renewals only ever raise one; see lua/renew.lua).
TEST_F(RedlockTest, ExtendSetsAShorterLeaseToo) {
  RedlockLock lock = client_->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire(absl::Minutes(10)));
  ASSERT_OK(lock.Extend(absl::Seconds(20)));
  for (auto& s : Servers()) {
    absl::StatusOr<testing::RedisValue> ttl = s->Command({"PTTL", lock.name()});
    ASSERT_OK(ttl);
    EXPECT_GT(ttl->integer, 0);
    EXPECT_LE(ttl->integer, 20000);
  }
  ASSERT_OK(lock.Release());
}

TEST_F(RedlockTest, TheWatchdogExtendsALockWithoutALease) {
  absl::StatusOr<std::unique_ptr<RedlockClient>> client =
      ConnectRedlock(Urls(), &events_, absl::Milliseconds(1500));
  ASSERT_OK(client);
  RedlockLock lock = (*client)->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire());
  // Time passes on purpose: over two leases, renewed throughout. (A 600 ms
  // lease was lost once under ASan on a machine loaded by two builds: five
  // masters' renewal rounds every 200 ms left too little slack.)
  absl::SleepFor(absl::Milliseconds(3200));
  EXPECT_EQ(OnMasters({"EXISTS", lock.name()}), kMasters);
  ASSERT_OK(lock.Release());
  EXPECT_EQ(OnMasters({"EXISTS", lock.name()}), 0);
  EXPECT_TRUE(events_.events().empty());
}

TEST_F(RedlockTest, LosingTheMajorityIsReported) {
  absl::StatusOr<std::unique_ptr<RedlockClient>> client =
      ConnectRedlock(Urls(), &events_, absl::Milliseconds(600));
  ASSERT_OK(client);
  RedlockLock lock = (*client)->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire());
  for (int i : {0, 1, 2}) {
    ASSERT_OK(Servers()[i]->Command({"DEL", lock.name()}));
  }
  LockEvent event;
  ASSERT_TRUE(
      events_.WaitFor(LockEventType::kLockLost, absl::Seconds(5), &event));
  EXPECT_EQ(event.lock_name, lock.name());
  EXPECT_EQ(lock.Release().code(), absl::StatusCode::kAborted);
}

TEST_F(RedlockTest, AWaiterIsWokenByTheUnlockMessage) {
  absl::StatusOr<std::unique_ptr<RedlockClient>> other = ConnectRedlock(Urls());
  ASSERT_OK(other);
  RedlockLock theirs = (*other)->GetLock(TestLockName());
  ASSERT_OK(theirs.Acquire());  // 30 s watchdog lease
  RedlockLock mine = client_->GetLock(TestLockName());
  // On the steady clock (the wall clock may step); generous against the 30 s
  // lease that would hand it on without the message.
  std::atomic<std::chrono::steady_clock::time_point> acquired_at{};
  std::thread waiter([&] {
    ASSERT_OK(mine.TryAcquire(absl::Seconds(20)));
    acquired_at = std::chrono::steady_clock::now();
    ASSERT_OK(mine.Release());
  });
  // It waits: subscribed on every master, every request answered.
  for (auto& s : Servers()) {
    EXPECT_OK(testing::WaitUntilWaiting(*s, testing::LockChannel(mine.name()),
                                        *client_));
  }
  const auto released_at = std::chrono::steady_clock::now();
  ASSERT_OK(theirs.Release());
  waiter.join();
  EXPECT_LT(absl::FromChrono(acquired_at.load() - released_at),
            absl::Seconds(2));
}

TEST_F(RedlockTest, FailFastAndShuffleStillAcquire) {
  RedlockOptions options;
  options.urls = Urls();
  options.fail_fast = true;
  options.shuffle_masters = true;
  absl::StatusOr<std::unique_ptr<RedlockClient>> client =
      RedlockClient::Connect(options);
  ASSERT_OK(client);
  RedlockLock lock = (*client)->GetLock(TestLockName());
  for (int i = 0; i < 10; ++i) {
    ASSERT_OK(lock.Acquire());
    ASSERT_OK(lock.Release());
  }
}

TEST_F(RedlockTest, BadOptionsAreInvalidArgument) {
  auto connect = [](void (*tweak)(RedlockOptions&)) {
    RedlockOptions o;
    o.urls = Urls();
    tweak(o);
    return RedlockClient::Connect(o).status().code();
  };
  const absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(connect([](RedlockOptions& o) { o.urls.clear(); }), kInvalid);
  EXPECT_EQ(connect([](RedlockOptions& o) { o.urls.resize(16, o.urls[0]); }),
            kInvalid);
  EXPECT_EQ(connect([](RedlockOptions& o) { o.drift_factor = 0.7; }), kInvalid);
  // One server twice (in another db too): it would count twice.
  EXPECT_EQ(connect([](RedlockOptions& o) { o.urls[4] = o.urls[0]; }),
            kInvalid);
  EXPECT_EQ(connect([](RedlockOptions& o) { o.urls[4] = o.urls[0] + "/3"; }),
            kInvalid);
  EXPECT_EQ(connect([](RedlockOptions& o) { o.timeout_factor = 0; }), kInvalid);
  EXPECT_EQ(connect([](RedlockOptions& o) { o.tries = 0; }), kInvalid);
  EXPECT_EQ(connect([](RedlockOptions& o) { o.urls[1] = "http://x"; }),
            kInvalid);
  EXPECT_EQ(connect([](RedlockOptions& o) {
              o.owner_id_generator = [] { return std::string("a:b"); };
            }),
            kInvalid);
  // Issue 23 review: owner fields must be UUIDs to count as locks, so a
  // redsync-style random string is refused at Connect instead of making
  // every other client's acquire fail with "not a lock".
  EXPECT_EQ(connect([](RedlockOptions& o) {
              o.owner_id_generator = [] {
                return std::string("q8J3kZx0c2VjcmV0dmFsdWU=");
              };
            }),
            kInvalid);
  EXPECT_EQ(connect([](RedlockOptions& o) {
              o.owner_id_generator = [] {
                return std::string("123e4567-e89b-42d3-a456-426614174000");
              };
            }),
            absl::StatusCode::kOk);
  RedlockLock unbound;
  EXPECT_EQ(unbound.Acquire().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(client_->GetLock("").Acquire().code(), kInvalid);
  EXPECT_EQ(client_->GetLock("x").Acquire(absl::ZeroDuration()).code(),
            kInvalid);
}

// A kReleasedOnClose callback that destroys the RedlockClient while Close()
// runs (no RedlockLock handle keeps its core alive): Close() keeps the core
// alive until it returns (a use-after-free before; ASan shows it).
TEST_F(RedlockTest, DestroyingTheClientInACloseEventIsSafe) {
  EventLog events;
  auto client = std::make_shared<std::unique_ptr<RedlockClient>>();
  RedlockOptions options;
  options.urls = Urls();
  options.connection.connect_timeout = absl::Milliseconds(300);
  options.connection.command_timeout = absl::Milliseconds(500);
  options.connection.on_lock_event = [&events, client](const LockEvent& e) {
    events.Callback()(e);
    if (e.type == LockEventType::kReleasedOnClose) client->reset();
  };
  absl::StatusOr<std::unique_ptr<RedlockClient>> c =
      RedlockClient::Connect(options);
  ASSERT_OK(c);
  *client = *std::move(c);
  const std::string name = TestLockName();
  ASSERT_OK((*client)->GetLock(name).Acquire());  // the handle goes
  RedlockClient* raw = client->get();
  raw->Close();
  EXPECT_EQ(*client, nullptr);
  ASSERT_EQ(events.events().size(), 1u);
  EXPECT_OK(events.events()[0].status);
  EXPECT_EQ(OnMasters({"EXISTS", name}), 0);
}

}  // namespace
}  // namespace relock
