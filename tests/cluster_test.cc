// relock on a real Redis Cluster (3 masters, 3 replicas, started by the
// fixture: tests/testing/redis_cluster.h) through `redis-cluster://` URLs:
// locks spread over every master, exclusion and wake-ups between clients,
// hash-tagged names, the watchdog renewing across masters, the asynchronous
// calls, a slot migrated back and forth under lock traffic without an
// error reaching the user or two holders overlapping, Redisson's own scripts
// as a peer (sharded wake-ups both ways), failovers (a lock kept, a lock
// reported lost), a paused master, and the backend's MOVED/ASK handling.

#include "lib/redis/cluster.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/backend/cluster_backend.h"
#include "lib/common/mutex.h"
#include "lib/io/event_loop.h"
#include "lib/lock/lock_scripts.h"
#include "lib/pubsub/subscriber.h"
#include "relock/relock.h"
#include "tests/cluster_test_util.h"
#include "tests/redisson_scripts.h"
#include "tests/test_util.h"
#include "tests/testing/eventually.h"
#include "tests/testing/raw_connection.h"
#include "tests/testing/redis_cluster.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace {

using ::relock::testing::BackgroundWaiter;
using ::relock::testing::EventLog;
using ::relock::testing::kRedissonLock;
using ::relock::testing::kRedissonUnlock;
using ::relock::testing::LockChannel;
using ::relock::testing::MustConnect;
using ::relock::testing::PubSub;
using ::relock::testing::RedisCluster;
using ::relock::testing::RedisServer;
using ::relock::testing::RedisValue;
using ::relock::testing::RwLockChannel;
using ::relock::testing::Stopwatch;
using ::relock::testing::TestLockName;
using ::relock::testing::WaitUntilWaiting;
using ::testing::HasSubstr;

class ClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = &testing::SharedRedisCluster(); }
  void SetUp() override { ASSERT_NE(cluster_, nullptr); }

  // The master that holds `key` now.
  static RedisServer& Owner(const std::string& key) {
    return testing::MasterOf(*cluster_, key);
  }

  // Names with the test's prefix, `per_master` on each master.
  static std::vector<std::string> NamesOnEveryMaster(int per_master) {
    return testing::NamesOnEveryMaster(*cluster_, per_master);
  }

  static RedisCluster* cluster_;
};

RedisCluster* ClusterTest::cluster_ = nullptr;

TEST_F(ClusterTest, LocksOnEveryMasterLiveOnTheMasterOfTheirSlot) {
  std::unique_ptr<Client> client = MustConnect(cluster_->url());
  ASSERT_NE(client, nullptr);
  ASSERT_OK(client->Ping());
  testing::ExpectLocksLiveOnTheMasterOfTheirSlot(*cluster_, *client, 2);
}

TEST_F(ClusterTest, TwoClientsExcludeAndAReleaseWakesTheWaiter) {
  std::unique_ptr<Client> a = MustConnect(cluster_->url());
  std::unique_ptr<Client> b = MustConnect(cluster_->url());
  ASSERT_TRUE(a != nullptr && b != nullptr);
  testing::ExpectAReleaseWakesTheWaiter(
      *cluster_, *a, *b, [&b](const std::string& name) {
        EXPECT_OK(WaitUntilWaiting(Owner(name), LockChannel(name), *b, 1,
                                   PubSub::kSharded))
            << name;
      });
}

// A fenced lock's token counter shares its lock's slot (Redisson's
// prefixName rule), so the acquire script's two keys never straddle slots:
// on every master, and for a name with a hash tag of its own.
TEST_F(ClusterTest, FencedLocksKeepTheirTokenCounterInTheLocksSlot) {
  std::unique_ptr<Client> client = MustConnect(cluster_->url());
  ASSERT_NE(client, nullptr);
  std::vector<std::string> names = NamesOnEveryMaster(1);
  names.push_back(TestLockName("fenced:{7}"));
  for (const std::string& name : names) {
    FencedLock lock = client->GetFencedLock(name);
    absl::StatusOr<int64_t> first = lock.LockAndGetToken();
    ASSERT_OK(first) << name << ": " << first.status();
    absl::StatusOr<int64_t> second = lock.LockAndGetToken();
    ASSERT_OK(second) << name << ": " << second.status();
    EXPECT_GT(*second, *first);
    EXPECT_EQ(lock.GetToken().value_or(-1), *second);
    const std::string counter =
        absl::StrContains(name, "{")
            ? absl::StrCat("redisson_lock_token:", name)
            : absl::StrCat("redisson_lock_token:{", name, "}");
    absl::StatusOr<RedisValue> value = Owner(name).Command({"GET", counter});
    ASSERT_OK(value);
    EXPECT_EQ(value->str, absl::StrCat(*second)) << name;
    EXPECT_OK(lock.Release());
    EXPECT_OK(lock.Release());
  }
}

// Fair locks on a cluster: the queue and its deadlines share the lock's
// slot, and the waiters, woken one at a time on their own (sharded)
// channels, get the lock in the order they joined the queue, on every master
// and for a name with a hash tag of its own.
TEST_F(ClusterTest, FairLocksHandOffInArrivalOrderOnEveryMaster) {
  std::unique_ptr<Client> a = MustConnect(cluster_->url());
  std::unique_ptr<Client> b = MustConnect(cluster_->url());
  ASSERT_TRUE(a != nullptr && b != nullptr);
  std::vector<std::string> names = NamesOnEveryMaster(1);
  names.push_back(TestLockName("fair:{9}"));
  for (const std::string& name : names) {
    const std::string queue =
        absl::StrContains(name, "{")
            ? absl::StrCat("redisson_lock_queue:", name)
            : absl::StrCat("redisson_lock_queue:{", name, "}");
    auto queued = [&] {
      absl::StatusOr<RedisValue> n = Owner(name).Command({"LLEN", queue});
      return n.ok() && n->is_integer() ? n->integer : -1;
    };
    FairLock lock = a->GetFairLock(name);
    ASSERT_OK(lock.Acquire()) << name;
    constexpr int kWaiters = 3;
    std::mutex mu;
    std::vector<int> order;
    std::vector<testing::JoiningThread> waiters;
    waiters.reserve(kWaiters);
    for (int i = 0; i < kWaiters; ++i) {
      waiters.emplace_back([&, i] {
        FairLock mine = b->GetFairLock(name);
        absl::Status s = mine.TryAcquire(absl::Seconds(60));
        ASSERT_OK(s) << name << ": " << s;
        {
          std::lock_guard<std::mutex> guard(mu);
          order.push_back(i);
        }
        EXPECT_OK(mine.Release());
      });
      ASSERT_TRUE(testing::Eventually([&] { return queued() == i + 1; }))
          << name << ": " << queued() << " queued";
    }
    ASSERT_OK(lock.Release());
    for (testing::JoiningThread& w : waiters) w.join();
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2})) << name;
    EXPECT_EQ(queued(), 0) << name;
  }
}

