// relock::RedlockClient and RedlockLock: the public surface over the
// reentrant lock's algorithm on a Redlock core (lib/redlock/).

#include "relock/redlock.h"

#include <utility>

#include "lib/api/calls.h"
#include "lib/common/deadline.h"
#include "lib/lock/algorithm.h"
#include "lib/lock/owner.h"
#include "lib/redlock/redlock.h"

namespace relock {
namespace {

absl::Status UnboundRedlock() {
  return internal::UnboundHandle("relock::RedlockLock",
                                 "RedlockClient::GetLock");
}

}  // namespace

absl::StatusOr<std::unique_ptr<RedlockClient>> RedlockClient::Connect(
    RedlockOptions options) {
  absl::StatusOr<std::shared_ptr<internal::ClientCore>> core =
      internal::ConnectRedlock(std::move(options));
  if (!core.ok()) return core.status();
  return std::unique_ptr<RedlockClient>(new RedlockClient(*std::move(core)));
}

RedlockClient::RedlockClient(std::shared_ptr<internal::ClientCore> core)
    : core_(std::move(core)) {}
RedlockClient::~RedlockClient() { Close(); }

RedlockLock RedlockClient::GetLock(absl::string_view name) {
  return RedlockLock(core_, std::string(name));
}
const std::string& RedlockClient::id() const { return core_->id(); }
int RedlockClient::quorum() const {
  return static_cast<int>(core_->backend().quorum());
}
ClientMetrics RedlockClient::Metrics() const { return core_->Snapshot(); }
void RedlockClient::Close() {
  // A kReleasedOnClose callback may destroy this RedlockClient during
  // Close(): keep the core alive until Close() returns (as Client::Close()).
  const std::shared_ptr<internal::ClientCore> core = core_;
  core->Close();
}

RedlockLock::RedlockLock(std::shared_ptr<internal::ClientCore> core,
                         std::string name)
    : core_(std::move(core)), name_(std::move(name)) {}

absl::Status RedlockLock::AcquireFor(const Owner& owner, absl::Duration wait,
                                     absl::optional<absl::Duration> lease) {
  if (core_ == nullptr) return UnboundRedlock();
  // The client's replica_sync (RedlockOptions::connection), on every master.
  return internal::Acquire(core_, name_, owner, wait, lease, LockOptions());
}

void RedlockLock::AcquireAsyncFor(const Owner& owner, absl::Duration wait,
                                  absl::optional<absl::Duration> lease,
                                  std::function<void(absl::Status)> done) {
  done = internal::Contained(core_, std::move(done));
  if (core_ == nullptr) return done(UnboundRedlock());
  internal::AcquireAsync(core_, name_, owner, wait, lease, LockOptions(),
                         std::move(done));
}

void RedlockLock::ReleaseAsyncFor(const Owner& owner,
                                  std::function<void(absl::Status)> done) {
  done = internal::Contained(core_, std::move(done));
  if (core_ == nullptr) return done(UnboundRedlock());
  internal::ReleaseAsync(core_, name_, owner, std::move(done));
}

void RedlockLock::ReportUnlockFailure(absl::Status status) noexcept {
  if (core_ != nullptr) {
    core_->Report(LockEventType::kUnlockFailed, name_, std::move(status));
  }
}

absl::Status RedlockLock::ReleaseFor(const Owner& owner) {
  if (core_ == nullptr) return UnboundRedlock();
  return internal::Release(core_, name_, owner);
}

absl::Status RedlockLock::Extend(absl::Duration lease) {
  if (core_ == nullptr) return UnboundRedlock();
  if (absl::Status s = lock::ValidateName(name_); !s.ok()) return s;
  return lock::Extend(*core_, name_, lock::ThisThread(), lease);
}

absl::StatusOr<std::chrono::steady_clock::time_point> RedlockLock::ValidUntil()
    const {
  if (core_ == nullptr) return UnboundRedlock();
  if (absl::Status s = lock::ValidateName(name_); !s.ok()) return s;
  return lock::SafeUntil(*core_, name_, lock::ThisThread());
}

int64_t RedlockLock::LocalHoldCount() const {
  if (core_ == nullptr) return 0;
  const absl::optional<watchdog::HoldFacts> hold =
      core_->holds().FindFacts(name_, lock::CurrentThreadNumber());
  return hold.has_value() && !hold->ended() ? hold->count : 0;
}

}  // namespace relock
