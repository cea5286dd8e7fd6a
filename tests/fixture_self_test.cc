// Tests of the test fixtures themselves: RedisServer and ChildProcess.

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/child_process.h"
#include "tests/testing/eventually.h"
#include "tests/testing/raw_connection.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/spawn.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace relock {
namespace testing {
namespace {

using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::Eq;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// Echoes its args, then each stdin line, until "exit" or EOF; exits with 7.
RELOCK_CHILD_MAIN(EchoUntilEof) {
  std::cout << "args " << absl::StrJoin(args, " ") << std::endl;
  std::string line;
  while (std::getline(std::cin, line) && line != "exit") {
    std::cout << line << std::endl;
  }
  return 7;
}

// PINGs the server on port args[0] and prints the reply.
RELOCK_CHILD_MAIN(PingPort) {
  if (args.size() != 1) return 2;
  absl::StatusOr<RawConnection> c = RawConnection::Connect(std::stoi(args[0]));
  if (!c.ok()) return 3;
  absl::StatusOr<RedisValue> reply = c->Command({"PING"});
  if (!reply.ok()) return 4;
  std::cout << reply->str << std::endl;
  return 0;
}

// Starts a server it never destroys (like a test's leaked static), uses the
// shared server, prints both dirs and returns: a normal exit.
RELOCK_CHILD_MAIN(LeakServersAndExit) {
  if (!args.empty()) return 2;
  absl::StatusOr<std::unique_ptr<RedisServer>> server = RedisServer::Start();
  if (!server.ok()) return 2;
  RedisServer* leaked = server->release();
  std::cout << leaked->dir() << "\n" << SharedRedisServer().dir() << std::endl;
  return 0;
}

// Starts a server, prints its dir, then waits (to be killed).
RELOCK_CHILD_MAIN(StartServerAndWait) {
  if (!args.empty()) return 2;
  absl::StatusOr<std::unique_ptr<RedisServer>> server = RedisServer::Start();
  if (!server.ok()) return 2;
  std::cout << (*server)->dir() << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  return 0;
}

// fork()s a copy that starts a server, prints its dir and _exit()s (no
// destructor, no at-exit handler); reaps the copy and returns its exit code.
RELOCK_CHILD_MAIN(ForkedCopyStartsServerAndExits) {
  if (!args.empty()) return 2;
  const pid_t pid = fork();
  if (pid < 0) return 2;
  if (pid == 0) {
    absl::StatusOr<std::unique_ptr<RedisServer>> server = RedisServer::Start();
    if (server.ok()) std::cout << (*server)->dir() << std::endl;
    _exit(server.ok() ? 0 : 3);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return 4;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 5;
}

// Sets $RELOCK_OPENSSL to args[0], starts a TLS server and prints "ok", or
// the error's code and (escaped, on one line) message.
RELOCK_CHILD_MAIN(StartTlsServerWithOpenssl) {
  if (args.size() != 1) return 2;
  setenv("RELOCK_OPENSSL", args[0].c_str(), 1);  // Still single-threaded.
  RedisServerOptions options;
  options.tls = true;
  absl::StatusOr<std::unique_ptr<RedisServer>> server =
      RedisServer::Start(options);
  if (server.ok()) {
    std::cout << "ok" << std::endl;
  } else {
    std::cout << absl::StatusCodeToString(server.status().code()) << "\n"
              << absl::CEscape(server.status().message()) << std::endl;
  }
  return 0;
}

std::unique_ptr<RedisServer> MustStart(RedisServerOptions options = {}) {
  absl::StatusOr<std::unique_ptr<RedisServer>> server =
      RedisServer::Start(std::move(options));
  EXPECT_OK(server);
  return server.ok() ? *std::move(server) : nullptr;
}

bool ProcessExists(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

bool PathExists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

// /usr/bin/<name>, else the first <name> on $PATH, else empty.
std::string FindTool(const std::string& name) {
  std::vector<std::string> dirs = {"/usr/bin"};
  if (const char* path = getenv("PATH"); path) {
    for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
      dirs.emplace_back(dir);
    }
  }
  for (const std::string& dir : dirs) {
    std::string candidate = absl::StrCat(dir, "/", name);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

struct ToolRun {
  int exit_code = -1;  // 128 + N if killed by signal N.
  std::string output;  // stdout and stderr.
};

// Runs argv (argv[0] a path) through the fixture's Spawn(), with stdin
// /dev/null; kills it after 30 s (DeadlineExceeded).
absl::StatusOr<ToolRun> RunTool(const std::vector<std::string>& argv) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", strerror(errno)));
  }
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  internal::SpawnOptions spawn;
  spawn.path = argv[0];
  spawn.argv = argv;
  spawn.stdin_fd = null_fd;
  spawn.stdout_fd = pipe_fds[1];
  spawn.stderr_fd = pipe_fds[1];
  absl::StatusOr<pid_t> pid = internal::Spawn(spawn);
  close(pipe_fds[1]);
  if (null_fd >= 0) close(null_fd);
  if (!pid.ok()) {
    close(pipe_fds[0]);
    return pid.status();
  }
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  ToolRun run;
  bool timed_out = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd pfd = {pipe_fds[0], POLLIN, 0};
    const int ready =
        poll(&pfd, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      timed_out = true;
      break;
    }
    char buf[4096];
    const ssize_t n = read(pipe_fds[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the tool is done.
    run.output.append(buf, static_cast<size_t>(n));
  }
  close(pipe_fds[0]);
  if (timed_out) kill(*pid, SIGKILL);
  absl::StatusOr<int> status = internal::Reap(*pid);
  if (!status.ok()) return status.status();
  if (timed_out) {
    return absl::DeadlineExceededError(
        absl::StrCat(absl::StrJoin(argv, " "), " ran for 30 s: ", run.output));
  }
  run.exit_code = internal::ExitCodeFromWaitStatus(*status);
  return run;
}

// `redis-cli --tls -h 127.0.0.1 -p <tls_port> <args> PING`.
ToolRun RedisCliPing(const RedisServer& redis,
                     const std::vector<std::string>& args) {
  std::vector<std::string> argv = {
      FindTool("redis-cli"), "--tls", "-h",
      RedisServer::kHost,    "-p",    absl::StrCat(redis.tls_port())};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("PING");
  absl::StatusOr<ToolRun> run = RunTool(argv);
  EXPECT_OK(run);
  return run.ok() ? *std::move(run) : ToolRun{};
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in),
                     std::istreambuf_iterator<char>());
}

// Removes a temp dir of this test when it goes out of scope.
struct ScopedTempDir {
  ScopedTempDir() {
    absl::StatusOr<std::string> made = internal::MakeTempDir();
    EXPECT_OK(made);
    if (made.ok()) path = *made;
  }
  ~ScopedTempDir() {
    if (!path.empty()) internal::RemoveTree(path);
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;
  std::string path;
};

// ------------------------------------------------------------ RedisServer --

TEST(RedisServerTest, StartsAndAnswersPing) {
  std::unique_ptr<RedisServer> redis = MustStart();
  ASSERT_NE(redis, nullptr);
  EXPECT_TRUE(redis->running());
  EXPECT_GT(redis->pid(), 0);
  EXPECT_GT(redis->port(), 0);
  EXPECT_NE(redis->port(), 6379);
  EXPECT_EQ(redis->url(), absl::StrCat("redis://127.0.0.1:", redis->port()));
  EXPECT_EQ(redis->unix_url(), "");
  EXPECT_EQ(redis->socket_path(), "");
  EXPECT_EQ(redis->tls_port(), 0);
  EXPECT_EQ(redis->tls_url(), "");
  EXPECT_EQ(redis->ca_file(), "");
  EXPECT_EQ(redis->other_ca_file(), "");
  EXPECT_EQ(redis->client_cert_file(), "");
  EXPECT_EQ(redis->client_key_file(), "");

  absl::StatusOr<RedisValue> pong = redis->Command({"PING"});
  ASSERT_OK(pong);
  EXPECT_EQ(pong->type, RedisValue::Type::kStatus);
  EXPECT_EQ(pong->str, "PONG");
  EXPECT_EQ(pong->DebugString(), "(status) PONG");
}

TEST(RedisServerTest, CommandDecodesEveryReplyType) {
  std::unique_ptr<RedisServer> redis = MustStart();
  ASSERT_NE(redis, nullptr);
  EXPECT_TRUE(redis->Command({"SET", "k", std::string("v\0w", 3)})->is_ok());
  RedisValue value = *redis->Command({"GET", "k"});
  EXPECT_TRUE(value.is_string());
  EXPECT_EQ(value.str, std::string("v\0w", 3));
  EXPECT_THAT(value.DebugString(), AnyOf(Eq("\"v\\x00w\""), Eq("\"v\\000w\"")));
  EXPECT_TRUE(redis->Command({"GET", "missing"})->is_nil());
  EXPECT_EQ(redis->Command({"GET", "missing"})->DebugString(), "nil");
  RedisValue integer = *redis->Command({"HSET", "h", "f", "1"});
  EXPECT_TRUE(integer.is_integer());
  EXPECT_EQ(integer.integer, 1);
  RedisValue array = *redis->Command({"HGETALL", "h"});
  ASSERT_TRUE(array.is_array());
  ASSERT_EQ(array.elements.size(), 2u);
  EXPECT_EQ(array.elements[0].str, "f");
  EXPECT_EQ(array.DebugString(), "[\"f\", \"1\"]");
  RedisValue error = *redis->Command({"NOSUCHCOMMAND"});
  EXPECT_TRUE(error.is_error());
  EXPECT_THAT(error.str, StartsWith("ERR"));
  // The DEBUG command is enabled (Redis >= 7 disables it by default).
  EXPECT_TRUE(redis->Command({"DEBUG", "SLEEP", "0"})->is_ok());
  EXPECT_OK(redis->FlushAll());
  EXPECT_EQ(redis->Command({"DBSIZE"})->integer, 0);
}

TEST(RedisServerTest, UnixSocketIsCreated) {
  RedisServerOptions options;
  options.unix_socket = true;
  std::unique_ptr<RedisServer> redis = MustStart(options);
  ASSERT_NE(redis, nullptr);
  ASSERT_FALSE(redis->socket_path().empty());
  EXPECT_LT(redis->socket_path().size(), 100u);
  EXPECT_EQ(redis->unix_url(), "unix://" + redis->socket_path());
  struct stat st;
  ASSERT_EQ(stat(redis->socket_path().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));

  absl::StatusOr<RawConnection> c =
      RawConnection::ConnectUnix(redis->socket_path());
  ASSERT_OK(c);
  absl::StatusOr<RedisValue> reply = c->Command({"PING"});
  ASSERT_OK(reply);
  EXPECT_EQ(reply->str, "PONG");
}

TEST(RedisServerTest, RequirePassIsEnforcedAndUsedByCommand) {
  RedisServerOptions options;
  options.requirepass = "s3cret/pw";
  options.unix_socket = true;
  std::unique_ptr<RedisServer> redis = MustStart(options);
  ASSERT_NE(redis, nullptr);
  EXPECT_EQ(redis->url(),
            absl::StrCat("redis://:s3cret%2Fpw@127.0.0.1:", redis->port()));
  EXPECT_EQ(redis->unix_url(), absl::StrCat("unix://", redis->socket_path(),
                                            "?password=s3cret%2Fpw"));
  EXPECT_EQ(redis->Command({"PING"})->str, "PONG");

  absl::StatusOr<RawConnection> raw = RawConnection::Connect(redis->port());
  ASSERT_OK(raw);
  absl::StatusOr<RedisValue> refused = raw->Command({"PING"});
  ASSERT_OK(refused);
  EXPECT_TRUE(refused->is_error()) << *refused;
  EXPECT_THAT(refused->str, StartsWith("NOAUTH"));
}

TEST(RedisServerTest, ExtraArgsReachTheServer) {
  RedisServerOptions options;
  options.extra_args = {"--maxmemory", "10mb"};
  std::unique_ptr<RedisServer> redis = MustStart(options);
  ASSERT_NE(redis, nullptr);
  RedisValue config = *redis->Command({"CONFIG", "GET", "maxmemory"});
  ASSERT_EQ(config.elements.size(), 2u) << config;
  EXPECT_EQ(config.elements[1].str, "10485760");
}

TEST(RedisServerTest, StartFailureQuotesTheServerLog) {
  RedisServerOptions options;
  options.extra_args = {"--no-such-directive", "1"};
  absl::StatusOr<std::unique_ptr<RedisServer>> redis =
      RedisServer::Start(options);
  ASSERT_FALSE(redis.ok());
  EXPECT_THAT(redis.status().message(), HasSubstr("no-such-directive"));
}

TEST(RedisServerTest, StopAndRestartKeepThePortAndLoseTheData) {
  std::unique_ptr<RedisServer> redis = MustStart();
  ASSERT_NE(redis, nullptr);
  const int port = redis->port();
  const pid_t old_pid = redis->pid();
  ASSERT_TRUE(redis->Command({"SET", "k", "v"})->is_ok());

  ASSERT_OK(redis->Stop());
  EXPECT_FALSE(redis->running());
  EXPECT_EQ(redis->pid(), -1);
  EXPECT_FALSE(ProcessExists(old_pid));
  absl::StatusOr<RedisValue> refused = redis->Command({"PING"});
  EXPECT_TRUE(absl::IsUnavailable(refused.status())) << refused.status();
  EXPECT_OK(redis->Stop()) << "Stop() is idempotent";
  EXPECT_TRUE(absl::IsFailedPrecondition(redis->Pause()));

  ASSERT_OK(redis->Restart());
  EXPECT_TRUE(redis->running());
  EXPECT_EQ(redis->port(), port);
  EXPECT_TRUE(redis->Command({"GET", "k"})->is_nil());

  // Restart while running.
  ASSERT_TRUE(redis->Command({"SET", "k", "v"})->is_ok());
  ASSERT_OK(redis->Restart());
  EXPECT_EQ(redis->port(), port);
  EXPECT_TRUE(redis->Command({"GET", "k"})->is_nil());
}

TEST(RedisServerTest, PauseMakesCommandsTimeOutAndResumeRecovers) {
  std::unique_ptr<RedisServer> redis = MustStart();
  ASSERT_NE(redis, nullptr);
  ASSERT_OK(redis->Pause());
  EXPECT_TRUE(redis->running());
  {
    const auto start = std::chrono::steady_clock::now();
    RawConnectionOptions quick;
    quick.connect_timeout = absl::Milliseconds(200);
    quick.command_timeout = absl::Milliseconds(200);
    absl::StatusOr<RawConnection> raw =
        RawConnection::Connect(redis->port(), quick);
    ASSERT_OK(raw);  // the kernel accepts for the stopped process
    absl::StatusOr<RedisValue> reply = raw->Command({"PING"});
    const absl::Duration elapsed =
        absl::FromChrono(std::chrono::steady_clock::now() - start);
    EXPECT_FALSE(reply.ok()) << "a paused server answered: " << *reply;
    EXPECT_GE(elapsed, absl::Milliseconds(150));
    EXPECT_LT(elapsed, absl::Seconds(3));
  }
  ASSERT_OK(redis->Resume());
  absl::StatusOr<RedisValue> pong = redis->Command({"PING"});
  ASSERT_OK(pong);
  EXPECT_EQ(pong->str, "PONG");

  // Stop() works on a paused server too.
  ASSERT_OK(redis->Pause());
  ASSERT_OK(redis->Stop());
  EXPECT_FALSE(redis->running());
}

TEST(RedisServerTest, KillEndsTheProcessAndRestartRecovers) {
  std::unique_ptr<RedisServer> redis = MustStart();
  ASSERT_NE(redis, nullptr);
  const pid_t pid = redis->pid();
  ASSERT_OK(redis->Kill());
  EXPECT_FALSE(redis->running());
  EXPECT_FALSE(ProcessExists(pid));
  EXPECT_FALSE(redis->Command({"PING"}).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(redis->Kill()));
  ASSERT_OK(redis->Restart());
  EXPECT_EQ(redis->Command({"PING"})->str, "PONG");
}

TEST(RedisServerTest, ServerThatShutsItselfDownCountsAsStopped) {
  std::unique_ptr<RedisServer> redis = MustStart();
  ASSERT_NE(redis, nullptr);
  (void)redis->Command({"SHUTDOWN", "NOSAVE"});  // No reply: the server exits.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (redis->running() && std::chrono::steady_clock::now() < deadline) {
    usleep(10000);
  }
  EXPECT_FALSE(redis->running());
  ASSERT_OK(redis->Restart());
  EXPECT_TRUE(redis->running());
}

TEST(RedisServerTest, TwoServersRunAtOnce) {
  std::unique_ptr<RedisServer> a = MustStart();
  std::unique_ptr<RedisServer> b = MustStart();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a->port(), b->port());
  EXPECT_NE(a->dir(), b->dir());
  ASSERT_TRUE(a->Command({"SET", "k", "a"})->is_ok());
  EXPECT_TRUE(b->Command({"GET", "k"})->is_nil());
  EXPECT_EQ(a->Command({"GET", "k"})->str, "a");
}

TEST(RedisServerTest, DestructorStopsTheServerAndRemovesTheDir) {
  std::unique_ptr<RedisServer> redis = MustStart();
  ASSERT_NE(redis, nullptr);
  const pid_t pid = redis->pid();
  const std::string dir = redis->dir();
  struct stat st;
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  redis.reset();
  EXPECT_FALSE(ProcessExists(pid));
  EXPECT_NE(stat(dir.c_str(), &st), 0);
}

// Regression: every test run left about five /tmp/relock-test-* dirs behind,
// those of servers never destroyed (redlock_test keeps its five in a leaked
// static), and a process killed or _exit()ed leaves those of its servers.
TEST(RedisServerTest, TempDirsAreRemovedAtExitForServersNeverDestroyed) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Spawn("LeakServersAndExit");
  ASSERT_OK(child);
  absl::StatusOr<std::string> leaked = (*child)->ReadLine(absl::Seconds(30));
  absl::StatusOr<std::string> shared = (*child)->ReadLine(absl::Seconds(30));
  ASSERT_EQ(*(*child)->Wait(absl::Seconds(30)), 0);
  ASSERT_TRUE(leaked.ok() && shared.ok());
  EXPECT_THAT(*leaked, HasSubstr("/relock-test-"));
  EXPECT_FALSE(PathExists(*leaked)) << "a leaked server's dir survived exit";
  EXPECT_FALSE(PathExists(*shared)) << "the shared server's dir survived exit";
}

