#include "tests/testing/child_process.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "lib/common/mutex.h"
#include "tests/testing/spawn.h"
#include "tests/testing/temp_dir.h"

namespace relock {
namespace testing {
namespace {

constexpr absl::string_view kChildFlag = "--relock_child=";
constexpr int kUnknownChildExitCode = 125;

// The registered child routines. A function-local static (never destroyed)
// rather than a constant-initialized global mutex: RegisterChildMain runs
// from static initializers, and relock::Mutex has no constexpr constructor
// under ThreadSanitizer (lib/common/mutex.h).
struct Registry {
  Mutex mu;
  std::map<std::string, ChildMain> mains ABSL_GUARDED_BY(mu);
};

Registry& TheRegistry() {
  static auto* const registry = new Registry;
  return *registry;
}

ChildMain FindChildMain(const std::string& name, std::string* known) {
  Registry& registry = TheRegistry();
  MutexLock lock(&registry.mu);
  auto it = registry.mains.find(name);
  if (it != registry.mains.end()) return it->second;
  std::vector<std::string> names;
  for (const auto& entry : registry.mains) names.push_back(entry.first);
  *known = names.empty() ? "(none)" : absl::StrJoin(names, ", ");
  return nullptr;
}

void CloseIfOpen(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

}  // namespace

void RegisterChildMain(const std::string& name, ChildMain fn) {
  Registry& registry = TheRegistry();
  MutexLock lock(&registry.mu);
  auto inserted = registry.mains.emplace(name, fn);
  if (!inserted.second && inserted.first->second != fn) {
    fprintf(stderr,
            "FATAL: relock::testing::RegisterChildMain: two routines named "
            "\"%s\" in one test binary\n",
            name.c_str());
    abort();
  }
}

int MaybeRunChildMain(int argc, char** argv) {
  if (argc < 2 || argv[1] == nullptr) return -1;
  absl::string_view flag = argv[1];
  if (!absl::StartsWith(flag, kChildFlag)) return -1;
  const std::string name(flag.substr(kChildFlag.size()));
  std::string known;
  const ChildMain fn = FindChildMain(name, &known);
  if (fn == nullptr) {
    fprintf(stderr,
            "relock::testing::MaybeRunChildMain: no child routine \"%s\" in "
            "this binary (registered: %s)\n",
            name.c_str(), known.c_str());
    return kUnknownChildExitCode;
  }
  int code = fn(std::vector<std::string>(argv + 2, argv + argc));
  std::cout.flush();
  fflush(stdout);
  // exit() would truncate the same way; never return -1 ("not a child").
  if (code < 0) code &= 0xff;
  return code;
}

// ----------------------------------------------------------- ChildProcess --

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Spawn(
    const std::string& name, const std::vector<std::string>& args) {
  // Sockets rather than pipes: writes use MSG_NOSIGNAL, so a child that has
  // exited gives an error rather than a SIGPIPE that kills the test binary.
  int in[2];   // in[0]: ours, to write; in[1]: the child's stdin.
  int out[2];  // out[0]: ours, to read; out[1]: the child's stdout.
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in) != 0) {
    return absl::InternalError(
        absl::StrCat("ChildProcess::Spawn: socketpair: ", strerror(errno)));
  }
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, out) != 0) {
    const int err = errno;
    close(in[0]);
    close(in[1]);
    return absl::InternalError(
        absl::StrCat("ChildProcess::Spawn: socketpair: ", strerror(err)));
  }
  // One-way sockets, so the child sees EOF/EPIPE like with pipes.
  shutdown(in[0], SHUT_RD);
  shutdown(in[1], SHUT_WR);
  shutdown(out[0], SHUT_WR);
  shutdown(out[1], SHUT_RD);

  internal::SpawnOptions spawn;
  spawn.path = "/proc/self/exe";
  spawn.argv.push_back(program_invocation_name != nullptr
                           ? program_invocation_name
                           : "/proc/self/exe");
  spawn.argv.push_back(absl::StrCat(kChildFlag, name));
  spawn.argv.insert(spawn.argv.end(), args.begin(), args.end());
  spawn.stdin_fd = in[1];
  spawn.stdout_fd = out[1];
  absl::StatusOr<pid_t> pid = internal::Spawn(spawn);
  close(in[1]);
  close(out[1]);
  if (!pid.ok()) {
    close(in[0]);
    close(out[0]);
    return absl::Status(pid.status().code(),
                        absl::StrCat("ChildProcess::Spawn(", name,
                                     "): ", pid.status().message()));
  }
  return std::unique_ptr<ChildProcess>(
      new ChildProcess(name, *pid, in[0], out[0]));
}

