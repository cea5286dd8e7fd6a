// relock::ReadWriteLock on a real redis-server: readers share the lock and a
// writer is alone (counted under load, and across processes); downgrade, and
// a clear error instead of a self-deadlock on upgrade; writers starve while
// reads overlap (measured) and get the lock promptly once the readers stop;
// the watchdog renews read and write holds and reports their loss; Redisson's
// own read-write scripts as a peer (exclusion and wake-ups both ways); the
// std surface, the asynchronous calls and bad input.

#include <atomic>
#include <chrono>
#include <iostream>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
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
using ::relock::testing::EventLog;
using ::relock::testing::Eventually;
using ::relock::testing::JoiningThread;
using ::relock::testing::kRedissonReadLock;
using ::relock::testing::kRedissonReadUnlock;
using ::relock::testing::kRedissonWriteLock;
using ::relock::testing::kRedissonWriteUnlock;
using ::relock::testing::MustConnect;
using ::relock::testing::RawConnection;
using ::relock::testing::RedisValue;
using ::relock::testing::Stopwatch;
using ::relock::testing::TestLockName;
using ::relock::testing::WaitForKeyGone;
using ::relock::testing::WaitUntilWaiting;
using ::testing::HasSubstr;

std::string Channel(const std::string& name) {
  return absl::StrCat("redisson_rwlock:{", name, "}");
}
// Redisson's lease key of `reader`'s read hold `i`.
std::string ReadLeaseKey(const std::string& name, const std::string& reader,
                         int i) {
  return absl::StrCat("{", name, "}:", reader, ":rwlock_timeout:", i);
}

class ReadWriteLockTest : public testing::RedisTest {
 protected:
  int64_t Integer(std::vector<std::string> argv) {
    absl::StatusOr<RedisValue> v = redis().Command(std::move(argv));
    return v.ok() && v->is_integer() ? v->integer : -1;
  }
  std::string Str(std::vector<std::string> argv) {
    absl::StatusOr<RedisValue> v = redis().Command(std::move(argv));
    return v.ok() && v->is_string() ? v->str : "<none>";
  }
  std::string Mode(const std::string& name) {
    return Str({"HGET", name, "mode"});
  }
};

// The owner field a thread's read hold of `name` uses: the one field of a
// hash that it alone holds.
std::string OnlyReader(testing::RedisServer& redis, const std::string& name) {
  absl::StatusOr<RedisValue> keys = redis.Command({"HKEYS", name});
  if (!keys.ok()) return "";
  for (const RedisValue& k : keys->elements) {
    if (k.str != "mode" && !absl::EndsWith(k.str, ":write")) return k.str;
  }
  return "";
}

// Eight threads hold the read lock at the same time (each waits until all
// eight hold it, and until the checks below are done); the hash then has one
// field per reader and a lease key per hold, no writer gets in, and once
// they all released, nothing is left in Redis.
TEST_F(ReadWriteLockTest, ManyReadersShareTheLock) {
  std::unique_ptr<Client> client = MustConnect(redis().url());
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  constexpr int kReaders = 8;
  std::atomic<int> holding{0};
  std::atomic<bool> go{false};
  std::vector<JoiningThread> readers;
  for (int i = 0; i < kReaders; ++i) {
    readers.emplace_back([&] {
      ReadWriteLock rw = client->GetReadWriteLock(name);
      const absl::Status s = rw.ReadLock().TryAcquire(absl::Seconds(30));
      ++holding;
      ASSERT_OK(s);
      EXPECT_TRUE(Eventually([&] { return go.load(); }));
      EXPECT_TRUE(rw.ReadLock().IsHeldByCurrentThread().value_or(false));
      EXPECT_OK(rw.ReadLock().Release());
    });
  }
  const bool all_tried = Eventually([&] { return holding.load() == kReaders; });
  // Every reader holds it now (a failed one failed its ASSERT above).
  EXPECT_TRUE(all_tried);
  EXPECT_EQ(Mode(name), "read");
  EXPECT_EQ(Integer({"HLEN", name}), kReaders + 1);  // mode + one per reader
  absl::StatusOr<RedisValue> leases =
      redis().Command({"KEYS", "*:rwlock_timeout:*"});
  ASSERT_OK(leases);
  EXPECT_EQ(leases->elements.size(), size_t{kReaders});
  ReadWriteLock rw = client->GetReadWriteLock(name);
  EXPECT_EQ(
      rw.WriteLock().TryAcquire(Owner::New(), absl::ZeroDuration()).code(),
      absl::StatusCode::kDeadlineExceeded);
  go = true;
  for (JoiningThread& t : readers) t.join();
  EXPECT_EQ(Integer({"EXISTS", name}), 0);
  EXPECT_THAT(testing::KeysButClientRecords(redis()), ::testing::IsEmpty());
}