// Read-write locks on every master (and a hash-tagged name): readers in
// two clients share, a waiting writer is woken by the last read release
// (sharded pub/sub), a waiting reader by the write release; the watchdog
// renews a read hold and its lease key (built in the script, in the name's
// slot).
TEST_F(ClusterTest, ReadWriteLocksShareExcludeAndWakeOnEveryMaster) {
  std::unique_ptr<Client> a = MustConnect(
      cluster_->url(),
      [](ClientOptions& o) { o.lock_watchdog_timeout = absl::Seconds(3); });
  std::unique_ptr<Client> b = MustConnect(cluster_->url());
  ASSERT_TRUE(a != nullptr && b != nullptr);
  std::vector<std::string> names = NamesOnEveryMaster(1);
  names.push_back(TestLockName("rw:{7}"));
  // a reads every lock; renewed past two 3 s leases, lease keys included
  // (time passes on purpose).
  for (const std::string& name : names) {
    ASSERT_OK(a->GetReadWriteLock(name).ReadLock().Acquire()) << name;
  }
  absl::SleepFor(absl::Seconds(7));
  for (const std::string& name : names) {
    absl::StatusOr<RedisValue> keys =
        Owner(name).Command({"KEYS", "*rwlock_timeout*"});
    ASSERT_OK(keys);
    bool live_lease_key = false;
    for (const RedisValue& k : keys->elements) {
      absl::StatusOr<RedisValue> ttl = Owner(name).Command({"PTTL", k.str});
      if (absl::StrContains(k.str, name) && absl::StrContains(k.str, a->id()) &&
          ttl.ok() && ttl->is_integer() && ttl->integer > 0) {
        live_lease_key = true;
      }
    }
    EXPECT_TRUE(live_lease_key) << name;
  }
  for (const std::string& name : names) {
    ReadWriteLock ra = a->GetReadWriteLock(name);
    ReadWriteLock rb = b->GetReadWriteLock(name);
    const relock::Owner reader_b = relock::Owner::New();
    ASSERT_OK(rb.ReadLock().TryAcquire(reader_b, absl::ZeroDuration())) << name;
    {
      testing::BackgroundWaiter writer(rb.WriteLock(), absl::Seconds(60));
      ASSERT_OK(WaitUntilWaiting(Owner(name), RwLockChannel(name), *b, 1,
                                 PubSub::kSharded))
          << name;
      EXPECT_FALSE(writer.done()) << name;
      // b's reader still reads: a's release alone does not free the lock.
      ASSERT_OK(ra.ReadLock().Release()) << name;
      absl::StatusOr<RedisValue> fields = Owner(name).Command({"HLEN", name});
      ASSERT_OK(fields);
      EXPECT_EQ(fields->integer, 2) << name;  // mode, b's reader
      EXPECT_FALSE(writer.done()) << name;
      const Stopwatch watch;
      ASSERT_OK(rb.ReadLock().Release(reader_b)) << name;
      EXPECT_TRUE(writer.Join()) << name;
      EXPECT_LT(watch.Elapsed(), absl::Seconds(20)) << name;
    }
    ASSERT_OK(rb.WriteLock().Acquire()) << name;
    {
      testing::BackgroundWaiter reader(ra.ReadLock(), absl::Seconds(60));
      ASSERT_OK(WaitUntilWaiting(Owner(name), RwLockChannel(name), *a, 1,
                                 PubSub::kSharded))
          << name;
      EXPECT_FALSE(reader.done()) << name;
      const Stopwatch watch;
      ASSERT_OK(rb.WriteLock().Release()) << name;
      EXPECT_TRUE(reader.Join()) << name;
      EXPECT_LT(watch.Elapsed(), absl::Seconds(20)) << name;
    }
  }
}

// A MultiLock over locks on every master (one a read-write lock's write
// lock): all or nothing, and two overlapping MultiLocks given in different
// orders from several threads never deadlock and exclude each other.
TEST_F(ClusterTest, MultiLocksSpanEveryMasterAllOrNothing) {
  std::unique_ptr<Client> a = MustConnect(cluster_->url());
  std::unique_ptr<Client> b = MustConnect(cluster_->url());
  ASSERT_TRUE(a != nullptr && b != nullptr);
  const std::vector<std::string> names = NamesOnEveryMaster(1);
  ASSERT_GE(names.size(), 3u);
  auto exists = [&](const std::string& name) {
    absl::StatusOr<RedisValue> n = Owner(name).Command({"EXISTS", name});
    return n.ok() && n->is_integer() ? n->integer : -1;
  };
  // All or nothing: b holds the last lock; a's MultiLock takes none.
  Lock blocker = b->GetLock(names.back());
  ASSERT_OK(blocker.Acquire());
  MultiLock all(a->GetLock(names[0]), a->GetReadWriteLock(names[1]).WriteLock(),
                a->GetLock(names.back()));
  const absl::Status s = all.TryAcquire(absl::Milliseconds(300));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_EQ(exists(names[0]), 0);
  EXPECT_EQ(exists(names[1]), 0);
  ASSERT_OK(blocker.Release());
  ASSERT_OK(all.Acquire());
  for (const std::string& name : names) EXPECT_EQ(exists(name), 1) << name;
  ASSERT_OK(all.Release());
  for (const std::string& name : names) EXPECT_EQ(exists(name), 0) << name;

  // Overlapping sets in different orders, from threads of two clients.
  std::atomic<int> inside{0}, overlaps{0}, rounds{0};
  std::vector<testing::JoiningThread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      Client& c = t % 2 == 0 ? *a : *b;
      MultiLock m = t % 2 == 0
                        ? MultiLock(c.GetLock(names[0]), c.GetLock(names[1]))
                        : MultiLock(c.GetLock(names[1]), c.GetLock(names[2]),
                                    c.GetLock(names[0]));
      for (int i = 0; i < 10; ++i) {
        const absl::Status got = m.TryAcquire(absl::Seconds(60));
        ASSERT_OK(got);
        if (++inside != 1) ++overlaps;
        absl::SleepFor(absl::Milliseconds(1));  // held a while
        --inside;
        EXPECT_OK(m.Release());
        ++rounds;
      }
    });
  }
  for (testing::JoiningThread& t : threads) t.join();
  EXPECT_EQ(rounds.load(), 40);
  EXPECT_EQ(overlaps.load(), 0);
}

