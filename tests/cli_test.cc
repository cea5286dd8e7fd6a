// End-to-end tests of the relock command (tools/relock/): the real binary,
// spawned against the real redis-server of tests/testing, its stdout, stderr
// and exit code captured. Every wait polls a condition with a generous
// deadline (the machine may be loaded); no sleep orders events.
//
// The commands relock runs are small sh scripts that leave marks in files of
// a temp dir: "echo $$ > pid" (so the test can see that the command is gone),
// appends to a log, and a loop that waits for a "go" file the test creates.

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/spawn.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

#ifndef RELOCK_CLI_PATH
#error "RELOCK_CLI_PATH must name the relock binary (set by the build)"
#endif

namespace relock {
namespace {

using ::relock::testing::Eventually;
using ::relock::testing::RedisServer;
using ::relock::testing::RedisTest;
using ::relock::testing::RedisValue;
using ::relock::testing::TestLockName;
using ::testing::HasSubstr;
using ::testing::StartsWith;

namespace spawn = ::relock::testing::internal;

constexpr absl::Duration kLong = absl::Seconds(60);

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void Touch(const std::string& path) { std::ofstream(path) << "go\n"; }

std::string HostName() {
  char name[256] = {};
  EXPECT_EQ(gethostname(name, sizeof(name) - 1), 0);
  return name;
}

// Whether process `pid` is gone (or a zombie nobody reaped yet).
bool Gone(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  const std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() &&
         stat[paren + 2] == 'Z';
}

// One run of the relock binary with its stdout and stderr in files.
class Relock {
 public:
  static std::unique_ptr<Relock> Start(const std::string& dir,
                                       const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"relock"};
    argv.insert(argv.end(), args.begin(), args.end());
    return StartProgram(dir, RELOCK_CLI_PATH, argv, "", /*argv0_given=*/true);
  }
  // Another program (`path` with `args`, its stdin from `input`), watched
  // the same way.
  static std::unique_ptr<Relock> StartProgram(
      const std::string& dir, const std::string& path,
      const std::vector<std::string>& args, const std::string& input = "",
      bool argv0_given = false) {
    static int serial = 0;
    const std::string base = absl::StrCat(dir, "/relock-", ++serial);
    auto r = std::unique_ptr<Relock>(new Relock(base + ".out", base + ".err"));
    const int in =
        open(input.empty() ? "/dev/null" : input.c_str(), O_RDONLY | O_CLOEXEC);
    const int out =
        open(r->out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const int err =
        open(r->err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    spawn::SpawnOptions options;
    options.path = path;
    if (!argv0_given) options.argv.push_back(path);
    options.argv.insert(options.argv.end(), args.begin(), args.end());
    options.stdin_fd = in;
    options.stdout_fd = out;
    options.stderr_fd = err;
    absl::StatusOr<pid_t> pid = spawn::Spawn(options);
    close(in);
    close(out);
    close(err);
    EXPECT_OK(pid);
    r->pid_ = pid.ok() ? *pid : -1;
    return r;
  }

  Relock(const Relock&) = delete;
  Relock& operator=(const Relock&) = delete;
  // Kills and reaps it if it still runs.
  ~Relock() {
    if (pid_ > 0 && code_ < 0) {
      kill(pid_, SIGKILL);
      (void)spawn::Reap(pid_);
    }
  }

  pid_t pid() const { return pid_; }
  // Its exit code (128+N for signal N), or -1 if it still runs after
  // `timeout`.
  int Wait(absl::Duration timeout = kLong) {
    if (code_ >= 0 || pid_ <= 0) return code_;
    absl::StatusOr<int> status = spawn::ReapWithTimeout(pid_, timeout);
    if (status.ok()) code_ = spawn::ExitCodeFromWaitStatus(*status);
    return code_;
  }
  // Whether it exited (reaping it if so).
  bool Exited() { return Wait(absl::ZeroDuration()) >= 0; }
  void Signal(int sig) const { kill(pid_, sig); }
  std::string out() const { return ReadFile(out_); }
  std::string err() const { return ReadFile(err_); }

 private:
  Relock(std::string out, std::string err)
      : out_(std::move(out)), err_(std::move(err)) {}
  const std::string out_;
  const std::string err_;
  pid_t pid_ = -1;
  int code_ = -1;
};

// Lines of `text` (without a last empty one).
std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

class CliTest : public RedisTest {
 protected:
  void SetUp() override {
    RedisTest::SetUp();
    absl::StatusOr<std::string> dir = spawn::MakeTempDir();
    ASSERT_OK(dir);
    dir_ = *dir;
    name_ = TestLockName();
  }
  void TearDown() override {
    runs_.clear();  // kills what still runs
    if (!dir_.empty()) spawn::RemoveTree(dir_);
  }

  std::string Path(const std::string& file) const {
    return absl::StrCat(dir_, "/", file);
  }

  // `relock --url <server> args...`, started.
  Relock& Start(std::vector<std::string> args) {
    args.insert(args.begin(), {"--url", redis().url()});
    runs_.push_back(Relock::Start(dir_, args));
    return *runs_.back();
  }
  // Started and waited for.
  Relock& RunToEnd(std::vector<std::string> args) {
    Relock& r = Start(std::move(args));
    EXPECT_GE(r.Wait(), 0) << "relock did not exit";
    return r;
  }

  // A command that writes its pid to `pid_file`, appends "start" to `log`,
  // waits for the file `go`, appends "end", and exits 0.
  std::vector<std::string> WaitForGo(const std::string& tag) const {
    return {"sh", "-c",
            absl::StrCat("echo $$ > ", Path(tag + ".pid"), "; echo start >> ",
                         Path("log"), "; while [ ! -e ", Path(tag + ".go"),
                         " ]; do sleep 0.02; done; echo end >> ", Path("log"))};
  }
  // A command that writes its pid and then sleeps 60 s.
  std::vector<std::string> Sleeper(const std::string& tag) const {
    return {"sh", "-c",
            absl::StrCat("echo $$ > ", Path(tag + ".pid"), "; exec sleep 60")};
  }
  // The pid a command wrote to <tag>.pid, once it has.
  pid_t CommandPid(const std::string& tag) const {
    int64_t pid = 0;
    EXPECT_TRUE(Eventually([&] {
      return absl::SimpleAtoi(
                 absl::StripAsciiWhitespace(ReadFile(Path(tag + ".pid"))),
                 &pid) &&
             pid > 0;
    }));
    return static_cast<pid_t>(pid);
  }
  // run [flags] NAME -- cmd
  std::vector<std::string> RunArgs(std::vector<std::string> flags,
                                   const std::vector<std::string>& cmd) const {
    std::vector<std::string> args = {"run"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.push_back(name_);
    args.push_back("--");
    args.insert(args.end(), cmd.begin(), cmd.end());
    return args;
  }
  // The waiters `relock status --json` reports for the lock.
  int64_t Waiters() {
    Relock& r = RunToEnd({"status", "--json", name_});
    const std::string out = r.out();
    const size_t at = out.find("\"waiters\":");
    int64_t n = -1;
    if (at != std::string::npos) {
      const std::string rest = out.substr(at + 10);
      (void)absl::SimpleAtoi(rest.substr(0, rest.find(',')), &n);
    }
    return n;
  }
  bool Exists(const std::string& key) {
    absl::StatusOr<RedisValue> v = redis().Command({"EXISTS", key});
    return v.ok() && v->integer == 1;
  }
  // The semaphore's count at `name_` ("" when absent) and the permits out
  // ("{name_}:timeout"'s size), as Redis holds them.
  std::string Count() {
    absl::StatusOr<RedisValue> v = redis().Command({"GET", name_});
    return v.ok() && v->is_string() ? v->str : "";
  }
  int64_t PermitsOut() {
    absl::StatusOr<RedisValue> v =
        redis().Command({"ZCARD", absl::StrCat("{", name_, "}:timeout")});
    return v.ok() && v->is_integer() ? v->integer : -1;
  }

  std::string dir_;
  std::string name_;
  std::vector<std::unique_ptr<Relock>> runs_;
};

TEST_F(CliTest, TwoRunsOnOneNameSerialize) {
  Relock& a = Start(RunArgs({}, WaitForGo("a")));
  CommandPid("a");  // a holds the lock and runs
  Relock& b = Start(RunArgs({}, WaitForGo("b")));
  EXPECT_TRUE(Eventually([&] { return Waiters() == 1; })) << "b does not wait";
  EXPECT_FALSE(b.Exited());
  EXPECT_EQ(ReadFile(Path("log")), "start\n");  // b's command did not start
  Touch(Path("a.go"));
  EXPECT_EQ(a.Wait(), 0) << a.err();
  CommandPid("b");
  Touch(Path("b.go"));
  EXPECT_EQ(b.Wait(), 0) << b.err();
  EXPECT_EQ(ReadFile(Path("log")), "start\nend\nstart\nend\n");
  EXPECT_FALSE(Exists(name_));
}

TEST_F(CliTest, BusyLockExits75WithNonblockAndWhenTheWaitRunsOut) {
  Relock& holder = Start(RunArgs({}, WaitForGo("a")));
  CommandPid("a");
  testing::Stopwatch watch;
  Relock& nonblock = RunToEnd(RunArgs({"--nonblock"}, {"true"}));
  EXPECT_EQ(nonblock.Wait(), 75);
  EXPECT_THAT(nonblock.err(), HasSubstr("busy"));
  EXPECT_EQ(Lines(nonblock.err()).size(), 1u) << nonblock.err();
  Relock& waited = RunToEnd(RunArgs({"--wait", "300ms"}, {"true"}));
  EXPECT_EQ(waited.Wait(), 75);
  EXPECT_THAT(waited.err(), HasSubstr("busy"));
  EXPECT_LT(watch.Elapsed(), absl::Seconds(30));  // prompt, not a long wait
  Touch(Path("a.go"));
  EXPECT_EQ(holder.Wait(), 0);
}

TEST_F(CliTest, KilledRunnerFreesTheLockWithinALeaseAndItsCommandDies) {
  Relock& a = Start(RunArgs({"--watchdog-timeout", "2s"}, Sleeper("a")));
  const pid_t command = CommandPid("a");
  Relock& b = Start(RunArgs({}, {"sh", "-c", "echo b > " + Path("b.ran")}));
  EXPECT_TRUE(Eventually([&] { return Waiters() == 1; }));
  a.Signal(SIGKILL);
  EXPECT_EQ(a.Wait(), 128 + SIGKILL);
  EXPECT_TRUE(Eventually([&] { return Gone(command); }, absl::Seconds(30)))
      << "the command outlived relock";
  EXPECT_EQ(b.Wait(absl::Seconds(30)), 0) << b.err();
  EXPECT_EQ(ReadFile(Path("b.ran")), "b\n");
}

TEST_F(CliTest, DeletedKeyTerminatesTheCommandAndExits76) {
  Relock& r = Start(RunArgs({"--watchdog-timeout", "1500ms"}, Sleeper("a")));
  const pid_t command = CommandPid("a");
  ASSERT_OK(redis().Command({"DEL", name_}));
  EXPECT_EQ(r.Wait(absl::Seconds(30)), 76) << r.err();
  EXPECT_TRUE(Gone(command));
  ASSERT_EQ(Lines(r.err()).size(), 1u) << r.err();
  EXPECT_THAT(r.err(), StartsWith("relock: lost lock \"" + name_ + "\""));
  EXPECT_THAT(r.err(), HasSubstr("SIGTERM"));
}

TEST_F(CliTest, OnLostIgnoreLetsTheCommandFinishButExits76) {
  Relock& r = Start(RunArgs(
      {"--watchdog-timeout", "1500ms", "--on-lost", "ignore"}, WaitForGo("a")));
  CommandPid("a");
  ASSERT_OK(redis().Command({"DEL", name_}));
  // A whole line (the message once came in two writes, and a reader could
  // see "relock: " alone).
  EXPECT_TRUE(Eventually([&] { return absl::StrContains(r.err(), "\n"); },
                         absl::Seconds(30)));
  EXPECT_THAT(r.err(), HasSubstr("--on-lost ignore"));
  EXPECT_FALSE(r.Exited());  // the command runs on
  Touch(Path("a.go"));
  EXPECT_EQ(r.Wait(), 76) << r.err();
  EXPECT_EQ(ReadFile(Path("log")), "start\nend\n");  // it finished
}

TEST_F(CliTest, ExplicitLeaseEndingBeforeTheCommandTerminatesIt) {
  Relock& r = Start(RunArgs({"--lease", "2s", "--grace", "10s"}, Sleeper("a")));
  EXPECT_EQ(r.Wait(absl::Seconds(30)), 76) << r.err();
  EXPECT_THAT(r.err(), HasSubstr("lease of 2s ran out"));
  // On a slow machine the lease may end before the command wrote its pid.
  int64_t command = 0;
  if (absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(Path("a.pid"))),
                       &command)) {
    EXPECT_TRUE(Gone(static_cast<pid_t>(command)));
  }
}

TEST_F(CliTest, CommandStatusIsPassedThrough) {
  EXPECT_EQ(RunToEnd(RunArgs({}, {"sh", "-c", "exit 3"})).Wait(), 3);
  EXPECT_EQ(RunToEnd(RunArgs({}, {"sh", "-c", "kill -9 $$"})).Wait(), 137);
  Relock& ok = RunToEnd(RunArgs({}, {"sh", "-c", "echo hello"}));
  EXPECT_EQ(ok.Wait(), 0);
  EXPECT_EQ(ok.out(), "hello\n");
  EXPECT_FALSE(Exists(name_));  // released
}

TEST_F(CliTest, SignalsAreForwardedToTheCommand) {
  Relock& r = Start(
      RunArgs({}, {"sh", "-c",
                   absl::StrCat("trap 'echo term > ", Path("got"),
                                "; exit 0' TERM; ", "echo $$ > ", Path("a.pid"),
                                "; while true; do sleep 0.02; done")}));
  CommandPid("a");
  r.Signal(SIGTERM);
  EXPECT_EQ(r.Wait(), 0) << r.err();
  EXPECT_EQ(ReadFile(Path("got")), "term\n");
  EXPECT_FALSE(Exists(name_));
}

TEST_F(CliTest, MissingOrUnexecutableCommand) {
  Relock& missing = RunToEnd(RunArgs({}, {"/no/such/command"}));
  EXPECT_EQ(missing.Wait(), 127);
  EXPECT_THAT(missing.err(), HasSubstr("not found"));
  const std::string file = Path("not-executable");
  Touch(file);
  EXPECT_EQ(RunToEnd(RunArgs({}, {file})).Wait(), 126);
  EXPECT_FALSE(Exists(name_));
}

TEST_F(CliTest, StatusAndListShowTheHolderHostPidAndWaiters) {
  Relock& holder = Start(RunArgs({}, WaitForGo("a")));
  CommandPid("a");
  Relock& waiter = Start(RunArgs({}, {"true"}));
  EXPECT_TRUE(Eventually([&] { return Waiters() == 1; }));

  Relock& text = RunToEnd({"status", name_});
  EXPECT_EQ(text.Wait(), 0) << text.err();
  EXPECT_THAT(text.out(), StartsWith(name_ + ": held (lock), lease "));
  EXPECT_THAT(text.out(), HasSubstr("waiters 1"));
  EXPECT_THAT(text.out(), HasSubstr(absl::StrCat("host ", HostName(), "  pid ",
                                                 holder.pid())));
  Relock& json = RunToEnd({"status", "--json", name_});
  EXPECT_EQ(json.Wait(), 0) << json.err();
  EXPECT_THAT(json.out(),
              StartsWith("[{\"name\":\"" + name_ +
                         "\",\"state\":\"held\",\"type\":\"lock\""));
  const std::string holder_json =
      absl::StrCat("\"hold_count\":1,\"write\":false,\"host\":\"", HostName(),
                   "\",\"pid\":", holder.pid(), ",");
  EXPECT_THAT(json.out(), HasSubstr(holder_json));
  EXPECT_THAT(json.out(), HasSubstr("\"waiters\":1,"));
  Relock& list = RunToEnd({"list", "--json", "relock-test:*"});
  EXPECT_EQ(list.Wait(), 0) << list.err();
  EXPECT_THAT(list.out(), StartsWith("[{\"name\":\"" + name_ + "\","));
  EXPECT_THAT(list.out(), HasSubstr(holder_json));
  EXPECT_EQ(Lines(list.out()).size(), 1u) << list.out();  // one lock
  Relock& list_text = RunToEnd({"list"});
  EXPECT_THAT(list_text.out(), HasSubstr(absl::StrCat("pid ", holder.pid())));
  Relock& free = RunToEnd({"status", name_ + ":other"});
  EXPECT_EQ(free.out(), name_ + ":other: free, waiters 0\n");

  ASSERT_OK(redis().Command({"SET", "not-a-lock", "x"}));
  Relock& wrong = RunToEnd({"status", "not-a-lock", name_});
  EXPECT_EQ(wrong.Wait(), 1);
  EXPECT_THAT(wrong.err(), HasSubstr("string"));
  EXPECT_THAT(wrong.out(), StartsWith(name_ + ": held"));

  Touch(Path("a.go"));
  EXPECT_EQ(holder.Wait(), 0);
  EXPECT_EQ(waiter.Wait(), 0);
  Relock& empty = RunToEnd({"list"});
  EXPECT_EQ(empty.Wait(), 0);
  EXPECT_EQ(empty.out(), "");
}

TEST_F(CliTest, JsonEscapesNames) {
  const std::string name = "we\"ird\\name\tx";
  Relock& r = RunToEnd({"status", "--json", name});
  EXPECT_EQ(r.Wait(), 0) << r.err();
  EXPECT_THAT(r.out(), StartsWith("[{\"name\":\"we\\\"ird\\\\name\\tx\","));
}

TEST_F(CliTest, ForcedUnlockFreesTheLockAndWakesAWaitingRun) {
  Relock& holder = Start(RunArgs({"--watchdog-timeout", "2s"}, WaitForGo("a")));
  CommandPid("a");
  Relock& waiter =
      Start(RunArgs({}, {"sh", "-c", "echo b > " + Path("b.ran")}));
  EXPECT_TRUE(Eventually([&] { return Waiters() == 1; }));

  Relock& refused = RunToEnd({"unlock", name_});
  EXPECT_EQ(refused.Wait(), 2);
  Relock& not_tty = RunToEnd({"unlock", "--force", name_});
  EXPECT_EQ(not_tty.Wait(), 2);
  EXPECT_THAT(not_tty.err(), HasSubstr("--yes"));
  EXPECT_FALSE(waiter.Exited());

  Relock& unlock = RunToEnd({"unlock", "--force", "--yes", name_});
  EXPECT_EQ(unlock.Wait(), 0) << unlock.err();
  EXPECT_THAT(unlock.out(), StartsWith("released lock " + name_));
  EXPECT_THAT(unlock.out(), HasSubstr(absl::StrCat("pid ", holder.pid())));
  EXPECT_EQ(waiter.Wait(absl::Seconds(30)), 0) << waiter.err();
  EXPECT_EQ(ReadFile(Path("b.ran")), "b\n");
  // The holder learns that it lost the lock.
  EXPECT_EQ(holder.Wait(absl::Seconds(30)), 76) << holder.err();
  Relock& again = RunToEnd({"unlock", "--force", "--yes", name_});
  EXPECT_EQ(again.out(), "lock " + name_ + " was not held\n");
}

// The question on a terminal: script(1) (util-linux, in every Debian) gives
// relock a pseudo-terminal and types what the answer file holds.
TEST_F(CliTest, UnlockAsksOnATerminal) {
  if (access("/usr/bin/script", X_OK) != 0) GTEST_SKIP() << "no script(1)";
  Relock& holder = Start(RunArgs({}, WaitForGo("a")));
  CommandPid("a");
  auto ask = [&](const std::string& answer) -> Relock& {
    const std::string input = Path("answer");
    std::ofstream(input) << answer << "\n";
    const std::string command = absl::StrCat(
        RELOCK_CLI_PATH, " --url ", redis().url(), " unlock --force ", name_);
    runs_.push_back(Relock::StartProgram(
        dir_, "/usr/bin/script", {"-qec", command, "/dev/null"}, input));
    EXPECT_GE(runs_.back()->Wait(), 0);
    return *runs_.back();
  };
  Relock& no = ask("n");
  EXPECT_EQ(no.Wait(), 1) << no.out();
  EXPECT_THAT(no.out(), HasSubstr("Force-release lock " + name_ + " held by "));
  EXPECT_THAT(no.out(), HasSubstr("not released"));
  EXPECT_TRUE(Exists(name_));
  Relock& yes = ask("y");
  EXPECT_EQ(yes.Wait(), 0) << yes.out();
  EXPECT_THAT(yes.out(), HasSubstr("released lock " + name_));
  EXPECT_FALSE(Exists(name_));
  Touch(Path("a.go"));
  EXPECT_EQ(holder.Wait(), 76) << holder.err();  // its release finds it gone
}

TEST_F(CliTest, UsageErrorsExit2WithOneLine) {
  const std::vector<std::vector<std::string>> bad = {
      RunArgs({"--bogus"}, {"true"}),
      RunArgs({"--wait", "ten"}, {"true"}),
      RunArgs({"--lease", "-1s"}, {"true"}),
      RunArgs({"--on-lost", "maybe"}, {"true"}),
      {"run", name_},
      {"run"},
      {"frobnicate"},
      {"status"},
      {"list", "--nope"},
  };
  for (const std::vector<std::string>& args : bad) {
    Relock& r = RunToEnd(args);
    EXPECT_EQ(r.Wait(), 2) << args[0] << " " << r.err();
    EXPECT_EQ(Lines(r.err()).size(), 1u) << r.err();
    EXPECT_THAT(r.err(), StartsWith("relock: "));
  }
  for (const char* url : {"foo://x", "redis://127.0.0.1:notaport"}) {
    runs_.push_back(Relock::Start(dir_, {"--url", url, "status", name_}));
    EXPECT_EQ(runs_.back()->Wait(), 2) << runs_.back()->err();
    EXPECT_EQ(Lines(runs_.back()->err()).size(), 1u) << runs_.back()->err();
  }
  // The library's bounds: a lease over 365 days.
  EXPECT_EQ(RunToEnd(RunArgs({"--lease", "10000h"}, {"true"})).Wait(), 2);
}

// Issue 23, defect 14: `relock run -- -NAME -- CMD`, the only way to pass a
// name that starts with "-", ran "--" as the command (exit 127).
TEST_F(CliTest, DashNameAfterDoubleDashRanTheDoubleDashAsTheCommand) {
  const std::string name = "-" + name_;
  Relock& r =
      Start({"run", "--", name, "--", "sh", "-c",
             absl::StrCat("echo $$ > ", Path("a.pid"), "; while [ ! -e ",
                          Path("a.go"), " ]; do sleep 0.02; done")});
  CommandPid("a");
  EXPECT_TRUE(Exists(name)) << r.err();
  Touch(Path("a.go"));
  EXPECT_EQ(r.Wait(), 0) << r.err();
  EXPECT_FALSE(Exists(name));
  // Without the second "--" the command follows the name directly.
  Relock& plain = RunToEnd({"run", "--", name, "sh", "-c", "exit 4"});
  EXPECT_EQ(plain.Wait(), 4) << plain.err();
}

// Issue 23, defect 15: `--grace inf` (or 3000000h) overflowed the SIGKILL
// time into the past, so the command was killed at once, and the message
// said "SIGKILL follows in inf". Now such a grace never sends SIGKILL.
TEST_F(CliTest, InfiniteGraceSentSigkillAtOnce) {
  for (const char* grace : {"inf", "3000000h"}) {
    SCOPED_TRACE(grace);
    const std::string tag = absl::StrCat("g", grace);
    const std::string log = Path(tag + ".log");
    // A command that notes SIGTERM and runs on until told to stop.
    Relock& r = Start(RunArgs(
        {"--lease", "1s", "--grace", grace},
        {"sh", "-c",
         absl::StrCat("trap 'echo term >> ", log, "' TERM; echo $$ > ",
                      Path(tag + ".pid"), "; while [ ! -e ", Path(tag + ".go"),
                      " ]; do sleep 0.02; done; echo end >> ", log)}));
    const pid_t command = CommandPid(tag);
    // Had SIGKILL followed SIGTERM at once, the trap would never run.
    EXPECT_TRUE(Eventually([&] { return ReadFile(log) == "term\n"; },
                           absl::Seconds(30)))
        << r.err();
    EXPECT_THAT(r.err(), HasSubstr("no SIGKILL follows"));
    EXPECT_FALSE(Gone(command));
    Touch(Path(tag + ".go"));
    EXPECT_EQ(r.Wait(), 76) << r.err();
    EXPECT_EQ(ReadFile(log), "term\nend\n");
  }
}

// Whether `s` is well-formed UTF-8 with no raw control characters: what
// RFC 8259 asks of a JSON text (outside strings, only " \t\n\r" appear).
bool ValidJsonText(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80                 ? 1
               : c >= 0xC2 && c <= 0xDF ? 2
               : c >= 0xE0 && c <= 0xEF ? 3
               : c >= 0xF0 && c <= 0xF4 ? 4
                                        : 0;
    if (n == 0 || i + n > s.size()) return false;
    if (n == 1 && c < 0x20 && c != '\n' && c != '\t' && c != '\r') return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

// Issue 23, defect 16: `list --json` wrote a name with byte 0xff as it was,
// so the output was not valid UTF-8, hence not JSON. Bytes that are not
// UTF-8 become U+FFFD, and name_base64 carries the exact name.
TEST_F(CliTest, NonUtf8NameMadeListJsonInvalid) {
  const std::string name =
      name_ + "\xff\xc3(\xe2\x82\xac";  // 0xff, a bad pair, a euro sign
  std::unique_ptr<Client> client = testing::MustConnect(redis().url());
  ASSERT_NE(client, nullptr);
  Lock lock = client->GetLock(name);
  ASSERT_OK(lock.Acquire());
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"list", "--json", name_ + "*"},
                                             {"status", "--json", name}}) {
    Relock& r = RunToEnd(args);
    EXPECT_EQ(r.Wait(), 0) << r.err();
    const std::string out = r.out();
    EXPECT_TRUE(ValidJsonText(out)) << out;
    EXPECT_THAT(out, HasSubstr(absl::StrCat("\"name\":\"", name_,
                                            "\\ufffd\\ufffd(\xe2\x82\xac\"")));
    EXPECT_THAT(out, HasSubstr(absl::StrCat("\"name_base64\":\"",
                                            absl::Base64Escape(name), "\"")));
  }
  EXPECT_OK(lock.Release());
}