TEST(RedisServerTest, TempDirsAreRemovedWhenAKilledChildIsReaped) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Spawn("StartServerAndWait");
  ASSERT_OK(child);
  absl::StatusOr<std::string> dir = (*child)->ReadLine(absl::Seconds(30));
  ASSERT_OK(dir);
  EXPECT_TRUE(PathExists(*dir));
  ASSERT_TRUE((*child)->Signal(SIGKILL).ok());
  EXPECT_EQ(*(*child)->Wait(absl::Seconds(30)), 128 + SIGKILL);
  EXPECT_FALSE(PathExists(*dir)) << "a killed child's server dir survived";
}

TEST(RedisServerTest,
     TempDirsAreRemovedForAForkedCopyThatExitedWithoutCleanup) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Spawn("ForkedCopyStartsServerAndExits");
  ASSERT_OK(child);
  absl::StatusOr<std::string> dir = (*child)->ReadLine(absl::Seconds(30));
  ASSERT_EQ(*(*child)->Wait(absl::Seconds(30)), 0);
  ASSERT_OK(dir);
  EXPECT_FALSE(PathExists(*dir)) << "an _exit()ed fork's server dir survived";
}

// Regression: under Bazel, whose sandbox gives each test a PID namespace of
// its own, a test removed the live dirs of another (same pid, or a pid it
// could not see) and that test's server could not restart. A dir is removed
// only once no process holds its lock, whatever its pid says.
TEST(RedisServerTest, TempDirsOfALiveOwnerInAnotherPidNamespaceAreKept) {
  // A pid that no process of this namespace has: a reaped child's.
  const pid_t gone = fork();
  ASSERT_GE(gone, 0);
  if (gone == 0) _exit(0);
  ASSERT_EQ(waitpid(gone, nullptr, 0), gone);
  const std::string name = absl::StrCat("/tmp/relock-test-", gone, "-AbCdEf");
  ASSERT_EQ(mkdir(name.c_str(), 0700), 0) << strerror(errno);
  const std::string owner_file = absl::StrCat(name, "/.owner");
  // The owner, as a process elsewhere would: its own open file, locked.
  const int owner =
      open(owner_file.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
  ASSERT_GE(owner, 0) << strerror(errno);
  ASSERT_EQ(flock(owner, LOCK_EX), 0);

  internal::RemoveOrphanedTempDirs();
  internal::RemoveTempDirsOf(gone);
  EXPECT_TRUE(PathExists(name)) << "a live owner's dir was removed";

  close(owner);  // the owner ends
  internal::RemoveTempDirsOf(gone);
  EXPECT_FALSE(PathExists(name)) << "an ended owner's dir was kept";
  internal::RemoveTree(name);
}

TEST(RedisServerTest, ServerStartedByAShortLivedThreadOutlivesIt) {
  // PR_SET_PDEATHSIG follows the forking *thread*: the fixture must not fork
  // from the calling thread.
  std::unique_ptr<RedisServer> redis;
  std::thread([&redis] { redis = MustStart(); }).join();
  ASSERT_NE(redis, nullptr);
  usleep(100 * 1000);
  EXPECT_TRUE(redis->running());
  EXPECT_EQ(redis->Command({"PING"})->str, "PONG");
}

// --------------------------------------------------------- RedisServer TLS --

TEST(RedisServerTlsTest, ServerAnswersRedisCliOnTheTlsPort) {
  if (FindTool("redis-cli").empty()) GTEST_SKIP() << "no redis-cli";
  RedisServerOptions options;
  options.tls = true;
  std::unique_ptr<RedisServer> redis = MustStart(options);
  ASSERT_NE(redis, nullptr);
  EXPECT_GT(redis->tls_port(), 0);
  EXPECT_NE(redis->tls_port(), 6379);
  EXPECT_NE(redis->tls_port(), redis->port());
  EXPECT_EQ(redis->tls_url(),
            absl::StrCat("rediss://127.0.0.1:", redis->tls_port()));
  EXPECT_EQ(redis->url(), absl::StrCat("redis://127.0.0.1:", redis->port()));
  for (const std::string& file :
       {redis->ca_file(), redis->other_ca_file(), redis->client_cert_file(),
        redis->client_key_file()}) {
    EXPECT_THAT(file, StartsWith(redis->dir() + "/"));
    EXPECT_THAT(ReadFile(file), HasSubstr("-----BEGIN ")) << file;
  }

  ToolRun run = RedisCliPing(*redis, {"--cacert", redis->ca_file()});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output, "PONG\n");

  // The plaintext port stays, for Command().
  absl::StatusOr<RedisValue> pong = redis->Command({"PING"});
  ASSERT_OK(pong);
  EXPECT_EQ(pong->str, "PONG");
  RedisValue tls_port = *redis->Command({"CONFIG", "GET", "tls-port"});
  ASSERT_EQ(tls_port.elements.size(), 2u) << tls_port;
  EXPECT_EQ(tls_port.elements[1].str, absl::StrCat(redis->tls_port()));

  const std::string dir = redis->dir();
  redis.reset();
  EXPECT_FALSE(PathExists(dir)) << "the certificates survived the server";
}

