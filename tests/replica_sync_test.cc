// Replica acknowledgement of acquires (ReplicaSync, LockOptions) on a real
// primary with one real replica: the script and WAIT in one round trip, an
// acquire the replica did not acknowledge undone without a trace (fresh, a
// re-entry, asynchronous), per-lock overrides in both directions, Redlock
// per master, and the validation of both option structs.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "relock/redlock.h"
#include "relock/relock.h"
#include "tests/test_util.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace {

using ::relock::testing::Calls;
using ::relock::testing::Eventually;
using ::relock::testing::Info;
using ::relock::testing::InfoField;
using ::relock::testing::MustConnect;
using ::relock::testing::RedisServer;
using ::relock::testing::RedisServerOptions;
using ::relock::testing::RedisValue;
using ::relock::testing::SharedRedisServer;
using ::relock::testing::TestLockName;
using ::testing::AllOf;
using ::testing::HasSubstr;

int64_t Exists(RedisServer& server, const std::string& key) {
  absl::StatusOr<RedisValue> r = server.Command({"EXISTS", key});
  return r.ok() && r->is_integer() ? r->integer : -1;
}

ReplicaSync Sync(int replicas, absl::Duration timeout) {
  ReplicaSync sync;
  sync.replicas = replicas;
  sync.timeout = timeout;
  return sync;
}

LockOptions WithSync(int replicas, absl::Duration timeout) {
  LockOptions options;
  options.replica_sync = Sync(replicas, timeout);
  return options;
}

// Pauses a server (SIGSTOP) for its scope; resumes it however the scope
// ends, so that a failed assertion does not leave the replica stopped for
// the next test.
class Paused {
 public:
  explicit Paused(RedisServer& server) : server_(server) {
    status_ = server_.Pause();
  }
  ~Paused() { Resume(); }
  Paused(const Paused&) = delete;
  Paused& operator=(const Paused&) = delete;
  const absl::Status& status() const { return status_; }
  void Resume() {
    if (status_.ok() && !resumed_) {
      resumed_ = true;
      EXPECT_OK(server_.Resume());
    }
  }

 private:
  RedisServer& server_;
  absl::Status status_;
  bool resumed_ = false;
};

// A primary and one replica of it, shared by the tests of this binary.
class ReplicaSyncTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    RedisServerOptions primary_options;
    // The replica's first sync starts at once (Redis 7 waits 5 s for more
    // replicas to share a diskless transfer by default).
    primary_options.extra_args = {"--repl-diskless-sync-delay", "0"};
    absl::StatusOr<std::unique_ptr<RedisServer>> primary =
        RedisServer::Start(primary_options);
    ASSERT_OK(primary);
    primary_ = primary->release();
    RedisServerOptions replica_options;
    replica_options.extra_args = {"--replicaof", RedisServer::kHost,
                                  absl::StrCat(primary_->port())};
    absl::StatusOr<std::unique_ptr<RedisServer>> replica =
        RedisServer::Start(replica_options);
    ASSERT_OK(replica);
    replica_ = replica->release();
  }
  static void TearDownTestSuite() {
    delete replica_;
    replica_ = nullptr;
    delete primary_;
    primary_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(primary_, nullptr);
    ASSERT_NE(replica_, nullptr);
    ASSERT_OK(primary_->FlushAll());
    // The replica is linked and has caught up with the flush.
    ASSERT_TRUE(Eventually([] {
      absl::StatusOr<RedisValue> size = replica_->Command({"DBSIZE"});
      return InfoField(Info(*replica_, "replication"), "master_link_status") ==
                 "up" &&
             size.ok() && size->is_integer() && size->integer == 0;
    })) << "the replica did not come up: "
        << Info(*replica_, "replication") << replica_->LogTail();
    // ... and acknowledges the primary's writes: a replica just synced may
    // take its first second or more (on a loaded machine) to answer a WAIT,
    // which would fail the first test's acquire.
    absl::StatusOr<RedisValue> acked =
        primary_->Command({"WAIT", "1", "30000"});
    ASSERT_TRUE(acked.ok() && acked->is_integer() && acked->integer == 1)
        << "the replica acknowledges nothing: "
        << Info(*replica_, "replication");
    client_ = Connect(Sync(1, absl::Seconds(1)));
    ASSERT_NE(client_, nullptr);
  }

  // A client of the primary with `sync` as its default.
  static std::unique_ptr<Client> Connect(ReplicaSync sync) {
    return MustConnect(primary_->url(),
                       [&sync](ClientOptions& o) { o.replica_sync = sync; });
  }

  // A client of the primary as user "nowait", who may run everything but
  // WAIT (the test deletes the user again), with 1 replica within 1 s as its
  // default. Null if the user could not be made.
  static std::unique_ptr<Client> ConnectWithoutWait() {
    if (!primary_
             ->Command({"ACL", "SETUSER", "nowait", "on", ">pw", "~*", "&*",
                        "+@all", "-wait"})
             .ok()) {
      return nullptr;
    }
    return MustConnect(
        absl::StrCat("redis://nowait:pw@127.0.0.1:", primary_->port()),
        [](ClientOptions& o) { o.replica_sync = Sync(1, absl::Seconds(1)); });
  }

  static RedisServer& primary() { return *primary_; }
  static RedisServer& replica() { return *replica_; }

  std::unique_ptr<Client> client_;  // replica_sync: 1 replica within 1 s

 private:
  static RedisServer* primary_;
  static RedisServer* replica_;
};

