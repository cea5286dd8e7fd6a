// The safety harness's record format (record.h): writing and parsing the
// workers' log lines.

#include "tools/harness/record.h"

#include <errno.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace relock {
namespace harness {

int64_t MonotonicNanos() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

const char* OutcomeName(Outcome o) {
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
    case Outcome::kRefused:
      return "refused-stale";
  }
  return "?";
}

LogFile::~LogFile() {
  if (fd_ >= 0) close(fd_);
}

absl::Status LogFile::Open(const std::string& path) {
  fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    return absl::UnavailableError(
        absl::StrCat("open ", path, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

void LogFile::Append(std::string line) {
  line.push_back('\n');
  size_t off = 0;
  while (off < line.size()) {
    ssize_t n = write(fd_, line.data() + off, line.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

std::string FormatAcquired(int thread, int lock, int64_t start, int64_t end,
                           int64_t token) {
  return absl::StrCat("A ", thread, " ", lock, " ", start, " ", end,
                      token >= 0 ? absl::StrCat(" ", token) : "");
}

std::string FormatPermit(int thread, int lock, const std::string& permit) {
  return absl::StrCat("P ", thread, " ", lock, " ", permit);
}

std::string FormatReleasing(int thread, int lock, int64_t time) {
  return absl::StrCat("R ", thread, " ", lock, " ", time);
}

std::string FormatFailed(const FailedAttempt& f) {
  return absl::StrCat("F ", f.thread, " ", f.lock, " ", f.start, " ", f.end,
                      " ", f.code);
}

std::string FormatHold(const Hold& h) {
  return absl::StrCat("H ", h.thread, " ", h.lock, " ", h.attempt_start, " ",
                      h.attempt_end, " ", static_cast<int>(h.outcome), " ",
                      h.read_value, " ", h.get_start, " ", h.set_start, " ",
                      h.set_end, " ", h.set_sent ? 1 : 0, " ", h.safe_code, " ",
                      h.release_start, " ", h.release_end, " ", h.release_code,
                      h.fence_high >= 0 ? absl::StrCat(" ", h.fence_high) : "");
}

std::string FormatLost(const LostEvent& e) {
  std::string line =
      absl::StrCat("L ", e.owner, " ", e.lock, " ", e.time, " ", e.code);
  if (e.safe_until > 0) absl::StrAppend(&line, " ", e.safe_until);
  return line;
}

std::string FormatStall(int64_t time) { return absl::StrCat("S ", time); }

bool ParseInts(const std::vector<absl::string_view>& f, size_t first,
               std::vector<int64_t>* out) {
  out->clear();
  for (size_t i = first; i < f.size(); ++i) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(f[i], &v)) return false;
    out->push_back(v);
  }
  return true;
}

WorkerLog ParseWorkerLog(int worker, const std::string& path) {
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
    } else if (kind == 'L' && (f.size() == 5 || f.size() == 6)) {
      LostEvent e;
      e.owner = std::string(f[1]);
      ok = ParseInts(f, 2, &v);
      if (ok) {
        e.lock = static_cast<int>(v[0]);
        e.time = v[1];
        e.code = static_cast<int>(v[2]);
        if (v.size() == 4) e.safe_until = v[3];
        log.lost.push_back(e);
      }
    } else if (kind == 'S' && f.size() == 2 && ParseInts(f, 1, &v)) {
      log.stalls.push_back(v[0]);
      ok = true;
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
    } else if (kind == 'P' && f.size() == 4) {
      std::vector<absl::string_view> nums(f.begin(), f.begin() + 3);
      ok = ParseInts(nums, 1, &v);
      if (ok) {
        auto it = open.find({static_cast<int>(v[0]), static_cast<int>(v[1])});
        if (it != open.end()) log.holds[it->second].permit = std::string(f[3]);
      }
    } else if (kind == 'R' && f.size() == 4 && ParseInts(f, 1, &v)) {
      auto it = open.find({static_cast<int>(v[0]), static_cast<int>(v[1])});
      if (it != open.end()) log.holds[it->second].release_start = v[2];
      ok = true;
    } else if (kind == 'F' && f.size() == 6 && ParseInts(f, 1, &v)) {
      log.failed.push_back(FailedAttempt{static_cast<int>(v[0]),
                                         static_cast<int>(v[1]), v[2], v[3],
                                         static_cast<int>(v[4])});
      ok = true;
    } else if (kind == 'H' && (f.size() == 15 || f.size() == 16) &&
               ParseInts(f, 1, &v)) {
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
        if (v.size() == 15) h.fence_high = v[14];
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