TEST_F(ClusterTest, HashTaggedNamesShareTheirTagsSlot) {
  std::unique_ptr<Client> client = MustConnect(cluster_->url());
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName("order:{42}");
  EXPECT_EQ(redis::KeySlot(name), redis::KeySlot("42"));
  Lock lock = client->GetLock(name);
  ASSERT_OK(lock.Acquire());
  absl::StatusOr<RedisValue> exists = Owner("{42}").Command({"EXISTS", name});
  ASSERT_OK(exists);
  EXPECT_EQ(exists->integer, 1);
  ASSERT_OK(lock.Release());
}

// A name with "{" but no usable hash tag ("a{b", "x{}y", "{}x"), or with
// "}" and no "{" ("a}b": braced, its tag would be "a"): its
// companion keys and channels (Redisson's names for them) hash elsewhere
// than the name, and a script's keys must share one slot. Every lock type
// either works with such a name (taken and freed) or refuses it at once with
// InvalidArgument, leaving nothing behind: never a lock that is taken and
// then cannot be released (it once could be, for the read-write and fenced
// locks).
TEST_F(ClusterTest, NamesWithoutAUsableHashTagWorkOrAreRefusedUpFront) {
  std::unique_ptr<Client> client = MustConnect(cluster_->url());
  ASSERT_NE(client, nullptr);
  for (const std::string& odd :
       {std::string("a{b"), std::string("x{}y"), std::string("{}x"),
        std::string("cfg{"), std::string("a}b")}) {
    const std::string name = TestLockName(odd);
    ReadWriteLock rw = client->GetReadWriteLock(name);
    const std::vector<std::pair<std::string, Lock>> locks = {
        {"lock", client->GetLock(name)},
        {"fenced", client->GetFencedLock(name)},
        {"read", rw.ReadLock()},
        {"write", rw.WriteLock()}};
    for (const auto& [kind, lock] : locks) {
      Lock l = lock;
      const absl::Status acquired = l.Acquire();
      if (acquired.ok()) {
        EXPECT_OK(l.Release()) << kind << " " << name;
      } else {
        EXPECT_EQ(acquired.code(), absl::StatusCode::kInvalidArgument)
            << kind << " " << name << ": " << acquired;
      }
      absl::StatusOr<RedisValue> exists = Owner(name).Command({"EXISTS", name});
      ASSERT_OK(exists);
      EXPECT_EQ(exists->integer, 0) << kind << " " << name;
    }
  }
}

TEST_F(ClusterTest, TheWatchdogRenewsLocksOnEveryMaster) {
  EventLog events;
  std::unique_ptr<Client> client =
      MustConnect(cluster_->url(), [&](ClientOptions& o) {
        o.lock_watchdog_timeout = absl::Milliseconds(600);
        o.on_lock_event = events.Callback();
      });
  ASSERT_NE(client, nullptr);
  std::vector<Lock> locks;
  for (const std::string& name : NamesOnEveryMaster(3)) {
    locks.push_back(client->GetLock(name));
    ASSERT_OK(locks.back().Acquire()) << name;
  }
  // Five leases (time passes on purpose): without renewals every lock would
  // be gone.
  absl::SleepFor(absl::Seconds(3));
  for (Lock& lock : locks) {
    absl::StatusOr<RedisValue> ttl =
        Owner(lock.name()).Command({"PTTL", lock.name()});
    ASSERT_OK(ttl);
    EXPECT_GT(ttl->integer, 0) << lock.name();
    EXPECT_OK(lock.Release()) << lock.name();
  }
  EXPECT_TRUE(events.events().empty());
}

TEST_F(ClusterTest, AsynchronousCallsFollowTheSlots) {
  std::unique_ptr<Client> client = MustConnect(cluster_->url());
  ASSERT_NE(client, nullptr);
  const relock::Owner owner = relock::Owner::New();
  for (const std::string& name : NamesOnEveryMaster(1)) {
    Lock lock = client->GetLock(name);
    ASSERT_OK(lock.AcquireAsync(owner).Get()) << name;
    EXPECT_EQ(lock.IsHeldBy(owner).value_or(false), true);
    ASSERT_OK(lock.ReleaseAsync(owner).Get()) << name;
  }
}

