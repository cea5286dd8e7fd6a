// Regression tests for issue 8 ("Hardening"): each test is named after a
// failure that a hostile user or a newcomer found, and failed before its fix.
// Defect 12 (braced names) is in data_model_test.cc, 13 in watchdog_test.cc,
// 14 in fixture_self_test.cc.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/api/client_access.h"
#include "lib/io/connection.h"
#include "lib/io/event_loop.h"
#include "lib/lock/fair_lock.h"
#include "lib/redis/errors.h"
#include "lib/redis/url.h"
#include "lib/timer/timer_thread.h"
#include "lib/watchdog/hold_registry.h"
#include "relock/relock.h"
#include "tests/test_util.h"
#include "tests/testing/child_process.h"
#include "tests/testing/notification.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace {

using ::relock::testing::ChildProcess;
using ::relock::testing::EventLog;
using ::relock::testing::MustConnect;
using ::relock::testing::RedisServer;
using ::relock::testing::RedisServerOptions;
using ::relock::testing::Stopwatch;
using ::relock::testing::TestLockName;
using ::testing::HasSubstr;

// A loaded 2-core CI machine can be late by this much.
constexpr absl::Duration kSlack = absl::Seconds(2);

// An owner field of another client (a UUID client id and a thread number),
// written by hand.
constexpr absl::string_view kForeignOwner =
    "9f0c5b7e-3d21-4c8a-9e57-0a1b2c3d4e5f:1";

std::unique_ptr<RedisServer> MustStart(RedisServerOptions options = {}) {
  absl::StatusOr<std::unique_ptr<RedisServer>> server =
      RedisServer::Start(std::move(options));
  EXPECT_OK(server);
  return server.ok() ? *std::move(server) : nullptr;
}

int64_t Integer(RedisServer& server, const std::vector<std::string>& argv) {
  absl::StatusOr<testing::RedisValue> v = server.Command(argv);
  EXPECT_OK(v);
  return v.ok() ? v->integer : -1;
}

// --- 1. SIGPIPE --------------------------------------------------------------

// Runs with SIGPIPE at its default action (which kills the process), as in a
// host that never touched it. args: port of a server whose only client slot
// (--maxclients 1) the routine fills itself.
RELOCK_CHILD_MAIN(WriteToConnectionsTheServerClosed) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_DFL);

  absl::StatusOr<redis::Endpoint> ep =
      redis::ParseRedisUrl(absl::StrCat("redis://127.0.0.1:", args[0]));
  if (!ep.ok()) return 10;
  io::EventLoop loop;
  io::ConnectionOptions options;
  options.endpoint = *ep;
  auto call = [](io::Connection& conn, std::string wire, size_t commands) {
    return io::Call(conn, std::move(wire), commands,
                    Deadline::After(absl::Seconds(5)));
  };
  auto ping = [&call](io::Connection& conn) {
    std::string wire;
    io::AppendCommand({"PING"}, &wire);
    return call(conn, std::move(wire), 1);
  };
  // The first connection takes the server's only slot.
  absl::StatusOr<std::shared_ptr<io::Connection>> first =
      io::Connection::Create(&loop, options);
  if (!first.ok() || !ping(**first).status.ok()) return 11;
  // Each later connection is accepted, told "max number of clients reached"
  // and closed by the server: its connect fails with Unavailable, and
  // nothing is ever written to it again.
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<std::shared_ptr<io::Connection>> c =
        io::Connection::Create(&loop, options);
    if (!c.ok()) return 12;
    io::Result r = ping(**c);
    if (r.status.code() != absl::StatusCode::kUnavailable) return 13;
    (*c)->Close();
  }
  // Writes to a socket the peer closed and reset: a QUIT in the middle of a
  // pipeline makes Redis close the connection while the rest is in flight;
  // the writes that follow meet EPIPE/ECONNRESET, never SIGPIPE.
  for (int round = 0; round < 5; ++round) {
    std::string wire;
    io::AppendCommand({"QUIT"}, &wire);
    for (int i = 0; i < 200; ++i) io::AppendCommand({"PING"}, &wire);
    (void)call(**first, std::move(wire), 201);
    for (int i = 0; i < 3; ++i) (void)ping(**first);
  }
  if (!ping(**first).status.ok()) return 17;  // reconnected afterwards
  (*first)->Close();
  std::cout << "alive" << std::endl;
  return 0;
}

TEST(HardeningTest, SigpipeNeverKillsTheHostProcess) {
  RedisServerOptions options;
  options.extra_args = {"--maxclients", "1"};
  std::unique_ptr<RedisServer> server = MustStart(options);
  ASSERT_NE(server, nullptr);
  absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Spawn(
      "WriteToConnectionsTheServerClosed", {absl::StrCat(server->port())});
  ASSERT_OK(child);
  absl::StatusOr<int> code = (*child)->Wait(absl::Seconds(30));
  ASSERT_OK(code);
  EXPECT_EQ(*code, 0) << "128 + " << SIGPIPE << " = killed by SIGPIPE";
}

TEST(HardeningTest, MaxClientsIsUnavailableAndTheConnectionIsDropped) {
  EXPECT_EQ(
      redis::ErrorReplyToStatus("PING", "ERR max number of clients reached")
          .code(),
      absl::StatusCode::kUnavailable);
  EXPECT_TRUE(redis::IsConnectionClosingError("DENIED Redis is running in"));
  EXPECT_FALSE(redis::IsConnectionClosingError("ERR unknown command"));
}

