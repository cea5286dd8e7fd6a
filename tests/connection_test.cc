// Connecting and surviving faults: AUTH (password and ACL user), unix
// sockets, SELECT, NOSCRIPT after SCRIPT FLUSH, Redis stopped, restarted and
// paused mid-run. Each test that harms its server starts its own.

#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "relock/relock.h"
#include "tests/test_util.h"
#include "tests/testing/fake_server.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace {

using ::relock::testing::FakeServer;
using ::relock::testing::MustConnect;
using ::relock::testing::RedisServer;
using ::relock::testing::RedisServerOptions;
using ::relock::testing::Stopwatch;
using ::relock::testing::TestLockName;
using ::testing::HasSubstr;
using ::testing::Not;

std::unique_ptr<RedisServer> MustStart(RedisServerOptions options = {}) {
  absl::StatusOr<std::unique_ptr<RedisServer>> s =
      RedisServer::Start(std::move(options));
  EXPECT_OK(s);
  return s.ok() ? *std::move(s) : nullptr;
}

// Acquire + release through `client`, or the first error.
absl::Status RoundTrip(Client& client, const std::string& name) {
  Lock lock = client.GetLock(name);
  if (absl::Status s = lock.Acquire(); !s.ok()) return s;
  return lock.Release();
}

TEST(ConnectTest, UnreachableServerIsUnavailableWithinTheConnectTimeout) {
  std::unique_ptr<RedisServer> server = MustStart();
  ASSERT_NE(server, nullptr);
  const std::string url = server->url();
  ASSERT_OK(server->Stop());
  ClientOptions options;
  options.url = url;
  options.connect_timeout = absl::Milliseconds(500);
  Stopwatch watch;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(client.status().message()),
              HasSubstr(absl::StrCat("127.0.0.1:", server->port())));
  EXPECT_LT(watch.Elapsed(), absl::Seconds(3));
}

TEST(ConnectTest, InvalidOptionsAreInvalidArgument) {
  auto connect = [](void (*tweak)(ClientOptions&)) {
    ClientOptions options;
    tweak(options);
    return Client::Connect(options).status().code();
  };
  const absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(connect([](ClientOptions& o) { o.url = "http://x"; }), kInvalid);
  EXPECT_EQ(connect([](ClientOptions& o) { o.command_connections = 0; }),
            kInvalid);
  EXPECT_EQ(connect([](ClientOptions& o) { o.command_connections = 65; }),
            kInvalid);
  EXPECT_EQ(connect([](ClientOptions& o) { o.tls.ca_file = "/ca.pem"; }),
            kInvalid);
  EXPECT_EQ(connect([](ClientOptions& o) {
              o.command_timeout = absl::ZeroDuration();
            }),
            kInvalid);
  EXPECT_EQ(
      connect([](ClientOptions& o) { o.connect_timeout = -absl::Seconds(1); }),
      kInvalid);
  EXPECT_EQ(connect([](ClientOptions& o) {
              o.connect_timeout = absl::InfiniteDuration();
            }),
            kInvalid);
  EXPECT_EQ(connect([](ClientOptions& o) {
              o.lock_watchdog_timeout = absl::Milliseconds(5);
            }),
            kInvalid);
  EXPECT_EQ(connect([](ClientOptions& o) { o.client_id = "a:b"; }), kInvalid);
  // Longer than a year (a "no limit" of 300 years once overflowed the
  // steady clock's nanoseconds: every command timed out at once).
  EXPECT_EQ(connect([](ClientOptions& o) {
              o.command_timeout = absl::Hours(24 * 365 * 300);
            }),
            kInvalid);
  EXPECT_EQ(connect([](ClientOptions& o) {
              o.connect_timeout = kMaxTimeout + absl::Nanoseconds(1);
            }),
            kInvalid);
}