// Issue 23, defect 17: `relock status` with a 100 KB name exited 1 ("not a
// lock") instead of 2 (bad input).
TEST_F(CliTest, HugeNameExitedOneInsteadOfTwo) {
  Relock& r = RunToEnd({"status", std::string(100 * 1024, 'x'), name_});
  EXPECT_EQ(r.Wait(), 2) << r.err();
  EXPECT_EQ(Lines(r.err()).size(), 1u);
  EXPECT_EQ(r.out(), "");
}

TEST_F(CliTest, HelpAndVersion) {
  Relock& help = RunToEnd({"--help"});
  EXPECT_EQ(help.Wait(), 0);
  EXPECT_THAT(help.out(), HasSubstr("exit codes:"));
  EXPECT_THAT(help.out(), HasSubstr("76 "));
  for (const char* command : {"run", "status", "list", "unlock"}) {
    Relock& r = RunToEnd({command, "--help"});
    EXPECT_EQ(r.Wait(), 0);
    EXPECT_THAT(r.out(), StartsWith(absl::StrCat("usage: relock ", command)));
  }
  Relock& version = RunToEnd({"--version"});
  EXPECT_EQ(version.Wait(), 0);
  EXPECT_EQ(version.out(), absl::StrCat("relock ", kVersionString, "\n"));
}

