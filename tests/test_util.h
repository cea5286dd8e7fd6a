// Helpers shared by the relock test binaries (header-only).

#ifndef RELOCK_TESTS_TEST_UTIL_H_
#define RELOCK_TESTS_TEST_UTIL_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "lib/common/mutex.h"
#include "relock/relock.h"
#include "tests/testing/child_process.h"
#include "tests/testing/eventually.h"
#include "tests/testing/redis_server.h"

namespace relock {
namespace testing {

// Connects to `url` (with `tweak` applied to the options) or fails the test.
inline std::unique_ptr<Client> MustConnect(
    const std::string& url,
    const std::function<void(ClientOptions&)>& tweak = {}) {
  ClientOptions options;
  options.url = url;
  if (tweak) tweak(options);
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

// Records LockEvents delivered to ClientOptions::on_lock_event.
class EventLog {
 public:
  std::function<void(const LockEvent&)> Callback() {
    return [this](const LockEvent& e) {
      MutexLock lock(&mu_);
      events_.push_back(e);
    };
  }
  std::vector<LockEvent> events() const {
    MutexLock lock(&mu_);
    return events_;
  }
  // Waits up to `timeout` for an event of `type`; returns it if seen.
  bool WaitFor(LockEventType type, absl::Duration timeout,
               LockEvent* out = nullptr) const {
    MutexLock lock(&mu_);
    auto seen = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      for (const LockEvent& e : events_) {
        if (e.type == type) {
          if (out != nullptr) *out = e;
          return true;
        }
      }
      return false;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&seen), timeout);
  }

 private:
  mutable Mutex mu_;
  std::vector<LockEvent> events_ ABSL_GUARDED_BY(mu_);
};

// Monotonic stopwatch.
class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  absl::Duration Elapsed() const {
    return absl::FromChrono(std::chrono::steady_clock::now() - start_);
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

// The value of `field` in the INFO text `info` ("field:value" lines), or "".
inline std::string InfoField(const std::string& info, absl::string_view field) {
  for (absl::string_view line : absl::StrSplit(info, "\r\n")) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(line, absl::MaxSplits(':', 1));
    if (kv.first == field) return std::string(kv.second);
  }
  return "";
}

inline std::string Info(RedisServer& server, const std::string& section) {
  absl::StatusOr<RedisValue> info = server.Command({"INFO", section});
  return info.ok() ? info->str : "";
}

// How many times `command` ran on `server` since the last CONFIG RESETSTAT
// (INFO commandstats: "cmdstat_<command>:calls=N,usec=...").
inline int64_t Calls(RedisServer& server, const std::string& command) {
  const std::string stats =
      InfoField(Info(server, "commandstats"), "cmdstat_" + command);
  for (absl::string_view part : absl::StrSplit(stats, ',')) {
    if (absl::ConsumePrefix(&part, "calls=")) {
      int64_t calls = 0;
      if (absl::SimpleAtoi(part, &calls)) return calls;
    }
  }
  return 0;
}

// The error of a Connect() that must fail (a failure of the test, and
// Unknown, if it succeeds).
inline absl::Status ConnectError(const ClientOptions& options) {
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  EXPECT_FALSE(client.ok()) << "Connect succeeded";
  return client.ok() ? absl::UnknownError("Connect succeeded")
                     : client.status();
}

// Redisson's name of a companion key or channel of `name`
// (RedissonObject.prefixName), written out here independently of relock's
// code: "<prefix>:{N}", or "<prefix>:N" when N contains "{".
inline std::string RedissonPrefixName(const std::string& prefix,
                                      const std::string& name) {
  return absl::StrContains(name, "{") ? prefix + ":" + name
                                      : prefix + ":{" + name + "}";
}

// Where a plain (reentrant or fenced) lock's waiters listen, and where its
// releases publish: "redisson_lock__channel:{N}" (or ":N").
inline std::string LockChannel(const std::string& name) {
  return RedissonPrefixName("redisson_lock__channel", name);
}

// Where a read-write lock's waiters listen: "redisson_rwlock:{N}" (or
// "redisson_rwlock:N" when N has a "{").
inline std::string RwLockChannel(const std::string& name) {
  return RedissonPrefixName("redisson_rwlock", name);
}

// Where a semaphore's waiters listen and its changes are published:
// "redisson_sc:{N}" (or "redisson_sc:N").
inline std::string SemaphoreChannel(const std::string& name) {
  return RedissonPrefixName("redisson_sc", name);
}

// Waits until `client` (a Client or a RedlockClient) has no request in
// flight (ClientMetrics::pending_requests is 0).
template <class AnyClient>
absl::Status WaitUntilIdle(const AnyClient& client,
                           absl::Duration limit = kEventuallyLimit) {
  return WaitUntil(
      "no request of the client in flight",
      [&] { return client.Metrics().pending_requests == 0; }, limit);
}

// Waits until a thread of `client` that found a lock held sleeps in its
// wait: `channel` on `server` has `subscribers` subscribers (a relock client
// counts once, however many of its threads wait) and `client` has no request
// in flight (its SUBSCRIBE confirmed and the re-check made after it
// answered), so only an unlock message or a timer wakes it now. What the old
// "let it subscribe" sleeps stood for; wait for this before the release whose
// message must wake it. On a cluster `server` is the master of the lock's
// slot, and `kind` kSharded on Redis >= 7 (ClusterPubSub::kAuto).
template <class AnyClient>
absl::Status WaitUntilWaiting(RedisServer& server, const std::string& channel,
                              const AnyClient& client, int64_t subscribers = 1,
                              PubSub kind = PubSub::kClassic,
                              absl::Duration limit = kEventuallyLimit) {
  absl::Status s =
      WaitForSubscribers(server, channel, subscribers, kind, limit);
  if (!s.ok()) return s;
  return WaitUntilIdle(client, limit);
}

// A std::thread that is joined when it goes out of scope, so that a failed
// ASSERT in the test body ends the test with a report instead of
// std::terminate (the thread's own waits must be bounded).
class JoiningThread {
 public:
  template <class Fn>
  explicit JoiningThread(Fn fn) : thread_(std::move(fn)) {}
  JoiningThread(JoiningThread&&) = default;
  JoiningThread& operator=(JoiningThread&&) = delete;
  ~JoiningThread() { join(); }
  void join() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::thread thread_;
};

// A thread that waits for `lock` (TryAcquire(wait), as itself), expects to
// get it, and releases it at once. The destructor joins.
class BackgroundWaiter {
 public:
  BackgroundWaiter(Lock lock, absl::Duration wait)
      : thread_([this, lock, wait]() mutable {
          absl::Status s = lock.TryAcquire(wait);
          EXPECT_TRUE(s.ok()) << lock.name() << ": " << s;
          got_ = s.ok();
          if (s.ok()) {
            EXPECT_TRUE(lock.Release().ok());
          }
          done_ = true;
        }) {}
  BackgroundWaiter(const BackgroundWaiter&) = delete;
  BackgroundWaiter& operator=(const BackgroundWaiter&) = delete;
  ~BackgroundWaiter() { Join(); }

