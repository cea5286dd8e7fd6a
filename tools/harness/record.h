// The safety harness's record format: what a worker process writes about
// every lock attempt and hold, one text line per event, appended to its own
// log file with one write(2) each (O_APPEND), so a worker killed with SIGKILL
// leaves every line it wrote before the kill, including the "A" line of a hold
// it never closed. Times are CLOCK_MONOTONIC nanoseconds, comparable between
// processes on one machine.
//
//   O <thread> <owner>                  owner field of a worker thread
//   A <thread> <lock> <start> <end>     attempt that acquired (hold opens)
//   R <thread> <lock> <time>            Release() about to be called
//   F <thread> <lock> <start> <end> <code>
//                                       attempt that failed (status code)
//   H <thread> <lock> <start> <end> <outcome> <read> <get_start> <set_start>
//     <set_end> <set_sent> <safe_code> <release_start> <release_end>
//     <release_code>                    hold closed (all of it again)
//   L <owner> <lock> <time> <code>      a kLockLost event (lock -1: unknown)
//   G <thread> <lock> <time> <count> <pttl> <where>
//                                       a ghost hold found (and freed): the
//                                       thread's owner field was in Redis
//                                       though it held no hold
//   E <text>                            something unexpected (an anomaly)
//   D                                   the worker finished normally
//
// Header-only; part of tools/harness (see harness.h).

#ifndef RELOCK_TOOLS_HARNESS_RECORD_H_
#define RELOCK_TOOLS_HARNESS_RECORD_H_

#include <errno.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace relock {
namespace harness {

// CLOCK_MONOTONIC (what std::chrono::steady_clock uses on Linux), in ns.
inline int64_t MonotonicNanos() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// What happened inside a hold (between acquire and release).
enum class Outcome : int {
  kCompleted = 1,     // GET and SET both succeeded
  kNoConnection = 2,  // the raw connection could not be (re)opened
  kGetFailed = 3,     // GET failed: nothing written
  kAbandoned = 4,     // SafeUntil() too close or lost: SET skipped
  kSetFailed = 5,     // SET sent but failed: may or may not have written
};

inline const char* OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kCompleted:
      return "completed";
    case Outcome::kNoConnection:
      return "no-connection";
    case Outcome::kGetFailed:
      return "get-failed";
    case Outcome::kAbandoned:
      return "abandoned";
    case Outcome::kSetFailed:
      return "set-failed";
  }
  return "?";
}

// One acquisition attempt and, if it acquired, the hold that followed.
struct Hold {
  int worker = 0;
  int thread = 0;
  int lock = 0;
  int64_t attempt_start = 0;
  int64_t attempt_end = 0;  // when TryAcquire returned: the hold's start
  int64_t token = -1;       // a FencedLock's token (fenced runs), else -1
  // Filled from the "H" line; `open` while there is none.
  bool open = true;
  Outcome outcome = Outcome::kGetFailed;
  int64_t read_value = -1;  // counter value read by GET (-1: none)
  int64_t get_start = 0;
  int64_t set_start = 0;
  int64_t set_end = 0;
  bool set_sent = false;
  int safe_code = 0;          // absl::StatusCode of SafeUntil() before SET
  int64_t release_start = 0;  // when Release() was called: the hold's end
  int64_t release_end = 0;
  int release_code = 0;  // absl::StatusCode of Release()
  // Set by the checker.
  bool told_lost = false;
  int64_t told_at = 0;  // the first report of the loss; 0: none timed
  bool paused = false;  // its process was SIGSTOPped during it (pause-holder)
  bool cut = false;     // its worker was partitioned during it
  bool killed = false;  // open when its process was SIGKILLed
  int64_t end = 0;      // release_start, or the kill time
};

struct FailedAttempt {
  int thread = 0;
  int lock = 0;
  int64_t start = 0;
  int64_t end = 0;
  int code = 0;
};

struct GhostHold {
  int thread = 0;
  int lock = 0;
  int64_t time = 0;
  int64_t count = 0;
  int64_t pttl = 0;
  std::string where;
};

struct LostEvent {
  std::string owner;
  int lock = -1;
  int64_t time = 0;
  int code = 0;
};

// Everything one worker process wrote.
struct WorkerLog {
  int worker = 0;
  std::map<int, std::string> owners;  // thread -> owner field
  std::vector<Hold> holds;            // in the order they were acquired
  std::vector<FailedAttempt> failed;
  std::vector<LostEvent> lost;
  std::vector<GhostHold> ghosts;
  std::vector<std::string> anomalies;
  bool done = false;
  int bad_lines = 0;
};

// --- Writing ---------------------------------------------------------------