// --- 2. Spurious Unavailable after a restart, CLIENT KILL or idle timeout ---

class StaleConnectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = MustStart();
    ASSERT_NE(server_, nullptr);
    // Several command connections, so that every one of them goes stale.
    client_ = MustConnect(server_->url(),
                          [](ClientOptions& o) { o.command_connections = 4; });
    ASSERT_NE(client_, nullptr);
  }
  // Opens every command connection: calls go to them round robin, and they
  // stay open afterwards.
  void OpenSeveralConnections() {
    for (int round = 0; round < 50 && NormalClients() < 5; ++round) {
      std::vector<std::thread> threads;
      for (int t = 0; t < 8; ++t) {
        threads.emplace_back([this] {
          for (int i = 0; i < 20; ++i) EXPECT_OK(client_->Ping());
        });
      }
      for (std::thread& t : threads) t.join();
    }
    // Our command connections (the fixture's own query counts as one).
    ASSERT_GE(NormalClients(), 4);
  }
  int NormalClients() {
    absl::StatusOr<testing::RedisValue> list =
        server_->Command({"CLIENT", "LIST", "TYPE", "normal"});
    if (!list.ok()) return 0;
    int lines = 0;
    for (char c : list->str) lines += c == '\n';
    return lines;
  }
  // Every call works at once although every pooled connection is dead.
  void ExpectCallsWork() {
    Lock lock = client_->GetLock(TestLockName());
    Stopwatch watch;
    absl::Status s = lock.TryAcquire(absl::Seconds(1));
    EXPECT_OK(s);
    ASSERT_OK(s);
    EXPECT_OK(lock.Acquire());  // re-entry
    EXPECT_OK(lock.Release());
    EXPECT_OK(lock.Release());
    EXPECT_EQ(*lock.IsLocked(), false);
    EXPECT_OK(client_->Ping());
  }
  std::unique_ptr<RedisServer> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(StaleConnectionTest, NoSpuriousUnavailableAfterClientKill) {
  OpenSeveralConnections();
  ASSERT_GE(Integer(*server_, {"CLIENT", "KILL", "TYPE", "normal"}), 4);
  ExpectCallsWork();
}

TEST_F(StaleConnectionTest, NoSpuriousUnavailableAfterARestart) {
  OpenSeveralConnections();
  ASSERT_OK(server_->Restart());
  ExpectCallsWork();
}

TEST_F(StaleConnectionTest, NoSpuriousUnavailableAfterAnIdleTimeout) {
  OpenSeveralConnections();
  ASSERT_OK(server_->Command({"CONFIG", "SET", "timeout", "1"}));
  // Redis closes idle clients in its cron, some seconds after `timeout`. Left
  // are this query's connection and the pub/sub one (type normal while
  // subscribed to nothing), which its PINGs keep busy.
  ASSERT_TRUE(testing::Eventually([&] { return NormalClients() <= 2; }))
      << "the server did not close idle clients";
  ExpectCallsWork();
}

// --- 3. Re-entry with an explicit lease inside a watchdog hold --------------

constexpr absl::Duration kShortWatchdog = absl::Milliseconds(600);

class ShortLeaseTest : public testing::RedisClientTest {
 protected:
  void SetUp() override {
    testing::RedisTest::SetUp();
    client_ = MustConnect(redis().url(), [this](ClientOptions& o) {
      o.on_lock_event = events_.Callback();
      o.lock_watchdog_timeout = kShortWatchdog;
    });
    ASSERT_NE(client_, nullptr);
    other_ = MustConnect(redis().url());
    ASSERT_NE(other_, nullptr);
  }
  std::unique_ptr<Client> other_;
};

TEST_F(ShortLeaseTest, ReentryWithAnExplicitLeaseDoesNotCutAWatchdogHoldShort) {
  Lock lock = client_->GetLock(TestLockName());
  lock.lock();
  ASSERT_OK(lock.Acquire(absl::Milliseconds(200)));
  ASSERT_OK(lock.Release());
  // Time passes on purpose: several leases, renewed throughout.
  absl::SleepFor(kShortWatchdog * 3);
  EXPECT_EQ(
      other_->GetLock(lock.name()).TryAcquire(absl::ZeroDuration()).code(),
      absl::StatusCode::kDeadlineExceeded)
      << "the outer hold expired: the re-entry cut it short";
  EXPECT_EQ(*lock.HoldCount(), 1);
  absl::StatusOr<std::chrono::steady_clock::time_point> safe = lock.SafeUntil();
  ASSERT_OK(safe);
  EXPECT_GT(*safe, std::chrono::steady_clock::now());
  EXPECT_OK(lock.Release());
  EXPECT_TRUE(events_.events().empty());
}

TEST_F(ShortLeaseTest, ReentryNeverShortensAnExplicitLease) {
  Lock lock = client_->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire(absl::Seconds(20)));
  ASSERT_OK(lock.Acquire(absl::Milliseconds(100)));
  EXPECT_GT(*lock.RemainingLease(), absl::Seconds(15));
  // Time passes on purpose: past the 100 ms lease the re-entry asked for.
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_OK(lock.SafeUntil());
  EXPECT_OK(lock.Release());
  EXPECT_OK(lock.Release());
}

