// relock::PermitExpirableSemaphore: the public surface over
// lib/lock/permit_semaphore.h.

#include "relock/permit_expirable_semaphore.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/api/calls.h"
#include "lib/client/client_core.h"
#include "lib/common/deadline.h"
#include "lib/lock/permit_semaphore.h"

namespace relock {
namespace {

absl::Status UnboundPermitSemaphore() {
  return internal::UnboundHandle("relock::PermitExpirableSemaphore",
                                 "Client::GetPermitExpirableSemaphore");
}

absl::Status NegativePermitWait(absl::Duration wait) {
  return absl::InvalidArgumentError(absl::StrCat(
      "acquire permit-expirable semaphore: wait must not be negative, got ",
      absl::FormatDuration(wait)));
}

using PermitIdDone = std::function<void(absl::StatusOr<std::string>)>;

}  // namespace

absl::StatusOr<bool> PermitExpirableSemaphore::TrySetPermits(int64_t permits) {
  if (core_ == nullptr) return UnboundPermitSemaphore();
  return lock::TrySetExpirablePermits(*core_, name_, permits);
}

absl::StatusOr<std::string> PermitExpirableSemaphore::Acquire() {
  return TryAcquire(absl::InfiniteDuration(), absl::InfiniteDuration());
}

absl::StatusOr<std::string> PermitExpirableSemaphore::Acquire(
    absl::Duration lease) {
  return TryAcquire(absl::InfiniteDuration(), lease);
}

absl::StatusOr<std::string> PermitExpirableSemaphore::TryAcquire(
    absl::Duration wait) {
  return TryAcquire(wait, absl::InfiniteDuration());
}

absl::StatusOr<std::string> PermitExpirableSemaphore::TryAcquire(
    absl::Duration wait, absl::Duration lease) {
  if (core_ == nullptr) return UnboundPermitSemaphore();
  if (wait < absl::ZeroDuration()) return NegativePermitWait(wait);
  return lock::AcquirePermit(*core_, name_, lease, Deadline::After(wait));
}

absl::Status PermitExpirableSemaphore::Release(const std::string& permit_id) {
  if (core_ == nullptr) return UnboundPermitSemaphore();
  return lock::ReleasePermit(*core_, name_, permit_id);
}

absl::Status PermitExpirableSemaphore::UpdateLeaseTime(
    const std::string& permit_id, absl::Duration lease) {
  if (core_ == nullptr) return UnboundPermitSemaphore();
  return lock::UpdatePermitLease(*core_, name_, permit_id, lease);
}

absl::StatusOr<int64_t> PermitExpirableSemaphore::AvailablePermits() {
  if (core_ == nullptr) return UnboundPermitSemaphore();
  return lock::AvailableExpirablePermits(*core_, name_);
}

Future<absl::StatusOr<std::string>> PermitExpirableSemaphore::AcquireAsync(
    absl::Duration lease) {
  return TryAcquireAsync(absl::InfiniteDuration(), lease);
}

void PermitExpirableSemaphore::AcquireAsync(absl::Duration lease,
                                            PermitIdDone done) {
  TryAcquireAsync(absl::InfiniteDuration(), lease, std::move(done));
}

Future<absl::StatusOr<std::string>> PermitExpirableSemaphore::TryAcquireAsync(
    absl::Duration wait, absl::Duration lease) {
  internal::Promise<absl::StatusOr<std::string>> promise;
  TryAcquireAsync(wait, lease, [promise](absl::StatusOr<std::string> id) {
    promise.Set(std::move(id));
  });
  return promise.future();
}

void PermitExpirableSemaphore::TryAcquireAsync(absl::Duration wait,
                                               absl::Duration lease,
                                               PermitIdDone done) {
  done = internal::Contained(core_, std::move(done));
  if (core_ == nullptr) return done(UnboundPermitSemaphore());
  if (wait < absl::ZeroDuration()) return done(NegativePermitWait(wait));
  lock::AcquirePermitAsync(*core_, core_, name_, lease, Deadline::After(wait),
                           std::move(done));
}

Future<absl::Status> PermitExpirableSemaphore::ReleaseAsync(
    const std::string& permit_id) {
  return internal::Promised([&](std::function<void(absl::Status)> done) {
    ReleaseAsync(permit_id, std::move(done));
  });
}

void PermitExpirableSemaphore::ReleaseAsync(
    const std::string& permit_id, std::function<void(absl::Status)> done) {
  done = internal::Contained(core_, std::move(done));
  if (core_ == nullptr) return done(UnboundPermitSemaphore());
  lock::ReleasePermitAsync(*core_, core_, name_, permit_id, std::move(done));
}

}  // namespace relock