// The longest timeouts accepted work: no deadline computed from them
// overflows into the past.
TEST(ConnectTest, AYearLongTimeoutIsNoTimeoutAtAll) {
  std::unique_ptr<RedisServer> server = MustStart();
  ASSERT_NE(server, nullptr);
  std::unique_ptr<Client> client =
      MustConnect(server->url(), [](ClientOptions& o) {
        o.connect_timeout = kMaxTimeout;
        o.command_timeout = kMaxTimeout;
      });
  ASSERT_NE(client, nullptr);
  Lock lock = client->GetLock(TestLockName());
  for (int i = 0; i < 20; ++i) {
    ASSERT_OK(lock.Acquire());
    ASSERT_OK(lock.Release());
  }
  const Owner task = Owner::New();
  ASSERT_OK(lock.AcquireAsync(task).Get());
  ASSERT_OK(lock.ReleaseAsync(task).Get());
}

TEST(ConnectTest, PasswordAuth) {
  RedisServerOptions options;
  options.requirepass = "s3cret";
  std::unique_ptr<RedisServer> server = MustStart(options);
  ASSERT_NE(server, nullptr);
  const std::string base = absl::StrCat("127.0.0.1:", server->port());

  std::unique_ptr<Client> good =
      MustConnect(absl::StrCat("redis://:s3cret@", base));
  ASSERT_NE(good, nullptr);
  EXPECT_OK(RoundTrip(*good, "auth-lock"));

  ClientOptions wrong;
  wrong.url = absl::StrCat("redis://:nope@", base);
  absl::Status s = Client::Connect(wrong).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  EXPECT_THAT(std::string(s.message()), Not(HasSubstr("nope")));

  ClientOptions none;
  none.url = absl::StrCat("redis://", base);
  s = Client::Connect(none).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
}

TEST(ConnectTest, AclUserAuthAndAUserWithoutScripting) {
  std::unique_ptr<RedisServer> server = MustStart();
  ASSERT_NE(server, nullptr);
  ASSERT_OK(server->Command(
      {"ACL", "SETUSER", "locker", "on", ">pw1", "~*", "&*", "+@all"}));
  ASSERT_OK(server->Command({"ACL", "SETUSER", "noscripts", "on", ">pw2", "~*",
                             "&*", "+@all", "-@scripting"}));
  const std::string base = absl::StrCat("127.0.0.1:", server->port());
  std::unique_ptr<Client> locker =
      MustConnect(absl::StrCat("redis://locker:pw1@", base));
  ASSERT_NE(locker, nullptr);
  EXPECT_OK(RoundTrip(*locker, "acl-lock"));

  ClientOptions wrong;
  wrong.url = absl::StrCat("redis://locker:pw2@", base);
  EXPECT_EQ(Client::Connect(wrong).status().code(),
            absl::StatusCode::kUnauthenticated);

  ClientOptions refused;
  refused.url = absl::StrCat("redis://noscripts:pw2@", base);
  absl::Status s = Client::Connect(refused).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("SCRIPT LOAD"));
}

// Issue 23 item 18: a malformed URL failed Connect with the same generic
// "expected redis://, ..." whatever was wrong; now the part and its text.
TEST(ConnectTest, AMalformedUrlSaysWhichPartIsWrong) {
  ClientOptions options;
  options.url = "redis://127.0.0.1:99999";
  absl::Status s = Client::Connect(options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("port \"99999\" is out of range 1..65535"));
  options.url = "redis://127.0.0.1/0?timeout=5";
  s = Client::Connect(options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("unknown query parameter \"timeout\""));
}

// Issue 23 item 19, for Sentinel: a sentinel address where something else
// answers is named as such (it was "sent a malformed reply: Protocol
// error").
TEST(ConnectTest, ASentinelThatSpeaksAnotherProtocolIsNamed) {
  absl::StatusOr<std::unique_ptr<FakeServer>> http = FakeServer::Start();
  ASSERT_OK(http);
  ClientOptions options;
  options.url = absl::StrCat("redis-sentinel://", (*http)->address(), "#m");
  options.connect_timeout = absl::Seconds(20);
  Stopwatch watch;
  const absl::Status s = Client::Connect(options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(absl::StrCat("the server at ", (*http)->address(),
                                     " does not speak the Redis protocol")));
  EXPECT_LT(watch.Elapsed(), absl::Seconds(10));
}