TEST_F(ShortLeaseTest, SafeUntilNeverReturnsAPastTimeAsOk) {
  Lock lock = client_->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire(absl::Milliseconds(100)));
  // Time passes on purpose: the lease ends on this process's clock.
  absl::SleepFor(absl::Milliseconds(400));
  absl::StatusOr<std::chrono::steady_clock::time_point> safe = lock.SafeUntil();
  EXPECT_EQ(safe.status().code(), absl::StatusCode::kAborted)
      << (safe.ok() ? "a time in the past" : safe.status().ToString());
  EXPECT_EQ(lock.Release().code(), absl::StatusCode::kAborted);
}

// --- 4. A thread that exits while holding a lock -----------------------------

TEST_F(ShortLeaseTest, ThreadExitWhileHoldingStopsRenewalAndIsReported) {
  Lock lock = client_->GetLock(TestLockName());
  std::thread holder([&] { EXPECT_OK(lock.Acquire()); });
  holder.join();
  LockEvent event;
  ASSERT_TRUE(events_.WaitFor(LockEventType::kOwnerThreadExited,
                              absl::Seconds(10), &event));
  EXPECT_EQ(event.lock_name, lock.name());
  EXPECT_EQ(event.status.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(event.status.message()), HasSubstr("exited"));
  // No longer renewed: another owner gets it within about one lease.
  Stopwatch watch;
  Lock theirs = other_->GetLock(lock.name());
  ASSERT_OK(theirs.TryAcquire(absl::Seconds(20)));
  EXPECT_LT(watch.Elapsed(), kShortWatchdog + kSlack);
  EXPECT_OK(theirs.Release());
  EXPECT_EQ(internal::ClientAccess::Core(*client_).holds().size(), 0u);
}

// --- 5. Destroying the client inside its own on_lock_event callback --------

TEST(HardeningTest, DestroyingTheClientInsideItsEventCallbackIsSafe) {
  testing::RedisServer& redis = testing::SharedRedisServer();
  std::unique_ptr<Client> client;
  testing::Notification destroyed;
  std::atomic<int> lost{0};
  client = MustConnect(redis.url(), [&](ClientOptions& o) {
    o.lock_watchdog_timeout = absl::Milliseconds(300);
    o.on_lock_event = [&](const LockEvent& e) {
      if (e.type != LockEventType::kLockLost) return;
      if (lost.fetch_add(1) == 0) {
        client.reset();  // "lock lost: shut down"
        destroyed.Notify();
      }
    };
  });
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  {
    // No handle may outlive this scope: the callback must destroy the last
    // reference to the client's core, on the event thread itself (before
    // the fix: std::terminate from joining itself).
    Lock lock = client->GetLock(name);
    ASSERT_OK(lock.Acquire());
  }
  ASSERT_OK(redis.Command({"DEL", name}));
  ASSERT_TRUE(destroyed.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(client, nullptr);
}

// --- 6. Close while Redis is paused
// --------------------------------------------

TEST(HardeningTest, CloseWhileRedisIsPausedIsBoundedAsAWhole) {
  std::unique_ptr<RedisServer> server = MustStart();
  ASSERT_NE(server, nullptr);
  EventLog events;
  constexpr absl::Duration kTimeout = absl::Milliseconds(500);
  std::unique_ptr<Client> client =
      MustConnect(server->url(), [&](ClientOptions& o) {
        o.command_timeout = kTimeout;
        o.connect_timeout = kTimeout;
        o.on_lock_event = events.Callback();
      });
  ASSERT_NE(client, nullptr);
  constexpr int kLocks = 20;  // one timeout each would take 10 s
  for (int i = 0; i < kLocks; ++i) {
    ASSERT_OK(client->GetLock(TestLockName(absl::StrCat(i))).Acquire());
  }
  ASSERT_OK(server->Pause());
  Stopwatch watch;
  client->Close();
  const absl::Duration took = watch.Elapsed();
  ASSERT_OK(server->Resume());
  // A watchdog round in flight, one pipelined release round, the pub/sub
  // thread's reconnect: each bounded by the timeouts.
  EXPECT_LT(took, 4 * kTimeout + kSlack);
  int reported = 0;
  for (const LockEvent& e : events.events()) {
    if (e.type != LockEventType::kReleasedOnClose) continue;
    ++reported;
    EXPECT_FALSE(e.status.ok()) << "Redis was paused";
  }
  EXPECT_EQ(reported, kLocks);
}

// --- 7. Expired explicit-lease holds
// ------------------------------------------

TEST(HardeningTest, ExpiredExplicitLeaseHoldsAreDroppedFromTheRegistry) {
  FakeClock clock;
  timer::TimerThread timers(&clock);
  constexpr absl::Duration kRetention = absl::Seconds(60);
  watchdog::HoldRegistry holds(&timers, kRetention);
  constexpr int kHolds = 20000;
  const auto start = clock.Now();
  for (int i = 0; i < kHolds; ++i) {
    holds.OnAcquired(absl::StrCat("lock-", i), 1, "owner:1",
                     /*watchdog=*/false, absl::Seconds(1), start);
  }
  holds.OnAcquired("renewed", 1, "owner:1", /*watchdog=*/true, absl::Seconds(1),
                   start);
  ASSERT_EQ(holds.size(), kHolds + 1u);
  auto wait_for = [&](auto done) {
    return testing::Eventually([&] {
      timers.Poke();
      return done();
    });
  };
  clock.Advance(absl::Milliseconds(1001));
  EXPECT_TRUE(wait_for([&] {
    absl::optional<watchdog::Hold> h = holds.Find("lock-0", 1);
    absl::optional<watchdog::Hold> last =
        holds.Find(absl::StrCat("lock-", kHolds - 1), 1);
    return h.has_value() && h->expired() && last.has_value() && last->expired();
  }));
  clock.Advance(kRetention);
  EXPECT_TRUE(wait_for([&] { return holds.size() == 1; }))
      << holds.size() << " holds left";
  // Close() releases only what is held: never the expired ones.
  std::vector<std::pair<watchdog::HoldRegistry::Key, watchdog::Hold>> all =
      holds.TakeAll();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].first.first, "renewed");
  timers.Shutdown();
}

