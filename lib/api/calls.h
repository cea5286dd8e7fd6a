// What the public lock classes (Lock, RedlockLock) share: the owner a call
// acts for, and the asynchronous calls (lib/api only).

#ifndef RELOCK_LIB_API_CALLS_H_
#define RELOCK_LIB_API_CALLS_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "lib/client/client_core.h"
#include "lib/common/contain.h"
#include "lib/common/deadline.h"
#include "lib/lock/algorithm.h"
#include "lib/lock/owner.h"
#include "relock/future.h"
#include "relock/options.h"
#include "relock/owner.h"

namespace relock {
namespace internal {

// FailedPrecondition for a call on a handle that is not bound to a client
// (default-constructed or moved-from): `handle` is its class
// ("relock::Lock"), `getter` the call that gives a bound one.
inline absl::Status UnboundHandle(absl::string_view handle,
                                  absl::string_view getter) {
  return absl::FailedPreconditionError(
      absl::StrCat("this ", handle,
                   " handle is not bound to a client (default-constructed or "
                   "moved-from); get one from ",
                   getter, "()"));
}

// InvalidArgument for a default-constructed Owner.
inline absl::StatusOr<lock::OwnerId> CheckedOwner(const Owner& owner) {
  if (!owner.valid()) {
    return absl::InvalidArgumentError(
        "relock::Owner: a default-constructed Owner is no owner; make one "
        "with Owner::New() (or Owner::ThisThread())");
  }
  return lock::OwnerId{owner.number(), owner.is_thread()};
}

// `done` (a callback of an asynchronous call, or the setter of its
// Future, which runs the Future's Then() callback) as relock calls it: what
// it throws is logged at kError through `core`'s logger (std::cerr when
// `core` is null: an unbound handle) and dropped (lib/common/contain.h).
// Every asynchronous call of the public classes wraps its `done` with this
// first, so that no callback can throw through the event loop thread.
template <class... Args>
std::function<void(Args...)> Contained(const std::shared_ptr<ClientCore>& core,
                                       std::function<void(Args...)> done) {
  std::shared_ptr<Observer> observer =
      core == nullptr ? nullptr : core->observer();
  return
      [observer = std::move(observer), done = std::move(done)](Args... args) {
        static const LogFn kToStderr;
        CallContained(observer != nullptr ? observer->log : kToStderr,
                      "the callback of an asynchronous call (or its Future's "
                      "Then())",
                      done, std::move(args)...);
      };
}

// Starts an asynchronous call that completes a Future: `start` gets the
// callback that sets it.
template <class Start>
Future<absl::Status> Promised(Start start) {
  Promise<absl::Status> promise;
  start([promise](absl::Status s) { promise.Set(std::move(s)); });
  return promise.future();
}

// The checks every lock call of a bound handle makes: the name and the
// owner. Returns the OwnerId under which the owner holds a lock of type
// `kind` (lock::HolderOf).
inline absl::StatusOr<lock::OwnerId> CheckCall(
    const std::string& name, const Owner& owner,
    lock::LockKind kind = lock::LockKind::kReentrant) {
  if (absl::Status s = lock::ValidateName(name); !s.ok()) return s;
  absl::StatusOr<lock::OwnerId> by = CheckedOwner(owner);
  if (!by.ok()) return by.status();
  return lock::HolderOf(*by, kind);
}

// A handle's lock type, as the algorithms take it (AcquireOptionsFor() adds
// the handle's options).
inline lock::AcquireOptions LockType(bool fenced, LockKind kind,
                                     absl::Duration queue_wait,
                                     bool spin = false) {
  lock::AcquireOptions type;
  type.fenced = fenced;
  type.kind = kind;
  type.queue_wait = queue_wait;
  type.spin = spin;
  return type;
}

// How a handle of lock type `type` with `options` acquires: its own values
// over the client's defaults (checked at Connect). InvalidArgument for
// invalid per-lock values.
inline absl::StatusOr<lock::AcquireOptions> AcquireOptionsFor(
    const ClientCore& core, const LockOptions& options,
    const lock::AcquireOptions& type = {}) {
  const ReplicaSync& sync = options.replica_sync.has_value()
                                ? *options.replica_sync
                                : core.options().replica_sync;
  if (options.replica_sync.has_value()) {
    if (absl::Status s =
            lock::ValidateReplicaSync(sync, core.options().command_timeout);
        !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("LockOptions: ", s.message()));
    }
  }
  if (type.kind == lock::LockKind::kFair &&
      (type.queue_wait < absl::Milliseconds(1) ||
       type.queue_wait > absl::Hours(365 * 24))) {
    return absl::InvalidArgumentError(
        absl::StrCat("FairLockOptions: queue_wait must be in [1ms, 8760h], "
                     "not ",
                     absl::FormatDuration(type.queue_wait)));
  }
  lock::AcquireOptions out = type;
  out.on_lost = options.on_lost;
  out.replica_sync.replicas = sync.replicas;
  out.replica_sync.timeout = sync.timeout;
  return out;
}

// Lock/RedlockLock's AcquireFor, ReleaseFor, AcquireAsyncFor and
// ReleaseAsyncFor, once the handle is known to be bound. `type`: the
// handle's lock type (LockType()); a fenced acquire's token goes to `*token`
// (if given).
inline absl::Status Acquire(const std::shared_ptr<ClientCore>& core,
                            const std::string& name, const Owner& owner,
                            absl::Duration wait,
                            absl::optional<absl::Duration> lease,
                            const LockOptions& options,
                            const lock::AcquireOptions& type = {},
                            int64_t* token = nullptr) {
  absl::StatusOr<lock::AcquireOptions> how =
      AcquireOptionsFor(*core, options, type);
  if (!how.ok()) return how.status();
  absl::StatusOr<lock::OwnerId> by = CheckCall(name, owner, how->kind);
  if (!by.ok()) return by.status();
  return lock::Acquire(*core, name, *by, lease, Deadline::After(wait), *how,
                       token);
}
inline absl::Status Release(const std::shared_ptr<ClientCore>& core,
                            const std::string& name, const Owner& owner,
                            lock::LockKind kind = lock::LockKind::kReentrant) {
  absl::StatusOr<lock::OwnerId> by = CheckCall(name, owner, kind);
  if (!by.ok()) return by.status();
  return lock::Release(*core, name, *by, kind);
}
inline void AcquireAsync(const std::shared_ptr<ClientCore>& core,
                         const std::string& name, const Owner& owner,
                         absl::Duration wait,
                         absl::optional<absl::Duration> lease,
                         const LockOptions& options,
                         const lock::AcquireOptions& type,
                         lock::AcquireDone done) {
  absl::StatusOr<lock::AcquireOptions> how =
      AcquireOptionsFor(*core, options, type);
  if (!how.ok()) return done(how.status(), -1);
  absl::StatusOr<lock::OwnerId> by = CheckCall(name, owner, how->kind);
  if (!by.ok()) return done(by.status(), -1);
  lock::AcquireAsync(*core, core, name, *by, lease, Deadline::After(wait), *how,
                     std::move(done));
}
inline void AcquireAsync(const std::shared_ptr<ClientCore>& core,
                         const std::string& name, const Owner& owner,
                         absl::Duration wait,
                         absl::optional<absl::Duration> lease,
                         const LockOptions& options,
                         std::function<void(absl::Status)> done) {
  AcquireAsync(core, name, owner, wait, lease, options, lock::AcquireOptions(),
               [done = std::move(done)](absl::Status s, int64_t) {
                 done(std::move(s));
               });
}
inline void ReleaseAsync(const std::shared_ptr<ClientCore>& core,
                         const std::string& name, const Owner& owner,
                         std::function<void(absl::Status)> done,
                         lock::LockKind kind = lock::LockKind::kReentrant) {
  absl::StatusOr<lock::OwnerId> by = CheckCall(name, owner, kind);
  if (!by.ok()) return done(by.status());
  lock::ReleaseAsync(*core, core, name, *by, kind, std::move(done));
}

}  // namespace internal
}  // namespace relock

#endif  // RELOCK_LIB_API_CALLS_H_