// A slot moves to another master and back while two clients' threads lock
// and unlock a lock in it: every call succeeds (MOVED and ASK are followed
// inside the library) and the holds never overlap.
TEST_F(ClusterTest, ASlotMigratedUnderTrafficLosesNothing) {
  const std::string name = TestLockName("migrating");
  const int slot = redis::KeySlot(name);
  absl::StatusOr<size_t> home = cluster_->NodeForSlot(slot);
  ASSERT_OK(home);
  const size_t away = (*home + 1) % cluster_->masters();

  std::unique_ptr<Client> a = MustConnect(cluster_->url());
  std::unique_ptr<Client> b = MustConnect(cluster_->url());
  ASSERT_TRUE(a != nullptr && b != nullptr);
  std::atomic<bool> stop{false};
  std::atomic<int> inside{0}, overlaps{0}, pairs{0}, failures{0};
  Mutex mu;
  std::string first_failure;
  std::vector<std::thread> threads;
  for (Client* client : {a.get(), b.get()}) {
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&, client] {
        Lock lock = client->GetLock(name);
        while (!stop.load()) {
          absl::Status s = lock.TryAcquire(absl::Seconds(10));
          if (s.ok()) {
            if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
            absl::SleepFor(absl::Microseconds(200));  // held a while
            inside.fetch_sub(1);
            s = lock.Release();
          }
          if (s.ok()) {
            pairs.fetch_add(1);
          } else {
            failures.fetch_add(1);
            MutexLock l(&mu);
            if (first_failure.empty()) first_failure = s.ToString();
          }
        }
      });
    }
  }
  // Some lock traffic before, between and after the moves (the threads stop
  // on any failure of the wait).
  auto some_traffic = [&] {
    const int before = pairs.load() + failures.load();
    EXPECT_TRUE(testing::Eventually([&] {
      return pairs.load() + failures.load() >= before + 20;
    })) << "no lock traffic";
  };
  for (int round = 0; round < 3; ++round) {
    some_traffic();
    ASSERT_OK(cluster_->MigrateSlot(slot, away));
    some_traffic();
    ASSERT_OK(cluster_->MigrateSlot(slot, *home));
  }
  some_traffic();
  stop = true;
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(failures.load(), 0) << first_failure;
  EXPECT_GT(pairs.load(), 20);
  ASSERT_OK(cluster_->WaitUntilHealthy(absl::Seconds(30)));
}

// A slow migration (its slot importing and migrating for a second, longer
// than the ASK-TRYAGAIN rounds once allowed) meets an acquire whose key is
// not there yet and a release whose key has not moved yet. Both are calls of
// several keys, which the importing master refuses with TRYAGAIN until every
// key is there: they wait the migration out and succeed.
TEST_F(ClusterTest, CallsWaitOutASlowMigration) {
  const std::string held_name = TestLockName("{slow-migration}held");
  const std::string fresh_name = TestLockName("{slow-migration}fresh");
  const int slot = redis::KeySlot(held_name);
  ASSERT_EQ(redis::KeySlot(fresh_name), slot);
  absl::StatusOr<size_t> home = cluster_->NodeForSlot(slot);
  ASSERT_OK(home);
  const size_t away = (*home + 1) % cluster_->masters();

  std::unique_ptr<Client> client = MustConnect(cluster_->url());
  ASSERT_NE(client, nullptr);
  Lock held = client->GetLock(held_name);
  Lock fresh = client->GetLock(fresh_name);
  const relock::Owner holder = relock::Owner::New();
  ASSERT_OK(held.Acquire(holder));
  absl::Status acquired = absl::UnknownError("not run");  // and released
  absl::Status released = absl::UnknownError("not run");
  std::vector<std::thread> calls;
  ASSERT_OK(cluster_->MigrateSlot(slot, away, [&] {
    calls.emplace_back([&] {
      acquired = fresh.TryAcquire(absl::Seconds(20));
      if (acquired.ok()) acquired = fresh.Release();
    });
    calls.emplace_back([&] { released = held.Release(holder); });
    absl::SleepFor(absl::Seconds(1));  // the slow part of the migration
  }));
  for (std::thread& t : calls) t.join();
  EXPECT_OK(acquired);
  EXPECT_OK(released);
  EXPECT_EQ(held.IsLocked().value_or(true), false);
  EXPECT_EQ(fresh.IsLocked().value_or(true), false);
  ASSERT_OK(cluster_->MigrateSlot(slot, *home));
  ASSERT_OK(cluster_->WaitUntilHealthy(absl::Seconds(30)));
}

// Failovers, each on a cluster of its own (a master is killed): two
// clients with a 6 s watchdog lease (renewed every 2 s; a promotion takes
// about node_timeout + 1 s = 2 s here) and a lock name on master 0.
class ClusterFailoverTest : public ::testing::Test {
 protected:
  static constexpr absl::Duration kLease = absl::Seconds(6);

  void SetUp() override {
    testing::RedisClusterOptions cluster_options;
    cluster_options.node_timeout = absl::Seconds(1);
    absl::StatusOr<std::unique_ptr<RedisCluster>> cluster =
        RedisCluster::Start(cluster_options);
    ASSERT_OK(cluster);
    cluster_ = *std::move(cluster);
    auto options = [&](ClientOptions& o) {
      o.lock_watchdog_timeout = kLease;
      o.connect_timeout = absl::Milliseconds(500);
      o.command_timeout = absl::Milliseconds(500);
      o.on_lock_event = events_.Callback();
    };
    holder_client_ = MustConnect(cluster_->url(), options);
    other_client_ = MustConnect(cluster_->url(), options);
    ASSERT_TRUE(holder_client_ != nullptr && other_client_ != nullptr);
    for (int i = 0; name_.empty(); ++i) {
      const std::string candidate = TestLockName(absl::StrCat(i));
      absl::StatusOr<size_t> node = cluster_->NodeForKey(candidate);
      ASSERT_OK(node);
      if (*node == 0) name_ = candidate;
    }
  }

  std::unique_ptr<RedisCluster> cluster_;
  EventLog events_;
  std::unique_ptr<Client> holder_client_;
  std::unique_ptr<Client> other_client_;
  std::string name_;  // a lock on master 0
};