TEST_F(ShortLeaseTest, ExpiredExplicitLeaseHoldsAreNotReportedOnClose) {
  std::vector<Lock> locks;
  for (int i = 0; i < 200; ++i) {
    locks.push_back(client_->GetLock(TestLockName(absl::StrCat(i))));
    ASSERT_OK(locks.back().Acquire(absl::Milliseconds(100)));
  }
  Lock kept = client_->GetLock(TestLockName("kept"));
  ASSERT_OK(kept.Acquire(absl::Seconds(30)));
  // Time passes on purpose: the 100 ms leases end on this process's clock.
  absl::SleepFor(absl::Milliseconds(600));
  // Within the retention, the holder is told its lease ran out.
  absl::Status s = locks[0].Release();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("explicit lease ran out"));
  client_->Close();
  std::vector<LockEvent> closed = events_.events();
  ASSERT_EQ(closed.size(), 1u) << "only the live hold is released on close";
  EXPECT_EQ(closed[0].type, LockEventType::kReleasedOnClose);
  EXPECT_EQ(closed[0].lock_name, kept.name());
  EXPECT_OK(closed[0].status);
}

// --- 8. Values that are not locks
// ---------------------------------------------

class NotALockTest : public testing::RedisClientTest {};

TEST_F(NotALockTest, ForceReleaseDeletesOnlyLocks) {
  const std::string name = TestLockName();
  Lock lock = client_->GetLock(name);
  const std::vector<std::vector<std::string>> values = {
      {"SET", name, "user data"},
      {"RPUSH", name, "a", "b"},
      {"HSET", name, "field", "value"},
      {"HSET", name, "owner:1", "not a count"},
  };
  for (const std::vector<std::string>& set : values) {
    ASSERT_OK(redis().Command({"DEL", name}));
    ASSERT_OK(redis().Command(set));
    absl::StatusOr<bool> forced = lock.ForceRelease();
    EXPECT_EQ(forced.status().code(), absl::StatusCode::kFailedPrecondition)
        << set[0] << " " << forced.status();
    EXPECT_EQ(Integer(redis(), {"EXISTS", name}), 1) << "user data deleted";
    EXPECT_EQ(lock.IsLocked().status().code(),
              absl::StatusCode::kFailedPrecondition)
        << set[0];
    EXPECT_EQ(lock.RemainingLease().status().code(),
              absl::StatusCode::kFailedPrecondition)
        << set[0];
    EXPECT_EQ(lock.HoldCount().status().code(),
              absl::StatusCode::kFailedPrecondition)
        << set[0];
  }
  // A real lock (another owner's) is still force-released.
  ASSERT_OK(redis().Command({"DEL", name}));
  std::thread other([&] { EXPECT_OK(lock.Acquire()); });
  other.join();
  EXPECT_EQ(*lock.ForceRelease(), true);
}

TEST_F(NotALockTest, PlainHashWithoutTtlDoesNotBlockLockForever) {
  const std::string name = TestLockName();
  ASSERT_OK(redis().Command({"HSET", name, "field", "value"}));
  Lock lock = client_->GetLock(name);
  Stopwatch watch;
  try {
    lock.lock();
    ADD_FAILURE() << "lock() on a plain hash succeeded";
  } catch (const LockError& e) {
    EXPECT_EQ(e.status().code(), absl::StatusCode::kFailedPrecondition)
        << e.status();
  }
  EXPECT_LT(watch.Elapsed(), kSlack);
}

TEST_F(NotALockTest, LockWithoutTtlIsRecheckedNotAwaitedForever) {
  const std::string name = TestLockName();
  // A lock-shaped hash without a TTL, set by hand.
  ASSERT_OK(redis().Command({"HSET", name, std::string(kForeignOwner), "1"}));
  Lock lock = client_->GetLock(name);
  EXPECT_EQ(lock.TryAcquire(absl::Milliseconds(300)).code(),
            absl::StatusCode::kDeadlineExceeded);
  absl::Status got;
  std::thread waiter([&] {
    got = lock.Acquire();
    if (got.ok()) {
      EXPECT_OK(lock.Release());
    }
  });
  EXPECT_OK(
      testing::WaitUntilWaiting(redis(), testing::LockChannel(name), *client_));
  Stopwatch watch;
  ASSERT_OK(redis().Command({"DEL", name}));  // no unlock message
  waiter.join();
  EXPECT_OK(got);
  EXPECT_LT(watch.Elapsed(), absl::Seconds(1) + kSlack);
}

// --- 9. ACL users without channel or publish rights -------------------------

