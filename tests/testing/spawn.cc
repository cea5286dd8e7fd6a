#include "tests/testing/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "lib/common/mutex.h"

extern char** environ;

namespace relock {
namespace testing {
namespace internal {
namespace {

absl::Status ErrnoStatus(absl::string_view what, int err) {
  return absl::InternalError(absl::StrCat(what, ": ", strerror(err)));
}

// Closes every descriptor >= 3 except `keep`. Async-signal-safe.
void CloseDescriptorsFrom3Except(int keep, int max_fd) {
#ifdef SYS_close_range
  bool ok = true;
  if (keep > 3) ok = syscall(SYS_close_range, 3u, keep - 1u, 0u) == 0;
  if (ok && syscall(SYS_close_range, keep + 1u, ~0u, 0u) == 0) return;
#endif
  for (int fd = 3; fd < max_fd; ++fd) {
    if (fd != keep) close(fd);
  }
}

// In the forked child: only async-signal-safe calls from here on.
[[noreturn]] void ExecChild(const char* path, char* const* argv,
                            const int (&std_fds)[3], bool new_process_group,
                            pid_t parent, int error_fd, int max_fd) {
  // Default dispositions and an empty mask (ignored signals would otherwise
  // stay ignored across exec, and the mask is inherited too).
  struct sigaction default_action;
  memset(&default_action, 0, sizeof(default_action));
  default_action.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP)
      sigaction(sig, &default_action, nullptr);
  }
  sigset_t empty;
  sigemptyset(&empty);
  sigprocmask(SIG_SETMASK, &empty, nullptr);

  if (new_process_group) setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The parent may have died before prctl() took effect.
  if (getppid() != parent) _exit(127);

