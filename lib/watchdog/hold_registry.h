// What this client believes its threads hold: per (lock name, thread), the
// hold count, the lease in force, when the lease was last confirmed, and
// whether the watchdog renews it. Redis stays the truth; the registry lets a
// release keep an explicit lease, lets Release() tell a lost lease from a
// non-owner, lets Close() release what is still held, and is the watchdog's
// table of locks to renew.
//
// Times are on the clock of the registry's TimerThread (timers->clock(): the
// real steady clock in a client, a FakeClock in tests). Times are passed in
// (`sent_at`, Sweep's `now`) and must be on that clock; the explicit-lease
// timers fire when that clock reaches them, and FindFactsExpiringDue() and
// a lease-end timer read it, so a FakeClock drives expiry and retention.
// "acked_at" is when the command that last set the lease (acquire or renewal)
// was *sent*: Redis set the TTL no earlier, so acked_at + lease never
// overstates how long the lock is held.
//
// Lease rules (see lua/acquire.lua): a re-entry never shortens a hold. The
// caller passes `watchdog` = true for a re-entry of a watchdog hold even when
// the re-entry asked for an explicit lease; a re-entry with an explicit lease
// on an explicit hold keeps whichever of the two ends is later.
//
// Explicit-lease holds end by themselves: with a TimerThread, a timer at the
// end of the lease marks the hold expired (Release() then says "lease ran
// out", Close() leaves it alone) and kExpiredHoldRetention after the lease
// end drops it, so holds that are never released cost no memory for long.

#ifndef RELOCK_LIB_WATCHDOG_HOLD_REGISTRY_H_
#define RELOCK_LIB_WATCHDOG_HOLD_REGISTRY_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "lib/common/deadline.h"
#include "lib/common/mutex.h"
#include "lib/timer/timer_thread.h"
#include "relock/lock_kind.h"

namespace relock {
namespace watchdog {

// How long an expired explicit-lease hold is remembered (so that Release()
// can say "lease ran out") before it is dropped.
inline constexpr absl::Duration kExpiredHoldRetention = absl::Minutes(1);

// Called once when a hold is lost (see HoldRegistry::AddLossCallback), with
// why.
using LossFn = std::function<void(const absl::Status& why)>;
using LossFns = std::vector<LossFn>;

// Where a hold is in its life. Only a watchdog hold that is kHeld is
// renewed; an ended hold (kLost, kExpired) stays in the registry so that
// Release() can say how it ended.
//
//   state       how it got there                 Release()
//   ----------  -------------------------------  --------------------------
//   kHeld       acquired; an inner or failed     releases it
//               release
//   kReleasing  its final release began          (under way)
//               (BeginRelease)
//   kLost       the watchdog could not renew it  Aborted: lease lost
//               (lease end passed, or its owner
//               field gone)
//   kExpired    its explicit lease ran out       Aborted: lease ran out
enum class HoldState : uint8_t { kHeld, kReleasing, kLost, kExpired };

// The replica acknowledgement that a hold's renewals need (the ReplicaSync
// of the acquire that took it, relock/options.h): a renewal counts, and
// moves the hold's safe end, only if `replicas` replicas acknowledged it
// within `timeout` (a WAIT after it). replicas 0: none needed.
struct ReplicaAck {
  int replicas = 0;
  absl::Duration timeout = absl::ZeroDuration();
};

// A hold's count, lease kind, state and lock type: what the lock
// algorithms read of a hold on every call (FindFacts(), BeginRelease()),
// copied without the owner field and the callbacks a whole Hold carries.
struct HoldFacts {
  int64_t count = 0;  // holds, as the client counts them
  // Of those, re-entries taken locally (TryLocalReentry), which Redis does
  // not count: Redis's count is count - local.
  int64_t local = 0;
  bool watchdog = true;  // lease is lock_watchdog_timeout, renewed
  HoldState state = HoldState::kHeld;
  // The lock type, opaque here: which scripts release the hold.
  LockKind kind = LockKind::kReentrant;

