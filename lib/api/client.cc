// relock::Client: the public surface over internal::ClientCore.

#include "relock/client.h"

#include <utility>

#include "lib/client/client_core.h"
#include "lib/lock/inspect.h"
#include "lib/redis/errors.h"

namespace relock {

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(ClientOptions options) {
  absl::StatusOr<std::shared_ptr<internal::ClientCore>> core =
      internal::ClientCore::Create(std::move(options));
  if (!core.ok()) return core.status();
  return std::unique_ptr<Client>(new Client(*std::move(core)));
}

Client::Client(std::shared_ptr<internal::ClientCore> core)
    : core_(std::move(core)) {}

Client::~Client() { Close(); }

Lock Client::GetLock(absl::string_view name) {
  return Lock(core_, std::string(name), LockOptions());
}

Lock Client::GetLock(absl::string_view name, const LockOptions& options) {
  return Lock(core_, std::string(name), options);
}

FencedLock Client::GetFencedLock(absl::string_view name) {
  return FencedLock(core_, std::string(name), LockOptions());
}

FencedLock Client::GetFencedLock(absl::string_view name,
                                 const LockOptions& options) {
  return FencedLock(core_, std::string(name), options);
}

FairLock Client::GetFairLock(absl::string_view name) {
  return FairLock(core_, std::string(name), FairLockOptions());
}

FairLock Client::GetFairLock(absl::string_view name,
                             const FairLockOptions& options) {
  return FairLock(core_, std::string(name), options);
}

ReadWriteLock Client::GetReadWriteLock(absl::string_view name) {
  return ReadWriteLock(core_, std::string(name), LockOptions());
}

ReadWriteLock Client::GetReadWriteLock(absl::string_view name,
                                       const LockOptions& options) {
  return ReadWriteLock(core_, std::string(name), options);
}

Lock Client::GetSpinLock(absl::string_view name) {
  Lock lock(core_, std::string(name), LockOptions());
  lock.spin_ = true;
  return lock;
}

Semaphore Client::GetSemaphore(absl::string_view name) {
  return Semaphore(core_, std::string(name));
}

PermitExpirableSemaphore Client::GetPermitExpirableSemaphore(
    absl::string_view name) {
  return PermitExpirableSemaphore(core_, std::string(name));
}

CountDownLatch Client::GetCountDownLatch(absl::string_view name) {
  return CountDownLatch(core_, std::string(name));
}

const std::string& Client::id() const { return core_->id(); }

absl::Status Client::Ping() {
  if (absl::Status s = core_->CheckBlockingCall(); !s.ok()) return s;
  const absl::string_view ping[] = {"PING"};
  std::vector<backend::Answer> answers =
      core_->backend().Command(ping, Deadline::Never());
  for (const backend::Answer& a : answers) {
    if (!a.reply.ok()) return a.reply.status();
    if (a.reply->is_error()) {
      return redis::ErrorReplyToStatus("PING", a.reply->str());
    }
  }
  return absl::OkStatus();
}

ClientMetrics Client::Metrics() const { return core_->Snapshot(); }

absl::StatusOr<LockInfo> Client::InspectLock(absl::string_view name) {
  return lock::InspectLock(*core_, name);
}

absl::StatusOr<SemaphoreInfo> Client::InspectSemaphore(absl::string_view name) {
  return lock::InspectSemaphore(*core_, name);
}

absl::StatusOr<std::vector<LockInfo>> Client::ListLocks(
    absl::string_view pattern) {
  return lock::ListLocks(*core_, pattern);
}

void Client::Close() {
  // A kReleasedOnClose callback may destroy this Client during Close(): keep
  // the core alive until Close() returns.
  const std::shared_ptr<internal::ClientCore> core = core_;
  core->Close();
}

}  // namespace relock