// One master stops answering (paused, not failed over) for longer than the
// lease: the lock on it is reported lost when its lease runs out, and the
// locks on the other masters are renewed all along and kept.
TEST(ClusterPausedMasterTest, OnlyTheLocksOnThePausedMasterAreLost) {
  testing::RedisClusterOptions cluster_options;
  cluster_options.node_timeout = absl::Seconds(30);  // no failover here
  cluster_options.replicas_per_master = 0;
  absl::StatusOr<std::unique_ptr<RedisCluster>> cluster =
      RedisCluster::Start(cluster_options);
  ASSERT_OK(cluster);
  RedisCluster& c = **cluster;
  EventLog events;
  std::unique_ptr<Client> client = MustConnect(c.url(), [&](ClientOptions& o) {
    o.lock_watchdog_timeout = absl::Seconds(2);
    o.connect_timeout = absl::Milliseconds(300);
    o.command_timeout = absl::Milliseconds(300);
    o.on_lock_event = events.Callback();
  });
  ASSERT_NE(client, nullptr);
  std::vector<std::string> names(c.masters());  // names[m] lives on master m
  for (int i = 0; std::any_of(names.begin(), names.end(),
                              [](const std::string& n) { return n.empty(); });
       ++i) {
    const std::string candidate = TestLockName(absl::StrCat(i));
    absl::StatusOr<size_t> node = c.NodeForKey(candidate);
    ASSERT_OK(node);
    if (names[*node].empty()) names[*node] = candidate;
  }
  std::vector<Lock> locks;
  for (const std::string& name : names) {
    locks.push_back(client->GetLock(name));
    ASSERT_OK(locks.back().Acquire());
  }
  ASSERT_OK(c.node(0).Pause());
  LockEvent lost;
  const bool told =
      events.WaitFor(LockEventType::kLockLost, absl::Seconds(10), &lost);
  // Time passes on purpose: time for more (wrong) losses.
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_OK(c.node(0).Resume());
  ASSERT_TRUE(told) << "the lock on the paused master was not reported lost";
  EXPECT_EQ(lost.lock_name, names[0]);
  // Two more leases (time passes on purpose): the other locks are still
  // renewed and kept.
  absl::SleepFor(absl::Seconds(4));
  for (const LockEvent& e : events.events()) {
    EXPECT_EQ(e.lock_name, names[0]) << e.status.ToString();
  }
  for (size_t m = 1; m < c.masters(); ++m) {
    absl::StatusOr<RedisValue> ttl = c.node(m).Command({"PTTL", names[m]});
    ASSERT_OK(ttl);
    EXPECT_GT(ttl->integer, 0) << names[m];
    EXPECT_OK(locks[m].Release()) << names[m];
  }
  EXPECT_FALSE(locks[0].Release().ok());
}

// A master is killed and its replica promoted, with a lock held on it and a
// waiter on another client: the holder keeps the lock (its acquire reached
// the replica: WAIT says so) and its watchdog renews it on the new master,
// with no loss reported; the release works there and the waiter gets the
// lock well before its deadline; the dead master comes back as a replica
// (RedisCluster::Revive). A cluster of its own: this one loses a node.
TEST_F(ClusterFailoverTest, AHeldLockSurvivesItsMastersFailover) {
  RedisCluster& c = *cluster_;
  const std::string& name = name_;
  Lock held = holder_client_->GetLock(name);
  ASSERT_OK(held.Acquire());
  absl::StatusOr<RedisValue> acked = c.node(0).Command({"WAIT", "1", "2000"});
  ASSERT_TRUE(acked.ok() && acked->integer == 1) << "not replicated";

  BackgroundWaiter waiter(other_client_->GetLock(name), absl::Seconds(40));
  ASSERT_OK(WaitUntilWaiting(c.node(0), LockChannel(name), *other_client_, 1,
                             PubSub::kSharded));
  EXPECT_OK(c.Kill(0));
  EXPECT_OK(c.WaitUntilHealthy(absl::Seconds(30)));
  absl::StatusOr<size_t> promoted = c.NodeForKey(name);
  EXPECT_TRUE(promoted.ok() && *promoted != 0) << promoted.status();

  // More than a lease after the kill (time passes on purpose): only renewals
  // on the new master kept the lock.
  absl::SleepFor(kLease + absl::Seconds(1));
  if (promoted.ok()) {
    absl::StatusOr<RedisValue> fields =
        c.node(*promoted).Command({"HGETALL", name});
    ASSERT_OK(fields);
    EXPECT_EQ(fields->elements.size(), 2u) << "the lock did not survive";
    if (fields->elements.size() == 2) {
      EXPECT_THAT(fields->elements[0].str, HasSubstr(holder_client_->id()));
    }
  }
  EXPECT_FALSE(waiter.done());
  for (const LockEvent& e : events_.events()) {
    ADD_FAILURE() << "event " << static_cast<int>(e.type) << " "
                  << e.status.ToString();
  }

  Stopwatch since_release;
  EXPECT_OK(held.Release());
  EXPECT_TRUE(waiter.Join());
  // Woken by the unlock message, or at worst by its next look at the lease:
  // either way long before its 40 s deadline.
  EXPECT_LT(since_release.Elapsed(), kLease + absl::Seconds(6));

  // The dead master comes back as a replica of the promoted one, and the
  // slot keeps working.
  ASSERT_OK(c.Revive(0));
  ASSERT_OK(c.WaitUntilHealthy(absl::Seconds(30)));
  absl::StatusOr<bool> master = c.IsMaster(0);
  ASSERT_OK(master);
  EXPECT_FALSE(*master);
  ASSERT_OK(held.Acquire());
  EXPECT_OK(held.Release());
}

// The other outcome: the acquire never reached the replica (its link was
// down when its master died), so the promoted replica has no lock.
// The holder is told kLockLost by its watchdog (the renewal finds no owner
// field), its Release() says the lock was lost, and another client can take
// the lock on the new master.
TEST_F(ClusterFailoverTest, ALockTheReplicaNeverSawIsReportedLost) {
  RedisCluster& c = *cluster_;
  const std::string& name = name_;
  // Master 0's replica (node masters() + 0) is stopped and its link cut, so
  // the acquire is never sent to it; the master dies before the replica
  // could reconnect.
  RedisServer& replica = c.node(c.masters());
  ASSERT_OK(replica.Pause());
  absl::StatusOr<RedisValue> cut =
      c.node(0).Command({"CLIENT", "KILL", "TYPE", "replica"});
  ASSERT_TRUE(cut.ok() && cut->integer == 1) << cut.status();
  Lock held = holder_client_->GetLock(name);
  ASSERT_OK(held.Acquire());
  EXPECT_OK(c.Kill(0));
  EXPECT_OK(replica.Resume());
  ASSERT_OK(c.WaitUntilHealthy(absl::Seconds(30)));
  absl::StatusOr<size_t> promoted = c.NodeForKey(name);
  ASSERT_OK(promoted);
  ASSERT_EQ(*promoted, c.masters());
  absl::StatusOr<RedisValue> exists = replica.Command({"EXISTS", name});
  ASSERT_TRUE(exists.ok() && exists->integer == 0) << "the replica has it";

  LockEvent lost;
  ASSERT_TRUE(
      events_.WaitFor(LockEventType::kLockLost, absl::Seconds(15), &lost))
      << "the holder was not told";
  EXPECT_EQ(lost.lock_name, name);
  const absl::Status release = held.Release();
  EXPECT_FALSE(release.ok());
  Lock other = other_client_->GetLock(name);
  EXPECT_OK(other.TryAcquire(absl::Seconds(10)));
  EXPECT_OK(other.Release());
}