TEST_F(CliTest, RedisDownExits69AndRelockUrlIsRead) {
  absl::StatusOr<std::unique_ptr<RedisServer>> down = RedisServer::Start();
  ASSERT_OK(down);
  const std::string url = (*down)->url();
  ASSERT_TRUE((*down)->Stop().ok());
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"--url", url, "status", name_},
           {"--url", url, "run", name_, "--", "true"},
           {"--url", url, "list"}}) {
    runs_.push_back(Relock::Start(dir_, args));
    EXPECT_EQ(runs_.back()->Wait(), 69) << runs_.back()->err();
    EXPECT_EQ(Lines(runs_.back()->err()).size(), 1u) << runs_.back()->err();
  }
  // $RELOCK_URL when there is no --url (the child inherits the variable).
  ASSERT_EQ(setenv("RELOCK_URL", redis().url().c_str(), 1), 0);
  runs_.push_back(Relock::Start(dir_, {"status", name_}));
  EXPECT_EQ(runs_.back()->Wait(), 0) << runs_.back()->err();
  ASSERT_EQ(unsetenv("RELOCK_URL"), 0);
  EXPECT_EQ(runs_.back()->out(), name_ + ": free, waiters 0\n");
}

TEST_F(CliTest, RunPermitsHoldsOnePermitWhileTheCommandRunsThenGivesItBack) {
  Relock& r = Start(RunArgs({"--permits", "3"}, WaitForGo("a")));
  CommandPid("a");
  // Held while CMD runs: seen in Redis and by a second relock.
  EXPECT_EQ(Count(), "2");
  EXPECT_EQ(PermitsOut(), 1);
  Relock& status = RunToEnd({"status", name_});
  EXPECT_EQ(status.Wait(), 0) << status.err();
  EXPECT_THAT(status.out(),
              StartsWith(name_ + ": permit-expirable semaphore, available 2, "
                                 "out 1, waiters 0\n  permit "));
  Touch(Path("a.go"));
  EXPECT_EQ(r.Wait(), 0) << r.err();
  EXPECT_EQ(Count(), "3");
  EXPECT_EQ(PermitsOut(), 0);
}