RedisServer* ReplicaSyncTest::primary_ = nullptr;
RedisServer* ReplicaSyncTest::replica_ = nullptr;

TEST_F(ReplicaSyncTest, AcquireWaitsForOneReplicaInOneRoundTrip) {
  Lock lock = client_->GetLock(TestLockName());
  ASSERT_OK(primary().Command({"CONFIG", "RESETSTAT"}));
  ASSERT_OK(lock.Acquire());
  // One acquire script and one WAIT, and nothing else of ours: the two go
  // in one write on one connection (no separate WAIT after the reply).
  EXPECT_EQ(Calls(primary(), "evalsha"), 1);
  EXPECT_EQ(Calls(primary(), "wait"), 1);
  EXPECT_EQ(Calls(primary(), "eval"), 0);
  EXPECT_EQ(Calls(primary(), "script|load"), 0);
  // WAIT counted the replica: it has the owner field with count 1.
  absl::StatusOr<RedisValue> on_primary =
      primary().Command({"HGETALL", lock.name()});
  absl::StatusOr<RedisValue> on_replica =
      replica().Command({"HGETALL", lock.name()});
  ASSERT_OK(on_primary);
  ASSERT_OK(on_replica);
  ASSERT_EQ(on_replica->elements.size(), 2u) << *on_replica;
  EXPECT_THAT(on_replica->elements[0].str,
              ::testing::StartsWith(client_->id()));
  EXPECT_EQ(on_replica->elements[1].str, "1");
  EXPECT_EQ(*on_replica, *on_primary);
  // Releases send no WAIT.
  ASSERT_OK(lock.Release());
  EXPECT_EQ(Calls(primary(), "wait"), 1);
  EXPECT_EQ(Exists(primary(), lock.name()), 0);
}

TEST_F(ReplicaSyncTest, EvalAfterNoScriptIsFollowedByTheWaitToo) {
  Lock lock = client_->GetLock(TestLockName());
  ASSERT_OK(primary().Command({"SCRIPT", "FLUSH"}));
  ASSERT_OK(primary().Command({"CONFIG", "RESETSTAT"}));
  ASSERT_OK(lock.Acquire());
  // EVALSHA + WAIT met NOSCRIPT; EVAL + WAIT, sent again, ran.
  EXPECT_EQ(Calls(primary(), "evalsha"), 1);
  EXPECT_EQ(Calls(primary(), "eval"), 1);
  EXPECT_EQ(Calls(primary(), "wait"), 2);
  EXPECT_EQ(Exists(replica(), lock.name()), 1);
  ASSERT_OK(lock.Release());
}

