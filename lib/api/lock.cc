// relock::Lock, LockGuard and LockError: the public surface over
// lib/lock/algorithm.h.

#include "relock/lock.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/api/calls.h"
#include "lib/client/client_core.h"
#include "lib/common/deadline.h"
#include "lib/lock/algorithm.h"

namespace relock {
namespace {

std::errc ErrcFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return std::errc::invalid_argument;
    case absl::StatusCode::kDeadlineExceeded:
      return std::errc::timed_out;
    case absl::StatusCode::kUnavailable:
      return std::errc::resource_unavailable_try_again;
    case absl::StatusCode::kCancelled:
      return std::errc::operation_canceled;
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
      return std::errc::permission_denied;
    case absl::StatusCode::kResourceExhausted:
      return std::errc::not_enough_memory;
    default:
      return std::errc::operation_not_permitted;
  }
}

absl::Status UnboundLock() {
  return internal::UnboundHandle("relock::Lock", "Client::GetLock");
}

}  // namespace

namespace internal {
void ThrowLockError(absl::Status status) { throw LockError(std::move(status)); }
}  // namespace internal

LockError::LockError(absl::Status status)
    : std::system_error(std::make_error_code(ErrcFor(status.code())),
                        status.ToString()),
      status_(std::move(status)) {}

Lock::Lock(std::shared_ptr<internal::ClientCore> core, std::string name,
           LockOptions options)
    : core_(std::move(core)),
      name_(std::move(name)),
      options_(std::move(options)) {}

// Whether the handle can make calls other than acquires (which check their
// options themselves): bound, with valid options.
absl::Status Lock::CheckUsable() const {
  if (core_ == nullptr) return UnboundLock();
  return internal::AcquireOptionsFor(
             *core_, options_,
             internal::LockType(fenced_, kind_, queue_wait_, spin_))
      .status();
}

absl::Status Lock::AcquireFor(const Owner& owner, absl::Duration wait,
                              absl::optional<absl::Duration> lease) {
  if (core_ == nullptr) return UnboundLock();
  return internal::Acquire(
      core_, name_, owner, wait, lease, options_,
      internal::LockType(fenced_, kind_, queue_wait_, spin_));
}

void Lock::AcquireAsyncFor(const Owner& owner, absl::Duration wait,
                           absl::optional<absl::Duration> lease,
                           std::function<void(absl::Status)> done) {
  done = internal::Contained(core_, std::move(done));
  if (core_ == nullptr) return done(UnboundLock());
  internal::AcquireAsync(core_, name_, owner, wait, lease, options_,
                         internal::LockType(fenced_, kind_, queue_wait_, spin_),
                         [done = std::move(done)](absl::Status s, int64_t) {
                           done(std::move(s));
                         });
}

void Lock::ReleaseAsyncFor(const Owner& owner,
                           std::function<void(absl::Status)> done) {
  done = internal::Contained(core_, std::move(done));
  if (absl::Status s = CheckUsable(); !s.ok()) return done(s);
  internal::ReleaseAsync(core_, name_, owner, std::move(done), kind_);
}

void Lock::ReportUnlockFailure(absl::Status status) noexcept {
  if (core_ != nullptr) {
    // unlock() acts for the calling thread: its hold of this handle's type.
    core_->Report(LockEventType::kUnlockFailed, name_, std::move(status),
                  lock::HolderOf(lock::ThisThread(), kind_).number);
  }
}

absl::Status Lock::ReleaseFor(const Owner& owner) {
  if (absl::Status s = CheckUsable(); !s.ok()) return s;
  return internal::Release(core_, name_, owner, kind_);
}

absl::StatusOr<bool> Lock::ForceRelease() {
  if (absl::Status s = CheckUsable(); !s.ok()) return s;
  if (absl::Status s = lock::ValidateName(name_); !s.ok()) return s;
  return lock::ForceRelease(*core_, name_, kind_);
}

absl::StatusOr<bool> Lock::IsLocked() const {
  if (absl::Status s = CheckUsable(); !s.ok()) return s;
  if (absl::Status s = lock::ValidateName(name_); !s.ok()) return s;
  return lock::IsLocked(*core_, name_, kind_);
}

absl::StatusOr<bool> Lock::IsHeldByCurrentThread() const {
  return IsHeldBy(Owner::ThisThread());
}

absl::StatusOr<bool> Lock::IsHeldBy(const Owner& owner) const {
  absl::StatusOr<int64_t> count = HoldCount(owner);
  if (!count.ok()) return count.status();
  return *count > 0;
}

absl::StatusOr<int64_t> Lock::HoldCount() const {
  return HoldCount(Owner::ThisThread());
}

absl::StatusOr<int64_t> Lock::HoldCount(const Owner& owner) const {
  if (absl::Status s = CheckUsable(); !s.ok()) return s;
  absl::StatusOr<lock::OwnerId> by = internal::CheckCall(name_, owner, kind_);
  if (!by.ok()) return by.status();
  return lock::HoldCount(*core_, name_, *by, kind_);
}

absl::StatusOr<absl::Duration> Lock::RemainingLease() const {
  if (absl::Status s = CheckUsable(); !s.ok()) return s;
  if (absl::Status s = lock::ValidateName(name_); !s.ok()) return s;
  return lock::RemainingLease(*core_, name_, kind_);
}

absl::StatusOr<std::chrono::steady_clock::time_point> Lock::SafeUntil() const {
  return SafeUntil(Owner::ThisThread());
}

absl::StatusOr<std::chrono::steady_clock::time_point> Lock::SafeUntil(
    const Owner& owner) const {
  if (absl::Status s = CheckUsable(); !s.ok()) return s;
  absl::StatusOr<lock::OwnerId> by = internal::CheckCall(name_, owner, kind_);
  if (!by.ok()) return by.status();
  return lock::SafeUntil(*core_, name_, *by);
}

absl::Status Lock::OnLost(std::function<void(const LockEvent&)> callback) {
  return OnLost(Owner::ThisThread(), std::move(callback));
}

absl::Status Lock::OnLost(const Owner& owner,
                          std::function<void(const LockEvent&)> callback) {
  if (absl::Status s = CheckUsable(); !s.ok()) return s;
  absl::StatusOr<lock::OwnerId> by = internal::CheckCall(name_, owner, kind_);
  if (!by.ok()) return by.status();
  return lock::OnLost(*core_, name_, *by, std::move(callback));
}

LockGuard::LockGuard(Lock& lock) : lock_(lock) {
  lock_.lock();
  owns_ = true;
}

LockGuard::LockGuard(Lock& lock, absl::Status* status) : lock_(lock) {
  *status = lock_.Acquire();
  owns_ = status->ok();
}

LockGuard::~LockGuard() {
  if (owns_) lock_.unlock();
}

}  // namespace relock