// An append-only log file shared by a worker's threads: each Append() is one
// write(2) of a whole line, so lines never interleave and survive SIGKILL.
class LogFile {
 public:
  LogFile() = default;
  LogFile(const LogFile&) = delete;
  LogFile& operator=(const LogFile&) = delete;
  ~LogFile() {
    if (fd_ >= 0) close(fd_);
  }
  absl::Status Open(const std::string& path) {
    fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      return absl::UnavailableError(
          absl::StrCat("open ", path, ": ", strerror(errno)));
    }
    return absl::OkStatus();
  }
  void Append(std::string line) {
    line.push_back('\n');
    size_t off = 0;
    while (off < line.size()) {
      ssize_t n = write(fd_, line.data() + off, line.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  }

 private:
  int fd_ = -1;
};

// "A <thread> <lock> <start> <end>", plus " <token>" in fenced runs.
inline std::string FormatAcquired(int thread, int lock, int64_t start,
                                  int64_t end, int64_t token = -1) {
  return absl::StrCat("A ", thread, " ", lock, " ", start, " ", end,
                      token >= 0 ? absl::StrCat(" ", token) : "");
}

// Written just before Release() is called, so that the hold of a worker
// killed during or after its release ends there, not at the kill.
inline std::string FormatReleasing(int thread, int lock, int64_t time) {
  return absl::StrCat("R ", thread, " ", lock, " ", time);
}

inline std::string FormatFailed(const FailedAttempt& f) {
  return absl::StrCat("F ", f.thread, " ", f.lock, " ", f.start, " ", f.end,
                      " ", f.code);
}

inline std::string FormatHold(const Hold& h) {
  return absl::StrCat("H ", h.thread, " ", h.lock, " ", h.attempt_start, " ",
                      h.attempt_end, " ", static_cast<int>(h.outcome), " ",
                      h.read_value, " ", h.get_start, " ", h.set_start, " ",
                      h.set_end, " ", h.set_sent ? 1 : 0, " ", h.safe_code, " ",
                      h.release_start, " ", h.release_end, " ", h.release_code);
}

inline std::string FormatLost(const LostEvent& e) {
  return absl::StrCat("L ", e.owner, " ", e.lock, " ", e.time, " ", e.code);
}

// --- Reading ---------------------------------------------------------------

inline bool ParseInts(const std::vector<absl::string_view>& f, size_t first,
                      std::vector<int64_t>* out) {
  out->clear();
  for (size_t i = first; i < f.size(); ++i) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(f[i], &v)) return false;
    out->push_back(v);
  }
  return true;
}

// Parses a worker's log. A missing file (a worker killed before it wrote
// anything) gives an empty log; a torn last line is counted in bad_lines.
inline WorkerLog ParseWorkerLog(int worker, const std::string& path) {
  WorkerLog log;
  log.worker = worker;
  std::ifstream in(path);
  // Index in log.holds of each open hold, by (thread, lock): a thread holds
  // one lock at a time, or two in a MultiLock round.
  std::map<std::pair<int, int>, size_t> open;
  std::string line;
  std::vector<int64_t> v;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const char kind = line[0];
    if (kind == 'E') {
      log.anomalies.push_back(line.size() > 2 ? line.substr(2) : "");
      continue;
    }
    if (kind == 'D') {
      log.done = true;
      continue;
    }
    std::vector<absl::string_view> f =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    bool ok = false;
    if (kind == 'O' && f.size() == 3) {
      int thread = 0;
      ok = absl::SimpleAtoi(f[1], &thread);
      if (ok) log.owners[thread] = std::string(f[2]);
    } else if (kind == 'L' && f.size() == 5) {
      LostEvent e;
      e.owner = std::string(f[1]);
      ok = ParseInts(f, 2, &v);
      if (ok) {
        e.lock = static_cast<int>(v[0]);
        e.time = v[1];
        e.code = static_cast<int>(v[2]);
        log.lost.push_back(e);
      }
    } else if (kind == 'G' && f.size() == 7) {
      std::vector<absl::string_view> nums(f.begin(), f.begin() + 6);
      ok = ParseInts(nums, 1, &v);
      if (ok) {
        log.ghosts.push_back(GhostHold{static_cast<int>(v[0]),
                                       static_cast<int>(v[1]), v[2], v[3], v[4],
                                       std::string(f[6])});
      }
    } else if (kind == 'A' && (f.size() == 5 || f.size() == 6) &&
               ParseInts(f, 1, &v)) {
      Hold h;
      h.worker = worker;
      h.thread = static_cast<int>(v[0]);
      h.lock = static_cast<int>(v[1]);
      h.attempt_start = v[2];
      h.attempt_end = v[3];
      if (v.size() == 5) h.token = v[4];
      open[{h.thread, h.lock}] = log.holds.size();
      log.holds.push_back(h);
      ok = true;
    } else if (kind == 'R' && f.size() == 4 && ParseInts(f, 1, &v)) {
      auto it = open.find({static_cast<int>(v[0]), static_cast<int>(v[1])});
      if (it != open.end()) log.holds[it->second].release_start = v[2];
      ok = true;
    } else if (kind == 'F' && f.size() == 6 && ParseInts(f, 1, &v)) {
      log.failed.push_back(FailedAttempt{static_cast<int>(v[0]),
                                         static_cast<int>(v[1]), v[2], v[3],
                                         static_cast<int>(v[4])});
      ok = true;
    } else if (kind == 'H' && f.size() == 15 && ParseInts(f, 1, &v)) {
      auto it = open.find({static_cast<int>(v[0]), static_cast<int>(v[1])});
      if (it != open.end() && log.holds[it->second].attempt_end == v[3]) {
        Hold& h = log.holds[it->second];
        h.open = false;
        h.outcome = static_cast<Outcome>(v[4]);
        h.read_value = v[5];
        h.get_start = v[6];
        h.set_start = v[7];
        h.set_end = v[8];
        h.set_sent = v[9] != 0;
        h.safe_code = static_cast<int>(v[10]);
        h.release_start = v[11];
        h.release_end = v[12];
        h.release_code = static_cast<int>(v[13]);
        open.erase(it);
        ok = true;
      }
    }
    if (!ok) ++log.bad_lines;
  }
  return log;
}

}  // namespace harness
}  // namespace relock

#endif  // RELOCK_TOOLS_HARNESS_RECORD_H_
