// relock::CountDownLatch: the public surface over
// lib/lock/count_down_latch.h.

#include "relock/count_down_latch.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/api/calls.h"
#include "lib/client/client_core.h"
#include "lib/common/deadline.h"
#include "lib/lock/count_down_latch.h"

namespace relock {
namespace {

absl::Status UnboundLatch() {
  return internal::UnboundHandle("relock::CountDownLatch",
                                 "Client::GetCountDownLatch");
}

absl::Status NegativeTimeout(absl::Duration timeout) {
  return absl::InvalidArgumentError(
      absl::StrCat("await count-down latch: timeout must not be negative, "
                   "got ",
                   absl::FormatDuration(timeout)));
}

}  // namespace

absl::StatusOr<bool> CountDownLatch::TrySetCount(int64_t count) {
  if (core_ == nullptr) return UnboundLatch();
  return lock::TrySetCount(*core_, name_, count);
}

absl::Status CountDownLatch::CountDown() {
  if (core_ == nullptr) return UnboundLatch();
  return lock::CountDown(*core_, name_).status();
}

absl::StatusOr<int64_t> CountDownLatch::GetCount() const {
  if (core_ == nullptr) return UnboundLatch();
  return lock::GetCount(*core_, name_);
}

absl::Status CountDownLatch::Await(absl::Duration timeout) {
  if (core_ == nullptr) return UnboundLatch();
  if (timeout < absl::ZeroDuration()) return NegativeTimeout(timeout);
  return lock::AwaitZero(*core_, name_, Deadline::After(timeout));
}

Future<absl::Status> CountDownLatch::AwaitAsync(absl::Duration timeout) {
  return internal::Promised([&](std::function<void(absl::Status)> done) {
    AwaitAsync(timeout, std::move(done));
  });
}

void CountDownLatch::AwaitAsync(absl::Duration timeout,
                                std::function<void(absl::Status)> done) {
  done = internal::Contained(core_, std::move(done));
  if (core_ == nullptr) return done(UnboundLatch());
  if (timeout < absl::ZeroDuration()) return done(NegativeTimeout(timeout));
  lock::AwaitZeroAsync(*core_, core_, name_, Deadline::After(timeout),
                       std::move(done));
}

}  // namespace relock