// The backend itself, for what the lock API cannot show: which redirection
// it followed and the slot map it ended up with.
class ClusterBackendTest : public ClusterTest {
 protected:
  void SetUp() override {
    ClusterTest::SetUp();
    absl::StatusOr<redis::Topology> topology =
        redis::ParseTopologyUrl(cluster_->url());
    ASSERT_OK(topology);
    backend::ClusterOptions options;
    options.seeds = topology->endpoints;
    absl::StatusOr<std::unique_ptr<backend::ClusterBackend>> made =
        backend::ClusterBackend::Create(&loop_, options,
                                        internal::LockScripts());
    ASSERT_OK(made);
    backend_ = *std::move(made);
  }
  void TearDown() override {
    if (backend_ != nullptr) backend_->Close();
    loop_.Stop();
  }

  // The inspect script (a read) on `keys[0]`.
  static backend::ScriptCall InspectCall(
      absl::Span<const absl::string_view> keys) {
    static constexpr absl::string_view kArgs[] = {"owner"};
    backend::ScriptCall call;
    call.script = internal::kInspectScript;
    call.keys = keys;
    call.args = kArgs;
    call.deadline = Deadline::After(absl::Seconds(10));
    call.resend = backend::Resend::kIfDropped;
    return call;
  }
  // The inspect script on `key`, blocking.
  backend::Answer Inspect(const std::string& key) {
    const absl::string_view keys[] = {key};
    return std::move(backend_->Run(InspectCall(keys))[0]);
  }
  // The same, asynchronously, waited for.
  backend::Answer InspectAsync(const std::string& key) {
    const absl::string_view keys[] = {key};
    // relock's Mutex, not absl::Notification: Debian's absl is not built
    // for TSan, which would not see that handoff.
    Mutex mu;
    bool done = false;
    backend::Answer answer;
    backend_->RunAsync(InspectCall(keys),
                       [&](std::vector<backend::Answer> answers) {
                         MutexLock lock(&mu);
                         answer = std::move(answers[0]);
                         done = true;
                       });
    MutexLock lock(&mu);
    EXPECT_TRUE(mu.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(20)));
    return answer;
  }
  static void ExpectAnswered(const backend::Answer& a,
                             const std::string& what) {
    ASSERT_OK(a.reply) << what << ": " << a.reply.status();
    EXPECT_FALSE(a.reply->is_error()) << what << ": " << a.reply->str();
  }
  // The port of the master of `slot` in the backend's map.
  int MappedPort(int slot) {
    const redis::SlotRange* r = backend_->slot_map()->Find(slot);
    return r == nullptr ? 0 : r->master.endpoint.port;
  }

  io::EventLoop loop_;  // before backend_: destroyed after it
  std::unique_ptr<backend::ClusterBackend> backend_;
};

TEST_F(ClusterBackendTest, AMovedSlotIsFollowedAndTheMapRefreshed) {
  const std::string key = TestLockName();
  const int slot = redis::KeySlot(key);
  absl::StatusOr<size_t> home = cluster_->NodeForSlot(slot);
  ASSERT_OK(home);
  const size_t away = (*home + 1) % cluster_->masters();
  ExpectAnswered(Inspect(key), "before");
  const uint64_t refreshes = backend_->refreshes();
  EXPECT_EQ(MappedPort(slot), cluster_->node(*home).port());

  ASSERT_OK(cluster_->MigrateSlot(slot, away));
  ExpectAnswered(Inspect(key), "after the move");  // MOVED, followed
  // The MOVED also refreshed the map (in the background).
  EXPECT_TRUE(testing::Eventually(
      [&] { return MappedPort(slot) == cluster_->node(away).port(); }));
  EXPECT_GT(backend_->refreshes(), refreshes);
  EXPECT_EQ(MappedPort(slot), cluster_->node(away).port());

  ASSERT_OK(cluster_->MigrateSlot(slot, *home));
  ExpectAnswered(InspectAsync(key), "after the move back");
  ASSERT_OK(cluster_->WaitUntilHealthy(absl::Seconds(30)));
}

// A batch whose master answers after the batch's deadline: RunBatch()
// returns without that answer, and the answer, when it comes, is dropped.
// It was written into the results the returning call had taken away (a
// crash of every worker in sentinel harness runs with replica_sync, whose
// renewal batches met a restarted primary).
TEST_F(ClusterBackendTest, ALateBatchReplyAfterItsDeadlineIsDropped) {
  const std::string key = TestLockName();
  ExpectAnswered(Inspect(key), "before");
  RedisServer& master = Owner(key);
  static constexpr absl::string_view kArgs[] = {"owner"};
  backend::Call call;
  call.script = internal::kInspectScript;
  call.keys = {key};
  call.args = {kArgs[0]};
  ASSERT_OK(master.Pause());
  // Far within the cluster's node timeout (2 s): no failover.
  const backend::BatchReplies late =
      backend_->RunBatch({call}, Deadline::After(absl::Milliseconds(100)));
  ASSERT_OK(master.Resume());
  ASSERT_EQ(late.size(), 1u);
  ASSERT_EQ(late[0].size(), 1u);
  EXPECT_FALSE(late[0][0].reply.ok());
  // The late answer comes in before the next one on the same connection.
  for (int i = 0; i < 3; ++i) {
    const backend::BatchReplies next =
        backend_->RunBatch({call}, Deadline::After(absl::Seconds(10)));
    ASSERT_EQ(next.size(), 1u);
    ASSERT_EQ(next[0].size(), 1u);
    EXPECT_OK(next[0][0].reply.status()) << "try " << i;
  }
  ExpectAnswered(Inspect(key), "after");
}