TEST_F(ReplicaSyncTest, AcquireWhoseWaitIsRefusedFailsAndLeavesNoKey) {
  // A user that may run everything but WAIT: the script runs and takes the
  // lock, WAIT says NOPERM, and the acquire is undone.
  std::unique_ptr<Client> client = ConnectWithoutWait();
  ASSERT_NE(client, nullptr);
  Lock lock = client->GetLock(TestLockName());
  absl::Status s = lock.Acquire();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("WAIT after the call"), HasSubstr("NOPERM")));
  EXPECT_EQ(Exists(primary(), lock.name()), 0);
  EXPECT_FALSE(*lock.IsHeldByCurrentThread());
  client.reset();
  EXPECT_OK(primary().Command({"ACL", "DELUSER", "nowait"}));
}

TEST_F(ReplicaSyncTest, AcquireWithPausedReplicaFailsAndLeavesNoKey) {
  std::unique_ptr<Client> client = Connect(Sync(1, absl::Milliseconds(200)));
  ASSERT_NE(client, nullptr);
  Lock lock = client->GetLock(TestLockName());
  Paused paused(replica());
  ASSERT_OK(paused.status());
  ASSERT_OK(primary().Command({"CONFIG", "RESETSTAT"}));
  // A blocking Acquire() with no deadline: it fails at once, not retried.
  absl::Status s = lock.Acquire();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(
      s.message(),
      AllOf(HasSubstr(absl::StrCat("acquire lock \"", lock.name(), "\"")),
            HasSubstr("only 0 of the 1 required replicas acknowledged "
                      "within 200ms on 127.0.0.1:"),
            HasSubstr("the acquisition is being undone")));
  EXPECT_EQ(Calls(primary(), "wait"), 1);
  EXPECT_EQ(Calls(primary(), "evalsha"), 2);  // the acquire and its undo
  // The undo ran before Acquire() returned.
  EXPECT_EQ(Exists(primary(), lock.name()), 0);
  EXPECT_FALSE(*lock.IsHeldByCurrentThread());
  // Nothing is left to release, nor renewed.
  EXPECT_EQ(lock.Release().code(), absl::StatusCode::kFailedPrecondition);
  paused.Resume();
  EXPECT_EQ(Exists(primary(), lock.name()), 0);
  // Once the replica caught up, it has no key either.
  EXPECT_TRUE(Eventually([&] {
    return Exists(replica(), lock.name()) == 0 &&
           InfoField(Info(replica(), "replication"), "master_link_status") ==
               "up";
  }));
  // Another client takes it at once.
  std::unique_ptr<Client> other = MustConnect(primary().url());
  ASSERT_NE(other, nullptr);
  Lock theirs = other->GetLock(lock.name());
  EXPECT_OK(theirs.TryAcquire(absl::ZeroDuration()));
  EXPECT_OK(theirs.Release());
}

// Review finding: replica_sync was not applied to semaphores. A semaphore's
// acquire waits for the replicas as a lock's does; one they did not
// acknowledge gives its permits back. Its releases, like a lock's, send no
// WAIT.
TEST_F(ReplicaSyncTest, SemaphoreAcquireWaitsForTheReplicasOrGivesPermitsBack) {
  const std::string name = TestLockName();
  Semaphore sem = client_->GetSemaphore(name);
  ASSERT_THAT(sem.TrySetPermits(3), testing::IsOkAndHolds(true));
  ASSERT_OK(primary().Command({"CONFIG", "RESETSTAT"}));
  ASSERT_OK(sem.Acquire(2));
  EXPECT_EQ(Calls(primary(), "wait"), 1);
  EXPECT_EQ(replica().Command({"GET", name})->str, "1");
  ASSERT_OK(sem.Release());
  EXPECT_EQ(Calls(primary(), "wait"), 1);

  std::unique_ptr<Client> client = Connect(Sync(1, absl::Milliseconds(200)));
  ASSERT_NE(client, nullptr);
  Paused paused(replica());
  ASSERT_OK(paused.status());
  absl::Status s = client->GetSemaphore(name).Acquire(2);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr(absl::StrCat("acquire semaphore \"", name)),
                    HasSubstr("only 0 of the 1 required replicas")));
  // The two permits it took are back before Acquire() returned.
  EXPECT_EQ(primary().Command({"GET", name})->str, "2");
  paused.Resume();
}