TEST_F(CliTest, RunPermitsExitCodesMatchTheLocks) {
  EXPECT_EQ(
      RunToEnd(RunArgs({"--permits", "2"}, {"sh", "-c", "exit 3"})).Wait(), 3);
  // The total is 2 now: another N is refused, and nothing changes.
  Relock& other = RunToEnd(RunArgs({"--permits", "5"}, {"true"}));
  EXPECT_EQ(other.Wait(), 2);
  EXPECT_THAT(other.err(), HasSubstr("2 permits in all"));
  EXPECT_EQ(Lines(other.err()).size(), 1u) << other.err();
  EXPECT_EQ(Count(), "2");
  for (const char* bad : {"0", "-1", "x", "2147483648"}) {
    Relock& r = RunToEnd(RunArgs({"--permits", bad}, {"true"}));
    EXPECT_EQ(r.Wait(), 2) << bad;
    EXPECT_THAT(r.err(), HasSubstr("--permits")) << bad;
  }
  // Both permits held: --nonblock and a short --wait find none (75).
  Relock& a = Start(RunArgs({"--permits", "2"}, WaitForGo("a")));
  CommandPid("a");
  Relock& b = Start(RunArgs({"--permits", "2"}, WaitForGo("b")));
  CommandPid("b");
  Relock& nonblock =
      RunToEnd(RunArgs({"--permits", "2", "--nonblock"}, {"true"}));
  EXPECT_EQ(nonblock.Wait(), 75);
  EXPECT_THAT(nonblock.err(), HasSubstr("no free permit"));
  Relock& waited =
      RunToEnd(RunArgs({"--permits", "2", "--wait", "300ms"}, {"true"}));
  EXPECT_EQ(waited.Wait(), 75);
  Touch(Path("a.go"));
  Touch(Path("b.go"));
  EXPECT_EQ(a.Wait(), 0) << a.err();
  EXPECT_EQ(b.Wait(), 0) << b.err();
  EXPECT_EQ(RunToEnd(RunArgs({"--permits", "2"}, {"/no/such/command"})).Wait(),
            127);
  EXPECT_EQ(Count(), "2");
}

