// Internal to tests/testing/: starting and reaping child processes for the
// redis-server fixture (redis_server.h) and ChildProcess (child_process.h).
// Tests should use those two instead.
//
// Every child is forked from one long-lived helper thread, never from the
// calling thread: PR_SET_PDEATHSIG fires when the *thread* that forked the
// child exits, so forking from a short-lived test thread would kill the child
// as soon as that thread ends. The helper thread lives until the process
// exits, so the children die with the test binary, even on SIGKILL.

#ifndef RELOCK_TESTS_TESTING_SPAWN_H_
#define RELOCK_TESTS_TESTING_SPAWN_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace relock {
namespace testing {
namespace internal {

struct SpawnOptions {
  std::string path;               // The executable, passed to execve().
  std::vector<std::string> argv;  // Including argv[0].
  // File descriptors for the child's stdin/stdout/stderr; -1 inherits ours.
  // They are dup'ed in the child; the caller still owns (and closes) them.
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  // Put the child in a process group of its own (so a ^C aimed at the test
  // binary's group does not reach it; it still dies with us, see above).
  bool new_process_group = true;
};

// Forks and execs. In the child: PR_SET_PDEATHSIG(SIGKILL), default signal
// dispositions, an empty signal mask, and every descriptor >= 3 closed (so
// e.g. hiredis sockets, which are not close-on-exec, do not leak into it).
// Returns the pid once execve() has succeeded; an execve() failure is an error
// (the child is reaped).
absl::StatusOr<pid_t> Spawn(const SpawnOptions& options);

// Non-blocking waitpid(`pid`):
//   the raw wait status -- `pid` has terminated and is now reaped;
//   Unavailable         -- still running (or stopped);
//   Internal            -- waitpid() failed (e.g. ECHILD: not our child).
absl::StatusOr<int> TryReap(pid_t pid);

// Blocking waitpid() (retries on EINTR). Returns the raw wait status.
absl::StatusOr<int> Reap(pid_t pid);

// Polls TryReap() until `pid` terminates or `timeout` passes
// (DeadlineExceeded). Returns the raw wait status.
absl::StatusOr<int> ReapWithTimeout(pid_t pid, absl::Duration timeout);

// The exit code for a raw wait status: WEXITSTATUS, or 128 + the signal
// number if the child was killed by a signal (the shell's convention).
int ExitCodeFromWaitStatus(int status);

// Human-readable form of a raw wait status ("exit code 3", "signal 9
// (Killed)").
std::string DescribeWaitStatus(int status);

}  // namespace internal
}  // namespace testing
}  // namespace relock

#endif  // RELOCK_TESTS_TESTING_SPAWN_H_
