#include "tests/testing/temp_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "lib/common/mutex.h"

namespace relock {
namespace testing {
namespace internal {
namespace {

constexpr absl::string_view kPrefix = "relock-test-";
constexpr size_t kRandomChars = 6;      // mkdtemp's XXXXXX
constexpr size_t kMaxSocketPath = 100;  // sun_path is 108 bytes.

std::vector<std::string> Bases() {
  std::vector<std::string> bases = {"/tmp"};
  if (const char* env = getenv("TEST_TMPDIR"); env && *env) {
    bases.push_back(env);
  }
  return bases;
}

constexpr char kOwnerFile[] = ".owner";  // flock()ed by the owner

// The pid in a name made by MakeTempDir ("relock-test-<pid>-XXXXXX"), or 0.
pid_t OwnerOf(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, kPrefix)) return 0;
  const size_t dash = name.find('-');
  if (dash == absl::string_view::npos ||
      name.size() - dash - 1 != kRandomChars) {
    return 0;
  }
  int pid = 0;
  if (!absl::SimpleAtoi(name.substr(0, dash), &pid) || pid <= 0) return 0;
  return static_cast<pid_t>(pid);
}

// The lock files of the dirs this process made, open (and locked) until the
// dir is removed; never inherited by what a child exec()s.
struct OwnedDirs {
  Mutex mu;
  std::map<std::string, int> fds ABSL_GUARDED_BY(mu);
};
OwnedDirs& Owned() {
  static auto* owned = new OwnedDirs;
  return *owned;
}

// Whether no process holds the lock of `dir`: its owner, and every fork()ed
// copy of it, has ended, whatever PID namespace it ran in (Bazel's sandbox
// gives each test its own, so two tests can have one pid). A dir without a
// lock file is being made, or was made by an older fixture: not ended.
bool OwnerEnded(const std::string& dir) {
  const std::string file = absl::StrCat(dir, "/", kOwnerFile);
  const int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  const bool ended = flock(fd, LOCK_EX | LOCK_NB) == 0;
  close(fd);
  return ended;
}

// Removes every temp dir under the bases whose owner pid matches `remove`
// and whose owner has ended.
void RemoveEndedTempDirsIf(const std::function<bool(pid_t owner)>& remove) {
  for (const std::string& base : Bases()) {
    DIR* dir = opendir(base.c_str());
    if (dir == nullptr) continue;
    std::vector<std::string> doomed;
    while (const dirent* entry = readdir(dir)) {
      const pid_t owner = OwnerOf(entry->d_name);
      if (owner == 0 || !remove(owner)) continue;
      const std::string path = absl::StrCat(base, "/", entry->d_name);
      struct stat st;
      if (lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
          st.st_uid == geteuid() && OwnerEnded(path)) {
        doomed.push_back(path);
      }
    }
    closedir(dir);
    for (const std::string& path : doomed) RemoveTree(path);
  }
}

int RemoveEntry(const char* path, const struct stat*, int, struct FTW*) {
  remove(path);
  return 0;
}

// Registered during static initialization, so it runs after the at-exit
// handler of RedisServer (registered later), which removes this process's
// own dirs: this one removes those of processes that ended without doing so.
[[maybe_unused]] const bool orphans_removed_at_exit =
    (std::atexit(&RemoveOrphanedTempDirs), true);

}  // namespace

absl::StatusOr<std::string> MakeTempDir(const std::string& socket_name) {
  static std::once_flag orphans_removed;
  std::call_once(orphans_removed, &RemoveOrphanedTempDirs);
  std::string errors;
  for (const std::string& base : Bases()) {
    std::string name = absl::StrCat(base, "/", kPrefix, getpid(), "-",
                                    std::string(kRandomChars, 'X'));
    if (!socket_name.empty() &&
        name.size() + 1 + socket_name.size() + 1 > kMaxSocketPath) {
      absl::StrAppend(&errors, " ", base, ": too long for a unix socket path;");
      continue;
    }
    if (mkdtemp(&name[0]) == nullptr) {
      absl::StrAppend(&errors, " ", base, ": ", strerror(errno), ";");
      continue;
    }
    // The lock file appears under its name already locked (made and locked
    // under another name, then renamed): another process's sweep that found
    // it made but not yet locked would take its owner for ended and remove
    // the dir under it (seen once: a test's dir vanished as it started,
    // while other test binaries started beside it).
    const std::string file = absl::StrCat(name, "/", kOwnerFile);
    const std::string making = absl::StrCat(file, ".new");
    const int fd =
        open(making.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0 || flock(fd, LOCK_EX) != 0 ||
        rename(making.c_str(), file.c_str()) != 0) {
      const int error = errno;
      absl::StrAppend(&errors, " ", file, ": ", strerror(error), ";");
      if (fd >= 0) close(fd);
      RemoveTree(name);
      continue;
    }
    OwnedDirs& owned = Owned();
    MutexLock lock(&owned.mu);
    owned.fds[name] = fd;
    return name;
  }
  return absl::UnavailableError(
      absl::StrCat("cannot create a temp dir:", errors));
}

void RemoveTree(const std::string& dir) {
  if (dir.empty()) return;
  nftw(dir.c_str(), RemoveEntry, 16, FTW_DEPTH | FTW_PHYS);
  OwnedDirs& owned = Owned();
  MutexLock lock(&owned.mu);
  if (auto it = owned.fds.find(dir); it != owned.fds.end()) {
    close(it->second);
    owned.fds.erase(it);
  }
}

void RemoveTempDirsOf(pid_t pid) {
  RemoveEndedTempDirsIf([pid](pid_t owner) { return owner == pid; });
}

void RemoveOrphanedTempDirs() {
  RemoveEndedTempDirsIf([](pid_t) { return true; });
}

}  // namespace internal
}  // namespace testing
}  // namespace relock
