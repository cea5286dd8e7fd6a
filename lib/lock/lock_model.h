// What one lock type sends to Redis: the script call of each step of the
// algorithms of lib/lock/algorithm.h (acquire, release, release all,
// force release, leaving a queue) and where its waiters listen. The
// algorithms (attempts, notified waits, hand-off, undo, local re-entry, the
// watchdog's renewals, loss reports) are shared by every lock type; a lock
// type is its scripts (lua/) plus one LockModel.
//
//   type       | model                    | scripts
//   -----------+--------------------------+---------------------------------
//   reentrant  | ReentrantModel() (here)  | acquire, release, release_all,
//              |                          | force_release
//   fair       | FairModel() (fair_lock)  | fair_acquire, fair_release,
//              |                          | fair_release_all, fair_leave,
//              |                          | fair_force_release
//   read       | ReadModel() (rw_lock)    | read_acquire, read_release,
//              |                          | rw_release_all, read_renew,
//              |                          | rw_inspect, rw_force_release
//   write      | WriteModel() (rw_lock)   | write_acquire, write_release,
//              |                          | rw_release_all, rw_inspect,
//              |                          | rw_force_release
//   semaphore  | SemaphoreModel()         | semaphore_acquire, semaphore_add,
//              | (semaphore)              | semaphore_drain, counter_set,
//              |                          | counter_inspect
//   latch      | LatchModel()             | latch_await, latch_count_down,
//              | (count_down_latch)       | counter_set, counter_inspect
//   permit     | PermitModel()            | permit_acquire, permit_release,
//              | (permit_semaphore)       | permit_update, permit_renew,
//              |                          | permit_available, counter_set,
//              |                          | counter_inspect
//   (inspection of either semaphore: semaphore_info, lib/lock/inspect)
//
// A semaphore (and a count-down latch) is no lock: no owner holds what its
// acquire takes, so only its waits run on the shared machine (AwaitGrant()
// in lib/lock/algorithm.h); its model's release steps are never sent.
// A permit-expirable semaphore's permit is held by its id: registered as a
// hold of kind kPermitKind (under a number of its own), renewed by the
// watchdog and released on Close() like a lock's hold.

#ifndef RELOCK_LIB_LOCK_LOCK_MODEL_H_
#define RELOCK_LIB_LOCK_LOCK_MODEL_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "lib/backend/backend.h"
#include "lib/common/concat.h"
#include "lib/lock/lease.h"
#include "lib/lock/lock_scripts.h"
#include "lib/lock/owner.h"
#include "lib/pubsub/subscriber.h"
#include "relock/lock_kind.h"
#include "relock/options.h"

namespace relock {
namespace lock {

// The lock types (relock/lock_kind.h); a hold remembers its type
// (Hold::kind) so that a closing client releases it with the right script.
using ::relock::LockKind;

// The hold kind of a permit of a permit-expirable semaphore
// (lib/lock/permit_semaphore.h): internal to the hold registry and
// ModelOf(), never a relock::LockKind a caller sees.
inline constexpr LockKind kPermitKind = static_cast<LockKind>(4);

// The OwnerId under which `by` holds a lock of type `kind` (a write hold:
// under its number with kWriteHoldBit).
inline OwnerId HolderOf(OwnerId by, LockKind kind) {
  if (kind == LockKind::kWrite) by.number |= kWriteHoldBit;
  return by;
}

// Redisson's default threadWaitTime: how long past its expected turn a fair
// lock's waiter keeps its place in the queue.
inline constexpr absl::Duration kDefaultQueueWait = absl::Minutes(5);

// How one lock's acquires are sent (relock::LockOptions over the client's
// defaults).
struct AcquireOptions {
  // With replicas > 0: each attempt's script is followed by this WAIT in the
  // same round trip, and a node whose replicas did not acknowledge the
  // acquire in time counts as not acquired: what it took is undone, and the
  // node's error is Unavailable.
  backend::WaitReplicas replica_sync;
  // A fenced lock (Redisson's RFencedLock): every acquisition, re-entries
  // included, also increments the counter TokenKey(name) in the same script
  // and hands on its new value, the fencing token. Reentrant locks only.
  bool fenced = false;
  LockKind kind = LockKind::kReentrant;
  // A fair lock's queue wait (see relock/fair_lock.h).
  absl::Duration queue_wait = kDefaultQueueWait;
  // A semaphore's acquire: the permits it takes (lib/lock/semaphore.h).
  int64_t permits = 1;
  // A permit-expirable semaphore's acquire: the permit's id (hex) and its
  // lease.
  std::string permit_id;
  absl::Duration permit_lease;
  // A spin lock's acquire (Redisson's RSpinLock): its wait re-checks on the
  // policy's spin_backoff instead of listening for messages.
  bool spin = false;
  // LockOptions::on_lost: registered for a hold this acquire starts.
  std::function<void(const LockEvent&)> on_lost;
};

// A step's keys or its arguments, in order: each a copy the step owns, or
// a view of text that outlives the step's use (Borrow()). Kept inline, as
// the copies are (one after another, in one buffer): building the step of
// a lock call allocates nothing unless its name is long (about 40 bytes
// and more), and a borrowed text (the lock's name, the caller's owner
// field) costs no copy at all.
class StepTexts {
 public:
  StepTexts() = default;
  // Copies of `texts`: the form of Step{script, {key, ...}, {arg, ...}}.
  StepTexts(std::initializer_list<absl::string_view> texts) {
    for (const absl::string_view text : texts) Add(text);
  }

