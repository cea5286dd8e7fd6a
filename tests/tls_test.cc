// TLS (rediss://) against a real redis-server with a TLS port and
// certificates the fixture makes with openssl: connect, lock, wait for a
// notification, renew, and the refusals (wrong CA, wrong name, missing client
// certificate), each with a precise status.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "relock/relock.h"
#include "tests/test_util.h"
#include "tests/testing/fake_server.h"
#include "tests/testing/notification.h"
#include "tests/testing/status_matchers.h"

namespace relock {
namespace {

using ::relock::testing::FakeServer;
using ::relock::testing::Notification;
using ::relock::testing::RedisServer;
using ::relock::testing::RedisServerOptions;
using ::relock::testing::Stopwatch;
using ::relock::testing::TestLockName;
using ::testing::HasSubstr;

class TlsTest : public ::testing::Test {
 protected:
  // Starts a TLS server; `auth_clients`: the server's tls-auth-clients.
  void StartServer(const std::string& auth_clients) {
    RedisServerOptions o;
    o.tls = true;
    o.tls_auth_clients = auth_clients;
    absl::StatusOr<std::unique_ptr<RedisServer>> s = RedisServer::Start(o);
    ASSERT_OK(s);
    server_ = *std::move(s);
  }
  ClientOptions Options() const {
    ClientOptions o;
    o.url = server_->tls_url();
    o.tls.ca_file = server_->ca_file();
    o.connect_timeout = absl::Seconds(5);
    return o;
  }
  // Clients connected over TLS, counted by the server.
  int64_t TlsClients() {
    absl::StatusOr<testing::RedisValue> list =
        server_->Command({"CLIENT", "LIST"});
    EXPECT_OK(list);
    int64_t n = 0;
    const std::string port = absl::StrCat(":", server_->tls_port());
    for (size_t at = list->str.find("laddr="); at != std::string::npos;
         at = list->str.find("laddr=", at + 1)) {
      const size_t end = list->str.find(' ', at);
      if (list->str.substr(at, end - at).find(port) != std::string::npos) ++n;
    }
    return n;
  }
  std::unique_ptr<RedisServer> server_;
};

TEST_F(TlsTest, LockWaitAndRenewOverTls) {
  StartServer("no");
  ClientOptions o = Options();
  o.lock_watchdog_timeout = absl::Seconds(2);
  absl::StatusOr<std::unique_ptr<Client>> a = Client::Connect(o);
  ASSERT_OK(a);
  absl::StatusOr<std::unique_ptr<Client>> b = Client::Connect(o);
  ASSERT_OK(b);
  // Both clients' command and pub/sub connections go over TLS.
  EXPECT_EQ(TlsClients(), 4);

  // Renewal over TLS: still held after more than one watchdog lease (it is
  // renewed about every 2/3 s; losing it would take 2 s without renewal).
  const std::string renewed = TestLockName("renewed");
  Lock watched = (*a)->GetLock(renewed);
  ASSERT_OK(watched.Acquire());
  // Time passes on purpose: longer than a lease.
  absl::SleepFor(absl::Milliseconds(2500));
  EXPECT_TRUE(*watched.IsHeldByCurrentThread());
  absl::StatusOr<testing::RedisValue> pttl =
      server_->Command({"PTTL", renewed});
  ASSERT_OK(pttl);
  EXPECT_GT(pttl->integer, 0);
  EXPECT_OK(watched.Release());

  // A waiter on the other client wakes by notification over TLS: the holder
  // has a 60 s lease, so only the unlock message can wake the waiter before
  // its 20 s wait ends.
  const std::string name = TestLockName("waited");
  Lock held = (*a)->GetLock(name);
  ASSERT_OK(held.Acquire(absl::Seconds(60)));
  absl::Status waited;
  Notification waiting;
  std::thread waiter([&] {
    Lock lock = (*b)->GetLock(name);
    waiting.Notify();
    waited = lock.TryAcquire(absl::Seconds(20));
    if (waited.ok()) waited = lock.Release();
  });
  waiting.WaitForNotification();
  EXPECT_OK(
      testing::WaitUntilWaiting(*server_, testing::LockChannel(name), **b));
  ASSERT_OK(held.Release());
  waiter.join();
  EXPECT_OK(waited);
}

TEST_F(TlsTest, MutualTls) {
  StartServer("yes");
  ClientOptions o = Options();
  o.tls.cert_file = server_->client_cert_file();
  o.tls.key_file = server_->client_key_file();
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(o);
  ASSERT_OK(client);
  Lock lock = (*client)->GetLock(TestLockName());
  EXPECT_OK(lock.Acquire());
  EXPECT_OK(lock.Release());
}

TEST_F(TlsTest, MissingClientCertificateIsRefused) {
  StartServer("yes");
  Stopwatch watch;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(Options());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnauthenticated)
      << client.status();
  EXPECT_THAT(std::string(client.status().message()), HasSubstr("TLS"));
  EXPECT_LT(watch.Elapsed(), absl::Seconds(10));
}

TEST_F(TlsTest, WrongCaIsRefused) {
  StartServer("no");
  ClientOptions o = Options();
  o.tls.ca_file = server_->other_ca_file();
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(o);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnauthenticated)
      << client.status();
  EXPECT_THAT(std::string(client.status().message()),
              HasSubstr("certificate verify failed"));
}