TEST(HardeningTest, AclUserWithoutChannelRightsGetsPermissionDenied) {
  std::unique_ptr<RedisServer> server = MustStart();
  ASSERT_NE(server, nullptr);
  // Redis 7's default for a new user: no channels (acl-pubsub-default).
  absl::StatusOr<testing::RedisValue> created =
      server->Command({"ACL", "SETUSER", "locker", "on", ">secret", "~*",
                       "+@all", "resetchannels"});
  ASSERT_TRUE(created.ok() && created->is_ok()) << created->DebugString();
  std::unique_ptr<Client> holder = MustConnect(server->url());
  std::unique_ptr<Client> locker = MustConnect(
      absl::StrCat("redis://locker:secret@127.0.0.1:", server->port()));
  ASSERT_NE(holder, nullptr);
  ASSERT_NE(locker, nullptr);
  const std::string name = TestLockName();
  Lock held = holder->GetLock(name);
  ASSERT_OK(held.Acquire());

  // Waiting needs SUBSCRIBE on the lock's channel: refused at once, named.
  Lock lock = locker->GetLock(name);
  Stopwatch watch;
  absl::Status s = lock.TryAcquire(absl::Seconds(3));
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("redisson_lock__channel"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("NOPERM"));
  EXPECT_LT(watch.Elapsed(), kSlack);
  s = lock.Acquire();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  ASSERT_OK(held.Release());

  // Releasing needs PUBLISH: the lock is freed, and the status says that
  // its waiters were not told.
  ASSERT_OK(lock.Acquire());
  s = lock.Release();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("was released"));
  EXPECT_EQ(Integer(*server, {"EXISTS", name}), 0);
  EXPECT_EQ(lock.Release().code(), absl::StatusCode::kFailedPrecondition)
      << "the hold must be gone";
}

// --- 10. fork() in a process holding locks ----------------------------------

TEST_F(ShortLeaseTest, ForkedChildIsNotAnOwnerAndItsExitKeepsTheParentsLocks) {
  Lock lock = client_->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire());
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child: every call fails cleanly, and destroying the client (as
    // exit() would for a global) touches neither Redis nor threads.
    int code = 0;
    if (lock.Release().code() != absl::StatusCode::kFailedPrecondition) {
      code |= 1;
    }
    if (lock.IsLocked().status().code() !=
        absl::StatusCode::kFailedPrecondition) {
      code |= 2;
    }
    if (lock.TryAcquire(absl::ZeroDuration()).code() !=
        absl::StatusCode::kFailedPrecondition) {
      code |= 4;
    }
    client_.reset();
    other_.reset();
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child crashed: " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // The parent still holds it, renewed (time passes on purpose: two leases),
  // and releases it normally.
  absl::SleepFor(kShortWatchdog * 2);
  EXPECT_EQ(*lock.HoldCount(), 1);
  EXPECT_EQ(
      other_->GetLock(lock.name()).TryAcquire(absl::ZeroDuration()).code(),
      absl::StatusCode::kDeadlineExceeded);
  EXPECT_OK(lock.Release());
  EXPECT_TRUE(events_.events().empty());
}

// --- 11. std chrono conversions
// ------------------------------------------------

TEST_F(ShortLeaseTest, TryLockUntilExtremeTimePointsDoesNotWaitForever) {
  Lock mine = client_->GetLock(TestLockName());
  ASSERT_OK(mine.Acquire());
  Lock theirs = other_->GetLock(mine.name());
  Stopwatch watch;
  EXPECT_FALSE(
      theirs.try_lock_until(std::chrono::steady_clock::time_point::min()));
  EXPECT_FALSE(
      theirs.try_lock_until(std::chrono::system_clock::time_point::min()));
  EXPECT_FALSE(theirs.try_lock_for(std::chrono::nanoseconds::min()));
  EXPECT_FALSE(theirs.try_lock_for(std::chrono::hours::min()));
  EXPECT_FALSE(theirs.try_lock_for(
      std::chrono::duration<double>(std::numeric_limits<double>::quiet_NaN())));
  EXPECT_LT(watch.Elapsed(), kSlack);
  ASSERT_OK(mine.Release());
  EXPECT_TRUE(
      theirs.try_lock_until(std::chrono::steady_clock::time_point::max()));
  theirs.unlock();
  EXPECT_TRUE(
      theirs.try_lock_until(std::chrono::system_clock::time_point::max()));
  theirs.unlock();
}

// --- Issue 23: scripts and data ---------------------------------------------
// Regression tests for items 9-13 of issue 23 ("Scripts and data"), each
// named after the failure it pins.

// A client of `server` for the user `user` (password "secret"), without an
// info record (whose writes the tests' settings would refuse).
std::unique_ptr<Client> ConnectAs(RedisServer& server, const std::string& user,
                                  EventLog* events = nullptr) {
  return MustConnect(
      absl::StrCat("redis://", user.empty() ? "" : user + ":secret@",
                   "127.0.0.1:", server.port()),
      [&](ClientOptions& o) {
        o.publish_client_info = false;
        if (events != nullptr) o.on_lock_event = events->Callback();
      });
}

// What an acquire of each lock type left at `server`: the keys but the
// clients' records.
std::string KeysLeft(RedisServer& server) {
  std::vector<std::string> keys = testing::KeysButClientRecords(server);
  std::sort(keys.begin(), keys.end());
  return absl::StrJoin(keys, ", ");
}

