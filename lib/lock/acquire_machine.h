// The AcquireMachine (Acquire() and AcquireAsync() of lib/lock/algorithm.h,
// in lib/lock/acquire.cc): an acquire's attempts and notified waits on the
// client's event loop thread, driven by callbacks. Internal to lib/lock, as
// attempts.h (each step of an attempt, which the machine makes).

#ifndef RELOCK_LIB_LOCK_ACQUIRE_MACHINE_H_
#define RELOCK_LIB_LOCK_ACQUIRE_MACHINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "lib/backend/backend.h"
#include "lib/common/clock.h"
#include "lib/common/deadline.h"
#include "lib/lock/attempt.h"
#include "lib/lock/attempts.h"
#include "lib/lock/lock_env.h"
#include "lib/lock/owner.h"

namespace relock {
namespace lock {
namespace algorithm_internal {

// What an acquire hands on. Acquired: when the winning attempt was sent, and
// its fencing token (-1 unless fenced). Failed: whether it was a re-entry
// that found the hold lost (Attempts::Next::hold_lost).
struct Grant {
  SteadyClock::time_point sent_at;
  int64_t token = -1;
  bool hold_lost = false;
};

// Acquire()'s attempts and notified waits, driven by callbacks. The
// asynchronous acquire runs all of it here; a blocking Acquire() hands its
// wait over once its first attempt (made on the calling thread) found the
// lock held. Then an unlock message is followed at once by the next
// attempt, sent by the event loop thread that read the message, and the
// blocked thread is woken once, with the lock already taken or with the
// outcome (the direct hand-off).
//
// Every step runs on the client's event loop thread (the first is posted
// there), so the machine needs no lock: the backend's answers, the pub/sub
// listener and the timer all call back on that thread. It is kept alive by
// its pending callbacks (the listener holds it weakly); should they be
// dropped unrun (the loop destroyed), its destructor reports Cancelled, so
// no caller waits forever. It does not register the hold: `done` does.
class AcquireMachine : public std::enable_shared_from_this<AcquireMachine> {
 public:
  // The outcome, unannotated; on success, when the winning acquire was sent
  // and its fencing token; whether the machine waited (found the lock held
  // before its deadline); the owner field it acquired for (valid during the
  // call).
  using Done = std::function<void(absl::Status, const Grant&, bool waited,
                                  const OwnerField& owner)>;

  // `keep` (may be null): held until the machine is gone (see keep_).
  // `failures`: attempts that already failed for lack of answers (made on a
  // blocking caller's thread).
  AcquireMachine(LockEnv& env, std::shared_ptr<void> keep, std::string name,
                 const OwnerId& by, const AcquirePlan& plan, Deadline deadline,
                 Done done, int failures = 0);
  // Reports Cancelled if the machine never finished (its callbacks were
  // dropped unrun).
  ~AcquireMachine();

  // From the first attempt.
  void Start();

  // From attempt `held`, made elsewhere, that found the lock held.
  void WaitAfter(Attempt held);

 private:
  enum class Phase { kAttempting, kBackingOff, kConfirming, kWaiting, kDone };

  // One attempt on the loop: OnAttempt() gets its outcome.
  void TryNow();

  void OnAttempt(Attempt a);

  // A wait that no message wakes (a spin lock; a client without pub/sub):
  // the next attempt after the spin backoff's next delay, within the
  // deadline (the attempt at the deadline ends it); a backoff that gives up
  // ends it at once.
  void Spin();

  void Subscribe();

  // The inspect script: a key that holds anything but a lock ends the wait.
  void CheckIsALock();

  // Only after the servers confirmed the subscription is a re-check free of
  // lost wake-ups. Confirmed once, it stays confirmed until the pub/sub
  // connection is replaced; then the re-check waits for the SUBSCRIBE on
  // the new one (messages sent in between are lost).
  void Confirm();

  // In kConfirming: re-checks (true) once confirmed, or ends the machine on
  // a refusal or at `confirm_by_`.
  bool Confirmed();

  // The listener and the timers: has what we wait for happened?
  void Look();

  // Deadlines on the env's clock.
  Deadline After(absl::Duration d) const;
  Deadline Now() const { return After(absl::ZeroDuration()); }

  void Finish(const absl::Status& s, const Grant& grant = Grant());

  // The client, for an asynchronous acquire: declared first, so destroyed
  // last, after timer_, whose destruction still reaches the client's loop
  // (`done`, which holds the client too, may drop its reference first).
  const std::shared_ptr<void> keep_;
  LockEnv& env_;
  const std::string name_;
  const OwnerField owner_;
  const AcquirePlan plan_;
  const Deadline deadline_;
  Attempts attempts_;  // refers to name_, owner_ and plan_
  Done done_;
  const std::unique_ptr<backend::Timer> timer_;
  std::unique_ptr<backend::Waiter> sub_;
  bool confirmed_ = false;  // the subscription, as of the last look
  bool woken_ = false;      // the next attempt follows a consumed wake-up
  Phase phase_ = Phase::kAttempting;
  Attempt last_;  // the latest attempt that found the lock held
  Deadline confirm_by_ = Deadline::Never();
  int splits_ = 0;  // split votes so far
  int spins_ = 0;   // re-checks by backoff so far (see Spin())
  bool waited_ = false;
};

}  // namespace algorithm_internal
}  // namespace lock
}  // namespace relock

#endif  // RELOCK_LIB_LOCK_ACQUIRE_MACHINE_H_