// A client whose watchdog lease is short (3 s: renewals every second) and
// whose acquires and renewals need one replica within 200 ms (SetUp() saw
// the replica acknowledge a WAIT, so the 200 ms run out only when it is
// paused).
std::unique_ptr<Client> ConnectShortLease(RedisServer& primary) {
  return MustConnect(primary.url(), [](ClientOptions& o) {
    o.replica_sync = Sync(1, absl::Milliseconds(200));
    o.lock_watchdog_timeout = absl::Seconds(3);
  });
}

TEST_F(ReplicaSyncTest, SemaphoreAcquireWhoseWaitIsRefusedGivesPermitsBack) {
  // A user that may run everything but WAIT: the script takes the permits,
  // WAIT says NOPERM, and the permits are given back (a refused WAIT once
  // hid the script's reply, and permits taken by an acquire of unknown
  // outcome are never given back).
  const std::string name = TestLockName();
  ASSERT_THAT(client_->GetSemaphore(name).TrySetPermits(3),
              testing::IsOkAndHolds(true));
  std::unique_ptr<Client> client = ConnectWithoutWait();
  ASSERT_NE(client, nullptr);
  Semaphore sem = client->GetSemaphore(name);
  for (int i = 0; i < 3; ++i) {
    absl::Status s = sem.Acquire(1);
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
    EXPECT_THAT(s.message(),
                AllOf(HasSubstr("WAIT after the call"), HasSubstr("NOPERM"),
                      HasSubstr("the acquisition is being undone")));
    // Given back before Acquire() returned.
    EXPECT_EQ(primary().Command({"GET", name})->str, "3");
  }
  PermitExpirableSemaphore permits =
      client->GetPermitExpirableSemaphore(name + "-p");
  ASSERT_THAT(
      client_->GetPermitExpirableSemaphore(name + "-p").TrySetPermits(1),
      testing::IsOkAndHolds(true));
  absl::StatusOr<std::string> id = permits.Acquire(absl::Hours(1));
  EXPECT_EQ(id.status().code(), absl::StatusCode::kPermissionDenied)
      << id.status();
  EXPECT_THAT(permits.AvailablePermits(), testing::IsOkAndHolds(1));
  client.reset();
  EXPECT_OK(primary().Command({"ACL", "DELUSER", "nowait"}));
}

TEST_F(ReplicaSyncTest, PermitRenewalsWaitForTheReplicasToo) {
  // A watchdog permit's renewals are followed by the WAIT its acquire had,
  // as a lock's are (they once sent none).
  std::unique_ptr<Client> client = ConnectShortLease(primary());
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  PermitExpirableSemaphore sem = client->GetPermitExpirableSemaphore(name);
  ASSERT_THAT(sem.TrySetPermits(1), testing::IsOkAndHolds(true));
  absl::StatusOr<std::string> id = sem.Acquire();  // the watchdog's lease
  ASSERT_OK(id);
  ASSERT_OK(primary().Command({"CONFIG", "RESETSTAT"}));
  // The watchdog renews it (every lease / 3 = 1 s), each renewal batch
  // followed by a WAIT.
  ASSERT_TRUE(Eventually([&] { return Calls(primary(), "evalsha") >= 1; }));
  ASSERT_TRUE(Eventually([&] { return Calls(primary(), "wait") >= 1; }))
      << "renewals sent no WAIT";
  ASSERT_OK(sem.Release(*id));
}

TEST_F(ReplicaSyncTest, TryAcquireOfNoWaitStillWaitsForTheReplicas) {
  // One attempt may take 200 ms + the replicas' timeout (Redis answers a
  // WAIT that times out up to 100 ms late): a TryAcquire(0) hears the count
  // (Unavailable), not its own deadline, and its undo lands.
  std::unique_ptr<Client> client = Connect(Sync(1, absl::Milliseconds(300)));
  ASSERT_NE(client, nullptr);
  Lock lock = client->GetLock(TestLockName());
  Paused paused(replica());
  ASSERT_OK(paused.status());
  absl::Status s = lock.TryAcquire(absl::ZeroDuration());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("only 0 of the 1 required replicas "
                                     "acknowledged within 300ms"));
  EXPECT_EQ(Exists(primary(), lock.name()), 0);
}