TEST(RedisServerTlsTest, AuthClientsYesRequiresTheClientCertificate) {
  if (FindTool("redis-cli").empty()) GTEST_SKIP() << "no redis-cli";
  RedisServerOptions options;
  options.tls = true;
  options.tls_auth_clients = "yes";
  std::unique_ptr<RedisServer> redis = MustStart(options);
  ASSERT_NE(redis, nullptr);

  ToolRun without = RedisCliPing(*redis, {"--cacert", redis->ca_file()});
  EXPECT_NE(without.exit_code, 0) << without.output;
  EXPECT_THAT(without.output, Not(HasSubstr("PONG")));

  ToolRun with = RedisCliPing(
      *redis, {"--cacert", redis->ca_file(), "--cert",
               redis->client_cert_file(), "--key", redis->client_key_file()});
  EXPECT_EQ(with.exit_code, 0) << with.output;
  EXPECT_EQ(with.output, "PONG\n");
}

TEST(RedisServerTlsTest, OtherCaFailsVerification) {
  if (FindTool("redis-cli").empty()) GTEST_SKIP() << "no redis-cli";
  RedisServerOptions options;
  options.tls = true;
  std::unique_ptr<RedisServer> redis = MustStart(options);
  ASSERT_NE(redis, nullptr);
  EXPECT_NE(ReadFile(redis->other_ca_file()), ReadFile(redis->ca_file()));

  ToolRun run = RedisCliPing(*redis, {"--cacert", redis->other_ca_file()});
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("certificate verify failed"));
}

