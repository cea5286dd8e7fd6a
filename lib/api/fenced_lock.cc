// relock::FencedLock: the public surface over lib/lock/algorithm.h's
// fenced acquire (AcquireOptions::fenced).

#include "relock/fenced_lock.h"

#include <utility>

#include "absl/status/status.h"
#include "lib/api/calls.h"
#include "lib/client/client_core.h"
#include "lib/lock/algorithm.h"

namespace relock {
namespace {

absl::Status UnboundFencedLock() {
  return internal::UnboundHandle("relock::FencedLock", "Client::GetFencedLock");
}

absl::Status NegativeWait(absl::Duration wait) {
  return absl::InvalidArgumentError("acquire: wait must not be negative, got " +
                                    absl::FormatDuration(wait));
}

// The token of an acquire that succeeded, or its error.
absl::StatusOr<int64_t> TokenOf(absl::Status status, int64_t token) {
  if (!status.ok()) return status;
  if (token < 1) {
    return absl::InternalError(
        "acquire fenced lock: the lock was taken but no token came back");
  }
  return token;
}

template <class Start>
Future<absl::StatusOr<int64_t>> PromisedToken(Start start) {
  internal::Promise<absl::StatusOr<int64_t>> promise;
  start([promise](absl::StatusOr<int64_t> t) { promise.Set(std::move(t)); });
  return promise.future();
}

}  // namespace

FencedLock::FencedLock(std::shared_ptr<internal::ClientCore> core,
                       std::string name, LockOptions options)
    : Lock(std::move(core), std::move(name), std::move(options)) {
  fenced_ = true;
}

absl::StatusOr<int64_t> FencedLock::AcquireWithToken(
    const Owner& owner, absl::Duration wait,
    absl::optional<absl::Duration> lease) {
  if (core_ == nullptr) return UnboundFencedLock();
  if (wait < absl::ZeroDuration()) return NegativeWait(wait);
  int64_t token = -1;
  absl::Status s = internal::Acquire(
      core_, name_, owner, wait, lease, options_,
      internal::LockType(/*fenced=*/true, LockKind::kReentrant, queue_wait_),
      &token);
  return TokenOf(std::move(s), token);
}

void FencedLock::AcquireWithTokenAsync(const Owner& owner, absl::Duration wait,
                                       TokenCallback done) {
  done = internal::Contained(core_, std::move(done));
  if (core_ == nullptr) return done(UnboundFencedLock());
  if (wait < absl::ZeroDuration()) return done(NegativeWait(wait));
  internal::AcquireAsync(
      core_, name_, owner, wait, absl::nullopt, options_,
      internal::LockType(/*fenced=*/true, LockKind::kReentrant, queue_wait_),
      [done = std::move(done)](absl::Status s, int64_t token) {
        done(TokenOf(std::move(s), token));
      });
}

absl::StatusOr<int64_t> FencedLock::LockAndGetToken() {
  return AcquireWithToken(Owner::ThisThread(), absl::InfiniteDuration(),
                          absl::nullopt);
}
absl::StatusOr<int64_t> FencedLock::LockAndGetToken(absl::Duration lease) {
  return AcquireWithToken(Owner::ThisThread(), absl::InfiniteDuration(), lease);
}
absl::StatusOr<int64_t> FencedLock::TryLockAndGetToken(absl::Duration wait) {
  return AcquireWithToken(Owner::ThisThread(), wait, absl::nullopt);
}
absl::StatusOr<int64_t> FencedLock::TryLockAndGetToken(absl::Duration wait,
                                                       absl::Duration lease) {
  return AcquireWithToken(Owner::ThisThread(), wait, lease);
}
absl::StatusOr<int64_t> FencedLock::LockAndGetToken(const Owner& owner) {
  return AcquireWithToken(owner, absl::InfiniteDuration(), absl::nullopt);
}
absl::StatusOr<int64_t> FencedLock::LockAndGetToken(const Owner& owner,
                                                    absl::Duration lease) {
  return AcquireWithToken(owner, absl::InfiniteDuration(), lease);
}
absl::StatusOr<int64_t> FencedLock::TryLockAndGetToken(const Owner& owner,
                                                       absl::Duration wait) {
  return AcquireWithToken(owner, wait, absl::nullopt);
}
absl::StatusOr<int64_t> FencedLock::TryLockAndGetToken(const Owner& owner,
                                                       absl::Duration wait,
                                                       absl::Duration lease) {
  return AcquireWithToken(owner, wait, lease);
}

Future<absl::StatusOr<int64_t>> FencedLock::LockAndGetTokenAsync(
    const Owner& owner) {
  return PromisedToken([&](TokenCallback done) {
    LockAndGetTokenAsync(owner, std::move(done));
  });
}
void FencedLock::LockAndGetTokenAsync(const Owner& owner, TokenCallback done) {
  AcquireWithTokenAsync(owner, absl::InfiniteDuration(), std::move(done));
}
Future<absl::StatusOr<int64_t>> FencedLock::TryLockAndGetTokenAsync(
    const Owner& owner, absl::Duration wait) {
  return PromisedToken([&](TokenCallback done) {
    TryLockAndGetTokenAsync(owner, wait, std::move(done));
  });
}
void FencedLock::TryLockAndGetTokenAsync(const Owner& owner,
                                         absl::Duration wait,
                                         TokenCallback done) {
  AcquireWithTokenAsync(owner, wait, std::move(done));
}

absl::StatusOr<int64_t> FencedLock::GetToken() const {
  if (core_ == nullptr) return UnboundFencedLock();
  if (absl::Status s = internal::AcquireOptionsFor(*core_, options_).status();
      !s.ok()) {
    return s;
  }
  if (absl::Status s = lock::ValidateName(name_); !s.ok()) return s;
  return lock::LastToken(*core_, name_);
}

}  // namespace relock