TEST_F(ReplicaSyncTest, AsyncAcquireWithPausedReplicaFailsAndLeavesNoKey) {
  std::unique_ptr<Client> client = Connect(Sync(1, absl::Milliseconds(200)));
  ASSERT_NE(client, nullptr);
  Lock lock = client->GetLock(TestLockName());
  const Owner task = Owner::New();
  // Live replica: acknowledged.
  ASSERT_OK(lock.AcquireAsync(task).Get());
  EXPECT_EQ(Exists(replica(), lock.name()), 1);
  ASSERT_OK(lock.ReleaseAsync(task).Get());
  // Paused replica: undone (sent without waiting for it), Unavailable.
  Paused paused(replica());
  ASSERT_OK(paused.status());
  absl::Status s = lock.AcquireAsync(task).Get();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("only 0 of the 1 required replicas"));
  EXPECT_TRUE(Eventually([&] { return Exists(primary(), lock.name()) == 0; }));
  EXPECT_EQ(*lock.HoldCount(task), 0);
}

TEST_F(ReplicaSyncTest, UnacknowledgedReentryIsUndoneByOneCount) {
  std::unique_ptr<Client> client = Connect(Sync(1, absl::Milliseconds(200)));
  ASSERT_NE(client, nullptr);
  Lock lock = client->GetLock(TestLockName());
  // A re-entry with an explicit lease goes to Redis (a re-entry of a
  // watchdog hold is counted locally and writes nothing to acknowledge).
  const Owner owner = Owner::New();
  ASSERT_OK(lock.Acquire(owner));  // acknowledged: count 1
  {
    Paused paused(replica());
    ASSERT_OK(paused.status());
    absl::Status s = lock.Acquire(owner, absl::Seconds(30));  // a re-entry
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_THAT(s.message(), HasSubstr("only 0 of the 1 required replicas"));
    // The outer hold stays, with count 1 on Redis and here.
    EXPECT_EQ(*lock.HoldCount(owner), 1);
    EXPECT_TRUE(*lock.IsHeldBy(owner));
  }
  // One release frees it.
  ASSERT_OK(lock.Release(owner));
  EXPECT_EQ(Exists(primary(), lock.name()), 0);
  EXPECT_EQ(lock.Release(owner).code(), absl::StatusCode::kFailedPrecondition);
}

// Regression (renewals ignored ReplicaSync): a split-brain trial saw a new
// holder acquire on the promoted replica while the old holder's SafeUntil()
// still said 5.9 s were left, since the watchdog's renewals were never
// acknowledged yet moved the hold's safe end. Now each renewal batch is
// followed by a WAIT, and only acknowledged renewals count.

TEST_F(ReplicaSyncTest, RenewalsIgnoredReplicaSyncAcknowledgedRenewalsCount) {
  std::unique_ptr<Client> client = ConnectShortLease(primary());
  ASSERT_NE(client, nullptr);
  Lock lock = client->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire());
  const absl::StatusOr<std::chrono::steady_clock::time_point> first =
      lock.SafeUntil();
  ASSERT_OK(first);
  ASSERT_OK(primary().Command({"CONFIG", "RESETSTAT"}));
  // The watchdog renews it with a WAIT after the renewal, the replica
  // acknowledges, and the safe end moves.
  ASSERT_TRUE(Eventually([&] {
    absl::StatusOr<std::chrono::steady_clock::time_point> now =
        lock.SafeUntil();
    return now.ok() && *now > *first;
  }));
  EXPECT_GE(Calls(primary(), "wait"), 1);
  EXPECT_GE(Calls(primary(), "evalsha"), 1);
  ASSERT_OK(lock.Release());
}