TEST(RedisServerTlsTest, CertificateVerifiesFor127001AndLocalhostOnly) {
  const std::string openssl = FindTool("openssl");
  ASSERT_FALSE(openssl.empty());
  RedisServerOptions options;
  options.tls = true;
  std::unique_ptr<RedisServer> redis = MustStart(options);
  ASSERT_NE(redis, nullptr);
  // openssl s_client checks the name as a client library would; with stdin
  // at EOF it ends after the handshake.
  auto connect = [&](const std::string& flag, const std::string& name) {
    absl::StatusOr<ToolRun> run = RunTool(
        {openssl, "s_client", "-connect",
         absl::StrCat(RedisServer::kHost, ":", redis->tls_port()), "-CAfile",
         redis->ca_file(), "-verify_return_error", "-brief", flag, name});
    EXPECT_OK(run);
    return run.ok() ? *std::move(run) : ToolRun{};
  };
  ToolRun ip = connect("-verify_ip", "127.0.0.1");
  EXPECT_EQ(ip.exit_code, 0) << ip.output;
  ToolRun localhost = connect("-verify_hostname", "localhost");
  EXPECT_EQ(localhost.exit_code, 0) << localhost.output;
  ToolRun other = connect("-verify_hostname", "example.com");
  EXPECT_NE(other.exit_code, 0) << other.output;
  EXPECT_THAT(other.output, HasSubstr("hostname mismatch"));
}