// Under load, from 2 clients: writers never overlap each other or a
// reader. (That readers overlap is shown above; here the largest overlap
// seen is printed.)
TEST_F(ReadWriteLockTest, AWriterIsAloneReadersOverlap) {
  std::unique_ptr<Client> a = MustConnect(redis().url());
  std::unique_ptr<Client> b = MustConnect(redis().url());
  ASSERT_TRUE(a != nullptr && b != nullptr);
  const std::string name = TestLockName();
  std::atomic<int> readers{0}, writers{0}, overlaps{0}, max_readers{0};
  std::atomic<int> writes{0}, reads{0};
  constexpr int kRounds = 25;
  std::vector<JoiningThread> threads;
  for (int t = 0; t < 6; ++t) {
    Client* client = t % 2 == 0 ? a.get() : b.get();
    const bool writer = t < 2;
    threads.emplace_back([&, client, writer] {
      ReadWriteLock rw = client->GetReadWriteLock(name);
      for (int i = 0; i < kRounds; ++i) {
        if (writer) {
          std::lock_guard<ReadWriteLock> guard(rw);
          if (++writers != 1 || readers.load() != 0) ++overlaps;
          absl::SleepFor(absl::Milliseconds(2));  // held a while
          --writers;
          ++writes;
        } else {
          std::shared_lock<ReadWriteLock> guard(rw);
          const int now = ++readers;
          int seen = max_readers.load();
          while (now > seen && !max_readers.compare_exchange_weak(seen, now)) {
          }
          if (writers.load() != 0) ++overlaps;
          absl::SleepFor(absl::Milliseconds(3));  // held a while
          --readers;
          ++reads;
        }
      }
    });
  }
  for (JoiningThread& t : threads) t.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(writes.load(), 2 * kRounds);
  EXPECT_EQ(reads.load(), 4 * kRounds);
  std::cout << "max concurrent readers: " << max_readers.load() << std::endl;
  EXPECT_EQ(Integer({"EXISTS", name}), 0);
}

// The writer takes the read lock too (downgrade): releasing the write lock
// leaves the lock read-locked by it, open to other readers and closed to
// writers. An owner holding the read lock gets FailedPrecondition at once
// for the write lock (it would wait for itself).
TEST_F(ReadWriteLockTest, DowngradeWorksUpgradeIsRefused) {
  std::unique_ptr<Client> client = MustConnect(redis().url());
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  ReadWriteLock rw = client->GetReadWriteLock(name);
  ASSERT_OK(rw.WriteLock().Acquire());
  ASSERT_OK(rw.ReadLock().Acquire());
  EXPECT_EQ(Mode(name), "write");
  EXPECT_EQ(Integer({"HLEN", name}), 3);  // mode, reader, writer
  EXPECT_EQ(rw.WriteLock().HoldCount().value_or(-1), 1);
  EXPECT_EQ(rw.ReadLock().HoldCount().value_or(-1), 1);
  EXPECT_TRUE(rw.WriteLock().IsLocked().value_or(false));
  EXPECT_TRUE(rw.ReadLock().IsLocked().value_or(false));
  {
    JoiningThread other([&] {
      ReadWriteLock mine = client->GetReadWriteLock(name);
      EXPECT_FALSE(mine.try_lock_shared());
      EXPECT_FALSE(mine.try_lock());
    });
  }
  // Downgraded: read mode, held by this thread only.
  ASSERT_OK(rw.WriteLock().Release());
  EXPECT_EQ(Mode(name), "read");
  EXPECT_FALSE(rw.WriteLock().IsLocked().value_or(true));
  EXPECT_TRUE(rw.ReadLock().IsHeldByCurrentThread().value_or(false));
  {
    JoiningThread other([&] {
      ReadWriteLock mine = client->GetReadWriteLock(name);
      EXPECT_FALSE(mine.try_lock());
      EXPECT_TRUE(mine.try_lock_shared());
      mine.unlock_shared();
    });
  }
  // No upgrade: refused at once, whatever the wait.
  Stopwatch watch;
  const absl::Status upgrade = rw.WriteLock().TryAcquire(absl::Seconds(30));
  EXPECT_EQ(upgrade.code(), absl::StatusCode::kFailedPrecondition) << upgrade;
  EXPECT_THAT(upgrade.message(), HasSubstr("cannot be upgraded"));
  EXPECT_LT(watch.Elapsed(), absl::Seconds(10));
  EXPECT_THROW(rw.lock(), LockError);
  ASSERT_OK(rw.ReadLock().Release());
  EXPECT_EQ(Integer({"EXISTS", name}), 0);
  // Free again: the write lock is this thread's for the asking.
  EXPECT_TRUE(rw.try_lock());
  rw.unlock();
}

// A child: takes the read or write lock (args: url, name, "read"|"write"),
// prints "held", releases when stdin closes, prints "released".
RELOCK_CHILD_MAIN(RwHolder) {
  if (args.size() != 3) return 2;
  ClientOptions options;
  options.url = args[0];
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  if (!client.ok()) return 3;
  ReadWriteLock rw = (*client)->GetReadWriteLock(args[1]);
  Lock& lock = args[2] == "write" ? rw.WriteLock() : rw.ReadLock();
  if (!lock.TryAcquire(absl::Seconds(60)).ok()) return 4;
  std::cout << "held" << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  if (!lock.Release().ok()) return 5;
  std::cout << "released" << std::endl;
  return 0;
}

