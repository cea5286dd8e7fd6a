// The bad-input table (README "Bad input"): one test per row. Every row gets a
// precise status or the documented exception; nothing crashes, hangs past its
// deadline, or leaves a lock behind. Rows tested elsewhere name their test in
// the README table.

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "relock/relock.h"
#include "tests/test_util.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace {

using ::relock::testing::MustConnect;
using ::relock::testing::Stopwatch;
using ::relock::testing::TestLockName;
using ::testing::HasSubstr;
using ::testing::Not;

class BadInputTest : public testing::RedisClientTest {};

TEST_F(BadInputTest, BadNamesAreInvalidArgument) {
  EXPECT_EQ(client_->GetLock("").Acquire().code(),
            absl::StatusCode::kInvalidArgument);
  for (size_t size : {kMaxLockNameSize + 1, size_t{1} << 20}) {  // to 1 MB
    std::string huge(size, 'x');
    Lock too_long = client_->GetLock(huge);
    absl::Status s = too_long.Acquire();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_LT(s.message().size(), 400u) << "the message must not echo 64 KiB";
    EXPECT_EQ(too_long.Release().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(too_long.IsLocked().status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_THROW(too_long.lock(), LockError);
  }
  EXPECT_THAT(testing::KeysButClientRecords(redis()), ::testing::IsEmpty())
      << "nothing reached Redis";
}

TEST_F(BadInputTest, OddButValidNamesWork) {
  for (std::string name : {std::string("a\0b", 3), std::string("{braces}"),
                           std::string("with space"), std::string("new\nline"),
                           std::string(kMaxLockNameSize, 'n')}) {
    Lock lock = client_->GetLock(name);
    ASSERT_OK(lock.Acquire()) << lock.name().size();
    EXPECT_EQ(redis().Command({"EXISTS", name})->integer, 1);
    ASSERT_OK(lock.Release());
    EXPECT_EQ(redis().Command({"EXISTS", name})->integer, 0);
  }
}

TEST_F(BadInputTest, BadDurationsAreInvalidArgument) {
  Lock lock = client_->GetLock(TestLockName());
  for (absl::Duration lease :
       {absl::ZeroDuration(), absl::Milliseconds(-5), absl::Microseconds(10),
        absl::Hours(366 * 24), absl::InfiniteDuration()}) {
    EXPECT_EQ(lock.Acquire(lease).code(), absl::StatusCode::kInvalidArgument)
        << lease;
  }
  EXPECT_EQ(lock.TryAcquire(absl::Milliseconds(-1)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*lock.IsLocked(), false) << "a rejected call must not lock";
  // Huge and infinite waits are fine when the lock is free.
  EXPECT_OK(lock.TryAcquire(absl::InfiniteDuration()));
  EXPECT_OK(lock.TryAcquire(absl::Hours(24 * 365 * 1000)));
  EXPECT_OK(lock.Release());
  EXPECT_OK(lock.Release());
}

TEST_F(BadInputTest, KeyHoldingAnotherTypeIsFailedPrecondition) {
  const std::string name = TestLockName();
  ASSERT_OK(redis().Command({"SET", name, "not a lock"}));
  const std::string list = TestLockName("list");
  ASSERT_OK(redis().Command({"RPUSH", list, "not a lock"}));
  // Every lock type says what the key holds (a review found the reentrant
  // and fenced locks passing Redis's WRONGTYPE on, with the script's sha).
  for (const std::string& key : {name, list}) {
    const std::string what = key == name ? "holds a string that is not a lock"
                                         : "holds a list that is not a lock";
    const std::pair<const char*, absl::Status> tries[] = {
        {"lock", client_->GetLock(key).TryAcquire(absl::ZeroDuration())},
        {"fenced", client_->GetFencedLock(key)
                       .TryLockAndGetToken(absl::ZeroDuration())
                       .status()},
        {"fair", client_->GetFairLock(key).TryAcquire(absl::ZeroDuration())},
        {"read", client_->GetReadWriteLock(key).ReadLock().TryAcquire(
                     absl::ZeroDuration())},
        {"write", client_->GetReadWriteLock(key).WriteLock().TryAcquire(
                      absl::ZeroDuration())}};
    for (const auto& [type, s] : tries) {
      EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << type << s;
      EXPECT_THAT(std::string(s.message()), HasSubstr("not a lock")) << type;
      EXPECT_THAT(std::string(s.message()), Not(HasSubstr("WRONGTYPE")))
          << type;
    }
    EXPECT_THAT(
        std::string(
            client_->GetLock(key).TryAcquire(absl::ZeroDuration()).message()),
        HasSubstr(what));
  }
  EXPECT_EQ(redis().Command({"GET", name})->str, "not a lock");
  EXPECT_EQ(redis().Command({"LLEN", list})->integer, 1);
}

TEST_F(BadInputTest, DefaultConstructedHandleFailsCleanly) {
  Lock unbound;
  EXPECT_EQ(unbound.Acquire().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(unbound.Release().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THROW(unbound.lock(), LockError);
  unbound.unlock();  // never throws
}

TEST_F(BadInputTest, NegativeStdWaitsAreOneAttemptLikeStdTimedMutex) {
  Lock lock = client_->GetLock(TestLockName());
  EXPECT_TRUE(lock.try_lock_for(std::chrono::milliseconds(-5)));
  lock.unlock();
  EXPECT_TRUE(lock.try_lock_until(std::chrono::steady_clock::now() -
                                  std::chrono::hours(1)));
  lock.unlock();
  EXPECT_TRUE(lock.try_lock_for(std::chrono::hours::max()));  // saturates
  lock.unlock();
  EXPECT_EQ(*lock.IsLocked(), false);
}

TEST_F(BadInputTest, UnlockWithoutLockFromAnyThreadIsReportedNotThrown) {
  Lock lock = client_->GetLock(TestLockName());
  std::thread other([&] { lock.unlock(); });
  other.join();
  lock.unlock();
  int failed = 0;
  for (const LockEvent& e : events_.events()) {
    EXPECT_EQ(e.type, LockEventType::kUnlockFailed);
    EXPECT_EQ(e.status.code(), absl::StatusCode::kFailedPrecondition);
    ++failed;
  }
  EXPECT_EQ(failed, 2);
}

TEST_F(BadInputTest, MalformedUrlsAreInvalidArgumentAtConnect) {
  for (const char* url : {"", "localhost:6379", "redis://:6379", "redis://h:0",
                          "redis://h/abc", "unix://relative"}) {
    ClientOptions options;
    options.url = url;
    EXPECT_EQ(Client::Connect(options).status().code(),
              absl::StatusCode::kInvalidArgument)
        << url;
  }
  // TLS settings that cannot be used are InvalidArgument before connecting.
  ClientOptions tls;
  tls.url = "rediss://127.0.0.1:1";
  tls.tls.ca_file = "/nonexistent/ca.pem";
  EXPECT_EQ(Client::Connect(tls).status().code(),
            absl::StatusCode::kInvalidArgument);
  tls.tls.ca_file.clear();
  tls.tls.cert_file = "/nonexistent/client.pem";
  EXPECT_EQ(Client::Connect(tls).status().code(),
            absl::StatusCode::kInvalidArgument);  // a cert needs its key
  ClientOptions not_tls;
  not_tls.url = "redis://127.0.0.1:1";
  not_tls.tls.ca_file = "/etc/ssl/certs/ca-certificates.crt";
  EXPECT_EQ(Client::Connect(not_tls).status().code(),
            absl::StatusCode::kInvalidArgument);  // would be ignored
}

TEST_F(BadInputTest, AServerThatAcceptsButNeverAnswersIsUnavailableInTime) {
  // A listening socket nobody serves: TCP connects, commands get no reply.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 8), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ClientOptions options;
  options.url =
      absl::StrCat("redis://:secret@127.0.0.1:", ntohs(addr.sin_port));
  options.connect_timeout = absl::Milliseconds(300);
  options.command_timeout = absl::Milliseconds(300);
  Stopwatch watch;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable)
      << client.status();
  EXPECT_LT(watch.Elapsed(), absl::Seconds(2));
  EXPECT_THAT(std::string(client.status().message()),
              ::testing::Not(HasSubstr("secret")));
  close(fd);
}

}  // namespace
}  // namespace relock