TEST(RedisServerTlsTest, TlsUrlCarriesThePassword) {
  if (FindTool("redis-cli").empty()) GTEST_SKIP() << "no redis-cli";
  RedisServerOptions options;
  options.tls = true;
  options.requirepass = "s3cret/pw";
  std::unique_ptr<RedisServer> redis = MustStart(options);
  ASSERT_NE(redis, nullptr);
  EXPECT_EQ(redis->tls_url(), absl::StrCat("rediss://:s3cret%2Fpw@127.0.0.1:",
                                           redis->tls_port()));
  EXPECT_EQ(redis->Command({"PING"})->str, "PONG");
  ToolRun run =
      RedisCliPing(*redis, {"--cacert", redis->ca_file(), "--no-auth-warning",
                            "-a", options.requirepass});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output, "PONG\n");
}

TEST(RedisServerTlsTest, RestartKeepsThePortsAndTheCertificates) {
  if (FindTool("redis-cli").empty()) GTEST_SKIP() << "no redis-cli";
  RedisServerOptions options;
  options.tls = true;
  std::unique_ptr<RedisServer> redis = MustStart(options);
  ASSERT_NE(redis, nullptr);
  const int port = redis->port();
  const int tls_port = redis->tls_port();
  const std::string ca = ReadFile(redis->ca_file());
  const std::string client_cert = ReadFile(redis->client_cert_file());

  ASSERT_OK(redis->Restart());
  EXPECT_EQ(redis->port(), port);
  EXPECT_EQ(redis->tls_port(), tls_port);
  EXPECT_EQ(ReadFile(redis->ca_file()), ca);
  EXPECT_EQ(ReadFile(redis->client_cert_file()), client_cert);
  ToolRun run = RedisCliPing(*redis, {"--cacert", redis->ca_file()});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output, "PONG\n");
}

