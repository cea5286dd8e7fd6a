// What a lock algorithm needs from the client it runs in: the backend it
// talks to Redis through (lib/backend/backend.h), the client's identity and
// lifecycle, its hold registry and watchdog. The client implements it; the
// algorithms (lib/lock/algorithm.h) see nothing else of the client, so no
// lock type knows which topology or client class it runs in.

#ifndef RELOCK_LIB_LOCK_LOCK_ENV_H_
#define RELOCK_LIB_LOCK_LOCK_ENV_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "lib/backend/backend.h"
#include "lib/common/clock.h"
#include "lib/common/observer.h"
#include "lib/watchdog/hold_registry.h"
#include "relock/backoff.h"

namespace relock {
namespace lock {

using watchdog::Hold;
using watchdog::HoldFacts;
using watchdog::HoldRegistry;
using watchdog::kExpiredHoldRetention;
using watchdog::RenewItem;

// How a client's locks behave beyond the data model: the defaults are the
// single-node client's; a Redlock client sets the quorum knobs.
struct LockPolicy {
  // In messages: "acquire lock \"x\": ..." or "acquire redlock \"x\": ...".
  std::string noun = "lock";
  // Clock drift allowed for, as a fraction of the lease (plus 2 ms): how much
  // earlier than acked_at + lease SafeUntil() ends.
  double drift_factor = 0.01;
  // Whether an acquisition must leave validity: lease - elapsed - drift > 0
  // (Redlock), else it is undone.
  bool check_validity = false;
  // Each attempt's requests wait at most this fraction of the lease (clamped
  // to [2 ms, command_timeout]); 0: the caller's wait bounds them (and at
  // least 100 ms).
  double attempt_timeout_factor = 0;
  absl::Duration command_timeout = absl::Seconds(2);
  // Attempts that failed for lack of answers (not because another owner
  // holds the lock) are retried after retry_backoff, `tries` in all.
  int tries = 1;
  std::shared_ptr<const BackoffStrategy> retry_backoff;
  // Finish an attempt as soon as its outcome is certain.
  bool fail_fast = false;
  // Whether waiters are woken by messages (ClientOptions::pubsub). false:
  // every wait re-checks on spin_backoff, as a spin lock's does, and a
  // release whose publish Redis refused is no error.
  bool notified = true;
  // How a wait that no message wakes re-checks (ClientOptions::
  // spin_backoff); null: DefaultSpinBackoff() of lib/lock/acquire_machine.cc.
  std::shared_ptr<const BackoffStrategy> spin_backoff;
  // The client's replica acknowledgement (ClientOptions::replica_sync), for
  // the synchronizers' acquires (a lock's comes with its AcquireOptions).
  backend::WaitReplicas replica_sync;

  absl::Duration Drift(absl::Duration lease) const {
    return lease * drift_factor + absl::Milliseconds(2);
  }
};

class LockEnv {
 public:
  virtual const LockPolicy& policy() const = 0;
  virtual backend::Backend& backend() = 0;
  // The clock of the algorithm's deadlines, attempt timing, validity and
  // retry pauses (the client's timer clock: RealClock() in a client; a
  // FakeClock under a fake backend in tests).
  virtual const Clock& clock() const = 0;
  // The client id: owner fields are "<id>:<thread number>".
  virtual const std::string& id() const = 0;
  // FailedPrecondition once the client is closed (or in a fork()ed child).
  virtual absl::Status CheckOpen() const = 0;
  // CheckOpen(), and FailedPrecondition on the client's event loop thread
  // (in a callback of an asynchronous call), where a blocking call would
  // wait for answers that only that thread can deliver. Every blocking
  // operation (one that waits for Redis) checks this first; the local ones
  // (SafeUntil, OnLost) and the asynchronous ones check CheckOpen().
  virtual absl::Status CheckBlockingCall() const = 0;
  virtual bool closed() const = 0;
  virtual HoldRegistry& holds() = 0;
  // The lease of watchdog holds (ClientOptions::lock_watchdog_timeout).
  virtual absl::Duration watchdog_lease() const = 0;
  // How long a subscription may take to be confirmed before the wait fails
  // with Unavailable (connect_timeout + command_timeout).
  virtual absl::Duration confirm_timeout() const = 0;
  // The calling thread took a hold from zero: tell the client when it exits.
  virtual void OnFreshHold() = 0;
  // A watchdog hold acknowledged at `acked_at` was registered: make sure
  // renewal rounds run and its loss is told at its safe end.
  virtual void ActivateWatchdog(SteadyClock::time_point acked_at) = 0;
  // The client's counters (relock/metrics.h).
  virtual Metrics& metrics() = 0;
  // A hold found lost outside the watchdog (a re-entry's NOTHELD), marked
  // lost in holds(): reported as the watchdog reports its losses (a
  // kLockLost event, the hold's loss callbacks, the locks_lost counter).
  virtual void ReportLost(const watchdog::LostHold& hold,
                          const absl::Status& why) = 0;

 protected:
  ~LockEnv() = default;
};

}  // namespace lock
}  // namespace relock

#endif  // RELOCK_LIB_LOCK_LOCK_ENV_H_