TEST_F(TlsTest, ServerNameIsVerified) {
  StartServer("no");
  ClientOptions o = Options();
  o.tls.server_name = "localhost";  // in the certificate's subjectAltName
  absl::StatusOr<std::unique_ptr<Client>> ok = Client::Connect(o);
  EXPECT_OK(ok);
  o.tls.server_name = "redis.example.com";  // not in it
  absl::StatusOr<std::unique_ptr<Client>> wrong = Client::Connect(o);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kUnauthenticated)
      << wrong.status();
  EXPECT_THAT(std::string(wrong.status().message()),
              HasSubstr("redis.example.com"));
}

TEST_F(TlsTest, SkippingVerificationIsExplicit) {
  StartServer("no");
  ClientOptions o = Options();
  o.tls.ca_file = server_->other_ca_file();
  o.tls.dangerously_skip_verification = true;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(o);
  ASSERT_OK(client);
  EXPECT_TRUE((*client)->Ping().ok());
}

TEST_F(TlsTest, PlainUrlToTheTlsPortFailsWithinTheTimeouts) {
  StartServer("no");
  ClientOptions o;
  o.url = absl::StrCat("redis://127.0.0.1:", server_->tls_port());
  o.connect_timeout = absl::Milliseconds(500);
  o.command_timeout = absl::Milliseconds(500);
  Stopwatch watch;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(o);
  EXPECT_FALSE(client.ok());
  EXPECT_LT(watch.Elapsed(), absl::Seconds(5));
}

// Issue 23 item 20: a nonexistent ca_dir was accepted, and the handshake
// failed later as "self-signed certificate in chain".
TEST_F(TlsTest, MissingCaDirIsInvalidArgumentNamingIt) {
  StartServer("no");
  ClientOptions o = Options();
  o.tls.ca_file.clear();
  o.tls.ca_dir = server_->dir() + "/no-such-dir";
  absl::Status s = Client::Connect(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(absl::StrCat("ClientOptions.tls.ca_dir \"",
                                     o.tls.ca_dir, "\": No such file")));
  o.tls.ca_dir = server_->ca_file();  // a file, not a directory
  s = Client::Connect(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("not a directory"));
}

// Issue 23 item 20: a FIFO as ca_file hung Connect past its timeout (OpenSSL
// blocks opening it for reading until a writer comes).
TEST_F(TlsTest, FifoAsCaFileFailsAtOnceInsteadOfHanging) {
  StartServer("no");
  const std::string fifo = server_->dir() + "/ca.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ClientOptions o = Options();
  o.tls.ca_file = fifo;
  o.connect_timeout = absl::Seconds(20);
  // Should Connect block on the FIFO, a writer frees it after a generous
  // bound, so that the test fails rather than hangs.
  std::atomic<bool> done{false};
  std::thread unblock([&] {
    testing::Eventually([&] { return done.load(); }, absl::Seconds(10));
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  });
  Stopwatch watch;
  const absl::Status s = Client::Connect(o).status();
  const absl::Duration took = watch.Elapsed();
  done.store(true);
  unblock.join();
  ::unlink(fifo.c_str());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(absl::StrCat("ClientOptions.tls.ca_file \"", fifo,
                                     "\": is a FIFO")));
  EXPECT_LT(took, absl::Seconds(10));
}

// Issue 23 item 20: rediss:// to a plaintext port took the whole connect
// timeout (a plaintext Redis never answers a ClientHello) and never
// mentioned TLS; an HTTP server there was a "wrong version number".
TEST_F(TlsTest, RedissToAPlaintextPortFailsFastNamingTls) {
  StartServer("no");
  ClientOptions o = Options();
  o.url = absl::StrCat("rediss://127.0.0.1:", server_->port());
  o.connect_timeout = absl::Seconds(20);
  Stopwatch watch;
  absl::Status s = Client::Connect(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(absl::StrCat("the server at 127.0.0.1:",
                                     server_->port(), " does not speak TLS")));
  EXPECT_THAT(std::string(s.message()), HasSubstr("use a redis:// URL"));
  EXPECT_LT(watch.Elapsed(), absl::Seconds(10));

  absl::StatusOr<std::unique_ptr<FakeServer>> http = FakeServer::Start();
  ASSERT_OK(http);
  o.url = absl::StrCat("rediss://", (*http)->address());
  s = Client::Connect(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(absl::StrCat("the server at ", (*http)->address(),
                                     " does not speak TLS")));
  EXPECT_LT(watch.Elapsed(), absl::Seconds(20));
}

// The reverse: redis:// to a TLS port names TLS as the likely reason.
TEST_F(TlsTest, PlainUrlToTheTlsPortNamesTls) {
  StartServer("no");
  ClientOptions o;
  o.url = absl::StrCat("redis://127.0.0.1:", server_->tls_port());
  o.connect_timeout = absl::Seconds(20);
  Stopwatch watch;
  const absl::Status s = Client::Connect(o).status();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("rediss://")) << s;
  EXPECT_LT(watch.Elapsed(), absl::Seconds(10));
}

}  // namespace
}  // namespace relock