// Item 9: with PEXPIRE refused (an ACL, or renamed away), the acquire
// scripts wrote the owner field and then failed on the lease: the lock stayed
// held with no TTL, and every other client waited for it forever.
void ExpectFailedAcquiresLeaveNothing(RedisServer& server, Client& client,
                                      absl::StatusCode code) {
  const std::string name = TestLockName();
  Lock plain = client.GetLock(name + ":plain");
  FairLock fair = client.GetFairLock(name + ":fair");
  ReadWriteLock rw = client.GetReadWriteLock(name + ":rw");
  ReadWriteLock rw2 = client.GetReadWriteLock(name + ":rw2");
  std::vector<std::pair<std::string, Lock*>> locks = {
      {"plain", &plain},
      {"fair", &fair},
      {"read", &rw.ReadLock()},
      {"write", &rw2.WriteLock()}};
  for (auto& [type, lock] : locks) {
    absl::Status s = lock->TryAcquire(absl::Seconds(1));
    EXPECT_EQ(s.code(), code) << type << ": " << s;
    EXPECT_EQ(KeysLeft(server), "")
        << type << ": the failed acquire left these";
    // Nothing to wait for, and nothing to clean up: the next one fails alike.
    s = lock->TryAcquire(absl::Seconds(1));
    EXPECT_EQ(s.code(), code) << type << ": " << s;
  }
  EXPECT_EQ(KeysLeft(server), "");
}

TEST(Issue23Test, AcquireWhosePexpireAnAclRefusesLeavesNoLockWithoutLease) {
  std::unique_ptr<RedisServer> server = MustStart();
  ASSERT_NE(server, nullptr);
  absl::StatusOr<testing::RedisValue> created =
      server->Command({"ACL", "SETUSER", "locker", "on", ">secret", "~*", "&*",
                       "+@all", "-pexpire"});
  ASSERT_TRUE(created.ok() && created->is_ok()) << created->DebugString();
  std::unique_ptr<Client> client = ConnectAs(*server, "locker");
  ASSERT_NE(client, nullptr);
  ExpectFailedAcquiresLeaveNothing(*server, *client,
                                   absl::StatusCode::kPermissionDenied);
}

TEST(Issue23Test, AcquireWhosePexpireIsRenamedAwayLeavesNoLockWithoutLease) {
  RedisServerOptions options;
  options.extra_args = {"--rename-command", "PEXPIRE", "\"\""};
  std::unique_ptr<RedisServer> server = MustStart(options);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<Client> client = ConnectAs(*server, "");
  ASSERT_NE(client, nullptr);
  ExpectFailedAcquiresLeaveNothing(*server, *client,
                                   absl::StatusCode::kInternal);
}

// Item 10: a hash that is not a lock but has a TTL answered the acquire as
// "held by another owner", so TryAcquire waited out its whole wait (and
// try_lock() said false); the same hash without a TTL was FailedPrecondition.
TEST_F(NotALockTest, HashWithTtlIsNotALockHeldByAnotherOwner) {
  const std::string name = TestLockName();
  ASSERT_OK(redis().Command({"HSET", name, "field", "value"}));
  ASSERT_OK(redis().Command({"PEXPIRE", name, "600000"}));
  Lock plain = client_->GetLock(name);
  FairLock fair = client_->GetFairLock(name);
  ReadWriteLock rw = client_->GetReadWriteLock(name);
  Stopwatch watch;
  for (Lock* lock :
       {&plain, static_cast<Lock*>(&fair), &rw.ReadLock(), &rw.WriteLock()}) {
    for (absl::Duration wait : {absl::ZeroDuration(), absl::Seconds(10)}) {
      absl::Status s = lock->TryAcquire(wait);
      EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
      EXPECT_THAT(std::string(s.message()), HasSubstr("NOTALOCK"));
    }
  }
  EXPECT_LT(watch.Elapsed(), 4 * kSlack) << "an acquire waited";
  EXPECT_EQ(Integer(redis(), {"HLEN", name}), 1) << "the hash was written";
  EXPECT_EQ(KeysLeft(redis()), name) << "a fair queue was left";
}

// Item 11: at maxmemory (noeviction), Redis refuses a script whose first
// write may grow memory; the release scripts began with HINCRBY, so
// Release() failed with ResourceExhausted and locks stayed held until their
// leases ended, while a fair acquire (whose first write was a queue
// removal) succeeded where a plain one failed.
TEST(Issue23Test, ReleaseAtMaxmemoryIsNotRefused) {
  std::unique_ptr<RedisServer> server = MustStart();
  ASSERT_NE(server, nullptr);
  EventLog events;
  std::unique_ptr<Client> client = ConnectAs(*server, "", &events);
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  Lock plain = client->GetLock(name + ":plain");
  FairLock fair = client->GetFairLock(name + ":fair");
  ReadWriteLock rw = client->GetReadWriteLock(name + ":rw");
  ReadWriteLock rw2 = client->GetReadWriteLock(name + ":rw2");
  const std::vector<Lock*> locks = {&plain, &fair, &rw.ReadLock(),
                                    &rw2.WriteLock()};
  // Three holds each in Redis (an explicit lease's re-entries go to Redis;
  // a release that leaves holds keeps its TTL).
  for (Lock* lock : locks) {
    for (int i = 0; i < 3; ++i) {
      ASSERT_OK(lock->Acquire(absl::Seconds(60))) << lock->name();
    }
  }
  ASSERT_OK(
      server->Command({"CONFIG", "SET", "maxmemory-policy", "noeviction"}));
  ASSERT_OK(server->Command({"CONFIG", "SET", "maxmemory", "1"}));

  // A new lock is refused, by every type alike: it would take memory.
  Lock other = client->GetLock(name + ":new");
  FairLock other_fair = client->GetFairLock(name + ":new-fair");
  ReadWriteLock other_rw = client->GetReadWriteLock(name + ":new-rw");
  for (Lock* lock : {&other, static_cast<Lock*>(&other_fair),
                     &other_rw.ReadLock(), &other_rw.WriteLock()}) {
    absl::Status s = lock->TryAcquire(absl::ZeroDuration());
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted)
        << lock->name() << ": " << s;
  }
  // Every release goes through: the counts go down, then the locks free.
  for (Lock* lock : locks) {
    for (int64_t left = 2; left >= 0; --left) {
      absl::Status s = lock->Release();
      EXPECT_OK(s) << lock->name() << ": " << s;
      absl::StatusOr<int64_t> count = lock->HoldCount();
      ASSERT_OK(count);
      EXPECT_EQ(*count, left) << lock->name();
    }
  }
  EXPECT_EQ(KeysLeft(*server), "") << "locks left held";
  ASSERT_OK(server->Command({"CONFIG", "SET", "maxmemory", "0"}));
  ASSERT_OK(other.Acquire());
  ASSERT_OK(other.Release());
  EXPECT_TRUE(events.events().empty());
}

