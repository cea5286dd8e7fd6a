// relock::MultiLock: all-or-nothing over several locks of any kind, taken in
// one global order (see relock/multi_lock.h).

#include "relock/multi_lock.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "lib/api/calls.h"
#include "lib/client/client_core.h"
#include "lib/common/unshared.h"

namespace relock {
namespace internal {

struct MultiLockPart {
  std::string order;  // the global order: name, then the servers
  std::string name;
  // The lock type (Lock::kind_; kReentrant for a RedlockLock): two parts
  // of one lock (the same order) must be of one type.
  LockKind kind = LockKind::kReentrant;
  std::string type;  // the type's name, for messages
  // The client the lock was got from: two parts of one lock (the same
  // order) must come from one client, whose owner they share.
  const void* client = nullptr;
  std::function<absl::Status(const Owner&, absl::Duration,
                             absl::optional<absl::Duration>)>
      acquire;
  std::function<absl::Status(const Owner&)> release;
  std::function<void(const Owner&, absl::Duration,
                     absl::optional<absl::Duration>,
                     std::function<void(absl::Status)>)>
      acquire_async;
  std::function<void(const Owner&, std::function<void(absl::Status)>)>
      release_async;
  std::function<void(absl::Status)> report_unlock_failure;
};

}  // namespace internal

namespace {

using Part = internal::MultiLockPart;
using Parts = std::vector<Part>;
using SteadyClock = std::chrono::steady_clock;

absl::Status NoLocks() {
  return absl::InvalidArgumentError(
      "MultiLock: the set has no locks (add some with Add() or the "
      "constructor)");
}

// Where a lock lives, for the global order: its backend's nodes.
std::string ServersOf(const std::shared_ptr<internal::ClientCore>& core) {
  if (core == nullptr) return "";
  backend::Backend& backend = core->backend();
  std::string servers;
  for (size_t i = 0; i < backend.nodes(); ++i) {
    absl::StrAppend(&servers, i == 0 ? "" : ",", backend.node_name(i));
  }
  return servers;
}

// The time left until `deadline` (none: no limit).
absl::Duration Left(absl::optional<SteadyClock::time_point> deadline) {
  if (!deadline.has_value()) return absl::InfiniteDuration();
  return std::max(absl::ZeroDuration(),
                  absl::FromChrono(*deadline - SteadyClock::now()));
}

absl::optional<SteadyClock::time_point> DeadlineAfter(absl::Duration wait) {
  if (wait == absl::InfiniteDuration()) return absl::nullopt;
  return SteadyClock::now() + absl::ToChronoNanoseconds(wait);
}

// Adds why releasing the locks taken before failed, if it did.
absl::Status WithUndo(absl::Status failure, const absl::Status& undo) {
  if (undo.ok()) return failure;
  return absl::Status(failure.code(),
                      absl::StrCat(failure.message(),
                                   "; releasing the locks taken before it "
                                   "failed too (they free at their lease "
                                   "end): ",
                                   undo.message()));
}

// A Lock handle's type (Lock::kind_), for messages.
const char* TypeName(LockKind kind) {
  switch (kind) {
    case LockKind::kFair:
      return "a fair lock";
    case LockKind::kRead:
      return "the read lock of a read-write lock";
    case LockKind::kWrite:
      return "the write lock of a read-write lock";
    case LockKind::kReentrant:
      break;
  }
  return "a lock";
}

// FailedPrecondition when one lock (the same name on the same servers) is in
// the set as two lock types: the read and the write lock of one read-write
// lock (the outcome would depend on the order they were added in: the write
// lock after the read lock is an upgrade, which fails; the read lock after
// the write lock a downgrade, which succeeds), or a lock and a fair lock (one
// name is one lock type).
//
// And when one lock is in the set through two clients (of one server): each
// client's owner is another owner, so the second part would wait for the
// first for ever.
absl::Status CheckOneTypePerLock(const Parts& parts) {
  for (size_t i = 1; i < parts.size(); ++i) {
    const Part& a = parts[i - 1];
    const Part& b = parts[i];
    // Sorted by order: the parts of one lock are neighbours.
    if (a.order != b.order) continue;
    if (a.client != b.client) {
      return absl::FailedPreconditionError(absl::StrCat(
          "MultiLock: the set holds \"", absl::CHexEscape(a.name),
          "\" through two clients of the same servers; each client is "
          "another owner, so the set would wait for itself: get both "
          "handles from one client"));
    }
    if (a.kind == b.kind) continue;
    return absl::FailedPreconditionError(absl::StrCat(
        "MultiLock: the set holds \"", absl::CHexEscape(a.name), "\" as ",
        a.type, " and as ", b.type,
        "; one name is one lock type in a set (take a read-write lock's "
        "write lock alone: its owner may read too)"));
  }
  return absl::OkStatus();
}

}  // namespace

template <class L>
void MultiLock::AddLock(const L& handle) {
  Part part;
  part.name = handle.name();
  part.order = absl::StrCat(handle.name(), std::string(1, '\0'),
                            ServersOf(handle.core_));
  part.client = handle.core_.get();
  if constexpr (std::is_same_v<L, Lock>) {
    part.kind = handle.kind_;
    part.type = TypeName(handle.kind_);
  } else {
    part.type = "a Redlock lock";
  }
  // Copies of the handle (thread-safe, like the handle itself).
  part.acquire = [lock = L(handle)](
                     const Owner& owner, absl::Duration wait,
                     absl::optional<absl::Duration> lease) mutable {
    return lease.has_value() ? lock.TryAcquire(owner, wait, *lease)
                             : lock.TryAcquire(owner, wait);
  };
  part.release = [lock = L(handle)](const Owner& owner) mutable {
    return lock.Release(owner);
  };
  part.acquire_async = [lock = L(handle)](
                           const Owner& owner, absl::Duration wait,
                           absl::optional<absl::Duration> lease,
                           std::function<void(absl::Status)> done) mutable {
    lock.TryAcquireAsync(owner, wait, lease, std::move(done));
  };
  part.release_async = [lock = L(handle)](
                           const Owner& owner,
                           std::function<void(absl::Status)> done) mutable {
    lock.ReleaseAsync(owner, std::move(done));
  };
  part.report_unlock_failure = [lock = L(handle)](absl::Status s) mutable {
    lock.ReportUnlockFailure(std::move(s));
  };
  Insert(std::move(part));
}

MultiLock& MultiLock::Add(const Lock& lock) {
  AddLock(lock);
  return *this;
}

MultiLock& MultiLock::Add(const RedlockLock& lock) {
  AddLock(lock);
  return *this;
}

void MultiLock::Insert(Part part) {
  auto parts = parts_ == nullptr ? std::make_shared<Parts>()
                                 : std::make_shared<Parts>(*parts_);
  auto at = std::upper_bound(
      parts->begin(), parts->end(), part,
      [](const Part& a, const Part& b) { return a.order < b.order; });
  parts->insert(at, std::move(part));
  parts_ = std::move(parts);
}

size_t MultiLock::size() const {
  return parts_ == nullptr ? 0 : parts_->size();
}

std::vector<std::string> MultiLock::names() const {
  std::vector<std::string> names;
  if (parts_ == nullptr) return names;
  for (const Part& part : *parts_) names.push_back(part.name);
  return names;
}

absl::Status MultiLock::AcquireFor(const Owner& owner, absl::Duration wait,
                                   absl::optional<absl::Duration> lease) {
  if (size() == 0) return NoLocks();
  if (absl::Status s = CheckOneTypePerLock(*parts_); !s.ok()) return s;
  const absl::optional<SteadyClock::time_point> deadline = DeadlineAfter(wait);
  for (size_t i = 0; i < parts_->size(); ++i) {
    absl::Status s = (*parts_)[i].acquire(owner, Left(deadline), lease);
    if (!s.ok()) {
      return WithUndo(std::move(s), ReleaseFirst(owner, i, /*report=*/false));
    }
  }
  return absl::OkStatus();
}

absl::Status MultiLock::ReleaseFirst(const Owner& owner, size_t n,
                                     bool report) {
  absl::Status first;
  for (size_t i = n; i-- > 0;) {
    absl::Status s = (*parts_)[i].release(owner);
    if (s.ok()) continue;
    if (report) (*parts_)[i].report_unlock_failure(s);
    if (first.ok()) first = std::move(s);
  }
  return first;
}

absl::Status MultiLock::ReleaseFor(const Owner& owner) {
  if (size() == 0) return NoLocks();
  return ReleaseFirst(owner, size(), /*report=*/false);
}

void MultiLock::unlock() noexcept {
  (void)ReleaseFirst(Owner::ThisThread(), size(), /*report=*/true);
}

namespace {

// Releases parts [0, n) asynchronously, all at once; `done` gets the first
// failure (or OK) once every release has answered.
void ReleaseAllAsync(const std::shared_ptr<const Parts>& parts,
                     const Owner& owner, size_t n,
                     std::function<void(absl::Status)> done) {
  if (n == 0) return done(absl::OkStatus());
  struct Tally {
    std::mutex mu;
    size_t left;
    absl::Status first;
    std::function<void(absl::Status)> done;
  };
  auto tally = std::make_shared<Tally>();
  tally->left = n;
  tally->done = std::move(done);
  for (size_t i = n; i-- > 0;) {
    (*parts)[i].release_async(owner, [tally](const absl::Status& s) {
      std::function<void(absl::Status)> finish;
      absl::Status result;
      {
        std::lock_guard<std::mutex> lock(tally->mu);
        if (!s.ok() && tally->first.ok()) {
          tally->first = Unshared(s);  // it may cross threads (clients' loops)
        }
        if (--tally->left > 0) return;
        finish = std::move(tally->done);
        result = tally->first;
      }
      finish(std::move(result));
    });
  }
}

// The asynchronous acquire: one part after the other, each from the
// previous one's callback; on a failure, the parts taken are released
// before `done` hears of it.
class AsyncMultiAcquire
    : public std::enable_shared_from_this<AsyncMultiAcquire> {
 public:
  AsyncMultiAcquire(std::shared_ptr<const Parts> parts, const Owner& owner,
                    absl::Duration wait, absl::optional<absl::Duration> lease,
                    std::function<void(absl::Status)> done)
      : parts_(std::move(parts)),
        owner_(owner),
        deadline_(DeadlineAfter(wait)),
        lease_(lease),
        done_(std::move(done)) {}

  void Step() {
    if (next_ == parts_->size()) return done_(absl::OkStatus());
    (*parts_)[next_].acquire_async(owner_, Left(deadline_), lease_,
                                   [self = shared_from_this()](absl::Status s) {
                                     self->OnPart(std::move(s));
                                   });
  }

 private:
  void OnPart(absl::Status s) {
    if (s.ok()) {
      ++next_;
      return Step();
    }
    ReleaseAllAsync(parts_, owner_, next_,
                    [failure = std::move(s), done = std::move(done_)](
                        const absl::Status& undo) mutable {
                      done(WithUndo(std::move(failure), undo));
                    });
  }

  const std::shared_ptr<const Parts> parts_;
  const Owner owner_;
  const absl::optional<SteadyClock::time_point> deadline_;
  const absl::optional<absl::Duration> lease_;
  std::function<void(absl::Status)> done_;
  size_t next_ = 0;
};

}  // namespace

void MultiLock::AcquireAsyncFor(const Owner& owner, absl::Duration wait,
                                absl::optional<absl::Duration> lease,
                                std::function<void(absl::Status)> done) {
  // (Later failures and successes reach `done` inside a part's callback,
  // which Contained() wraps with that part's client's logger.)
  if (size() == 0)
    return internal::Contained(nullptr, std::move(done))(NoLocks());
  if (absl::Status s = CheckOneTypePerLock(*parts_); !s.ok()) {
    return internal::Contained(nullptr, std::move(done))(std::move(s));
  }
  std::make_shared<AsyncMultiAcquire>(parts_, owner, wait, lease,
                                      std::move(done))
      ->Step();
}

void MultiLock::ReleaseAsyncFor(const Owner& owner,
                                std::function<void(absl::Status)> done) {
  if (size() == 0)
    return internal::Contained(nullptr, std::move(done))(NoLocks());
  ReleaseAllAsync(parts_, owner, size(), std::move(done));
}

}  // namespace relock