// Across processes: a writer in another process excludes this one's
// readers and writers, and its release wakes a waiting reader at once; a
// reader there shares with readers here and excludes writers, and its
// release wakes a waiting writer at once. (Holds are watchdog leases of 30
// s: only the wake-up ends the waits this soon.)
TEST_F(ReadWriteLockTest, ReadersAndWritersExcludeEachOtherAcrossProcesses) {
  std::unique_ptr<Client> client = MustConnect(redis().url());
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  ReadWriteLock rw = client->GetReadWriteLock(name);

  absl::StatusOr<std::unique_ptr<ChildProcess>> writer =
      ChildProcess::Spawn("RwHolder", {redis().url(), name, "write"});
  ASSERT_OK(writer);
  ASSERT_EQ((*writer)->ReadLine(absl::Seconds(60)).value_or(""), "held");
  EXPECT_FALSE(rw.try_lock_shared());
  EXPECT_FALSE(rw.try_lock());
  {
    testing::BackgroundWaiter reader(rw.ReadLock(), absl::Seconds(120));
    ASSERT_OK(WaitUntilWaiting(redis(), Channel(name), *client));
    EXPECT_FALSE(reader.done());
    Stopwatch watch;
    ASSERT_TRUE((*writer)->CloseStdin().ok());
    EXPECT_TRUE(reader.Join());
    EXPECT_LT(watch.Elapsed(), absl::Seconds(20));
  }
  ASSERT_EQ((*writer)->Wait(absl::Seconds(30)).value_or(-1), 0);

  absl::StatusOr<std::unique_ptr<ChildProcess>> reader =
      ChildProcess::Spawn("RwHolder", {redis().url(), name, "read"});
  ASSERT_OK(reader);
  ASSERT_EQ((*reader)->ReadLine(absl::Seconds(60)).value_or(""), "held");
  EXPECT_TRUE(rw.try_lock_shared());  // shared with the other process
  rw.unlock_shared();
  EXPECT_FALSE(rw.try_lock());
  {
    testing::BackgroundWaiter waiting_writer(rw.WriteLock(),
                                             absl::Seconds(120));
    ASSERT_OK(WaitUntilWaiting(redis(), Channel(name), *client));
    EXPECT_FALSE(waiting_writer.done());
    Stopwatch watch;
    ASSERT_TRUE((*reader)->CloseStdin().ok());
    EXPECT_TRUE(waiting_writer.Join());
    EXPECT_LT(watch.Elapsed(), absl::Seconds(20));
  }
  ASSERT_EQ((*reader)->Wait(absl::Seconds(30)).value_or(-1), 0);
  EXPECT_EQ(Integer({"EXISTS", name}), 0);
}

// Writers starve while reads overlap: two readers hand the read lock to
// each other (one always holds it), and a writer waiting 3 s gets nothing;
// once the readers stop, a waiting writer gets the lock at once (the last
// read release wakes it).
TEST_F(ReadWriteLockTest, WritersStarveWhileReadsOverlap) {
  std::unique_ptr<Client> client = MustConnect(redis().url());
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  ReadWriteLock rw = client->GetReadWriteLock(name);
  const Owner a = Owner::New(), b = Owner::New();
  std::atomic<bool> stop{false};
  std::atomic<int> hand_overs{0};
  std::atomic<bool> readers_failed{false};
  JoiningThread readers([&] {
    Lock read = rw.ReadLock();
    if (!read.Acquire(a).ok()) {
      readers_failed = true;
      return;
    }
    // Each round: the other reader joins before this one leaves.
    const Owner* holder = &a;
    const Owner* next = &b;
    while (!stop.load()) {
      if (!read.Acquire(*next).ok() || !read.Release(*holder).ok()) {
        readers_failed = true;
        break;
      }
      std::swap(holder, next);
      ++hand_overs;
      absl::SleepFor(absl::Milliseconds(5));  // the readers' pace
    }
    EXPECT_OK(read.Release(*holder));
  });
  ASSERT_TRUE(Eventually([&] { return hand_overs.load() > 0; }));

  Stopwatch starved;
  const int before = hand_overs.load();
  const absl::Status s = rw.WriteLock().TryAcquire(absl::Seconds(3));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  const int during = hand_overs.load() - before;
  EXPECT_GT(during, 0);
  std::cout << "writer starved for " << absl::FormatDuration(starved.Elapsed())
            << " while " << during << " read hand-overs went on" << std::endl;

  // A writer that waits while the readers stop gets the lock at once.
  std::atomic<int64_t> got_after_ms{-1};
  std::atomic<bool> writer_waiting{false};
  Stopwatch since_stop;
  JoiningThread writer([&] {
    Lock write = rw.WriteLock();
    writer_waiting = true;
    const absl::Status w = write.TryAcquire(absl::Seconds(120));
    got_after_ms = absl::ToInt64Milliseconds(since_stop.Elapsed());
    EXPECT_OK(w);
    if (w.ok()) {
      EXPECT_OK(write.Release());
    }
  });
  ASSERT_TRUE(Eventually([&] { return writer_waiting.load(); }));
  // The writer waits (readers never do: only it listens on the channel).
  ASSERT_OK(WaitUntilWaiting(redis(), Channel(name), *client));
  EXPECT_EQ(got_after_ms.load(), -1);  // still starved
  since_stop = Stopwatch();
  stop = true;
  readers.join();
  writer.join();
  EXPECT_FALSE(readers_failed.load());
  // The watchdog lease is 30 s: a writer that was not woken would wait for
  // the readers' lease to end.
  EXPECT_GE(got_after_ms.load(), 0);
  EXPECT_LT(got_after_ms.load(), 20000);
  std::cout << "writer got the lock " << got_after_ms.load()
            << " ms after the readers stopped" << std::endl;
}