// Issue 23 item 21: connecting to a read-only replica succeeded, and every
// later call failed (READONLY).
TEST(ConnectTest, AReadOnlyReplicaIsRefusedNamingItsMaster) {
  std::unique_ptr<RedisServer> master = MustStart();
  ASSERT_NE(master, nullptr);
  std::unique_ptr<RedisServer> replica = MustStart();
  ASSERT_NE(replica, nullptr);
  ASSERT_OK(replica->Command(
      {"REPLICAOF", RedisServer::kHost, absl::StrCat(master->port())}));
  ClientOptions options;
  options.url = replica->url();
  const absl::Status s = Client::Connect(options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(absl::StrCat("is a replica of ", RedisServer::kHost,
                                     ":", master->port(), " (ROLE)")));
  EXPECT_THAT(std::string(s.message()), HasSubstr("connect to the master"));
  // The master itself is fine.
  std::unique_ptr<Client> client = MustConnect(master->url());
  ASSERT_NE(client, nullptr);
  EXPECT_OK(RoundTrip(*client, "master-lock"));
}

// Issue 23 item 21: a user without EVALSHA (or EVAL) connected, and every
// later call failed with NOPERM. A server that denies the check's own
// command (ROLE) is not refused for it.
TEST(ConnectTest, AUserWithoutEvalshaIsRefusedNamingTheCommand) {
  std::unique_ptr<RedisServer> server = MustStart();
  ASSERT_NE(server, nullptr);
  for (const char* denied : {"-evalsha", "-eval", "-role"}) {
    ASSERT_OK(server->Command(
        {"ACL", "SETUSER",
         absl::StrCat("no", absl::string_view(denied).substr(1)), "on", ">pw",
         "~*", "&*", "+@all", denied}));
  }
  const std::string base = absl::StrCat("@127.0.0.1:", server->port());
  ClientOptions options;
  options.url = absl::StrCat("redis://noevalsha:pw", base);
  absl::Status s = Client::Connect(options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("user \"noevalsha\" may not run EVALSHA"));
  options.url = absl::StrCat("redis://noeval:pw", base);
  s = Client::Connect(options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("user \"noeval\" may not run EVAL,"));
  std::unique_ptr<Client> client =
      MustConnect(absl::StrCat("redis://norole:pw", base));
  ASSERT_NE(client, nullptr);
  EXPECT_OK(RoundTrip(*client, "norole-lock"));
}

TEST(ConnectTest, UnixSocket) {
  RedisServerOptions options;
  options.unix_socket = true;
  std::unique_ptr<RedisServer> server = MustStart(options);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<Client> client = MustConnect(server->unix_url());
  ASSERT_NE(client, nullptr);
  Lock lock = client->GetLock("unix-lock");
  ASSERT_OK(lock.Acquire());
  EXPECT_EQ(server->Command({"EXISTS", "unix-lock"})->integer, 1);
  ASSERT_OK(lock.Release());
}