  // Move the sources out of the way first (a source may itself be 0, 1 or 2),
  // then onto 0/1/2; dup2() clears close-on-exec on the targets.
  int moved[3] = {-1, -1, -1};
  for (int i = 0; i < 3; ++i) {
    if (std_fds[i] >= 0) moved[i] = fcntl(std_fds[i], F_DUPFD, 3);
  }
  int err = 0;
  for (int i = 0; i < 3; ++i) {
    if (std_fds[i] < 0) continue;
    if (moved[i] < 0 || dup2(moved[i], i) < 0) {
      err = errno;
      break;
    }
  }
  if (err == 0) {
    CloseDescriptorsFrom3Except(error_fd, max_fd);
    execve(path, argv, environ);
    err = errno;
  }
  ssize_t unused = write(error_fd, &err, sizeof(err));
  (void)unused;
  _exit(127);
}

absl::StatusOr<pid_t> ForkAndExec(const SpawnOptions& options) {
  if (options.argv.empty()) {
    return absl::InvalidArgumentError("Spawn: argv must include argv[0]");
  }
  // Everything the child needs is prepared before fork().
  std::vector<char*> argv;
  argv.reserve(options.argv.size() + 1);
  for (const std::string& arg : options.argv) {
    argv.push_back(const_cast<char*>(arg.c_str()));
  }
  argv.push_back(nullptr);
  const int std_fds[3] = {options.stdin_fd, options.stdout_fd,
                          options.stderr_fd};
  const long open_max = sysconf(_SC_OPEN_MAX);
  const int max_fd =
      static_cast<int>(std::min<long>(open_max > 0 ? open_max : 1024, 65536));

  // Reports an execve() failure: closed by a successful exec (close-on-exec).
  int error_pipe[2];
  if (pipe2(error_pipe, O_CLOEXEC) != 0) {
    return ErrnoStatus("Spawn: pipe2", errno);
  }
  if (error_pipe[1] < 3) {  // Our stdin/stdout/stderr were closed: move it.
    const int moved = fcntl(error_pipe[1], F_DUPFD_CLOEXEC, 3);
    const int err = errno;
    close(error_pipe[1]);
    if (moved < 0) {
      close(error_pipe[0]);
      return ErrnoStatus("Spawn: fcntl(F_DUPFD_CLOEXEC)", err);
    }
    error_pipe[1] = moved;
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close(error_pipe[0]);
    close(error_pipe[1]);
    return ErrnoStatus("Spawn: fork", err);
  }
  if (pid == 0) {
    close(error_pipe[0]);
    ExecChild(options.path.c_str(), argv.data(), std_fds,
              options.new_process_group, parent, error_pipe[1], max_fd);
  }
  close(error_pipe[1]);
  int child_errno = 0;
  ssize_t n;
  do {
    n = read(error_pipe[0], &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  close(error_pipe[0]);
  if (n == 0) return pid;  // execve() succeeded.
  (void)Reap(pid);
  return absl::InternalError(absl::StrCat(
      "Spawn: cannot execute ", options.path, " (",
      absl::StrJoin(options.argv, " "), "): ",
      n == sizeof(child_errno) ? strerror(child_errno) : "child failed"));
}

// The long-lived thread that does every fork() (see spawn.h for why).
class Spawner {
 public:
  // Leaked on purpose: it must outlive every child.
  static Spawner& Get() {
    static Spawner* const spawner = new Spawner;
    return *spawner;
  }

  absl::StatusOr<pid_t> Run(const SpawnOptions& options) {
    if (getpid() != owner_) {
      // We are a fork()ed copy of the process that started the thread, which
      // does not exist here: fork from the calling thread instead.
      return ForkAndExec(options);
    }
    Request request{&options};
    MutexLock lock(&mu_);
    queue_.push_back(&request);
    mu_.Await(absl::Condition(&request.done));
    return request.result;
  }

 private:
  struct Request {
    const SpawnOptions* options;
    bool done = false;
    absl::StatusOr<pid_t> result = absl::UnknownError("not run");
  };

  Spawner() : owner_(getpid()) {
    std::thread([this] { Loop(); }).detach();
  }

  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !queue_.empty();
  }

  void Loop() {
    for (;;) {
      Request* request;
      {
        MutexLock lock(&mu_);
        mu_.Await(absl::Condition(this, &Spawner::HasWork));
        request = queue_.front();
        queue_.pop_front();
      }
      absl::StatusOr<pid_t> result = ForkAndExec(*request->options);
      MutexLock lock(&mu_);
      request->result = std::move(result);
      request->done = true;
    }
  }

  const pid_t owner_;
  Mutex mu_;
  std::deque<Request*> queue_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<pid_t> Spawn(const SpawnOptions& options) {
  return Spawner::Get().Run(options);
}

absl::StatusOr<int> TryReap(pid_t pid) {
  int status = 0;
  pid_t r;
  do {
    r = waitpid(pid, &status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid) return status;
  if (r == 0) {
    return absl::UnavailableError(absl::StrCat("pid ", pid, " is running"));
  }
  return ErrnoStatus(absl::StrCat("waitpid(", pid, ")"), errno);
}

absl::StatusOr<int> Reap(pid_t pid) {
  int status = 0;
  pid_t r;
  do {
    r = waitpid(pid, &status, 0);
  } while (r < 0 && errno == EINTR);
  if (r == pid) return status;
  return ErrnoStatus(absl::StrCat("waitpid(", pid, ")"), errno);
}

absl::StatusOr<int> ReapWithTimeout(pid_t pid, absl::Duration timeout) {
  const auto deadline =
      std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(timeout);
  absl::Duration pause = absl::Milliseconds(1);
  for (;;) {
    absl::StatusOr<int> status = TryReap(pid);
    if (!absl::IsUnavailable(status.status())) return status;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "pid ", pid, " still running after ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(std::min(pause, absl::FromChrono(deadline - now)));
    pause = std::min(pause * 2, absl::Milliseconds(20));
  }
}

int ExitCodeFromWaitStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("signal ", WTERMSIG(status), " (",
                        strsignal(WTERMSIG(status)), ")");
  }
  return absl::StrCat("wait status ", status);
}

}  // namespace internal
}  // namespace testing
}  // namespace relock