// The watchdog keeps read and write holds alive past their lease (the read
// hold's lease key too), and reports a hold whose field was deleted as lost.
TEST_F(ReadWriteLockTest, WatchdogRenewsReadAndWriteHoldsAndReportsLoss) {
  EventLog events;
  std::unique_ptr<Client> client =
      MustConnect(redis().url(), [&](ClientOptions& o) {
        o.lock_watchdog_timeout = absl::Seconds(3);
        o.on_lock_event = events.Callback();
      });
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  ReadWriteLock rw = client->GetReadWriteLock(name);
  ASSERT_OK(rw.WriteLock().Acquire());
  ASSERT_OK(rw.ReadLock().Acquire());
  const std::string reader = OnlyReader(redis(), name);
  ASSERT_FALSE(reader.empty());
  // Over two leases later (time passes on purpose: only renewals keep them),
  // both holds live, and so does the read lease key.
  absl::SleepFor(absl::Seconds(7));
  EXPECT_EQ(Integer({"HEXISTS", name, reader}), 1);
  EXPECT_EQ(Integer({"HEXISTS", name, reader + ":write"}), 1);
  EXPECT_GT(Integer({"PTTL", ReadLeaseKey(name, reader, 1)}), 0);
  EXPECT_OK(rw.ReadLock().SafeUntil());
  EXPECT_TRUE(events.events().empty());

  // The read hold's field goes: reported lost, with the reader's field.
  ASSERT_EQ(Integer({"HDEL", name, reader}), 1);
  LockEvent lost;
  ASSERT_TRUE(
      events.WaitFor(LockEventType::kLockLost, absl::Seconds(30), &lost));
  EXPECT_EQ(lost.lock_name, name);
  EXPECT_EQ(lost.owner, reader);
  EXPECT_EQ(rw.ReadLock().Release().code(), absl::StatusCode::kAborted);
  // The write hold lives on.
  EXPECT_OK(rw.WriteLock().SafeUntil());
  ASSERT_OK(rw.WriteLock().Release());
  EXPECT_EQ(Integer({"EXISTS", name}), 0);
}

// A reader that dies holds the lock only until its own read lease ends,
// even while another reader's holds are renewed: the last live reader's
// release frees the lock (Redisson's lease keys).
TEST_F(ReadWriteLockTest, ADeadReadersHoldEndsWithItsOwnLease) {
  std::unique_ptr<Client> client = MustConnect(redis().url());
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  // The dead reader: a field and a lease key of 1 s.
  const std::string dead = "dead0000-0000-4000-8000-000000000009:9";
  ASSERT_OK(redis().Command({"HSET", name, "mode", "read", dead, "1"}));
  ASSERT_OK(
      redis().Command({"SET", ReadLeaseKey(name, dead, 1), "1", "PX", "1000"}));
  ASSERT_OK(redis().Command({"PEXPIRE", name, "1000"}));
  ReadWriteLock rw = client->GetReadWriteLock(name);
  ASSERT_OK(rw.ReadLock().Acquire());
  EXPECT_EQ(
      rw.WriteLock().TryAcquire(Owner::New(), absl::ZeroDuration()).code(),
      absl::StatusCode::kDeadlineExceeded);
  // The dead reader's lease ends (its lease key expires on the server).
  ASSERT_OK(WaitForKeyGone(redis(), ReadLeaseKey(name, dead, 1)));
  ASSERT_OK(rw.ReadLock().Release());
  EXPECT_EQ(Integer({"EXISTS", name}), 0);
  EXPECT_TRUE(rw.try_lock());
  rw.unlock();
}

// A read release that shortens the hash's life (the hold released had the
// longest lease) tells the waiters with the read-unlock message "1": a
// writer that found the lock held slept until the old end (10 s here, up to
// the watchdog's 30 s), although the key now ends with the reader left
// (found by a review). The writer takes the lock once that reader's lease
// ends, not at the old end.
TEST_F(ReadWriteLockTest, AReadReleaseThatShortensTheLockWakesTheWaiters) {
  std::unique_ptr<Client> client = MustConnect(redis().url());
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  ReadWriteLock rw = client->GetReadWriteLock(name);
  const Owner dying = Owner::New(), lasting = Owner::New(),
              writing = Owner::New();
  ASSERT_OK(rw.ReadLock().Acquire(dying, absl::Seconds(5)));
  ASSERT_OK(rw.ReadLock().Acquire(lasting, absl::Seconds(30)));
  absl::StatusOr<RawConnection> sub = RawConnection::Connect(redis().port());
  ASSERT_OK(sub);
  ASSERT_OK(sub->Command({"SUBSCRIBE", Channel(name)}));
  Stopwatch watch;
  absl::Status written = absl::UnknownError("not done");
  JoiningThread writer(
      [&] { written = rw.WriteLock().TryAcquire(writing, absl::Minutes(1)); });
  // Subscribed (with this test's connection, two), and its attempt made.
  ASSERT_OK(WaitUntilWaiting(redis(), Channel(name), *client, 2));
  ASSERT_OK(rw.ReadLock().Release(lasting));
  // "1", every waiter (or, should the 5 s lease have ended meanwhile on a
  // stalled machine, "0": the lock is free).
  absl::StatusOr<RedisValue> message = sub->NextReply();
  ASSERT_OK(message);
  ASSERT_EQ(message->elements.size(), 3u) << *message;
  EXPECT_TRUE(message->elements[2].str == "1" ||
              message->elements[2].str == "0")
      << *message;
  writer.join();
  ASSERT_OK(written);
  EXPECT_LT(watch.Elapsed(), absl::Seconds(25));  // not at the old end (30 s)
  EXPECT_OK(rw.WriteLock().Release(writing));
}