  // Whether it got the lock (so far).
  bool got() const { return got_.load(); }
  // Whether it stopped waiting.
  bool done() const { return done_.load(); }
  // Waits for the thread; whether it got the lock.
  bool Join() {
    if (thread_.joinable()) thread_.join();
    return got_.load();
  }

 private:
  std::atomic<bool> got_{false};
  std::atomic<bool> done_{false};
  std::thread thread_;  // last: it starts once the flags exist
};

// Expects each of `children` to print "done" within `read` and then to exit
// with code 0 within 30 s.
inline void ExpectChildrenDone(
    const std::vector<std::unique_ptr<ChildProcess>>& children,
    absl::Duration read = absl::Seconds(120)) {
  for (const std::unique_ptr<ChildProcess>& child : children) {
    absl::StatusOr<std::string> line = child->ReadLine(read);
    ASSERT_TRUE(line.ok()) << child->name() << ": " << line.status();
    EXPECT_EQ(*line, "done") << child->name();
    absl::StatusOr<int> code = child->Wait(absl::Seconds(30));
    ASSERT_TRUE(code.ok()) << child->name() << ": " << code.status();
    EXPECT_EQ(*code, 0) << child->name();
  }
}

// The keys on `server` but the clients' info records ("relock:client:<id>",
// ClientOptions::publish_client_info), which live as long as their client:
// what the locks left behind.
inline std::vector<std::string> KeysButClientRecords(RedisServer& server) {
  std::vector<std::string> keys;
  absl::StatusOr<RedisValue> all = server.Command({"KEYS", "*"});
  EXPECT_TRUE(all.ok()) << all.status();
  if (!all.ok()) return keys;
  for (const RedisValue& key : all->elements) {
    if (!absl::StartsWith(key.str, "relock:client:")) keys.push_back(key.str);
  }
  return keys;
}

// A lock name unique to the running test.
inline std::string TestLockName(const std::string& suffix = "") {
  const ::testing::TestInfo* info =
      ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string("relock-test:") + info->test_suite_name() + "." +
         info->name() + (suffix.empty() ? "" : ":" + suffix);
}

// Base fixture: the binary's shared redis-server, flushed before each test.
class RedisTest : public ::testing::Test {
 protected:
  void SetUp() override {
    redis_ = &SharedRedisServer();
    ASSERT_TRUE(redis_->running());
    ASSERT_TRUE(redis_->FlushAll().ok());
  }
  RedisServer& redis() { return *redis_; }

 private:
  RedisServer* redis_ = nullptr;
};

// RedisTest plus `client_`, connected to it, whose events go to `events_`.
class RedisClientTest : public RedisTest {
 protected:
  void SetUp() override {
    RedisTest::SetUp();
    client_ = MustConnect(redis().url(), [this](ClientOptions& o) {
      o.on_lock_event = events_.Callback();
    });
    ASSERT_NE(client_, nullptr);
  }
  EventLog events_;
  std::unique_ptr<Client> client_;
};

}  // namespace testing
}  // namespace relock

#endif  // RELOCK_TESTS_TEST_UTIL_H_