// Item 12: a user's hash whose fields merely looked like "<x>:<n>" with
// numeric values counted as a lock: ForceRelease() (and `relock unlock
// --force`) deleted it, and the queries reported it held.
TEST_F(NotALockTest, UserHashWithColonNumberFieldsIsNotALock) {
  const std::string name = TestLockName();
  ASSERT_OK(redis().Command({"HSET", name, "x:1", "1", "job:42", "3"}));
  Lock lock = client_->GetLock(name);
  absl::StatusOr<bool> forced = lock.ForceRelease();
  EXPECT_EQ(forced.status().code(), absl::StatusCode::kFailedPrecondition)
      << forced.status();
  EXPECT_EQ(Integer(redis(), {"HLEN", name}), 2) << "the user's hash is gone";
  EXPECT_EQ(lock.IsLocked().status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(client_->GetFairLock(name).ForceRelease().status().code(),
            absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<LockInfo> info = client_->InspectLock(name);
  EXPECT_FALSE(info.ok() && info->shape != LockShape::kFree &&
               !info->holders.empty())
      << "reported as a held lock";
  EXPECT_EQ(Integer(redis(), {"HLEN", name}), 2);
  // A lock of a client with a UUID id (relock's and Redisson's) still is.
  ASSERT_OK(redis().Command({"DEL", name}));
  ASSERT_OK(redis().Command({"HSET", name, std::string(kForeignOwner), "1"}));
  EXPECT_EQ(*lock.IsLocked(), true);
  EXPECT_EQ(*lock.ForceRelease(), true);
}

TEST_F(NotALockTest, ClientIdThatIsNotAUuidIsRefusedAtConnect) {
  // Its owner fields would not count as locks: its own locks would look
  // like user data to ForceRelease() and to every waiter.
  ClientOptions options;
  options.url = redis().url();
  options.client_id = "billing-7";
  EXPECT_EQ(testing::ConnectError(options).code(),
            absl::StatusCode::kInvalidArgument);
  options.client_id = "0B1111ED-0000-4000-8000-000000000007";
  std::unique_ptr<Client> client =
      MustConnect(redis().url(),
                  [&](ClientOptions& o) { o.client_id = options.client_id; });
  ASSERT_NE(client, nullptr);
  Lock lock = client->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire());
  EXPECT_EQ(*client_->GetLock(lock.name()).IsLocked(), true);
  ASSERT_OK(lock.Release());
}

// Item 13: a plain lock of a fair lock's name took the lock past the fair
// lock's queue and its release woke none of the fair waiters (one got the
// lock 29.5 s late); a plain waiter behind a fair holder was not woken
// either. A plain acquire while the fair lock has waiters is refused.
TEST_F(NotALockTest, PlainLockOfAFairLockWithWaitersIsRefused) {
  std::unique_ptr<Client> other = MustConnect(redis().url());
  ASSERT_NE(other, nullptr);
  const std::string name = TestLockName();
  FairLock fair = client_->GetFairLock(name);
  ASSERT_OK(fair.Acquire());
  absl::Status waited;
  testing::JoiningThread waiter([&] {
    waited = other->GetFairLock(name).TryAcquire(absl::Seconds(60));
    if (waited.ok()) waited = other->GetFairLock(name).Release();
  });
  ASSERT_TRUE(testing::Eventually([&] {
    return Integer(redis(), {"LLEN", lock::FairQueueKey(name)}) == 1;
  }));
  Lock plain = other->GetLock(name);
  Stopwatch watch;
  absl::Status s = plain.TryAcquire(absl::Seconds(10));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("fair lock"));
  EXPECT_LT(watch.Elapsed(), kSlack);
  // The fair waiter is woken by the release, not by its re-check.
  watch = Stopwatch();
  ASSERT_OK(fair.Release());
  waiter.join();
  EXPECT_OK(waited);
  EXPECT_LT(watch.Elapsed(), kSlack);
  // With nobody queued, the name is free for either type again.
  ASSERT_OK(plain.Acquire());
  ASSERT_OK(plain.Release());
}