  // Appends a copy of `text`.
  void Add(absl::string_view text) { AddConcat({text}); }
  // Appends a copy of PrefixName(prefix, name), written in place.
  void AddPrefixName(absl::string_view prefix, absl::string_view name) {
    const std::array<absl::string_view, 4> p = PrefixNamePieces(prefix, name);
    AddConcat({p[0], p[1], p[2], p[3]});
  }
  // Appends a view of `text`, which must outlive every use of the step.
  void Borrow(absl::string_view text) {
    texts_.push_back(Text{text.data(), 0, text.size()});
  }

  size_t size() const { return texts_.size(); }
  absl::string_view operator[](size_t i) const {
    const Text& t = texts_[i];
    return absl::string_view(
        t.borrowed != nullptr ? t.borrowed : owned_.data() + t.offset, t.size);
  }

 private:
  // A text: borrowed, or (null `borrowed`) owned_[offset, offset + size).
  // Offsets, not pointers, into owned_: they stay valid when it grows or the
  // step moves.
  struct Text {
    const char* borrowed;
    size_t offset;
    size_t size;
  };
  void AddConcat(std::initializer_list<absl::string_view> pieces) {
    const size_t offset = owned_.size();
    AppendConcat(pieces, &owned_);
    texts_.push_back(Text{nullptr, offset, owned_.size() - offset});
  }

  absl::InlinedVector<Text, 4> texts_;
  absl::InlinedVector<char, 128> owned_;
};

// One script call: the script and its keys and arguments.
struct Step {
  internal::ScriptId script;
  StepTexts keys;
  StepTexts args;

  // Views of the keys and arguments, as the backend takes them; valid while
  // this step, and the texts it borrows, live.
  backend::Call Views() const;
};

// The steps of Acquire(), Release() and Undo(), sent on every acquire and
// release, may borrow (StepTexts::Borrow()) the texts of their `name`,
// `owner` and `publish` rather than copy them: their caller keeps those
// alive while it uses the step. The other steps own their texts.
class LockModel {
 public:
  virtual ~LockModel() = default;