  // Renewed by the watchdog: a watchdog hold not in its final release.
  bool renewing() const { return watchdog && state == HoldState::kHeld; }
  // The final release is under way: a lease end meanwhile calls no loss
  // callback (the release's answer tells the holder).
  bool releasing() const { return state == HoldState::kReleasing; }
  bool lost() const { return state == HoldState::kLost; }
  bool expired() const { return state == HoldState::kExpired; }
  // Whether the hold ended without a release (lost or expired).
  bool ended() const { return lost() || expired(); }
};

// A hold: its facts, and what only the registry and the watchdog need.
struct Hold : HoldFacts {
  std::string owner;     // the owner field in Redis
  uint64_t hold_id = 0;  // changes whenever a hold starts from zero
  // What its renewals need to count (the most any acquire of it asked).
  ReplicaAck ack;
  absl::Duration lease;
  SteadyClock::time_point acked_at;
  timer::TimerId timer = 0;  // explicit holds: lease end, then retention end
  // Its final release was sent and its answer is not handled yet (see
  // AwaitReleases()); the state may have moved on meanwhile (a lease end).
  bool release_in_flight = false;
  // Called when the hold is lost (null: none); handed out, at most once, in
  // the LostHold that reports the loss.
  std::shared_ptr<LossFns> on_lost;

  SteadyClock::time_point lease_end() const {
    return acked_at + absl::ToChronoNanoseconds(lease);
  }
};

// A watchdog hold due for renewal, as collected by Sweep().
struct RenewItem {
  std::string name;
  std::string owner;
  uint64_t thread = 0;
  uint64_t hold_id = 0;
  LockKind kind = LockKind::kReentrant;  // Hold::kind: which script renews it
  ReplicaAck ack;                        // Hold::ack
};

// What a renewal found for one hold: its owner field was there and the lease
// is renewed (and acknowledged by the replicas its ReplicaAck asks for); it
// was gone (the hold is lost); or no answer decided it (a node did not
// answer, or its replicas did not acknowledge the renewal: the hold stays as
// it was, and is lost only if its lease runs out before a later renewal).
enum class Renewal : uint8_t { kRenewed, kGone, kUndecided };

// What one watchdog round sweeps the registry for (HoldRegistry::Sweep()).
struct SweepRound {
  // Holds whose lease ran out by now, less `drift` (the end SafeUntil()
  // gives, acked_at + lease - drift), are marked lost: a holder is told no
  // later than it stops being safe, before another owner can take the lock.
  SteadyClock::time_point now;
  // Renewing holds whose renewal is due by then (acked_at + period <=
  // due_by) are collected; so is every renewing hold acknowledged before
  // `acked_before` (a reconnect: Watchdog::RenewAllSoon()), and every
  // renewing hold when `all`.
  SteadyClock::time_point due_by;
  absl::Duration period;
  bool all = false;
  SteadyClock::time_point acked_before = SteadyClock::time_point::min();
  absl::Duration drift = absl::ZeroDuration();  // see `now`
};

// A hold found lost by Sweep() or ApplyRenewals().
struct LostHold {
  std::string name;
  uint64_t thread = 0;
  SteadyClock::time_point acked_at;
  std::shared_ptr<LossFns> on_lost;  // the hold's loss callbacks, if any
  std::string owner;                 // Hold::owner
  absl::Duration lease;              // Hold::lease
};

// Told of explicit-lease holds whose lease ran out before their release
// (see HoldRegistry::set_expiry_handler).
using ExpiryFn = std::function<void(const LostHold& hold)>;

class HoldRegistry {
 public:
  using Key = std::pair<std::string, uint64_t>;  // (lock name, thread)

  // `timers` (may be null: explicit holds are then never marked expired nor
  // dropped) runs the explicit-lease timers on its clock. The constructor
  // only keeps the pointer, so `timers` may be constructed after the
  // registry, but it must exist from the first call on and outlive the last,
  // and its callbacks must stop before the registry is destroyed.
  // `retention`: how long an expired hold is remembered.
  explicit HoldRegistry(timer::TimerThread* timers = nullptr,
                        absl::Duration retention = kExpiredHoldRetention)
      : timers_(timers), retention_(retention) {}
  HoldRegistry(const HoldRegistry&) = delete;
  HoldRegistry& operator=(const HoldRegistry&) = delete;

