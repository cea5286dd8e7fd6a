// Internal to tests/testing/: the temp dirs of the redis-server fixture
// (redis_server.h). Tests should use RedisServer::dir() instead.
//
// A dir is /tmp/relock-test-<pid>-XXXXXX (else under $TEST_TMPDIR), <pid>
// being the process that made it. Its RedisServer removes it (destructor, or
// at exit for a server never destroyed); the pid in the name lets another
// process remove the dirs of a process that ended without doing so (killed,
// crashed, _exit()ed, a fork()ed copy):
//   - ChildProcess removes the dirs of a child once it has reaped it;
//   - every process linked with the fixture removes the dirs of processes
//     that no longer exist, before its first temp dir and at exit.
// A process that still exists (a zombie too) keeps its dirs, and so does a
// dead one whose pid was reused (until the pid is free again). Dirs without a
// pid in the name, or owned by another user, are never touched.

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

// Removes the temp dirs made by `pid`, which must have ended.
void RemoveTempDirsOf(pid_t pid);

// Removes the temp dirs whose process no longer exists.
void RemoveOrphanedTempDirs();

}  // namespace internal
}  // namespace testing
}  // namespace relock

#endif  // RELOCK_TESTS_TESTING_TEMP_DIR_H_