TEST_F(ReplicaSyncTest,
       RenewalsIgnoredReplicaSyncUnacknowledgedRenewalsEndInALossReport) {
  std::unique_ptr<Client> client = ConnectShortLease(primary());
  ASSERT_NE(client, nullptr);
  LockOptions options;
  auto lost = std::make_shared<std::atomic<int>>(0);
  options.on_lost = [lost](const LockEvent&) { ++*lost; };
  Lock lock = client->GetLock(TestLockName(), options);
  ASSERT_OK(lock.Acquire());  // acknowledged by the replica
  const absl::StatusOr<std::chrono::steady_clock::time_point> acquired =
      lock.SafeUntil();
  ASSERT_OK(acquired);
  {
    // The replica stops (SIGSTOP): it sends no acknowledgements, so every
    // WAIT after a renewal counts 0 of 1, while the primary keeps running
    // the renewals (it still has the key, with a fresh lease).
    Paused paused(replica());
    ASSERT_OK(paused.status());
    ASSERT_OK(primary().Command({"CONFIG", "RESETSTAT"}));
    // The holder is told, by the safe end of its last acknowledged write
    // (the acquire), instead of believing it holds the lock; meanwhile its
    // safe end never moved past the acquire's.
    bool moved = false;
    ASSERT_TRUE(Eventually([&] {
      absl::StatusOr<std::chrono::steady_clock::time_point> now =
          lock.SafeUntil();
      if (now.ok() && *now != *acquired) moved = true;
      return lost->load() == 1;
    })) << "no loss report";
    EXPECT_FALSE(moved) << "SafeUntil() moved on an unacknowledged renewal";
    // The watchdog did renew it on the primary, with the WAIT after it.
    EXPECT_GE(Calls(primary(), "evalsha"), 1);
    EXPECT_GE(Calls(primary(), "wait"), 1);
    EXPECT_EQ(lock.SafeUntil().status().code(), absl::StatusCode::kAborted);
  }
  // The primary may still have it (its renewals ran): Release() then frees
  // it and says OK (relock/lock.h), else Aborted. Either way it is gone.
  const absl::Status released = lock.Release();
  EXPECT_TRUE(released.ok() || released.code() == absl::StatusCode::kAborted)
      << released;
  EXPECT_EQ(Exists(primary(), lock.name()), 0);
  EXPECT_EQ(lost->load(), 1);
}

TEST_F(ReplicaSyncTest, LockOptionsOverrideTheClientDefault) {
  // The binary's shared server has no replica.
  RedisServer& alone = SharedRedisServer();
  ASSERT_OK(alone.FlushAll());
  // A client that does not wait, with one lock that does.
  std::unique_ptr<Client> plain = MustConnect(alone.url());
  ASSERT_NE(plain, nullptr);
  Lock synced = plain->GetLock(TestLockName("synced"),
                               WithSync(1, absl::Milliseconds(100)));
  absl::Status s = synced.Acquire();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("only 0 of the 1 required replicas "
                                     "acknowledged within 100ms"));
  EXPECT_EQ(Exists(alone, synced.name()), 0);
  Lock unsynced = plain->GetLock(TestLockName("unsynced"));
  EXPECT_OK(unsynced.Acquire());
  EXPECT_OK(unsynced.Release());
  // A client that waits, with one lock that does not.
  std::unique_ptr<Client> waiting =
      MustConnect(alone.url(), [](ClientOptions& o) {
        o.replica_sync = Sync(1, absl::Milliseconds(100));
      });
  ASSERT_NE(waiting, nullptr);
  LockOptions no_wait;
  no_wait.replica_sync = ReplicaSync();  // 0 replicas
  Lock exempt = waiting->GetLock(TestLockName("exempt"), no_wait);
  EXPECT_OK(exempt.Acquire());
  EXPECT_OK(exempt.Release());
  Lock by_default = waiting->GetLock(TestLockName("default"));
  EXPECT_EQ(by_default.Acquire().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Exists(alone, by_default.name()), 0);
}