// Halfway through a migration: the key already moved to the importing node,
// the slot still belongs to the old one, which answers ASK; the call goes to
// the new node after ASKING, blocking or not.
TEST_F(ClusterBackendTest, AnAskForAKeyInAMigratingSlotIsFollowed) {
  const std::string key = TestLockName();
  const int slot = redis::KeySlot(key);
  absl::StatusOr<size_t> from = cluster_->NodeForSlot(slot);
  ASSERT_OK(from);
  const size_t to = (*from + 1) % cluster_->masters();
  RedisServer& source = cluster_->node(*from);
  RedisServer& target = cluster_->node(to);
  absl::StatusOr<std::string> from_id = cluster_->NodeId(*from);
  absl::StatusOr<std::string> to_id = cluster_->NodeId(to);
  ASSERT_TRUE(from_id.ok() && to_id.ok());
  const std::string s = absl::StrCat(slot);
  ASSERT_OK(source.Command(
      {"HSET", key, "0b6b2f6e-1c54-4a3c-9d7e-3f1f0c2a9e11:1", "1"}));
  ASSERT_TRUE(target.Command({"CLUSTER", "SETSLOT", s, "IMPORTING", *from_id})
                  ->is_ok());
  ASSERT_TRUE(
      source.Command({"CLUSTER", "SETSLOT", s, "MIGRATING", *to_id})->is_ok());
  absl::StatusOr<RedisValue> moved =
      source.Command({"MIGRATE", RedisServer::kHost,
                      absl::StrCat(target.port()), key, "0", "5000"});
  ASSERT_TRUE(moved.ok() && moved->is_ok()) << moved.status();
  absl::StatusOr<RedisValue> ask = source.Command({"HGETALL", key});
  ASSERT_TRUE(ask.ok() && ask->is_error()) << "expected ASK";
  EXPECT_THAT(ask->str, ::testing::StartsWith("ASK "));

  backend::Answer blocking = Inspect(key);
  ExpectAnswered(blocking, "blocking");
  ExpectAnswered(InspectAsync(key), "async");
  // The inspect script saw the lock-shaped hash on the target: {1, ...}.
  ASSERT_OK(blocking.reply);
  ASSERT_TRUE(blocking.reply->view().is_array());
  EXPECT_EQ(blocking.reply->view()[0].integer(), 1);

  // Finish the migration, then move the slot home.
  for (size_t i = 0; i < cluster_->masters(); ++i) {
    ASSERT_TRUE(cluster_->node(i)
                    .Command({"CLUSTER", "SETSLOT", s, "NODE", *to_id})
                    ->is_ok());
  }
  ASSERT_OK(cluster_->MigrateSlot(slot, *from));
  ASSERT_OK(cluster_->WaitUntilHealthy(absl::Seconds(30)));
}

// Sharded pub/sub on the master of the channel's slot: when the slot moves
// away, the server drops the subscription by itself; the waiter wakes to
// re-check and the subscription says the slot moved.
TEST_F(ClusterBackendTest, AShardedSubscriptionIsDroppedWhenItsSlotMoves) {
  const std::string channel =
      absl::StrCat("redisson_lock__channel:{", TestLockName(), "}");
  const int slot = redis::KeySlot(channel);
  absl::StatusOr<size_t> home = cluster_->NodeForSlot(slot);
  ASSERT_OK(home);
  io::ConnectionOptions o;
  o.endpoint.host = RedisServer::kHost;
  o.endpoint.port = cluster_->node(*home).port();
  absl::StatusOr<std::shared_ptr<pubsub::Subscriber>> started =
      pubsub::Subscriber::Start(&loop_, o, true,
                                pubsub::Subscriber::Mode::kSharded);
  ASSERT_OK(started);
  std::shared_ptr<pubsub::Subscriber> sub = *std::move(started);
  std::unique_ptr<pubsub::Subscription> s = sub->Subscribe(channel);
  ASSERT_OK(s->AwaitConfirmed(Deadline::After(absl::Seconds(10))));
  absl::StatusOr<RedisValue> n =
      cluster_->node(*home).Command({"SPUBLISH", channel, "0"});
  ASSERT_TRUE(n.ok() && n->integer == 1) << n.status();
  EXPECT_EQ(s->Wait(Deadline::After(absl::Seconds(10))),
            pubsub::WakeReason::kNotified);

  const size_t away = (*home + 1) % cluster_->masters();
  ASSERT_OK(cluster_->MigrateSlot(slot, away));
  EXPECT_EQ(s->Wait(Deadline::After(absl::Seconds(10))),
            pubsub::WakeReason::kResubscribed);
  absl::Status confirmed =
      s->AwaitConfirmed(Deadline::After(absl::ZeroDuration()));
  EXPECT_EQ(confirmed.code(), absl::StatusCode::kUnavailable) << confirmed;
  EXPECT_THAT(confirmed.message(), HasSubstr("moved away"));
  s.reset();
  sub->Close();
  ASSERT_OK(cluster_->MigrateSlot(slot, *home));
  ASSERT_OK(cluster_->WaitUntilHealthy(absl::Seconds(30)));
}

// Subscribes to `channel` on the node at `port` with `subscribe` (SUBSCRIBE
// or SSUBSCRIBE), releases `lock` (held once) and expects the unlock message
// as a `kind` push ("message" or "smessage").
void ExpectReleaseIsHeard(Lock& lock, int port, const char* subscribe,
                          const std::string& channel, const char* kind) {
  absl::StatusOr<testing::RawConnection> sub =
      testing::RawConnection::Connect(port);
  ASSERT_OK(sub);
  ASSERT_OK(sub->Command({subscribe, channel}));
  EXPECT_OK(lock.Release());
  absl::StatusOr<RedisValue> message = sub->NextReply();
  ASSERT_OK(message);
  ASSERT_EQ(message->elements.size(), 3u) << *message;
  EXPECT_EQ(message->elements[0].str, kind);
  EXPECT_EQ(message->elements[2].str, "0");
}

