// Helpers shared by the Redis Cluster test binaries (header-only): lock
// names spread over the masters, and the checks that cluster_test.cc runs
// over plaintext and cluster_tls_test.cc over TLS.

#ifndef RELOCK_TESTS_CLUSTER_TEST_UTIL_H_
#define RELOCK_TESTS_CLUSTER_TEST_UTIL_H_

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "relock/relock.h"
#include "tests/test_util.h"
#include "tests/testing/redis_cluster.h"

namespace relock {
namespace testing {

// The master that serves `key` now (node 0, and a test failure, if the
// cluster cannot tell).
inline RedisServer& MasterOf(const RedisCluster& cluster,
                             const std::string& key) {
  absl::StatusOr<size_t> i = cluster.NodeForKey(key);
  EXPECT_TRUE(i.ok()) << i.status();
  return cluster.node(i.ok() ? *i : 0);
}

// Names with the test's prefix (TestLockName), `per_master` on each master.
inline std::vector<std::string> NamesOnEveryMaster(const RedisCluster& cluster,
                                                   int per_master) {
  std::map<size_t, int> count;
  std::vector<std::string> names;
  for (int i = 0; count.size() < cluster.masters() ||
                  std::any_of(count.begin(), count.end(),
                              [&](auto& c) { return c.second < per_master; });
       ++i) {
    const std::string name = TestLockName(absl::StrCat(i));
    absl::StatusOr<size_t> node = cluster.NodeForKey(name);
    EXPECT_TRUE(node.ok()) << node.status();
    if (!node.ok()) break;
    if (count[*node]++ < per_master) names.push_back(name);
  }
  return names;
}

// `per_master` locks on every master through `client`: each is acquired
// twice by an explicit owner, the second time with an explicit lease (which
// goes to Redis; a re-entry of a watchdog hold is counted locally), its hash
// on the slot's master holds the client's owner field with a count of 2,
// and two releases remove it.
inline void ExpectLocksLiveOnTheMasterOfTheirSlot(const RedisCluster& cluster,
                                                  Client& client,
                                                  int per_master) {
  for (const std::string& name : NamesOnEveryMaster(cluster, per_master)) {
    Lock lock = client.GetLock(name);
    const Owner owner = Owner::New();
    ASSERT_TRUE(lock.Acquire(owner).ok()) << name;
    ASSERT_TRUE(lock.Acquire(owner, absl::Seconds(30)).ok()) << name;
    RedisServer& master = MasterOf(cluster, name);
    absl::StatusOr<RedisValue> fields = master.Command({"HGETALL", name});
    ASSERT_TRUE(fields.ok()) << fields.status();
    ASSERT_EQ(fields->elements.size(), 2u) << name;
    EXPECT_THAT(fields->elements[0].str, ::testing::HasSubstr(client.id()));
    EXPECT_EQ(fields->elements[1].str, "2");
    EXPECT_EQ(lock.IsLocked().value_or(false), true);
    EXPECT_EQ(lock.HoldCount(owner).value_or(-1), 2);
    ASSERT_TRUE(lock.Release(owner).ok());
    ASSERT_TRUE(lock.Release(owner).ok());
    absl::StatusOr<RedisValue> exists = master.Command({"EXISTS", name});
    ASSERT_TRUE(exists.ok()) << exists.status();
    EXPECT_EQ(exists->integer, 0) << name;
  }
}

// On every master: `holder` holds a lock (the default 30 s lease), which
// `waiter` cannot take at once; a 20 s TryAcquire by `waiter` on another
// thread is woken by the release (only the unlock message can wake it in
// time) within 10 s, and releases. `while_waiting(name)` runs on this
// thread while the waiter waits, before the release.
inline void ExpectAReleaseWakesTheWaiter(
    const RedisCluster& cluster, Client& holder, Client& waiter,
    const std::function<void(const std::string& name)>& while_waiting) {
  for (const std::string& name : NamesOnEveryMaster(cluster, 1)) {
    Lock held = holder.GetLock(name);
    Lock wanted = waiter.GetLock(name);
    ASSERT_TRUE(held.Acquire().ok()) << name;
    EXPECT_EQ(wanted.TryAcquire(absl::ZeroDuration()).code(),
              absl::StatusCode::kDeadlineExceeded);
    std::atomic<bool> got{false}, released{false};
    std::thread waiting([&] {
      got = wanted.TryAcquire(absl::Seconds(20)).ok();
      if (got) released = wanted.Release().ok();
    });
    while_waiting(name);
    EXPECT_FALSE(got.load()) << name;
    Stopwatch since_release;
    EXPECT_TRUE(held.Release().ok()) << name;
    waiting.join();
    EXPECT_TRUE(got.load()) << name;
    EXPECT_TRUE(released.load()) << name;
    EXPECT_LT(since_release.Elapsed(), absl::Seconds(10)) << name;
  }
}

}  // namespace testing
}  // namespace relock

#endif  // RELOCK_TESTS_CLUSTER_TEST_UTIL_H_