// How long Redis keeps `key` still, in milliseconds (PTTL: -2 when gone).
int64_t Pttl(testing::RedisServer& redis, const std::string& key) {
  absl::StatusOr<RedisValue> v = redis.Command({"PTTL", key});
  return v.ok() && v->is_integer() ? v->integer : -3;
}

// A re-entry with a longer explicit lease keeps that lease (include/relock/
// lock.h), and an inner release keeps the leases: Redis must then keep the
// lock as long as SafeUntil() says. The released hold's lease key goes (as
// Redisson's unlock deletes it), and the hold left takes over its longer
// lease, so that the hash's TTL, the longest lease key's, is not cut to the
// outer hold's 4 s (which let a writer in after 4 s while the reader was
// told it was safe for 60).
TEST_F(ReadWriteLockTest, AnInnerReadReleaseKeepsTheLongerLease) {
  std::unique_ptr<Client> client = MustConnect(redis().url());
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  ReadWriteLock rw = client->GetReadWriteLock(name);
  ASSERT_OK(rw.ReadLock().Acquire(absl::Seconds(4)));
  ASSERT_OK(rw.ReadLock().Acquire(absl::Seconds(60)));
  const std::string reader = OnlyReader(redis(), name);
  ASSERT_FALSE(reader.empty());
  ASSERT_OK(rw.ReadLock().Release());  // the inner hold
  EXPECT_EQ(Str({"HGET", name, reader}), "1");
  absl::StatusOr<std::chrono::steady_clock::time_point> safe =
      rw.ReadLock().SafeUntil();
  ASSERT_OK(safe);
  EXPECT_GT(*safe, std::chrono::steady_clock::now() + std::chrono::seconds(50));
  EXPECT_GT(Pttl(redis(), name), 50000);
  EXPECT_GT(Pttl(redis(), ReadLeaseKey(name, reader, 1)), 50000);
  EXPECT_EQ(Integer({"EXISTS", ReadLeaseKey(name, reader, 2)}), 0);
  EXPECT_EQ(
      rw.WriteLock().TryAcquire(Owner::New(), absl::ZeroDuration()).code(),
      absl::StatusCode::kDeadlineExceeded);

  // The other way round, the outer hold's own longer lease stays as it was.
  ASSERT_OK(rw.ReadLock().Acquire(absl::Seconds(4)));
  EXPECT_LT(Pttl(redis(), ReadLeaseKey(name, reader, 2)), 5000);
  const int64_t outer = Pttl(redis(), ReadLeaseKey(name, reader, 1));
  ASSERT_OK(rw.ReadLock().Release());
  EXPECT_LE(Pttl(redis(), ReadLeaseKey(name, reader, 1)), outer);
  EXPECT_GT(Pttl(redis(), name), 50000);
  ASSERT_OK(rw.ReadLock().Release());
  EXPECT_EQ(Integer({"EXISTS", name}), 0);
  EXPECT_THAT(testing::KeysButClientRecords(redis()), ::testing::IsEmpty());
}

// The same when the outer hold's own lease key has expired meanwhile (its
// lease was the shorter): the inner release makes it again with the longer
// lease, rather than leave the reader with no lease key (which freed the
// lock at once).
TEST_F(ReadWriteLockTest, AnInnerReadReleaseOutlivesTheOuterHoldsEndedLease) {
  std::unique_ptr<Client> client = MustConnect(redis().url());
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  ReadWriteLock rw = client->GetReadWriteLock(name);
  // The outer lease must last until the re-entry below (a stalled test
  // thread on a loaded machine could take longer than a few hundred ms).
  ASSERT_OK(rw.ReadLock().Acquire(absl::Seconds(1)));
  ASSERT_OK(rw.ReadLock().Acquire(absl::Seconds(60)));
  const std::string reader = OnlyReader(redis(), name);
  ASSERT_FALSE(reader.empty());
  ASSERT_OK(WaitForKeyGone(redis(), ReadLeaseKey(name, reader, 1)));
  ASSERT_OK(rw.ReadLock().Release());  // the inner hold
  EXPECT_OK(rw.ReadLock().SafeUntil());
  EXPECT_EQ(Str({"HGET", name, reader}), "1");
  EXPECT_GT(Pttl(redis(), name), 50000);
  EXPECT_GT(Pttl(redis(), ReadLeaseKey(name, reader, 1)), 50000);
  EXPECT_EQ(
      rw.WriteLock().TryAcquire(Owner::New(), absl::ZeroDuration()).code(),
      absl::StatusCode::kDeadlineExceeded);
  ASSERT_OK(rw.ReadLock().Release());
  EXPECT_EQ(Integer({"EXISTS", name}), 0);
  EXPECT_THAT(testing::KeysButClientRecords(redis()), ::testing::IsEmpty());
}