ChildProcess::ChildProcess(std::string name, pid_t pid, int stdin_fd,
                           int stdout_fd)
    : name_(std::move(name)),
      pid_(pid),
      stdout_fd_(stdout_fd),
      stdin_fd_(stdin_fd) {}

ChildProcess::~ChildProcess() {
  {
    MutexLock lock(&wait_mu_);
    if (!reaped_) {
      kill(pid_, SIGKILL);
      (void)internal::Reap(pid_);
      reaped_ = true;
      // A killed child could not remove the dirs of its servers.
      internal::RemoveTempDirsOf(pid_);
    }
  }
  {
    MutexLock lock(&write_mu_);
    CloseIfOpen(stdin_fd_);
  }
  MutexLock lock(&read_mu_);
  CloseIfOpen(stdout_fd_);
}

absl::StatusOr<std::string> ChildProcess::ReadLine(absl::Duration timeout) {
  MutexLock lock(&read_mu_);
  const auto deadline =
      std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(timeout);
  for (;;) {
    const size_t newline = buffer_.find('\n');
    if (newline != std::string::npos) {
      std::string line = buffer_.substr(0, newline);
      buffer_.erase(0, newline + 1);
      return line;
    }
    if (eof_) {
      if (!buffer_.empty()) return std::exchange(buffer_, std::string());
      return absl::OutOfRangeError(
          absl::StrCat("child ", name_, " (pid ", pid_, ") closed its stdout"));
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("no line from child ", name_, " (pid ", pid_,
                       ") within ", absl::FormatDuration(timeout),
                       buffer_.empty() ? "" : "; partial line: ", buffer_));
    }
    const auto left_ms =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
    pollfd pfd = {stdout_fd_, POLLIN, 0};
    const int ready =
        poll(&pfd, 1, static_cast<int>(std::min<long long>(left_ms, 1000)));
    if (ready < 0 && errno != EINTR) {
      return absl::InternalError(
          absl::StrCat("ChildProcess::ReadLine: poll: ", strerror(errno)));
    }
    if (ready <= 0) continue;
    char buf[4096];
    const ssize_t n = read(stdout_fd_, buf, sizeof(buf));
    if (n > 0) {
      buffer_.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno == ECONNRESET) {
      eof_ = true;
    } else if (errno != EINTR && errno != EAGAIN) {
      return absl::InternalError(
          absl::StrCat("ChildProcess::ReadLine: read: ", strerror(errno)));
    }
  }
}

absl::Status ChildProcess::WriteLine(absl::string_view line) {
  MutexLock lock(&write_mu_);
  if (stdin_fd_ < 0) {
    return absl::FailedPreconditionError(
        "ChildProcess::WriteLine: stdin already closed");
  }
  const std::string data = absl::StrCat(line, "\n");
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n =
        send(stdin_fd_, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::UnavailableError(absl::StrCat(
          "writing to child ", name_, " (pid ", pid_, "): ", strerror(errno)));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status ChildProcess::CloseStdin() {
  MutexLock lock(&write_mu_);
  CloseIfOpen(stdin_fd_);
  return absl::OkStatus();
}

absl::Status ChildProcess::Signal(int sig) {
  MutexLock lock(&wait_mu_);
  if (reaped_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ChildProcess::Signal: child ", name_, " has been reaped"));
  }
  if (kill(pid_, sig) != 0) {
    return absl::InternalError(
        absl::StrCat("kill(", pid_, ", ", sig, "): ", strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> ChildProcess::Wait(absl::Duration timeout) {
  const auto deadline =
      std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(timeout);
  absl::Duration pause = absl::Milliseconds(1);
  for (;;) {
    {
      // Not held while sleeping, so Signal() works from another thread.
      MutexLock lock(&wait_mu_);
      if (reaped_) return exit_code_;
      absl::StatusOr<int> status = internal::TryReap(pid_);
      if (status.ok()) {
        reaped_ = true;
        exit_code_ = internal::ExitCodeFromWaitStatus(*status);
        // Left behind if it was killed, crashed or _exit()ed.
        internal::RemoveTempDirsOf(pid_);
        return exit_code_;
      }
      if (!absl::IsUnavailable(status.status())) return status.status();
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "child ", name_, " (pid ", pid_, ") still running after ",
          absl::FormatDuration(timeout)));
    }
    absl::SleepFor(std::min(pause, absl::FromChrono(deadline - now)));
    pause = std::min(pause * 2, absl::Milliseconds(20));
  }
}

}  // namespace testing
}  // namespace relock