  // An acquire sent at `sent_at` succeeded. Starts a new hold (also over an
  // ended one) or adds to the existing one (see the lease rules above).
  // `on_lost`, if given, becomes a new hold's first loss callback (see
  // AddLossCallback), installed before its lease timer can fire; ignored by
  // a re-entry. `ack`: what the hold's renewals need (a re-entry raises it to
  // the most either asked). `reentry`: the acquire was sent as a re-entry of
  // the hold; if the hold was found lost meanwhile (its loss reported),
  // changes nothing and returns false (the caller gives back what Redis
  // counted). Else returns true.
  bool OnAcquired(const std::string& name, uint64_t thread,
                  absl::string_view owner, bool watchdog, absl::Duration lease,
                  SteadyClock::time_point sent_at,
                  LockKind kind = LockKind::kReentrant,
                  LossFn on_lost = nullptr, ReplicaAck ack = ReplicaAck(),
                  bool reentry = false);
  // A re-entry without a round trip: if `thread` has a live watchdog hold of
  // `name` still being renewed whose lease is known to last beyond
  // `safe_after` (acked_at + lease - drift), counts one more hold locally
  // and returns true; else changes nothing and returns false (the caller
  // goes to Redis).
  bool TryLocalReentry(const std::string& name, uint64_t thread,
                       SteadyClock::time_point safe_after,
                       absl::Duration drift);
  // A release without a round trip: if `thread`'s live hold of `name` has a
  // local re-entry left (and another hold beside it), counts it down and
  // returns true; else changes nothing and returns false.
  bool TryLocalRelease(const std::string& name, uint64_t thread);
  // Before sending a release: returns the hold's facts (if it exists) and,
  // when this release is the final one by the local count, stops its renewal
  // first, so no renewal is sent after the release.
  absl::optional<HoldFacts> BeginRelease(const std::string& name,
                                         uint64_t thread);
  // After the release script answered: `freed` = the lock is now free.
  void OnReleased(const std::string& name, uint64_t thread, bool freed);
  // A final release whose last step failed left holds in Redis: the hold
  // stays, unrenewed (a later acquire renews it again; Close() releases
  // it), but no release of it is in flight any more.
  void OnReleaseFailed(const std::string& name, uint64_t thread);
  // A hold's lease was set anew by a command sent at `sent_at` (Redlock's
  // Extend): it becomes an explicit-lease hold, no longer renewed.
  // Returns false if there is no live hold.
  bool OnExtended(const std::string& name, uint64_t thread,
                  absl::Duration lease, SteadyClock::time_point sent_at);
  // Registers `fn` for `thread`'s hold of `name`: it is handed out once, in
  // the LostHold that reports the hold lost (by Sweep(), ApplyRenewals(),
  // or, for an explicit lease that runs out before its release, to the
  // expiry handler). Dropped with the hold otherwise (released, forgotten,
  // taken). FailedPrecondition if there is no such hold; Aborted if it has
  // ended (lost, or its explicit lease ran out).
  absl::Status AddLossCallback(const std::string& name, uint64_t thread,
                               LossFn fn);
  // Called outside the registry's lock, for each explicit-lease hold with
  // loss callbacks whose lease runs out before its release: on the timer
  // thread, or on the thread of an acquire or release that found the lease
  // end passed first (FindFactsExpiringDue()). Set before the first hold is
  // registered.
  void set_expiry_handler(ExpiryFn fn) { on_expired_ = std::move(fn); }
  // Live holds (not ended), for the held_locks gauge.
  size_t live() const;
  // Removes the entry; returns it if there was one.
  absl::optional<Hold> Forget(const std::string& name, uint64_t thread);
  // Marks a hold that is not ended yet lost (as a renewal that found it gone
  // does: no longer renewed, its release says so) and returns what its loss
  // report needs (its callbacks moved out); nullopt if there is no such
  // hold.
  absl::optional<LostHold> MarkLost(const std::string& name, uint64_t thread);
  absl::optional<Hold> Find(const std::string& name, uint64_t thread) const;
  // Find()'s facts alone (no owner field or callbacks copied).
  absl::optional<HoldFacts> FindFacts(const std::string& name,
                                      uint64_t thread) const;
  // FindFacts() for an acquire: an explicit hold whose lease end (by this
  // clock) has passed is expired first, as its timer would a moment later,
  // so that the acquire starts a fresh hold whether or not the timer ran
  // yet (a late timer thread made it a re-entry of a hold Redis no longer
  // had: Aborted).
  absl::optional<HoldFacts> FindFactsExpiringDue(const std::string& name,
                                                 uint64_t thread);
  // For Close(), before TakeAll() and again before it closes the backend:
  // waits up to `timeout` until no final release is in flight
  // (BeginRelease() to OnReleased(), Forget() or OnReleaseFailed()), so that
  // each ends with its own answer (OK, or the lease lost) rather than in
  // Close()'s release round, and no acquire call or give-back either
  // (BeginInFlight() to EndInFlight()), so that a grant that comes as
  // Close() runs is given back while the backend still runs. Returns
  // whether none is left.
  bool AwaitReleases(absl::Duration timeout);
  // An acquire call (from before it checks that the client is open until
  // it registered or gave back what it took), or a give-back or undo of
  // what a call took, is in flight until EndInFlight(): see
  // AwaitReleases().
  void BeginInFlight();
  void EndInFlight();
  // Removes and returns every hold that has not ended (for Close()); ended
  // ones are dropped. Those returned are remembered (TakenOnClose()).
  std::vector<std::pair<Key, Hold>> TakeAll();
  // Whether TakeAll() took `thread`'s hold of `name`: a release of it whose
  // answer came after that finds it gone because Close() released it (or its
  // lease had been lost, which the released-on-close event then says).
  bool TakenOnClose(const std::string& name, uint64_t thread) const;
  // Removes and returns every hold of `thread` that has not ended (the
  // thread exited).
  std::vector<std::pair<Key, Hold>> TakeThread(uint64_t thread);
  // Entries, ended ones included (for tests).
  size_t size() const;