// A downgrade's read holds keep their longest lease too: an inner read
// release in write mode, then the write release (read mode from then on),
// leave the hash the read hold's 60 s; and while the write lock is held, an
// inner write release that refreshes the watchdog lease does not cut the
// hash below a read hold's longer lease (the hash is both holds' lease).
TEST_F(ReadWriteLockTest, ADowngradedReadHoldKeepsItsLongerLease) {
  std::unique_ptr<Client> client = MustConnect(redis().url());
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  ReadWriteLock rw = client->GetReadWriteLock(name);
  ASSERT_OK(rw.WriteLock().Acquire(absl::Seconds(10)));
  ASSERT_OK(rw.ReadLock().Acquire(absl::Seconds(4)));
  ASSERT_OK(rw.ReadLock().Acquire(absl::Seconds(60)));
  const std::string reader = OnlyReader(redis(), name);
  ASSERT_FALSE(reader.empty());
  ASSERT_OK(rw.ReadLock().Release());  // the inner read hold
  ASSERT_OK(rw.WriteLock().Release());
  EXPECT_EQ(Mode(name), "read");
  absl::StatusOr<std::chrono::steady_clock::time_point> safe =
      rw.ReadLock().SafeUntil();
  ASSERT_OK(safe);
  EXPECT_GT(*safe, std::chrono::steady_clock::now() + std::chrono::seconds(50));
  EXPECT_GT(Pttl(redis(), name), 50000);
  EXPECT_GT(Pttl(redis(), ReadLeaseKey(name, reader, 1)), 50000);
  ASSERT_OK(rw.ReadLock().Release());
  EXPECT_EQ(Integer({"EXISTS", name}), 0);

  // A watchdog write hold (30 s) re-entered with an explicit lease (its
  // count reaches Redis), and a read hold of 60 s: the inner write release
  // refreshes the write lease without cutting the read hold's.
  ASSERT_OK(rw.WriteLock().Acquire());
  ASSERT_OK(rw.WriteLock().Acquire(absl::Seconds(5)));
  ASSERT_OK(rw.ReadLock().Acquire(absl::Seconds(60)));
  EXPECT_EQ(Str({"HGET", name, reader + ":write"}), "2");
  ASSERT_OK(rw.WriteLock().Release());  // the inner write hold
  EXPECT_EQ(Str({"HGET", name, reader + ":write"}), "1");
  EXPECT_GT(Pttl(redis(), name), 50000);
  ASSERT_OK(rw.WriteLock().Release());
  EXPECT_EQ(Mode(name), "read");
  EXPECT_GT(Pttl(redis(), name), 50000);
  ASSERT_OK(rw.ReadLock().Release());
  EXPECT_EQ(Integer({"EXISTS", name}), 0);
  EXPECT_THAT(testing::KeysButClientRecords(redis()), ::testing::IsEmpty());
}

// A re-entry that goes to Redis (an explicit lease) and finds its hold gone
// is Aborted and writes nothing, for either side (it once made the lock
// anew with a count of 1, hiding the loss: see lua/acquire.lua).
TEST_F(ReadWriteLockTest, AReentryAfterTheHoldWasLostIsAborted) {
  std::unique_ptr<Client> client = MustConnect(redis().url());
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  ReadWriteLock rw = client->GetReadWriteLock(name);
  for (Lock side : {rw.ReadLock(), rw.WriteLock()}) {
    ASSERT_OK(side.Acquire(absl::Seconds(30)));
    ASSERT_EQ(Integer({"DEL", name}), 1);
    const absl::Status s = side.Acquire(absl::Seconds(30));
    EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
    EXPECT_THAT(s.message(), HasSubstr("NOTHELD"));
    EXPECT_EQ(Integer({"EXISTS", name}), 0);
    EXPECT_EQ(side.Release().code(), absl::StatusCode::kAborted);
    // The next acquire starts afresh.
    ASSERT_OK(side.Acquire(absl::Seconds(30)));
    ASSERT_OK(side.Release());
    EXPECT_EQ(Integer({"EXISTS", name}), 0);
  }
  EXPECT_THAT(testing::KeysButClientRecords(redis()), ::testing::IsEmpty());
}