TEST(ConnectTest, SelectsTheDatabaseInTheUrl) {
  std::unique_ptr<RedisServer> server = MustStart();
  ASSERT_NE(server, nullptr);
  std::unique_ptr<Client> client = MustConnect(server->url() + "/5");
  ASSERT_NE(client, nullptr);
  Lock lock = client->GetLock("db5-lock");
  ASSERT_OK(lock.Acquire());
  EXPECT_EQ(server->Command({"EXISTS", "db5-lock"})->integer, 0);
  EXPECT_EQ(server
                ->Command({"EVAL",
                           "redis.call('select', 5) "
                           "return redis.call('exists', KEYS[1])",
                           "1", "db5-lock"})
                ->integer,
            1);
  ASSERT_OK(lock.Release());
  ClientOptions bad;
  bad.url = server->url() + "/99999";
  EXPECT_EQ(Client::Connect(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

class FaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = MustStart();
    ASSERT_NE(server_, nullptr);
    client_ = MustConnect(server_->url(), [](ClientOptions& o) {
      o.connect_timeout = absl::Milliseconds(500);
      o.command_timeout = absl::Milliseconds(500);
    });
    ASSERT_NE(client_, nullptr);
  }
  std::unique_ptr<RedisServer> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(FaultTest, ScriptFlushIsRecoveredWithoutTheCallerNoticing) {
  ASSERT_OK(RoundTrip(*client_, TestLockName()));
  ASSERT_OK(server_->Command({"SCRIPT", "FLUSH"}));
  Lock lock = client_->GetLock(TestLockName());
  EXPECT_OK(lock.Acquire());
  ASSERT_OK(server_->Command({"SCRIPT", "FLUSH"}));
  EXPECT_OK(lock.Acquire());
  ASSERT_OK(server_->Command({"SCRIPT", "FLUSH"}));
  EXPECT_OK(lock.Release());
  ASSERT_OK(server_->Command({"SCRIPT", "FLUSH"}));
  EXPECT_OK(lock.Release());
  EXPECT_EQ(*lock.IsLocked(), false);
}

TEST_F(FaultTest, RedisStoppedIsUnavailableWithinTheTimeoutsThenRecovers) {
  Lock lock = client_->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire());
  ASSERT_OK(lock.Release());
  ASSERT_OK(server_->Stop());
  for (int i = 0; i < 3; ++i) {
    Stopwatch watch;
    absl::Status s = lock.Acquire();
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(lock.name()));
    EXPECT_LT(watch.Elapsed(), absl::Seconds(3));
  }
  EXPECT_EQ(lock.Release().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(client_->Ping().code(), absl::StatusCode::kUnavailable);
  // A restart without persistence: empty data and an empty script cache.
  ASSERT_OK(server_->Restart());
  EXPECT_OK(client_->Ping());
  EXPECT_OK(lock.Acquire());
  EXPECT_OK(lock.Release());
}

TEST_F(FaultTest, PausedRedisTimesOutWithinTheCommandTimeout) {
  // A timed-out command has an unknown outcome (Redis may run it when it
  // wakes), so probe with calls that are harmless if they run late: an
  // acquire attempt on a lock another client holds, and a query.
  std::unique_ptr<Client> holder = MustConnect(server_->url());
  Lock held = holder->GetLock(TestLockName());
  ASSERT_OK(held.Acquire());
  Lock lock = client_->GetLock(TestLockName());
  ASSERT_OK(server_->Pause());
  Stopwatch watch;
  absl::Status attempt = lock.TryAcquire(absl::Seconds(10));
  absl::Duration attempt_took = watch.Elapsed();
  watch = Stopwatch();
  absl::Status query = lock.IsLocked().status();
  absl::Duration query_took = watch.Elapsed();
  ASSERT_OK(server_->Resume());
  EXPECT_EQ(attempt.code(), absl::StatusCode::kUnavailable) << attempt;
  EXPECT_LT(attempt_took, absl::Seconds(3));
  EXPECT_EQ(query.code(), absl::StatusCode::kUnavailable) << query;
  EXPECT_LT(query_took, absl::Seconds(3));
  // The holder kept its lock; the timed-out connections were replaced.
  EXPECT_EQ(*held.HoldCount(), 1);
  EXPECT_EQ(lock.TryAcquire(absl::ZeroDuration()).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_OK(held.Release());
  EXPECT_OK(lock.TryAcquire(absl::Seconds(5)));
  EXPECT_OK(lock.Release());
}

// Regression (found by the safety harness): an acquire whose reply was lost
// still ran on Redis; the thread's next acquire re-entered it and its
// "final" release left a hold renewed forever (a ghost hold).
TEST_F(FaultTest, GhostHoldFromALostAcquireReplyIsAbsorbed) {
  Lock lock = client_->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire());  // warm the pool
  ASSERT_OK(lock.Release());
  ASSERT_OK(server_->Pause());
  EXPECT_FALSE(lock.TryAcquire(absl::ZeroDuration()).ok());
  ASSERT_OK(server_->Resume());
  // The buffered acquire runs when Redis wakes: a count nobody knows of.
  ASSERT_OK(testing::WaitForReply(
      *server_, {"HGETALL", lock.name()},
      [](const testing::RedisValue& v) { return v.elements.size() == 2; },
      "the lost acquire's hold"));
  absl::StatusOr<testing::RedisValue> orphan =
      server_->Command({"HGETALL", lock.name()});
  ASSERT_OK(orphan);
  ASSERT_EQ(orphan->elements.size(), 2u) << "the lost acquire did not run";
  const std::string owner = orphan->elements[0].str;
  // A fresh acquire by the same thread absorbs it: count 1, not 2.
  ASSERT_OK(lock.Acquire());
  EXPECT_EQ(server_->Command({"HGET", lock.name(), owner})->str, "1");
  ASSERT_OK(lock.Release());
  EXPECT_EQ(server_->Command({"EXISTS", lock.name()})->integer, 0);

  // A lost re-entry (Redis counts one more than the thread): the outermost
  // release still frees the lock.
  ASSERT_OK(lock.Acquire());
  ASSERT_OK(server_->Command({"HINCRBY", lock.name(), owner, "1"}));
  ASSERT_OK(lock.Release());
  EXPECT_EQ(server_->Command({"EXISTS", lock.name()})->integer, 0)
      << "a ghost hold outlived the outermost release";
}

TEST_F(FaultTest, CallsOnKilledPoolConnectionsAreResentOnce) {
  // A healthy Redis that dropped our pooled connections (CLIENT KILL, a
  // proxy, a restart) must not fail the next acquire or the outermost
  // release, and a release must not be left to the lease (30 s by default).
  Lock lock = client_->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire());
  ASSERT_OK(server_->Command({"CLIENT", "KILL", "TYPE", "normal"}));
  EXPECT_OK(lock.Release());
  EXPECT_EQ(server_->Command({"EXISTS", lock.name()})->integer, 0);
  ASSERT_OK(server_->Command({"CLIENT", "KILL", "TYPE", "normal"}));
  EXPECT_OK(lock.Acquire());
  EXPECT_EQ(*lock.HoldCount(), 1);
  EXPECT_OK(lock.Release());
  EXPECT_EQ(server_->Command({"EXISTS", lock.name()})->integer, 0);
}

TEST_F(FaultTest, WaiterAcquiresAfterTheServerComesBack) {
  std::unique_ptr<Client> other = MustConnect(server_->url());
  Lock theirs = other->GetLock(TestLockName());
  ASSERT_OK(theirs.Acquire());
  Lock lock = client_->GetLock(TestLockName());
  absl::Status waited, released;
  std::thread waiter([&] {
    waited = lock.TryAcquire(absl::Seconds(20));
    if (waited.ok()) released = lock.Release();
  });
  EXPECT_OK(testing::WaitUntilWaiting(
      *server_, testing::LockChannel(lock.name()), *client_));
  // Restart without persistence: the lock is gone, every connection drops.
  ASSERT_OK(server_->Restart());
  Stopwatch watch;
  waiter.join();
  // Once the subscriber reconnected, the waiter re-checked (its stale pooled
  // connection is replaced transparently) and found the lock free.
  EXPECT_OK(waited);
  EXPECT_OK(released);
  EXPECT_LT(watch.Elapsed(), absl::Seconds(5));
}

}  // namespace
}  // namespace relock
