// Calling the user's callbacks (async completions, Future::Then(),
// on_lock_event, on_lost, the logger) so that what they throw never unwinds
// through relock: a throw on the event loop thread would end the process
// (std::terminate) or leave a half-run state machine behind. The exception
// is caught and logged at kError, and the caller goes on as if the callback
// had returned (relock/future.h, relock/options.h).

#ifndef RELOCK_LIB_COMMON_CONTAIN_H_
#define RELOCK_LIB_COMMON_CONTAIN_H_

#include <exception>
#include <iostream>
#include <string>
#include <utility>

#include "absl/base/log_severity.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "lib/common/observer.h"

namespace relock {
namespace internal {

// What the exception being handled says; call only inside a catch block.
inline std::string CurrentExceptionText() noexcept {
  try {
    throw;
  } catch (const std::exception& e) {
    return absl::StrCat("an exception: ", e.what());
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

// The line logged for a callback (`what`) that threw; call only inside a
// catch block.
inline std::string ThrownLine(absl::string_view what) noexcept {
  return absl::StrCat(what, " threw ", CurrentExceptionText(),
                      "; relock caught it and carried on (callbacks must not "
                      "throw)");
}

// Writes `line` to stderr, "relock: <line>" (one write per line).
inline void WriteToStderr(absl::string_view line) noexcept {
  std::cerr << absl::StrCat("relock: ", line, "\n") << std::flush;
}

// Calls `f(args...)`; an exception is logged through `log` (stderr if `log`
// is empty) at kError, naming the callback by `what`, and dropped.
template <class F, class... Args>
void CallContained(const LogFn& log, absl::string_view what, F& f,
                   Args&&... args) noexcept {
  try {
    f(std::forward<Args>(args)...);
  } catch (...) {
    const std::string line = ThrownLine(what);
    if (log) {
      log(absl::LogSeverity::kError, line);
    } else {
      WriteToStderr(line);
    }
  }
}

}  // namespace internal
}  // namespace relock

#endif  // RELOCK_LIB_COMMON_CONTAIN_H_
