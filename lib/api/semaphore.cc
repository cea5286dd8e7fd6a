// relock::Semaphore: the public surface over lib/lock/semaphore.h.

#include "relock/semaphore.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/api/calls.h"
#include "lib/client/client_core.h"
#include "lib/common/deadline.h"
#include "lib/lock/semaphore.h"

namespace relock {
namespace {

absl::Status UnboundSemaphore() {
  return internal::UnboundHandle("relock::Semaphore", "Client::GetSemaphore");
}

absl::Status NegativeWait(absl::Duration wait) {
  return absl::InvalidArgumentError(
      absl::StrCat("acquire semaphore: wait must not be negative, got ",
                   absl::FormatDuration(wait)));
}

}  // namespace

absl::StatusOr<bool> Semaphore::TrySetPermits(int64_t permits) {
  if (core_ == nullptr) return UnboundSemaphore();
  return lock::TrySetPermits(*core_, name_, permits);
}

absl::Status Semaphore::AddPermits(int64_t permits) {
  if (core_ == nullptr) return UnboundSemaphore();
  return lock::ReleasePermits(*core_, name_, permits, /*add=*/true);
}

absl::Status Semaphore::Acquire(int64_t permits) {
  return TryAcquire(permits, absl::InfiniteDuration());
}

absl::Status Semaphore::TryAcquire(int64_t permits, absl::Duration wait) {
  if (core_ == nullptr) return UnboundSemaphore();
  if (wait < absl::ZeroDuration()) return NegativeWait(wait);
  return lock::AcquirePermits(*core_, name_, permits, Deadline::After(wait));
}

absl::Status Semaphore::Release(int64_t permits) {
  if (core_ == nullptr) return UnboundSemaphore();
  return lock::ReleasePermits(*core_, name_, permits);
}

absl::StatusOr<int64_t> Semaphore::AvailablePermits() const {
  if (core_ == nullptr) return UnboundSemaphore();
  return lock::AvailablePermits(*core_, name_);
}

absl::StatusOr<int64_t> Semaphore::Drain() {
  if (core_ == nullptr) return UnboundSemaphore();
  return lock::DrainPermits(*core_, name_);
}

Future<absl::Status> Semaphore::AcquireAsync(int64_t permits) {
  return internal::Promised([&](std::function<void(absl::Status)> done) {
    AcquireAsync(permits, std::move(done));
  });
}

void Semaphore::AcquireAsync(int64_t permits,
                             std::function<void(absl::Status)> done) {
  AcquireAsyncFor(permits, absl::InfiniteDuration(), std::move(done));
}

Future<absl::Status> Semaphore::TryAcquireAsync(int64_t permits,
                                                absl::Duration wait) {
  return internal::Promised([&](std::function<void(absl::Status)> done) {
    TryAcquireAsync(permits, wait, std::move(done));
  });
}

void Semaphore::TryAcquireAsync(int64_t permits, absl::Duration wait,
                                std::function<void(absl::Status)> done) {
  AcquireAsyncFor(permits, wait, std::move(done));
}

void Semaphore::AcquireAsyncFor(int64_t permits, absl::Duration wait,
                                std::function<void(absl::Status)> done) {
  done = internal::Contained(core_, std::move(done));
  if (core_ == nullptr) return done(UnboundSemaphore());
  if (wait < absl::ZeroDuration()) return done(NegativeWait(wait));
  lock::AcquirePermitsAsync(*core_, core_, name_, permits,
                            Deadline::After(wait), std::move(done));
}

Future<absl::Status> Semaphore::ReleaseAsync(int64_t permits) {
  return internal::Promised([&](std::function<void(absl::Status)> done) {
    ReleaseAsync(permits, std::move(done));
  });
}

void Semaphore::ReleaseAsync(int64_t permits,
                             std::function<void(absl::Status)> done) {
  done = internal::Contained(core_, std::move(done));
  if (core_ == nullptr) return done(UnboundSemaphore());
  lock::ReleasePermitsAsync(*core_, core_, name_, permits, std::move(done));
}

}  // namespace relock
