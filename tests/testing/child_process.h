// Multi-process tests: ChildProcess re-executes the test binary itself
// (/proc/self/exe) as a child that runs one named routine, and talks to it
// line by line over its stdin/stdout.
//
// In a test file:
//
//   RELOCK_CHILD_MAIN(HoldLockUntilEof) {  // args: url, lock name
//     ... connect to args[0], lock args[1] ...
//     std::cout << "locked" << std::endl;  // std::endl: flush every line!
//     std::string line;
//     while (std::getline(std::cin, line)) {}  // until the parent closes stdin
//     return 0;
//   }
//
//   TEST_F(CrossProcessTest, OtherProcessWaits) {
//     auto child = ChildProcess::Spawn("HoldLockUntilEof", {redis().url(),
//     name}); ASSERT_TRUE(child.ok()) << child.status();
//     ASSERT_EQ(*(*child)->ReadLine(absl::Seconds(10)), "locked");
//     ...
//     ASSERT_TRUE((*child)->CloseStdin().ok());
//     EXPECT_EQ(*(*child)->Wait(absl::Seconds(10)), 0);
//   }
//
// How it works: the test binary's main() (tests/testing/test_main.cc) calls
// MaybeRunChildMain() first; with argv[1] == "--relock_child=NAME" it runs the
// routine registered as NAME with argv[2..] and exits with its return value,
// without initializing GoogleTest. Binaries with their own main() must do the
// same to use ChildProcess.
//
// Protocol lines: the child writes with `std::cout << ... << std::endl` (or
// fflush(stdout)): its stdout is a socket, not a terminal, so it is fully
// buffered and unflushed output reaches the parent only at exit. The child's
// stderr is the test binary's, so diagnostics show up in the test log.
//
// The child dies with the test binary (PR_SET_PDEATHSIG SIGKILL) and with the
// ChildProcess object (SIGKILL in the destructor). Once it is reaped (Wait()
// or the destructor), the temp dirs of the RedisServers it started and could
// not remove (killed, crashed) are removed.

#ifndef RELOCK_TESTS_TESTING_CHILD_PROCESS_H_
#define RELOCK_TESTS_TESTING_CHILD_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "lib/common/mutex.h"

namespace relock {
namespace testing {

// A child routine: gets the arguments after --relock_child=NAME; its return
// value is the child's exit code.
using ChildMain = int (*)(const std::vector<std::string>& args);

// Registers `fn` as `name` (normally through RELOCK_CHILD_MAIN). Aborts if a
// different routine is already registered under `name`.
void RegisterChildMain(const std::string& name, ChildMain fn);

// Defines `static int name(const std::vector<std::string>& args)` and
// registers it as "name" during static initialization. Put it in the test
// file (a .cc linked into the test binary itself, so the registration cannot
// be dropped by the linker), at namespace scope.
#define RELOCK_CHILD_MAIN(name)                                            \
  static int name(const std::vector<std::string>& args);                   \
  [[maybe_unused]] static const bool relock_child_main_registered_##name = \
      (::relock::testing::RegisterChildMain(#name, &name), true);          \
  static int name(const std::vector<std::string>& args)

// If argv[1] is "--relock_child=NAME": runs NAME with argv[2..] and returns
// its exit code (125, after a message on stderr, if NAME is unknown).
// Otherwise returns -1: the caller goes on as the test binary.
int MaybeRunChildMain(int argc, char** argv);

// A running child. Thread-safety: ReadLine(), WriteLine()/CloseStdin() and
// Signal()/Wait() may be used from three different threads at once; each group
// serializes its own callers.
class ChildProcess {
 public:
  // Runs /proc/self/exe --relock_child=`name` `args`... with its stdin and
  // stdout connected to this object; stderr is inherited.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(
      const std::string& name, const std::vector<std::string>& args = {});

  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // SIGKILLs and reaps the child unless Wait() has already reaped it.
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  const std::string& name() const { return name_; }

  // The next line of the child's stdout, without the '\n'. DeadlineExceeded
  // if no full line arrives within `timeout` (what has arrived is kept for the
  // next call); OutOfRange once the child has closed its stdout (a last line
  // without '\n' is returned first).
  absl::StatusOr<std::string> ReadLine(absl::Duration timeout);

  // Writes `line` + '\n' to the child's stdin. Unavailable if the child has
  // closed it (e.g. exited); FailedPrecondition after CloseStdin().
  absl::Status WriteLine(absl::string_view line);
  // Closes the child's stdin: it reads EOF.
  absl::Status CloseStdin();

  // kill(pid, sig). FailedPrecondition once Wait() has reaped the child.
  absl::Status Signal(int sig);

  // Waits for the child to exit: its exit code, or 128 + the signal number if
  // a signal killed it. DeadlineExceeded if it is still running after
  // `timeout`. Once it has returned a code, returns the same code again.
  absl::StatusOr<int> Wait(absl::Duration timeout);

 private:
  ChildProcess(std::string name, pid_t pid, int stdin_fd, int stdout_fd);

  const std::string name_;
  const pid_t pid_;

  Mutex wait_mu_;
  bool reaped_ ABSL_GUARDED_BY(wait_mu_) = false;
  int exit_code_ ABSL_GUARDED_BY(wait_mu_) = -1;

  Mutex read_mu_;
  int stdout_fd_ ABSL_GUARDED_BY(read_mu_);
  std::string buffer_ ABSL_GUARDED_BY(read_mu_);
  bool eof_ ABSL_GUARDED_BY(read_mu_) = false;

  Mutex write_mu_;
  int stdin_fd_ ABSL_GUARDED_BY(write_mu_);
};

}  // namespace testing
}  // namespace relock

#endif  // RELOCK_TESTS_TESTING_CHILD_PROCESS_H_