TEST_F(CliTest, RunPermitsCommandKilledBySignalExits128PlusNAndFreesThePermit) {
  EXPECT_EQ(
      RunToEnd(RunArgs({"--permits", "1"}, {"sh", "-c", "kill -9 $$"})).Wait(),
      128 + SIGKILL);
  EXPECT_EQ(Count(), "1");
  // A signal to relock goes to CMD, which dies of it.
  Relock& r = Start(RunArgs({"--permits", "1"}, Sleeper("a")));
  const pid_t command = CommandPid("a");
  r.Signal(SIGTERM);
  EXPECT_EQ(r.Wait(), 128 + SIGTERM) << r.err();
  EXPECT_TRUE(Gone(command));
  EXPECT_EQ(Count(), "1");
  EXPECT_EQ(PermitsOut(), 0);
}

TEST_F(CliTest, RunPermitsRemovedPermitTerminatesTheCommandAndExits76) {
  Relock& r = Start(RunArgs({"--permits", "2", "--watchdog-timeout", "1500ms"},
                            Sleeper("a")));
  const pid_t command = CommandPid("a");
  ASSERT_OK(redis().Command({"DEL", absl::StrCat("{", name_, "}:timeout")}));
  EXPECT_EQ(r.Wait(absl::Seconds(30)), 76) << r.err();
  EXPECT_TRUE(Gone(command));
  ASSERT_EQ(Lines(r.err()).size(), 1u) << r.err();
  EXPECT_THAT(r.err(), StartsWith("relock: lost permit "));
  EXPECT_THAT(r.err(), HasSubstr("of semaphore \"" + name_ + "\""));
  EXPECT_THAT(r.err(), HasSubstr("SIGTERM"));
}