TEST(RedisServerTlsTest, BadAuthClientsValueIsInvalidArgument) {
  RedisServerOptions options;
  options.tls = true;
  options.tls_auth_clients = "required";
  absl::StatusOr<std::unique_ptr<RedisServer>> redis =
      RedisServer::Start(options);
  EXPECT_TRUE(absl::IsInvalidArgument(redis.status())) << redis.status();
}

TEST(RedisServerTlsTest, MissingOpensslIsNotFound) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Spawn(
      "StartTlsServerWithOpenssl", {"/nonexistent/openssl"});
  ASSERT_OK(child);
  EXPECT_EQ(*(*child)->ReadLine(absl::Seconds(30)), "NOT_FOUND");
  EXPECT_THAT(*(*child)->ReadLine(absl::Seconds(30)),
              HasSubstr("$RELOCK_OPENSSL=/nonexistent/openssl"));
  EXPECT_EQ(*(*child)->Wait(absl::Seconds(30)), 0);
}

TEST(RedisServerTlsTest, FailingOpensslIsInternalAndQuotesItsStderr) {
  // A stand-in for openssl that fails the way it does: a message on stderr.
  ScopedTempDir tmp;
  ASSERT_FALSE(tmp.path.empty());
  const std::string fake = tmp.path + "/openssl";
  {
    std::ofstream out(fake);
    out << "#!/bin/sh\necho \"fake openssl: cannot do $1\" >&2\nexit 3\n";
  }
  ASSERT_EQ(chmod(fake.c_str(), 0700), 0);
  absl::StatusOr<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Spawn("StartTlsServerWithOpenssl", {fake});
  ASSERT_OK(child);
  EXPECT_EQ(*(*child)->ReadLine(absl::Seconds(30)), "INTERNAL");
  absl::StatusOr<std::string> message = (*child)->ReadLine(absl::Seconds(30));
  ASSERT_OK(message);
  EXPECT_THAT(*message, HasSubstr("fake openssl: cannot do req"));
  EXPECT_THAT(*message, HasSubstr("exit code 3"));
  EXPECT_EQ(*(*child)->Wait(absl::Seconds(30)), 0);
}

TEST(RedisServerTest, SharedServerIsOneRunningServer) {
  RedisServer& shared = SharedRedisServer();
  EXPECT_EQ(&shared, &SharedRedisServer());
  EXPECT_TRUE(shared.running());
  EXPECT_EQ(shared.Command({"PING"})->str, "PONG");
  EXPECT_OK(shared.FlushAll());
}

// ----------------------------------------------------------- ChildProcess --

TEST(ChildProcessTest, EchoesLinesAndExitsWithItsCode) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Spawn("EchoUntilEof", {"a", "b c"});
  ASSERT_OK(child);
  ChildProcess& c = **child;
  EXPECT_GT(c.pid(), 0);
  EXPECT_EQ(*c.ReadLine(absl::Seconds(10)), "args a b c");
  ASSERT_OK(c.WriteLine("hello"));
  ASSERT_OK(c.WriteLine("world"));
  EXPECT_EQ(*c.ReadLine(absl::Seconds(10)), "hello");
  EXPECT_EQ(*c.ReadLine(absl::Seconds(10)), "world");
  ASSERT_OK(c.CloseStdin());
  absl::StatusOr<int> code = c.Wait(absl::Seconds(10));
  ASSERT_OK(code);
  EXPECT_EQ(*code, 7);
  EXPECT_EQ(*c.Wait(absl::Seconds(1)), 7) << "the code is kept";
  EXPECT_TRUE(absl::IsOutOfRange(c.ReadLine(absl::Seconds(1)).status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(c.Signal(SIGTERM)));
  EXPECT_FALSE(c.WriteLine("too late").ok());
}

TEST(ChildProcessTest, ExitLineEndsTheChild) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Spawn("EchoUntilEof", {});
  ASSERT_OK(child);
  EXPECT_EQ(*(*child)->ReadLine(absl::Seconds(10)), "args ");
  ASSERT_TRUE((*child)->WriteLine("exit").ok());
  EXPECT_EQ(*(*child)->Wait(absl::Seconds(10)), 7);
}

TEST(ChildProcessTest, SigkillGives128Plus9) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Spawn("EchoUntilEof", {});
  ASSERT_OK(child);
  ASSERT_TRUE((*child)->ReadLine(absl::Seconds(10)).ok());
  ASSERT_TRUE((*child)->Signal(SIGKILL).ok());
  absl::StatusOr<int> code = (*child)->Wait(absl::Seconds(10));
  ASSERT_OK(code);
  EXPECT_EQ(*code, 128 + SIGKILL);
}

TEST(ChildProcessTest, ReadLineAndWaitTimeOut) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Spawn("EchoUntilEof", {});
  ASSERT_OK(child);
  ASSERT_TRUE((*child)->ReadLine(absl::Seconds(10)).ok());
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> line =
      (*child)->ReadLine(absl::Milliseconds(200));
  const absl::Duration elapsed =
      absl::FromChrono(std::chrono::steady_clock::now() - start);
  EXPECT_TRUE(absl::IsDeadlineExceeded(line.status())) << line.status();
  EXPECT_GE(elapsed, absl::Milliseconds(190));
  EXPECT_LT(elapsed, absl::Seconds(3));
  EXPECT_TRUE(absl::IsDeadlineExceeded(
      (*child)->Wait(absl::Milliseconds(50)).status()));
  // Still usable after the timeouts.
  ASSERT_TRUE((*child)->WriteLine("again").ok());
  EXPECT_EQ(*(*child)->ReadLine(absl::Seconds(10)), "again");
}

