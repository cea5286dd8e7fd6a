// relock::RedlockClient and RedlockLock: the public surface over
// internal::RedlockCore.

#include "relock/redlock.h"

#include <utility>

#include "lib/common/deadline.h"
#include "lib/lock/reentrant_lock.h"
#include "lib/redlock/redlock_core.h"

namespace relock {
namespace {

absl::Status Unbound() {
  return absl::FailedPreconditionError(
      "this relock::RedlockLock handle is not bound to a client (default-"
      "constructed or moved-from); get one from RedlockClient::GetLock()");
}

}  // namespace

absl::StatusOr<std::unique_ptr<RedlockClient>> RedlockClient::Connect(
    RedlockOptions options) {
  absl::StatusOr<std::shared_ptr<internal::RedlockCore>> core =
      internal::RedlockCore::Create(std::move(options));
  if (!core.ok()) return core.status();
  return std::unique_ptr<RedlockClient>(new RedlockClient(*std::move(core)));
}

RedlockClient::RedlockClient(std::shared_ptr<internal::RedlockCore> core)
    : core_(std::move(core)) {}
RedlockClient::~RedlockClient() { Close(); }

RedlockLock RedlockClient::GetLock(absl::string_view name) {
  return RedlockLock(core_, std::string(name));
}
const std::string& RedlockClient::id() const { return core_->id(); }
int RedlockClient::quorum() const { return core_->quorum(); }
void RedlockClient::Close() { core_->Close(); }

RedlockLock::RedlockLock(std::shared_ptr<internal::RedlockCore> core,
                         std::string name)
    : core_(std::move(core)), name_(std::move(name)) {}

absl::Status RedlockLock::AcquireFor(absl::Duration wait,
                                     absl::optional<absl::Duration> lease) {
  if (core_ == nullptr) return Unbound();
  if (absl::Status s = lock::ValidateName(name_); !s.ok()) return s;
  return core_->Acquire(name_, lease, Deadline::After(wait));
}

void RedlockLock::ReportUnlockFailure(absl::Status status) noexcept {
  if (core_ != nullptr) core_->ReportUnlockFailure(name_, std::move(status));
}

absl::Status RedlockLock::Release() {
  if (core_ == nullptr) return Unbound();
  if (absl::Status s = lock::ValidateName(name_); !s.ok()) return s;
  return core_->Release(name_);
}

absl::Status RedlockLock::Extend(absl::Duration lease) {
  if (core_ == nullptr) return Unbound();
  if (absl::Status s = lock::ValidateName(name_); !s.ok()) return s;
  return core_->Extend(name_, lease);
}

absl::StatusOr<std::chrono::steady_clock::time_point> RedlockLock::ValidUntil()
    const {
  if (core_ == nullptr) return Unbound();
  return core_->ValidUntil(name_);
}

int64_t RedlockLock::LocalHoldCount() const {
  return core_ == nullptr ? 0 : core_->LocalHoldCount(name_);
}

}  // namespace relock