// The same for the read-write lock, on a free name whose fair lock has a
// waiter in time (the fair holder's lease just ran out): a read or write
// acquire took the name past the queue, and the queued fair waiter then
// failed with NOTALOCK. (The queue entry is written directly: the fair
// waiter's client is not needed to show the refusal.)
TEST_F(NotALockTest, ReadWriteLockOfAFreeFairLockWithWaitersIsRefused) {
  const std::string name = TestLockName();
  const std::string queue = lock::FairQueueKey(name);
  const std::string timeouts = lock::FairTimeoutKey(name);
  const std::string waiter = "00000000-0000-4000-8000-00000000f00d:1";
  absl::StatusOr<testing::RedisValue> now = redis().Command({"TIME"});
  ASSERT_OK(now);
  const int64_t now_ms = std::stoll(now->elements[0].str) * 1000;
  ASSERT_OK(redis().Command({"RPUSH", queue, waiter}));
  ASSERT_OK(redis().Command(
      {"ZADD", timeouts, absl::StrCat(now_ms + 600000), waiter}));
  ReadWriteLock rw = client_->GetReadWriteLock(name);
  for (Lock side : {rw.ReadLock(), rw.WriteLock()}) {
    const absl::Status s = side.TryAcquire(absl::ZeroDuration());
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("fair lock"));
    EXPECT_EQ(Integer(redis(), {"EXISTS", name}), 0);
  }
  // A waiter whose time is up no longer claims the name.
  ASSERT_OK(
      redis().Command({"ZADD", timeouts, absl::StrCat(now_ms - 1000), waiter}));
  ASSERT_OK(rw.WriteLock().TryAcquire(absl::ZeroDuration()));
  ASSERT_OK(rw.WriteLock().Release());
  ASSERT_OK(redis().Command({"DEL", queue, timeouts}));
}

// Item 13, the other way round: a FairLock that finds the name held by a
// plain lock cannot tell it from a fair holder (the hash is the same) and
// queues; the plain release published on the plain channel only, so the
// fair waiter slept until its re-check (29.5 s late). relock's plain release
// wakes the fair queue's head waiter too.
TEST_F(NotALockTest, FairWaiterBehindAPlainHolderIsWokenByItsRelease) {
  std::unique_ptr<Client> other = MustConnect(redis().url());
  ASSERT_NE(other, nullptr);
  const std::string name = TestLockName();
  Lock plain = client_->GetLock(name);
  ASSERT_OK(plain.Acquire());
  absl::Status waited;
  testing::JoiningThread waiter([&] {
    FairLock fair = other->GetFairLock(name);
    waited = fair.TryAcquire(absl::Seconds(60));
    if (waited.ok()) waited = fair.Release();
  });
  ASSERT_TRUE(testing::Eventually([&] {
    return Integer(redis(), {"LLEN", lock::FairQueueKey(name)}) == 1;
  }));
  Stopwatch watch;
  ASSERT_OK(plain.Release());
  waiter.join();
  EXPECT_OK(waited);
  EXPECT_LT(watch.Elapsed(), kSlack) << "the fair waiter was not woken";
}

// Item 13: a plain lock and a read-write lock of one name, held by different
// owners: the waiter of one type waited on its own channel for a release
// published on the other's (and, with a lease, until that lease ended).
TEST_F(NotALockTest, PlainAndReadWriteLockOfOneNameAreRefusedToOtherOwners) {
  std::unique_ptr<Client> other = MustConnect(redis().url());
  ASSERT_NE(other, nullptr);
  const std::string name = TestLockName();
  Stopwatch watch;
  {
    Lock plain = client_->GetLock(name);
    ASSERT_OK(plain.Acquire());
    ReadWriteLock rw = other->GetReadWriteLock(name);
    for (Lock* lock : {&rw.ReadLock(), &rw.WriteLock()}) {
      absl::Status s = lock->TryAcquire(absl::Seconds(10));
      EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    }
    ASSERT_OK(plain.Release());
  }
  {
    ReadWriteLock rw = client_->GetReadWriteLock(name);
    ASSERT_OK(rw.ReadLock().Acquire());
    for (Lock lock :
         {other->GetLock(name), static_cast<Lock>(other->GetFairLock(name))}) {
      absl::Status s = lock.TryAcquire(absl::Seconds(10));
      EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
      EXPECT_THAT(std::string(s.message()), HasSubstr("read-write lock"));
    }
    ASSERT_OK(rw.ReadLock().Release());
  }
  EXPECT_LT(watch.Elapsed(), 3 * kSlack) << "an acquire waited";
  EXPECT_EQ(KeysLeft(redis()), "");
}

// Item 13: a MultiLock of a read-write lock's read and write locks
// succeeded or failed depending on the order they were added in (write then
// read is a downgrade, read then write an upgrade).
TEST_F(NotALockTest, MultiLockOfReadAndWriteLockIsRefusedInEitherOrder) {
  ReadWriteLock rw = client_->GetReadWriteLock(TestLockName());
  for (MultiLock multi : {MultiLock(rw.ReadLock(), rw.WriteLock()),
                          MultiLock(rw.WriteLock(), rw.ReadLock())}) {
    absl::Status s = multi.TryAcquire(absl::Seconds(1));
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("read-write lock"));
    if (s.ok()) {
      ASSERT_OK(multi.Release());
    }
    const Owner owner = Owner::New();
    s = multi.TryAcquireAsync(owner, absl::Seconds(1)).Get();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    if (s.ok()) {
      ASSERT_OK(multi.ReleaseAsync(owner).Get());
    }
    EXPECT_EQ(KeysLeft(redis()), "") << "a part was taken";
  }
  // A lock and its fair form alike; the same lock twice is a re-entry.
  const std::string name = TestLockName("plain");
  MultiLock mixed(client_->GetLock(name), client_->GetFairLock(name));
  EXPECT_EQ(mixed.TryAcquire(absl::Seconds(1)).code(),
            absl::StatusCode::kFailedPrecondition);
  MultiLock twice(rw.WriteLock(), rw.WriteLock());
  ASSERT_OK(twice.Acquire());
  ASSERT_OK(twice.Release());
}

}  // namespace
}  // namespace relock