TEST(ChildProcessTest, DestructorKillsTheChild) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Spawn("EchoUntilEof", {});
  ASSERT_OK(child);
  const pid_t pid = (*child)->pid();
  ASSERT_TRUE((*child)->ReadLine(absl::Seconds(10)).ok());
  child->reset();
  EXPECT_FALSE(ProcessExists(pid));
}

TEST(ChildProcessTest, UnknownRoutineFails) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Spawn("NoSuchRoutine", {});
  ASSERT_OK(child);
  EXPECT_EQ(*(*child)->Wait(absl::Seconds(10)), 125);
}

TEST(ChildProcessTest, ChildTalksToTheSharedServer) {
  RedisServer& redis = SharedRedisServer();
  absl::StatusOr<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Spawn("PingPort", {absl::StrCat(redis.port())});
  ASSERT_OK(child);
  EXPECT_EQ(*(*child)->ReadLine(absl::Seconds(10)), "PONG");
  EXPECT_EQ(*(*child)->Wait(absl::Seconds(10)), 0);
}

// The status matchers (tests/testing/status_matchers.h) accept what they
// should, reject what they should, and say why.
TEST(StatusMatchersTest, MatchStatusesAndStatusOrsByCodeMessageAndValue) {
  const absl::Status ok = absl::OkStatus();
  const absl::Status bad = absl::InvalidArgumentError("lease too short");
  const absl::StatusOr<int> three = 3;
  const absl::StatusOr<int> missing = absl::NotFoundError("no such lock");

  EXPECT_OK(ok);
  EXPECT_OK(three);
  EXPECT_THAT(bad, Not(IsOk()));
  EXPECT_THAT(missing, Not(IsOk()));
  EXPECT_THAT(bad, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(bad,
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lease")));
  EXPECT_THAT(bad, Not(StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("owner"))));
  EXPECT_THAT(missing, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(three, StatusIs(absl::StatusCode::kOk));
  EXPECT_THAT(three, IsOkAndHolds(3));
  EXPECT_THAT(three, IsOkAndHolds(::testing::Gt(2)));
  EXPECT_THAT(three, Not(IsOkAndHolds(4)));
  EXPECT_THAT(missing, Not(IsOkAndHolds(3)));

  // A failure names the status it saw.
  ::testing::StringMatchResultListener why;
  EXPECT_FALSE(::testing::ExplainMatchResult(IsOk(), bad, &why));
  EXPECT_THAT(why.str(), HasSubstr("INVALID_ARGUMENT: lease too short"));
  ::testing::StringMatchResultListener why_not;
  EXPECT_FALSE(
      ::testing::ExplainMatchResult(IsOkAndHolds(3), missing, &why_not));
  EXPECT_THAT(why_not.str(), HasSubstr("NOT_FOUND: no such lock"));
  const ::testing::AssertionResult not_ok =
      status_internal::IsOkFormat("Find(name)", missing);
  EXPECT_FALSE(not_ok);
  EXPECT_STREQ(not_ok.message(),
               "Find(name) is not OK: NOT_FOUND: no such lock");
}

// --- RawConnection (tests/testing/raw_connection.h) --------------------------

TEST(RawConnectionTest, RunsCommandsAndReadsPushes) {
  RedisServer& redis = SharedRedisServer();
  absl::StatusOr<RawConnection> c = RawConnection::Connect(redis.port());
  ASSERT_OK(c);
  EXPECT_EQ(c->where(), absl::StrCat("127.0.0.1:", redis.port()));
  ASSERT_OK(c->Command({"SET", "raw:k", std::string("v\0w", 3)}));
  absl::StatusOr<RedisValue> got = c->Command({"GET", "raw:k"});
  ASSERT_OK(got);
  EXPECT_EQ(got->str, std::string("v\0w", 3));  // binary-safe
  // An error reply is a reply, not an error Status.
  absl::StatusOr<RedisValue> wrong = c->Command({"HGET", "raw:k", "f"});
  ASSERT_OK(wrong);
  EXPECT_TRUE(wrong->is_error()) << *wrong;
  absl::StatusOr<RawReply> raw = c->Call({"STRLEN", "raw:k"});
  ASSERT_OK(raw);
  EXPECT_EQ((*raw)->type, REDIS_REPLY_INTEGER);
  EXPECT_EQ((*raw)->integer, 3);
  EXPECT_THAT(c->Command({}), StatusIs(absl::StatusCode::kInvalidArgument));

  // A subscriber reads the published message as a push.
  absl::StatusOr<RawConnection> sub = RawConnection::Connect(redis.port());
  ASSERT_OK(sub);
  ASSERT_OK(sub->Command({"SUBSCRIBE", "raw:channel"}));
  ASSERT_OK(c->Command({"PUBLISH", "raw:channel", "hello"}));
  absl::StatusOr<RedisValue> message = sub->NextReply();
  ASSERT_OK(message);
  ASSERT_EQ(message->elements.size(), 3u) << *message;
  EXPECT_EQ(message->elements[0].str, "message");
  EXPECT_EQ(message->elements[2].str, "hello");
  // Nothing more: the read times out (DeadlineExceeded), the connection is
  // done for.
  ASSERT_OK(sub->SetTimeout(absl::Milliseconds(50)));
  EXPECT_THAT(sub->NextReply(), StatusIs(absl::StatusCode::kDeadlineExceeded));
  ASSERT_OK(c->Command({"DEL", "raw:k"}));
}

TEST(RawConnectionTest, AuthenticatesAndFailsWithAStatus) {
  RedisServerOptions options;
  options.requirepass = "pw";
  std::unique_ptr<RedisServer> redis = MustStart(options);
  ASSERT_NE(redis, nullptr);
  RawConnectionOptions with_password;
  with_password.password = "pw";
  absl::StatusOr<RawConnection> c =
      RawConnection::Connect(redis->port(), with_password);
  ASSERT_OK(c);
  EXPECT_EQ(c->Command({"PING"})->str, "PONG");
  with_password.password = "wrong";
  EXPECT_THAT(RawConnection::Connect(redis->port(), with_password),
              StatusIs(absl::StatusCode::kPermissionDenied));
  const int port = redis->port();
  redis.reset();  // nobody listens there now
  EXPECT_THAT(RawConnection::Connect(port),
              StatusIs(absl::StatusCode::kUnavailable));
}

// --- Eventually and the waits (tests/testing/eventually.h) ------------------

TEST(EventuallyTest, ReturnsOnceTheConditionHoldsAndFailsAtTheLimit) {
  int looks = 0;
  EXPECT_TRUE(Eventually([&] { return ++looks == 3; }));
  EXPECT_EQ(looks, 3);

  // Never true: false once the limit passed, after growing pauses (a fixed
  // 1 ms poll would look about 200 times, growing ones some 20 times).
  looks = 0;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(Eventually(
      [&] {
        ++looks;
        return false;
      },
      absl::Milliseconds(200)));
  EXPECT_GE(absl::FromChrono(std::chrono::steady_clock::now() - start),
            absl::Milliseconds(200));
  EXPECT_GE(looks, 2);
  EXPECT_LT(looks, 100);

  EXPECT_OK(WaitUntil("at once", [] { return true; }));
  EXPECT_THAT(
      WaitUntil(
          "the impossible", [] { return false; }, absl::Milliseconds(10)),
      StatusIs(absl::StatusCode::kDeadlineExceeded,
               HasSubstr("the impossible: not within 10ms")));
}

TEST(EventuallyTest, WaitForSubscribersSeesSubscribersComeAndGo) {
  RedisServer& redis = SharedRedisServer();
  const std::string channel = "eventually:channel";
  EXPECT_OK(WaitForSubscribers(redis, channel, 0));
  {
    absl::StatusOr<RawConnection> classic =
        RawConnection::Connect(redis.port());
    ASSERT_OK(classic);
    ASSERT_OK(classic->Command({"SUBSCRIBE", channel}));
    absl::StatusOr<RawConnection> sharded =
        RawConnection::Connect(redis.port());
    ASSERT_OK(sharded);
    ASSERT_OK(sharded->Command({"SSUBSCRIBE", channel}));
    EXPECT_OK(WaitForSubscribers(redis, channel, 1));
    EXPECT_OK(WaitForSubscribers(redis, channel, 1, PubSub::kSharded));
    EXPECT_THAT(Subscribers(redis, channel), IsOkAndHolds(1));
    EXPECT_THAT(WaitForSubscribers(redis, channel, 2, PubSub::kClassic,
                                   absl::Milliseconds(50)),
                StatusIs(absl::StatusCode::kDeadlineExceeded,
                         AllOf(HasSubstr(channel), HasSubstr("(integer) 1"))));
  }
  // The connections are freed with their RawConnection: no subscriber left.
  EXPECT_OK(WaitForSubscribers(redis, channel, 0));
  EXPECT_OK(WaitForSubscribers(redis, channel, 0, PubSub::kSharded));
}

TEST(EventuallyTest, WaitForKeyGoneAndWaitForField) {
  RedisServer& redis = SharedRedisServer();
  ASSERT_OK(redis.Command({"SET", "eventually:leased", "1", "PX", "200"}));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_OK(WaitForKeyGone(redis, "eventually:leased"));
  // Not before its TTL (Redis's clock; slack for the clocks' granularity).
  EXPECT_GE(absl::FromChrono(std::chrono::steady_clock::now() - start),
            absl::Milliseconds(150));
  ASSERT_OK(redis.Command({"SET", "eventually:kept", "1"}));
  EXPECT_THAT(WaitForKeyGone(redis, "eventually:kept", absl::Milliseconds(50)),
              StatusIs(absl::StatusCode::kDeadlineExceeded));

  EXPECT_THAT(
      WaitForField(redis, "eventually:hash", "f", absl::Milliseconds(50)),
      StatusIs(absl::StatusCode::kDeadlineExceeded,
               HasSubstr("field f of eventually:hash")));
  ASSERT_OK(redis.Command({"HSET", "eventually:hash", "f", "1"}));
  EXPECT_OK(WaitForField(redis, "eventually:hash", "f"));
  ASSERT_OK(redis.Command({"DEL", "eventually:kept", "eventually:hash"}));
}

TEST(EventuallyTest, WaitForReplyOutlivesARestartOfTheServer) {
  std::unique_ptr<RedisServer> redis = MustStart();
  ASSERT_NE(redis, nullptr);
  std::thread restarter([&] {
    EXPECT_OK(redis->Restart());  // breaks the wait's connection
    EXPECT_OK(redis->Command({"SET", "after", "restart"}));
  });
  EXPECT_OK(WaitForReply(
      *redis, {"GET", "after"},
      [](const RedisValue& v) { return v.str == "restart"; },
      "the key set after the restart"));
  restarter.join();
}

}  // namespace
}  // namespace testing
}  // namespace relock