TEST_F(CliTest, RunPermitsExplicitLeaseEndingBeforeTheCommandTerminatesIt) {
  Relock& r = Start(RunArgs({"--permits", "1", "--lease", "2s"}, Sleeper("a")));
  EXPECT_EQ(r.Wait(absl::Seconds(30)), 76) << r.err();
  EXPECT_THAT(r.err(), StartsWith("relock: lost permit "));
  EXPECT_THAT(r.err(), HasSubstr("lease of 2s ran out"));
  // Its lease ends (relock's own reckoning ended it a little earlier): the
  // next run gets the permit back.
  Relock& next =
      RunToEnd(RunArgs({"--permits", "1", "--wait", "30s"}, {"true"}));
  EXPECT_EQ(next.Wait(), 0) << next.err();
}

TEST_F(CliTest, RunPermitsNeverRunsMoreThanNCommandsAtOnce) {
  // Each command logs "start" after relock took its permit and "end" before
  // relock gives it back (appends of a line are atomic): counted in log
  // order, never more than 2 run at once.
  const std::vector<std::string> command = {
      "sh", "-c",
      absl::StrCat("echo start >> ", Path("log"), "; sleep 0.1; echo end >> ",
                   Path("log"))};
  constexpr int kRuns = 6;
  std::vector<Relock*> runs;
  for (int i = 0; i < kRuns; ++i) {
    runs.push_back(&Start(RunArgs({"--permits", "2"}, command)));
  }
  for (Relock* r : runs) EXPECT_EQ(r->Wait(), 0) << r->err();
  int running = 0;
  int most = 0;
  int starts = 0;
  for (const std::string& line : Lines(ReadFile(Path("log")))) {
    if (line == "start") {
      ++starts;
      most = std::max(most, ++running);
    } else {
      EXPECT_EQ(line, "end");
      --running;
    }
  }
  EXPECT_EQ(starts, kRuns);
  EXPECT_EQ(running, 0);
  EXPECT_LE(most, 2);
  EXPECT_EQ(Count(), "2");
  EXPECT_EQ(PermitsOut(), 0);
}

