// The fixture of the relock command's end-to-end tests (cli_test.cc,
// cli_semaphore_test.cc): the real binary (RELOCK_CLI_PATH, set by the
// build), spawned against the real redis-server of tests/testing, its stdout,
// stderr and exit code captured in files of a temp dir. Every wait polls a
// condition with a generous deadline (the machine may be loaded); no sleep
// orders events.
//
// The commands relock runs are small sh scripts that leave marks in files of
// the temp dir: "echo $$ > pid" (so the test can see that the command is
// gone), appends to a log, and a loop that waits for a "go" file the test
// creates.

#ifndef RELOCK_TESTS_CLI_TEST_UTIL_H_
#define RELOCK_TESTS_CLI_TEST_UTIL_H_

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "tests/testing/eventually.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/spawn.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

#ifndef RELOCK_CLI_PATH
#error "RELOCK_CLI_PATH must name the relock binary (set by the build)"
#endif

namespace relock {
namespace testing {

inline constexpr absl::Duration kLong = absl::Seconds(60);

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void Touch(const std::string& path) { std::ofstream(path) << "go\n"; }

inline std::string HostName() {
  char name[256] = {};
  EXPECT_EQ(gethostname(name, sizeof(name) - 1), 0);
  return name;
}

// Whether process `pid` is gone (or a zombie nobody reaped yet).
inline bool Gone(pid_t pid) {
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
    internal::SpawnOptions options;
    options.path = path;
    if (!argv0_given) options.argv.push_back(path);
    options.argv.insert(options.argv.end(), args.begin(), args.end());
    options.stdin_fd = in;
    options.stdout_fd = out;
    options.stderr_fd = err;
    absl::StatusOr<pid_t> pid = internal::Spawn(options);
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
      (void)internal::Reap(pid_);
    }
  }

  pid_t pid() const { return pid_; }
  // Its exit code (128+N for signal N), or -1 if it still runs after
  // `timeout`.
  int Wait(absl::Duration timeout = kLong) {
    if (code_ >= 0 || pid_ <= 0) return code_;
    absl::StatusOr<int> status = internal::ReapWithTimeout(pid_, timeout);
    if (status.ok()) code_ = internal::ExitCodeFromWaitStatus(*status);
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
inline std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

class CliTest : public RedisTest {
 protected:
  void SetUp() override {
    RedisTest::SetUp();
    absl::StatusOr<std::string> dir = internal::MakeTempDir();
    ASSERT_OK(dir);
    dir_ = *dir;
    name_ = TestLockName();
  }
  void TearDown() override {
    runs_.clear();  // kills what still runs
    if (!dir_.empty()) internal::RemoveTree(dir_);
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
  std::string dir_;
  std::string name_;
  std::vector<std::unique_ptr<Relock>> runs_;
};

// Whether `s` is well-formed UTF-8 with no raw control characters: what
// RFC 8259 asks of a JSON text (outside strings, only " \t\n\r" appear).
inline bool ValidJsonText(const std::string& s) {
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

}  // namespace testing
}  // namespace relock

#endif  // RELOCK_TESTS_CLI_TEST_UTIL_H_
