// The out-of-line helpers of relock/future.h.

#include "relock/future.h"

#include "absl/strings/string_view.h"
#include "lib/common/contain.h"
#include "lib/io/event_loop.h"

namespace relock {
namespace internal {

bool OnEventLoopThread() { return io::EventLoop::InAnyLoopThread(); }

void ReportCallbackException(absl::string_view what) noexcept {
  WriteToStderr(ThrownLine(what));
}

}  // namespace internal
}  // namespace relock
