// The safety harness's record format: what a worker process writes about
// every lock attempt and hold, one text line per event, appended to its own
// log file with one write(2) each (O_APPEND), so a worker killed with SIGKILL
// leaves every line it wrote before the kill, including the "A" line of a hold
// it never closed. Times are CLOCK_MONOTONIC nanoseconds, comparable between
// processes on one machine.
//
//   O <thread> <owner>                  owner field of a worker thread
//   A <thread> <lock> <start> <end>     attempt that acquired (hold opens)
//   P <thread> <lock> <permit>          semaphore runs, right after the A
//                                       line: the permit id the hold got
//   R <thread> <lock> <time>            Release() about to be called
//   F <thread> <lock> <start> <end> <code>
//                                       attempt that failed (status code)
//   H <thread> <lock> <start> <end> <outcome> <read> <get_start> <set_start>
//     <set_end> <set_sent> <safe_code> <release_start> <release_end>
//     <release_code> [<fence_high>]     hold closed (all of it again); in
//                                       fenced runs, the highest token the
//                                       resource had accepted before its write
//                                       (as its script reported; -1: none)
//   L <owner> <lock> <time> <code> [<safe_until>]
//                                       a kLockLost event (lock -1: unknown);
//                                       when the event gives it, the end of
//                                       the hold's SafeUntil()
//   G <thread> <lock> <time> <count> <pttl> <where>
//                                       a ghost hold found (and freed): the
//                                       thread's owner field was in Redis
//                                       though it held no hold
//   S <time>                            a stall: the worker's client lost a
//                                       connection because a request had no
//                                       reply within command_timeout (Redis
//                                       or the machine stalled; the library's
//                                       logger said so)
//   E <text>                            something unexpected (an anomaly)
//   D                                   the worker finished normally
//
// Part of tools/harness (see harness.h); record.cc has the definitions.

#ifndef RELOCK_TOOLS_HARNESS_RECORD_H_
#define RELOCK_TOOLS_HARNESS_RECORD_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace relock {
namespace harness {

// CLOCK_MONOTONIC (what std::chrono::steady_clock uses on Linux), in ns.
int64_t MonotonicNanos();

// What happened inside a hold (between acquire and release).
enum class Outcome : int {
  kCompleted = 1,     // GET and SET both succeeded
  kNoConnection = 2,  // the raw connection could not be (re)opened
  kGetFailed = 3,     // GET failed: nothing written
  kAbandoned = 4,     // SafeUntil() too close or lost: SET skipped
  kSetFailed = 5,     // SET sent but failed: may or may not have written
  // Fenced runs: the resource (the counter's script) refused the write, its
  // token being lower than one it had accepted: nothing written.
  kRefused = 6,
};

const char* OutcomeName(Outcome o);

// One acquisition attempt and, if it acquired, the hold that followed.
struct Hold {
  int worker = 0;
  int thread = 0;
  int lock = 0;
  int64_t attempt_start = 0;
  int64_t attempt_end = 0;  // when TryAcquire returned: the hold's start
  int64_t token = -1;       // a FencedLock's token (fenced runs), else -1
  std::string permit;       // its permit id (semaphore runs, "P" line)
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
  // Fenced runs: the highest token the resource had accepted before this
  // hold's write, as its script reported (-1: no write answered, or not
  // fenced). An accepted write with a token below it is a stale write
  // accepted, which the script makes impossible.
  int64_t fence_high = -1;
  // Set by the checker.
  bool told_lost = false;
  int64_t told_at = 0;  // the first report of the loss; 0: none timed
  bool paused = false;  // its process was SIGSTOPped during it (pause-holder)
  // Its worker was partitioned during it, or it intersects a split brain;
  // from `cut_at` on (the first such cut during it).
  bool cut = false;
  int64_t cut_at = 0;
  // It intersects a split-brain fault's window, in a run that expects
  // split-brain overlaps (CheckInput::expect_split_brain_overlaps).
  bool split_brain = false;
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
  int64_t time = 0;  // when the worker got it
  int code = 0;
  // LockEvent::safe_until (0: none): from then on the holder's SafeUntil()
  // said the hold was unsafe, however late the event came.
  int64_t safe_until = 0;
};

// Everything one worker process wrote.
struct WorkerLog {
  int worker = 0;
  std::map<int, std::string> owners;  // thread -> owner field
  std::vector<Hold> holds;            // in the order they were acquired
  std::vector<FailedAttempt> failed;
  std::vector<LostEvent> lost;
  std::vector<GhostHold> ghosts;
  std::vector<int64_t> stalls;  // "S" lines: when each was reported
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
  ~LogFile();
  absl::Status Open(const std::string& path);
  void Append(std::string line);

 private:
  int fd_ = -1;
};

// "A <thread> <lock> <start> <end>", plus " <token>" in fenced runs.
std::string FormatAcquired(int thread, int lock, int64_t start, int64_t end,
                           int64_t token = -1);

// "P <thread> <lock> <permit>": the permit a semaphore hold got.
std::string FormatPermit(int thread, int lock, const std::string& permit);

// Written just before Release() is called, so that the hold of a worker
// killed during or after its release ends there, not at the kill.
std::string FormatReleasing(int thread, int lock, int64_t time);

std::string FormatFailed(const FailedAttempt& f);
std::string FormatHold(const Hold& h);
std::string FormatLost(const LostEvent& e);
std::string FormatStall(int64_t time);

// --- Reading ---------------------------------------------------------------

// Fields f[first..] as integers in *out; false if one is not.
bool ParseInts(const std::vector<absl::string_view>& f, size_t first,
               std::vector<int64_t>* out);

// Parses a worker's log. A missing file (a worker killed before it wrote
// anything) gives an empty log; a torn last line is counted in bad_lines.
WorkerLog ParseWorkerLog(int worker, const std::string& path);

}  // namespace harness
}  // namespace relock

#endif  // RELOCK_TOOLS_HARNESS_RECORD_H_