TEST_F(ReplicaSyncTest, InvalidClientOptionsAreRejectedAtConnect) {
  auto connect = [](const std::function<void(ClientOptions&)>& tweak) {
    ClientOptions options;
    options.url = primary().url();
    tweak(options);
    return Client::Connect(options).status();
  };
  absl::Status s = connect([](ClientOptions& o) {
    o.command_timeout = absl::Seconds(1);
    o.replica_sync = Sync(1, absl::Seconds(1));
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("replica_sync.timeout"));
  // Redis may answer a WAIT 100 ms after its timeout: the connection must
  // not take that for a silent server.
  s = connect([](ClientOptions& o) {
    o.command_timeout = absl::Seconds(1);
    o.replica_sync = Sync(1, absl::Milliseconds(900));
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("may answer a WAIT that late"));
  s = connect([](ClientOptions& o) {
    o.command_timeout = absl::Seconds(1);
    o.replica_sync = Sync(1, absl::Milliseconds(899));
  });
  EXPECT_OK(s);
  s = connect([](ClientOptions& o) { o.replica_sync.replicas = -1; });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("replica_sync.replicas"));
  s = connect([](ClientOptions& o) { o.replica_sync.replicas = 65; });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  s = connect(
      [](ClientOptions& o) { o.replica_sync = Sync(1, absl::ZeroDuration()); });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  // Without replicas the timeout is not used, so a command_timeout below
  // its default stays valid.
  s = connect(
      [](ClientOptions& o) { o.command_timeout = absl::Milliseconds(500); });
  EXPECT_OK(s);
}

TEST_F(ReplicaSyncTest, InvalidLockOptionsFailEveryCall) {
  for (const LockOptions& bad :
       {WithSync(-1, absl::Seconds(1)), WithSync(65, absl::Seconds(1)),
        WithSync(1, absl::Seconds(2)) /* = the client's command_timeout */,
        WithSync(1, absl::ZeroDuration())}) {
    Lock lock = client_->GetLock(TestLockName(), bad);
    const absl::Status s = lock.Acquire();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr("LockOptions: replica_sync."));
    EXPECT_EQ(lock.TryAcquire(absl::ZeroDuration()).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(lock.Release().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(lock.IsLocked().status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(lock.HoldCount().status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(lock.RemainingLease().status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(lock.ForceRelease().status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(lock.SafeUntil().status().code(),
              absl::StatusCode::kInvalidArgument);
    const Owner task = Owner::New();
    EXPECT_EQ(lock.AcquireAsync(task).Get().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(lock.ReleaseAsync(task).Get().code(),
              absl::StatusCode::kInvalidArgument);
    try {
      lock.lock();
      ADD_FAILURE() << "lock() did not throw";
    } catch (const LockError& e) {
      EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
    }
    EXPECT_EQ(Exists(primary(), lock.name()), 0);
  }
}

TEST_F(ReplicaSyncTest, RedlockAppliesReplicaSyncOnEachMaster) {
  auto connect = [](const std::string& url) {
    RedlockOptions options;
    options.urls = {url};
    options.connection.replica_sync = Sync(1, absl::Milliseconds(200));
    return RedlockClient::Connect(options);
  };
  // A master with a replica: acquired.
  absl::StatusOr<std::unique_ptr<RedlockClient>> with_replica =
      connect(primary().url());
  ASSERT_OK(with_replica);
  RedlockLock lock = (*with_replica)->GetLock(TestLockName());
  ASSERT_OK(lock.Acquire());
  EXPECT_EQ(Exists(replica(), lock.name()), 1);
  ASSERT_OK(lock.Release());
  // A master without one: not acquired, nothing left.
  RedisServer& alone = SharedRedisServer();
  ASSERT_OK(alone.FlushAll());
  absl::StatusOr<std::unique_ptr<RedlockClient>> without = connect(alone.url());
  ASSERT_OK(without);
  RedlockLock lonely = (*without)->GetLock(TestLockName());
  absl::Status s = lonely.Acquire();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("only 0 of the 1 required replicas"));
  EXPECT_TRUE(Eventually([&] { return Exists(alone, lonely.name()) == 0; }));
}

}  // namespace
}  // namespace relock