// Redisson's own read-write lock scripts (EVAL, a foreign owner) and
// relock share the lock: a Redisson reader shares with relock's readers and
// excludes relock's writer, whose wait its release ends (the "0" message);
// relock's writer excludes Redisson's reader, and its release publishes "1"
// on Redisson's channel; a Redisson writer excludes relock's reader, whose
// wait its release ends.
TEST_F(ReadWriteLockTest, RedissonsScriptsShareTheLockBothWays) {
  std::unique_ptr<Client> client = MustConnect(redis().url());
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  const std::string redisson = "5b0e7a44-6f2b-4d4c-8e3f-1b2c3d4e5f60:17";
  const std::string timeout_prefix =
      absl::StrCat("{", name, "}:", redisson, ":rwlock_timeout");
  auto redisson_read = [&] {
    return redis().Command({"EVAL", kRedissonReadLock, "2", name,
                            timeout_prefix, "30000", redisson,
                            redisson + ":write"});
  };
  auto redisson_read_unlock = [&] {
    return redis().Command(
        {"EVAL", kRedissonReadUnlock, "4", name, Channel(name), timeout_prefix,
         absl::StrCat("{", name, "}"), "0", redisson, "PUBLISH"});
  };
  ReadWriteLock rw = client->GetReadWriteLock(name);

  // Redisson reads; relock reads alongside, relock's writer waits.
  absl::StatusOr<RedisValue> read = redisson_read();
  ASSERT_TRUE(read.ok() && read->is_nil()) << read.status();
  EXPECT_TRUE(rw.try_lock_shared());
  rw.unlock_shared();
  EXPECT_EQ(Integer({"EXISTS", name}), 1);  // still Redisson's
  {
    testing::BackgroundWaiter writer(rw.WriteLock(), absl::Seconds(120));
    ASSERT_OK(WaitUntilWaiting(redis(), Channel(name), *client));
    EXPECT_FALSE(writer.done());
    Stopwatch watch;
    absl::StatusOr<RedisValue> unlocked = redisson_read_unlock();
    ASSERT_TRUE(unlocked.ok() && unlocked->is_integer() &&
                unlocked->integer == 1)
        << unlocked.status();
    EXPECT_TRUE(writer.Join());
    EXPECT_LT(watch.Elapsed(), absl::Seconds(20));  // the lease was 30 s
  }

  // relock writes: Redisson's reader is excluded; the release tells it.
  const std::string channel = Channel(name);
  {
    absl::StatusOr<RawConnection> sub = RawConnection::Connect(redis().port());
    ASSERT_OK(sub);
    ASSERT_OK(sub->Command({"SUBSCRIBE", channel}));
    ASSERT_OK(rw.WriteLock().Acquire());
    absl::StatusOr<RedisValue> excluded = redisson_read();
    ASSERT_TRUE(excluded.ok() && excluded->is_integer()) << excluded.status();
    EXPECT_GT(excluded->integer, 0);
    ASSERT_OK(rw.WriteLock().Release());
    absl::StatusOr<RedisValue> message = sub->NextReply();
    ASSERT_OK(message);
    ASSERT_EQ(message->elements.size(), 3u) << *message;
    EXPECT_EQ(message->elements[1].str, channel);
    EXPECT_EQ(message->elements[2].str, "1");  // wakes every waiter
  }                                            // the subscriber leaves

  // A Redisson writer excludes relock's reader; its release wakes it.
  const std::string redisson_writer = redisson + ":write";
  absl::StatusOr<RedisValue> wrote = redis().Command(
      {"EVAL", kRedissonWriteLock, "1", name, "30000", redisson_writer});
  ASSERT_TRUE(wrote.ok() && wrote->is_nil()) << wrote.status();
  EXPECT_FALSE(rw.try_lock_shared());
  {
    testing::BackgroundWaiter reader(rw.ReadLock(), absl::Seconds(120));
    ASSERT_OK(WaitUntilWaiting(redis(), channel, *client));
    EXPECT_FALSE(reader.done());
    Stopwatch watch;
    absl::StatusOr<RedisValue> unlocked =
        redis().Command({"EVAL", kRedissonWriteUnlock, "2", name, channel, "1",
                         "30000", redisson_writer, "PUBLISH"});
    ASSERT_TRUE(unlocked.ok() && unlocked->is_integer() &&
                unlocked->integer == 1)
        << unlocked.status();
    EXPECT_TRUE(reader.Join());
    EXPECT_LT(watch.Elapsed(), absl::Seconds(20));
  }
  EXPECT_EQ(Integer({"EXISTS", name}), 0);
}

// The asynchronous calls with explicit owners: readers share, a writer
// waits for them and is handed the lock when the last one releases.
TEST_F(ReadWriteLockTest, AsynchronousReadersAndWriter) {
  std::unique_ptr<Client> client = MustConnect(redis().url());
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  ReadWriteLock rw = client->GetReadWriteLock(name);
  const Owner r1 = Owner::New(), r2 = Owner::New(), w = Owner::New();
  Future<absl::Status> read1 = rw.ReadLock().AcquireAsync(r1);
  Future<absl::Status> read2 = rw.ReadLock().AcquireAsync(r2);
  ASSERT_TRUE(read1.WaitFor(absl::Seconds(30)) && read1.Get().ok());
  ASSERT_TRUE(read2.WaitFor(absl::Seconds(30)) && read2.Get().ok());
  Future<absl::Status> write = rw.WriteLock().AcquireAsync(w);
  EXPECT_FALSE(write.WaitFor(absl::Milliseconds(300)));
  Future<absl::Status> done1 = rw.ReadLock().ReleaseAsync(r1);
  ASSERT_TRUE(done1.WaitFor(absl::Seconds(30)) && done1.Get().ok());
  EXPECT_FALSE(write.WaitFor(absl::Milliseconds(300)));
  Future<absl::Status> done2 = rw.ReadLock().ReleaseAsync(r2);
  ASSERT_TRUE(done2.WaitFor(absl::Seconds(30)) && done2.Get().ok());
  ASSERT_TRUE(write.WaitFor(absl::Seconds(20)));
  EXPECT_OK(write.Get());
  EXPECT_TRUE(rw.WriteLock().IsHeldBy(w).value_or(false));
  EXPECT_FALSE(rw.ReadLock().IsHeldBy(w).value_or(true));
  Future<absl::Status> release = rw.WriteLock().ReleaseAsync(w);
  ASSERT_TRUE(release.WaitFor(absl::Seconds(30)) && release.Get().ok());
  EXPECT_EQ(Integer({"EXISTS", name}), 0);
}