  virtual LockKind kind() const = 0;
  // One acquire attempt by `owner`. `fresh`: the owner holds no hold of its
  // own yet. `queue`: the caller will wait if it does not get the lock (a
  // queueing lock type then keeps its place; else the attempt leaves no
  // trace).
  virtual Step Acquire(LockName name, const OwnerField& owner, Lease lease,
                       bool fresh, bool queue, const AcquireOptions& options,
                       absl::string_view publish) const = 0;
  // One release by `owner`; `lease`: the lease to set when holds remain
  // (Lease::Keep(): keep the TTL). `last`: as far as the caller knows, the
  // release frees the lock (its outermost hold, or a hold it no longer tracks);
  // a script may be sent fewer keys otherwise (see lua/release.lua).
  virtual Step Release(LockName name, const OwnerField& owner, Lease lease,
                       absl::string_view publish, bool last) const = 0;
  // Every hold of `owner` (a closing client; an undo).
  virtual Step ReleaseAll(LockName name, const OwnerField& owner,
                          absl::string_view publish) const = 0;
  // Frees the lock whoever holds it.
  virtual Step ForceRelease(LockName name, absl::string_view publish) const = 0;
  // Undoes what an acquire step of `owner` with `options` took but must not
  // keep (its replicas did not acknowledge it; a Redlock without a quorum):
  // by default every hold of a `fresh` owner, else the one counted.
  virtual Step Undo(LockName name, const OwnerField& owner, bool fresh,
                    const AcquireOptions& /*options*/,
                    absl::string_view publish) const {
    return fresh ? ReleaseAll(name, owner, publish)
                 : Release(name, owner, Lease::Keep(), publish,
                           /*last=*/false);
  }
  // The text of the DeadlineExceeded of a wait that ended with the lock
  // still taken; empty: "held by another owner" and the holder's lease.
  virtual absl::string_view wait_ended() const { return {}; }
  // What a waiter that gives up sends, if the lock type queues its waiters
  // (none by default). `fresh`: it held no hold of its own (a field of its
  // own at the lock is then an orphan of an attempt whose reply was lost,
  // and goes too).
  virtual absl::optional<Step> Leave(LockName /*name*/,
                                     const OwnerField& /*owner*/,
                                     const AcquireOptions& /*options*/,
                                     bool /*fresh*/,
                                     absl::string_view /*publish*/) const {
    return absl::nullopt;
  }
  // The channel `owner`'s wait listens on, and how its messages wake.
  virtual std::string WaitChannel(LockName name,
                                  const OwnerField& owner) const = 0;
  virtual pubsub::WakePolicy wake_policy() const = 0;
  // What is at the lock for `owner` (lua/inspect.lua's reply: {held, pttl,
  // count}, or a NOTALOCK error for a key that is not this type's lock).
  // OwnerField::None(): nobody's holds are counted.
  virtual Step Inspect(LockName name, const OwnerField& owner) const;
  // The watchdog's batched renewal (lua/renew.lua's calling convention).
  virtual internal::ScriptId renew_script() const {
    return internal::kRenewScript;
  }
  // The key the renewal of a hold of `name` passes (the lock's own key; a
  // permit's "{N}:timeout").
  virtual std::string RenewKey(absl::string_view name) const {
    return std::string(name);
  }
  // The longest a waiter that no message woke sleeps before it re-checks
  // (besides the holder's lease end, which it always re-checks at); no
  // limit by default.
  virtual absl::Duration max_sleep() const { return absl::InfiniteDuration(); }
  // How often a waiter re-checks when the attempt found no lease to wait
  // for (the key has no TTL): a lock set by hand, deleted later without an
  // unlock message, must not keep a waiter forever. A type whose key
  // normally has no TTL (a semaphore's count) re-checks more rarely: its
  // waiters are woken by the messages of every change.
  virtual absl::Duration unleased_recheck() const { return absl::Seconds(1); }
  // Whether an acquire step that runs twice takes no more than one run
  // does. A lock's does (the same owner field; the next fresh acquire or a
  // release-all absorbs a count left over), so an attempt whose connection
  // dropped is sent again and a waiter rides out an outage. A counter's does
  // not (each run takes permits): its attempts are sent once, and an
  // attempt whose answer was lost ends the call with Unavailable.
  virtual bool acquire_is_idempotent() const { return true; }
};

const LockModel& ReentrantModel();
// The read and write locks of a read-write lock (lib/lock/rw_lock.cc).
const LockModel& ReadModel();
const LockModel& WriteModel();
// A permit-expirable semaphore's permits (lib/lock/permit_semaphore.cc).
const LockModel& PermitModel();
const LockModel& ModelOf(LockKind kind);

}  // namespace lock
}  // namespace relock

#endif  // RELOCK_LIB_LOCK_LOCK_MODEL_H_