TEST_F(CliTest, StatusShowsSemaphorePermitsAndTheirLeases) {
  // A plain Semaphore: a count.
  const std::string plain = name_ + ":plain";
  ASSERT_OK(redis().Command({"SET", plain, "4"}));
  Relock& text = RunToEnd({"status", plain});
  EXPECT_EQ(text.Wait(), 0) << text.err();
  EXPECT_EQ(text.out(), plain + ": semaphore, available 4, waiters 0\n");
  Relock& json = RunToEnd({"status", "--json", plain});
  EXPECT_EQ(json.Wait(), 0) << json.err();
  EXPECT_EQ(json.out(),
            absl::StrCat("[{\"name\":\"", plain,
                         "\",\"state\":\"semaphore\",\"type\":\"semaphore\","
                         "\"available\":4,\"permits_out\":0,\"waiters\":0,"
                         "\"permits\":[]}]\n"));
  // A permit-expirable one: a permit held by relock run, one whose lease is
  // over (not given back yet), one without a lease (Redisson's).
  Relock& holder = Start(RunArgs({"--permits", "4"}, WaitForGo("a")));
  CommandPid("a");
  const std::string timeouts = absl::StrCat("{", name_, "}:timeout");
  ASSERT_OK(redis().Command({"ZADD", timeouts, "1000", "abcdefghijklmnop"}));
  ASSERT_OK(redis().Command(
      {"ZADD", timeouts, "922337203685477", "ABCDEFGHIJKLMNOP"}));
  ASSERT_OK(redis().Command({"DECRBY", name_, "2"}));
  Relock& sem = RunToEnd({"status", name_, plain});
  EXPECT_EQ(sem.Wait(), 0) << sem.err();
  const std::vector<std::string> lines = Lines(sem.out());
  ASSERT_EQ(lines.size(), 5u) << sem.out();
  EXPECT_EQ(lines[0], name_ +
                          ": permit-expirable semaphore, available 1, out 3, "
                          "waiters 0");
  EXPECT_THAT(lines[1], StartsWith("  permit 6162636465666768696a6b6c6d6e6f70  "
                                   "expired "));
  EXPECT_THAT(lines[2], StartsWith("  permit "));
  EXPECT_THAT(lines[2], HasSubstr("  lease "));
  EXPECT_EQ(lines[3], "  permit 4142434445464748494a4b4c4d4e4f50  no lease");
  EXPECT_EQ(lines[4], plain + ": semaphore, available 4, waiters 0");
  Relock& sem_json = RunToEnd({"status", "--json", name_});
  EXPECT_EQ(sem_json.Wait(), 0) << sem_json.err();
  EXPECT_THAT(sem_json.out(),
              HasSubstr("\"type\":\"permit-expirable\",\"available\":1,"
                        "\"permits_out\":3,\"waiters\":0,\"permits\":[{\"id\":"
                        "\"6162636465666768696a6b6c6d6e6f70\",\"lease_end\":"
                        "\"1970-01-01T00:00:01.000Z\",\"lease_end_ms\":1000,"));
  EXPECT_THAT(sem_json.out(),
              HasSubstr("{\"id\":\"4142434445464748494a4b4c4d4e4f50\","
                        "\"lease_end\":null,\"lease_end_ms\":null,"
                        "\"remaining_lease_ms\":null}]}]"));
  EXPECT_TRUE(ValidJsonText(sem_json.out())) << sem_json.out();
  Touch(Path("a.go"));
  EXPECT_EQ(holder.Wait(), 0) << holder.err();
  // A string that is no count is still neither (exit 1).
  ASSERT_OK(redis().Command({"SET", plain, "four"}));
  Relock& wrong = RunToEnd({"status", plain});
  EXPECT_EQ(wrong.Wait(), 1);
  EXPECT_THAT(wrong.err(), HasSubstr("string"));
}

}  // namespace
}  // namespace relock