  // --- For the watchdog.
  // Collects the renewing holds whose renewal `round` finds due into `due`
  // (unless it is null: a loss check renews nothing), and marks lost (and
  // collects into `lost`) those whose lease, less round.drift, ran out by
  // round.now. Returns how many renewing holds remain.
  size_t Sweep(const SweepRound& round, std::vector<RenewItem>* due,
               std::vector<LostHold>* lost);
  // The earliest safe end (lease_end() - `drift`) of a renewing hold, or
  // nullopt if none is renewing.
  absl::optional<SteadyClock::time_point> EarliestSafeEnd(
      absl::Duration drift) const;
  // Applies a renewal sent at `sent_at`: renewed[i] is what it found for
  // due[i]. Holds whose field was gone are marked lost and collected;
  // undecided ones are left alone. Results for holds released or restarted
  // since are ignored.
  void ApplyRenewals(const std::vector<RenewItem>& due,
                     const std::vector<Renewal>& renewed,
                     SteadyClock::time_point sent_at,
                     std::vector<LostHold>* lost);

 private:
  // (Re)arms the timer of explicit hold `h` at its lease end.
  void ArmLeaseEnd(const Key& key, Hold& h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Disarm(Hold& h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A timer of hold `hold_id` (if it is still the hold at `key`): at its
  // lease end (ExpireLocked()), or at the end of its retention as an
  // expired hold (it is dropped).
  void OnTimer(const Key& key, uint64_t hold_id, bool retention_end);
  // Explicit hold `h`, whose lease end has come, becomes kExpired and is
  // dropped after the retention. Returns true, with `*report` filled, when
  // its loss callbacks are to be called (outside the mutex).
  bool ExpireLocked(const Key& key, Hold& h, LostHold* report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the entries for which `take(key, hold)` is true into the result
  // (those that have not ended) or drops them (ended ones). `on_close`: the
  // ones returned are remembered (TakenOnClose()), in the same critical
  // section, so no release answered meanwhile misses the mark.
  template <class Pred>
  std::vector<std::pair<Key, Hold>> TakeIf(Pred take, bool on_close);

  timer::TimerThread* const timers_;
  ExpiryFn on_expired_;
  const absl::Duration retention_;
  mutable Mutex mu_;
  // Looked up by (string_view, thread) without copying the name.
  using KeyView = std::pair<absl::string_view, uint64_t>;
  struct KeyHash {
    using is_transparent = void;
    size_t operator()(const KeyView& k) const {
      return absl::Hash<KeyView>{}(k);
    }
  };
  struct KeyEq {
    using is_transparent = void;
    bool operator()(const KeyView& a, const KeyView& b) const { return a == b; }
  };
  absl::flat_hash_map<Key, Hold, KeyHash, KeyEq> holds_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<Key, KeyHash, KeyEq> taken_on_close_ ABSL_GUARDED_BY(mu_);
  uint64_t next_hold_id_ ABSL_GUARDED_BY(mu_) = 1;
  // BeginInFlight() - EndInFlight(); and the AwaitReleases() calls waiting
  // (changed under mu_).
  // (A cache line of their own: every acquire changes in_flight_.)
  alignas(64) std::atomic<int64_t> in_flight_{0};
  std::atomic<int> awaiting_{0};
};

}  // namespace watchdog
}  // namespace relock

#endif  // RELOCK_LIB_WATCHDOG_HOLD_REGISTRY_H_