// Redisson's own lock and unlock scripts (3.x, the unlock publishing with the
// command it is given: SPUBLISH on a Redis 7 cluster), run as a foreign
// owner on the master of the lock's slot: Redisson and relock exclude each
// other, a Redisson unlock wakes a relock waiter, and a relock release
// reaches a Redisson-style sharded subscriber.
TEST_F(ClusterTest, RedissonPeersShareLocksAndShardedWakeUps) {
  constexpr char kPeer[] = "0b6b2f6e-1c54-4a3c-9d7e-3f1f0c2a9e11:77";
  const std::string name = TestLockName("redisson");
  const std::string channel =
      absl::StrCat("redisson_lock__channel:{", name, "}");
  RedisServer& master = Owner(name);
  std::unique_ptr<Client> client = MustConnect(cluster_->url());
  ASSERT_NE(client, nullptr);
  Lock lock = client->GetLock(name);

  // Redisson holds: relock waits, and Redisson's SPUBLISH wakes it.
  absl::StatusOr<RedisValue> taken =
      master.Command({"EVAL", kRedissonLock, "1", name, "30000", kPeer});
  ASSERT_TRUE(taken.ok() && taken->is_nil()) << taken.status();
  EXPECT_EQ(lock.TryAcquire(absl::ZeroDuration()).code(),
            absl::StatusCode::kDeadlineExceeded);
  BackgroundWaiter waiter(lock, absl::Seconds(20));  // the lease is 30 s
  ASSERT_OK(WaitUntilWaiting(master, channel, *client, 1, PubSub::kSharded));
  Stopwatch since_unlock;
  absl::StatusOr<RedisValue> unlocked =
      master.Command({"EVAL", kRedissonUnlock, "2", name, channel, "0", "30000",
                      kPeer, "SPUBLISH"});
  ASSERT_TRUE(unlocked.ok() && unlocked->integer == 1) << unlocked.status();
  EXPECT_TRUE(waiter.Join());
  EXPECT_LT(since_unlock.Elapsed(), absl::Seconds(10));

  // relock holds: Redisson is refused, and relock's release reaches a
  // sharded subscriber of the channel.
  ASSERT_OK(lock.Acquire());
  absl::StatusOr<RedisValue> refused =
      master.Command({"EVAL", kRedissonLock, "1", name, "30000", kPeer});
  ASSERT_OK(refused);
  EXPECT_TRUE(refused->is_integer()) << "Redisson got a held lock";
  ExpectReleaseIsHeard(lock, master.port(), "SSUBSCRIBE", channel, "smessage");
}

// ClusterPubSub::kClassic, for peers that only use classic pub/sub: a
// relock waiter SUBSCRIBEs (on the slot's master), so a PUBLISH made through
// any other node of the cluster wakes it, and relock's releases PUBLISH, so a
// classic subscriber on any node hears them.
TEST_F(ClusterTest, ClassicPubSubWhenAskedForReachesClassicPeers) {
  const std::string name = TestLockName("classic");
  const std::string channel =
      absl::StrCat("redisson_lock__channel:{", name, "}");
  absl::StatusOr<size_t> master = cluster_->NodeForKey(name);
  ASSERT_OK(master);
  const size_t other = (*master + 1) % cluster_->masters();
  ClientOptions options;
  options.url = cluster_->url();
  options.cluster_pubsub = ClusterPubSub::kClassic;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  ASSERT_OK(client);
  Lock lock = (*client)->GetLock(name);

  // A foreign holder (30 s lease): only a message can wake the waiter.
  constexpr char kPeer[] = "0b6b2f6e-1c54-4a3c-9d7e-3f1f0c2a9e11:78";
  RedisServer& owner = cluster_->node(*master);
  ASSERT_OK(owner.Command({"HSET", name, kPeer, "1"}));
  ASSERT_OK(owner.Command({"PEXPIRE", name, "30000"}));
  BackgroundWaiter waiter(lock, absl::Seconds(20));
  ASSERT_OK(WaitUntilWaiting(owner, channel, **client, 1, PubSub::kClassic));
  EXPECT_FALSE(waiter.got());
  ASSERT_OK(owner.Command({"DEL", name}));
  Stopwatch since_unlock;
  absl::StatusOr<RedisValue> published =
      cluster_->node(other).Command({"PUBLISH", channel, "0"});
  ASSERT_OK(published);
  EXPECT_TRUE(waiter.Join());
  EXPECT_LT(since_unlock.Elapsed(), absl::Seconds(10));

  // relock's release is a classic PUBLISH: heard on another node.
  ASSERT_OK(lock.Acquire());
  ExpectReleaseIsHeard(lock, cluster_->node(other).port(), "SUBSCRIBE", channel,
                       "message");
}

TEST_F(ClusterTest, ClusterPubSubWithoutAClusterUrlIsInvalid) {
  ClientOptions options;
  options.url = testing::SharedRedisServer().url();
  options.cluster_pubsub = ClusterPubSub::kSharded;
  const absl::Status s = testing::ConnectError(options);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("cluster_pubsub"));
}

TEST_F(ClusterTest, AClusterUrlToAStandaloneServerIsFailedPrecondition) {
  ClientOptions options;
  options.url = absl::StrCat("redis-cluster://127.0.0.1:",
                             testing::SharedRedisServer().port());
  const absl::Status s = testing::ConnectError(options);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("not a Redis Cluster"));
}

TEST_F(ClusterTest, NoSeedAnsweringIsUnavailableNamingThem) {
  ClientOptions options;
  options.url = "redis-cluster://127.0.0.1:1,127.0.0.1:2";
  options.connect_timeout = absl::Milliseconds(200);
  const absl::Status s = testing::ConnectError(options);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("127.0.0.1:1"));
  EXPECT_THAT(s.message(), HasSubstr("127.0.0.1:2"));
}

}  // namespace
}  // namespace relock