// Reentrant per owner and per side; a closing client releases both sides.
TEST_F(ReadWriteLockTest, ReentersAndCloseReleasesBothSides) {
  std::unique_ptr<Client> client = MustConnect(redis().url());
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  ReadWriteLock rw = client->GetReadWriteLock(name);
  {
    std::unique_lock<ReadWriteLock> outer(rw);
    std::lock_guard<Lock> inner(rw.WriteLock());
    std::shared_lock<ReadWriteLock> read(rw);
    EXPECT_EQ(rw.WriteLock().HoldCount().value_or(-1), 2);
    EXPECT_EQ(rw.ReadLock().HoldCount().value_or(-1), 1);
  }
  EXPECT_EQ(Integer({"EXISTS", name}), 0);
  ASSERT_OK(rw.WriteLock().Acquire());
  ASSERT_OK(rw.ReadLock().Acquire());
  client->Close();
  EXPECT_EQ(Integer({"EXISTS", name}), 0);
  EXPECT_THAT(testing::KeysButClientRecords(redis()), ::testing::IsEmpty());
}

// A plain lock and a read-write lock of one name do not mix: neither
// writes into the other's hash; either's acquire of the other's hash is
// FailedPrecondition (NOTALOCK) at once, whoever holds it, and one owner's
// hold of one type is no hold of the other. ForceRelease frees only its own
// side's mode. Unbound handles fail cleanly.
TEST_F(ReadWriteLockTest, MixingLockTypesAndForceReleaseAndBadInput) {
  std::unique_ptr<Client> client = MustConnect(redis().url());
  ASSERT_NE(client, nullptr);
  const std::string name = TestLockName();
  Lock plain = client->GetLock(name);
  ReadWriteLock rw = client->GetReadWriteLock(name);
  ASSERT_OK(redis().Command(
      {"HSET", name, "50e0e000-0000-4000-8000-000000000001:1", "1"}));
  const absl::Status s = rw.ReadLock().TryAcquire(absl::Seconds(10));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ(Str({"HGET", name, "mode"}), "<none>");  // never written
  ASSERT_OK(redis().Command({"DEL", name}));

  JoiningThread holder([&] {
    ReadWriteLock mine = client->GetReadWriteLock(name);
    ASSERT_OK(mine.ReadLock().Acquire());
    EXPECT_EQ(mine.WriteLock().ForceRelease().value_or(true), false);
    EXPECT_EQ(mine.ReadLock().ForceRelease().value_or(false), true);
    EXPECT_EQ(mine.ReadLock().Release().code(), absl::StatusCode::kAborted);
  });
  holder.join();
  ASSERT_OK(rw.ReadLock().Acquire());
  // This thread's read hold is not a hold of the plain lock of that name:
  // neither acquiring nor releasing it through a plain handle works.
  const absl::Status p = plain.TryAcquire(absl::Seconds(10));
  EXPECT_EQ(p.code(), absl::StatusCode::kFailedPrecondition) << p;
  EXPECT_THAT(p.message(), HasSubstr("one name is one lock type"));
  EXPECT_EQ(plain.Release().code(), absl::StatusCode::kFailedPrecondition);
  // Another owner's plain acquire is refused at once too (issue 23: its
  // wait would miss the read-write lock's releases), and never writes into
  // the read-write lock's hash.
  const absl::Status other = plain.TryAcquire(Owner::New(), absl::Seconds(10));
  EXPECT_EQ(other.code(), absl::StatusCode::kFailedPrecondition) << other;
  EXPECT_THAT(other.message(), HasSubstr("one name is one lock type"));
  EXPECT_EQ(Integer({"HLEN", name}), 2);  // mode, this thread's read hold
  ASSERT_OK(rw.ReadLock().Release());

  // The same with the write lock, both ways round (the write hold is
  // registered apart from the owner's other holds).
  ASSERT_OK(rw.WriteLock().Acquire());
  const absl::Status w = plain.TryAcquire(absl::Seconds(10));
  EXPECT_EQ(w.code(), absl::StatusCode::kFailedPrecondition) << w;
  EXPECT_THAT(w.message(), HasSubstr("one name is one lock type"));
  FairLock fair = client->GetFairLock(name);
  EXPECT_EQ(fair.TryAcquire(absl::Seconds(10)).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_OK(rw.WriteLock().Release());
  ASSERT_OK(plain.Acquire());
  const absl::Status up = rw.WriteLock().TryAcquire(absl::Seconds(10));
  EXPECT_EQ(up.code(), absl::StatusCode::kFailedPrecondition) << up;
  EXPECT_THAT(up.message(), HasSubstr("one name is one lock type"));
  EXPECT_EQ(rw.ReadLock().TryAcquire(absl::Seconds(10)).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_OK(plain.Release());
  EXPECT_EQ(Integer({"EXISTS", name}), 0);

  ReadWriteLock unbound;
  EXPECT_EQ(unbound.ReadLock().Acquire().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(unbound.WriteLock().Release().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_THROW(unbound.lock_shared(), LockError);
  ReadWriteLock empty = client->GetReadWriteLock("");
  EXPECT_EQ(empty.WriteLock().Acquire().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace relock
