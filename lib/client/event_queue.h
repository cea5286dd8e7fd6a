// A thread that delivers LockEvents to the user's callback, so that a slow
// callback never delays the watchdog's renewals. Events are delivered in
// order; Stop() delivers what is queued, then ends the thread.
//
// The callback may destroy the client that owns this queue (the usual "lock
// lost: shut down" reaction): Stop() called from the event thread itself does
// not join; the thread finishes the queued events on its own and exits, and
// it touches nothing of the queue object after the callback returns (its
// state is shared, kept alive by the thread).

#ifndef RELOCK_LIB_CLIENT_EVENT_QUEUE_H_
#define RELOCK_LIB_CLIENT_EVENT_QUEUE_H_

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "lib/common/mutex.h"
#include "lib/common/observer.h"
#include "lib/watchdog/hold_registry.h"
#include "relock/options.h"

namespace relock {
namespace internal {

// `callback`, or (when empty) a writer of one line per event to `log`,
// "<type> <prefix><quoted name>: <status>" (kError for a lost lock, else
// kWarning). A callback that throws has the exception logged to `log` (at
// kError) and dropped. Self-contained: it does not refer to the client, so the
// event thread may outlive the client.
std::function<void(const LockEvent&)> EventDeliverer(
    std::function<void(const LockEvent&)> callback, LogFn log,
    std::string prefix = "");

// ClientOptions::logger, or (when empty) a writer of messages of severity
// kWarning and above to stderr, "relock: <message>". What the logger throws
// goes to stderr, with the message, and is dropped.
LogFn Logger(LogFn logger);

class EventQueue {
 public:
  // `deliver` and `log` must not refer to the queue's owner: they may
  // outlive it. `log` gets what a loss callback throws (see contain.h).
  EventQueue(std::function<void(const LockEvent&)> deliver, LogFn log);
  ~EventQueue();
  EventQueue(const EventQueue&) = delete;
  EventQueue& operator=(const EventQueue&) = delete;

  // Queues `event` for `deliver`, then (if given) for each of a hold's loss
  // callbacks; dropped after Stop().
  void Post(LockEvent event,
            std::shared_ptr<watchdog::LossFns> on_lost = nullptr);
  // Queues `event` for the loss callbacks `on_lost` only.
  void PostToHolder(LockEvent event,
                    std::shared_ptr<watchdog::LossFns> on_lost);
  // Delivers what is queued, then ends the thread: joins it, or, when called
  // from the event thread (a callback), detaches it. Idempotent.
  void Stop();

 private:
  struct Item {
    LockEvent event;
    bool deliver = true;  // to `deliver`, before the callbacks
    std::shared_ptr<watchdog::LossFns> on_lost;
  };
  void Push(Item item);
  struct State {
    State(std::function<void(const LockEvent&)> d, LogFn l)
        : deliver(std::move(d)), log(std::move(l)) {}
    const std::function<void(const LockEvent&)> deliver;
    const LogFn log;
    Mutex mu;
    std::deque<Item> queue ABSL_GUARDED_BY(mu);
    bool stop ABSL_GUARDED_BY(mu) = false;
  };
  static void Run(const std::shared_ptr<State>& state);

  const std::shared_ptr<State> state_;
  Mutex join_mu_;
  std::thread thread_ ABSL_GUARDED_BY(join_mu_);
};

}  // namespace internal
}  // namespace relock

#endif  // RELOCK_LIB_CLIENT_EVENT_QUEUE_H_
