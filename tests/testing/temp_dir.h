// Internal to tests/testing/: the temp dirs of the redis-server fixture
// (redis_server.h). Tests should use RedisServer::dir() instead.
//
// A dir is /tmp/relock-test-<pid>-XXXXXX (else under $TEST_TMPDIR), <pid>
// being the process that made it, which holds an flock() on the dir's
// `.owner` file for as long as it lives (and so do its fork()ed copies; what
// a child exec()s does not). Its RedisServer removes it (destructor, or at
// exit for a server never destroyed); the lock lets another process remove
// the dirs of a process that ended without doing so (killed, crashed,
// _exit()ed, a fork()ed copy):
//   - ChildProcess removes the dirs of a child once it has reaped it;
//   - every process linked with the fixture removes the dirs whose owner has
//     ended, before its first temp dir and at exit.
// The lock, not the pid, says whether the owner lives: Bazel's sandbox runs
// each test in a PID namespace of its own, so tests running side by side can
// have the same pid, and one cannot see (kill(pid, 0)) another's processes.
// Dirs without a lock file, or owned by another user, are never touched.

#ifndef RELOCK_TESTS_TESTING_TEMP_DIR_H_
#define RELOCK_TESTS_TESTING_TEMP_DIR_H_

#include <sys/types.h>

#include <string>

#include "absl/status/statusor.h"

namespace relock {
namespace testing {
namespace internal {

// Makes a new temp dir of this process (see above). With `socket_name` not
// empty, only where <dir>/<socket_name> fits in a unix socket address (100
// bytes here; sun_path has 108). Unavailable if none can be made.
absl::StatusOr<std::string> MakeTempDir(const std::string& socket_name = "");

// Removes `dir` and everything in it (not following symlinks); best effort.
void RemoveTree(const std::string& dir);

// Removes the temp dirs with `pid` in their name whose owner has ended (a
// process of another PID namespace may have the same pid, and keeps its own).
void RemoveTempDirsOf(pid_t pid);

// Removes the temp dirs whose owner has ended.
void RemoveOrphanedTempDirs();

}  // namespace internal
}  // namespace testing
}  // namespace relock

#endif  // RELOCK_TESTS_TESTING_TEMP_DIR_H_
