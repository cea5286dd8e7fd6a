// The client's pub/sub connection: unlock notifications for waiting threads.
//
// One Subscriber per client (per endpoint) owns one Redis connection on the
// client's event loop (lib/io/connection.h, kept connected by the loop and
// reconnected with the connection's backoff); it has no thread of its own.
// Threads
// that wait for a lock take a Subscription to the lock's channel; a channel is
// subscribed on the server once however many threads hold Subscriptions to
// it (reference counted), and unsubscribed when the last one goes.
//
// No lost wake-up: a waiter first calls AwaitConfirmed(), which returns only
// once the server has confirmed the SUBSCRIBE on the current connection; the
// waiter then re-checks the lock, and any unlock after that check arrives as
// a message. Each unlock message ("0") adds one permit to the channel and
// wakes one waiting thread, which consumes it (Redisson's semaphore). After a
// reconnect the thread resubscribes every channel and every waiter wakes with
// kResubscribed, so it re-checks at once (messages sent while disconnected
// are lost).
//
// A SUBSCRIBE the server refuses (NOPERM: an ACL user without access to the
// channel) fails the subscription: AwaitConfirmed() returns PermissionDenied
// naming the channel and quoting Redis, until the last Subscription to the
// channel goes or the connection is replaced.
//
// The connection is checked with PING when idle (every max(1 s,
// command_timeout)); a connection that does not answer within command_timeout
// is replaced.
//
// Sharded pub/sub (Mode::kSharded, Redis >= 7): SSUBSCRIBE / SUNSUBSCRIBE
// and "smessage"s, for the node that owns the channel's slot (releases
// SPUBLISH there). When the slot moves away, the server unsubscribes the
// channel by itself (a "sunsubscribe" push): the channel's waiters wake with
// kResubscribed and AwaitConfirmed() returns Unavailable saying the slot
// moved, and the channel is not subscribed here again (the cluster backend
// moves such waits to the slot's new master).

#ifndef RELOCK_LIB_PUBSUB_SUBSCRIBER_H_
#define RELOCK_LIB_PUBSUB_SUBSCRIBER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "asio/steady_timer.hpp"
#include "lib/common/deadline.h"
#include "lib/common/mutex.h"
#include "lib/io/connection.h"
#include "lib/io/event_loop.h"
#include "lib/redis/reply.h"

namespace relock {
namespace pubsub {

class Subscriber;

// A wake-up shared by subscriptions on several subscribers (a Redlock waiter
// listens on every master): notified on every unlock message, subscription
// confirmation and reconnect of any of them. Notifications coalesce.
class WakeSignal {
 public:
  void Notify();
  // Returns true once notified since the previous Wait() (consuming it), or
  // false at `deadline`.
  bool Wait(Deadline deadline);

 private:
  Mutex mu_;
  CondVar cv_;
  bool notified_ ABSL_GUARDED_BY(mu_) = false;
};

// What an unlock message on a channel wakes.
enum class WakePolicy {
  kWakeOne,    // an unlock message ("0") wakes one waiting subscription (it
               // consumes a permit: Redisson's lock channel)
  kWakeAll,    // any message wakes every subscription of this policy
               // (Redisson's read-lock release)
  kWakeNamed,  // a message whose text is the subscription's name wakes it
               // (and any other of that name): a waiter named in the queue
  kReadWrite,  // an unlock message ("0") wakes one waiting subscription, as
               // kWakeOne; a read-unlock message ("1") wakes every one
               // (Redisson's read-write lock channel)
};

// Told, on the loop thread, that a subscription's wait may be over (a
// message, a confirmation or refusal, a reconnect, a close): a waiter that
// does not block looks with AwaitConfirmed() / Wait() given a deadline that
// has passed (they do not block then). Spurious calls are allowed.
//
// No herd: of the kWakeOne listeners without a WakeSignal, an unlock message
// tells only one, the first whose latest Wait() found no permit, and then
// not again until it waits again; a listener that goes away with a permit
// it was told of passes the permit on to the next. Every other event tells
// every listener.
using Listener = std::function<void()>;

// Why Subscription::Wait() returned.
enum class WakeReason {
  kNotified,      // an unlock message arrived (one permit consumed)
  kResubscribed,  // the connection was replaced: re-check now
  kTimeout,       // the given deadline passed
  kClosed,        // the subscriber is closed
};

// A thread's reference to one channel. Not thread-safe: one waiter each.
class Subscription {
 public:
  ~Subscription();
  Subscription(const Subscription&) = delete;
  Subscription& operator=(const Subscription&) = delete;

  // Returns OK once the server has confirmed the subscription on the current
  // connection; Cancelled if the subscriber closes; PermissionDenied if the
  // server refused it; DeadlineExceeded at `deadline` (the message says
  // whether the connection is down and why).
  absl::Status AwaitConfirmed(Deadline deadline);

  // Sleeps until a permit can be consumed, the connection was replaced since
  // the last AwaitConfirmed(), the subscriber closes, or `deadline`.
  WakeReason Wait(Deadline deadline);

  // Gives one permit back, waking another waiter (for a waiter that consumed
  // a notification but leaves without acting on it).
  void PassOn();

  // Whether the subscriber is closed (waits end with kClosed).
  bool closed() const;

 private:
  friend class Subscriber;
  struct Channel;
  Subscription(Subscriber* owner, std::string name, Channel* channel,
               std::shared_ptr<WakeSignal> signal, WakePolicy policy,
               std::string waiter, std::shared_ptr<const Listener> listener)
      : owner_(owner),
        name_(std::move(name)),
        channel_(channel),
        signal_(std::move(signal)),
        policy_(policy),
        waiter_(std::move(waiter)),
        listener_(std::move(listener)) {}
  // Messages this subscription has not consumed yet (its policy's count).
  uint64_t Count() const;
  // A wake-one listener without a signal is told of an unlock message only
  // while armed: its last Wait() found no permit (no herd: one message tells
  // one waiter). Caller holds the subscriber's mutex.
  bool armable() const {
    return (policy_ == WakePolicy::kWakeOne ||
            policy_ == WakePolicy::kReadWrite) &&
           signal_ == nullptr && listener_ != nullptr;
  }
  void Disarm();
  WakeReason WaitLocked(Deadline deadline);

  Subscriber* owner_;
  std::string name_;
  Channel* channel_;
  std::shared_ptr<WakeSignal> signal_;
  const WakePolicy policy_;
  const std::string waiter_;  // kWakeNamed: the name
  const std::shared_ptr<const Listener> listener_;
  uint64_t seen_generation_ = 0;
  uint64_t seen_moved_ = 0;  // channel_->moved at the last confirmation
  // kWakeAll / kWakeNamed / kReadWrite: Count() seen.
  uint64_t seen_messages_ = 0;
  bool armed_ = false;  // in channel_->armed (subscriber's mutex)
};

struct Subscription::Channel {
  int refs = 0;
  int64_t permits = 0;
  uint64_t messages = 0;      // messages received (kWakeAll)
  int wake_all = 0;           // subscriptions with WakePolicy::kWakeAll
  uint64_t read_unlocks = 0;  // read-unlock messages received (kReadWrite)
  int read_write = 0;         // subscriptions with WakePolicy::kReadWrite
  // kWakeNamed: per name with subscriptions, messages naming it and the
  // subscriptions of that name.
  struct Named {
    uint64_t messages = 0;
    int subscriptions = 0;
  };
  absl::flat_hash_map<std::string, Named> named;
  int in_flight = 0;    // SUBSCRIBE/UNSUBSCRIBE sent, reply not yet read
  bool wanted = false;  // the last command queued was SUBSCRIBE
  // Why the server refused the SUBSCRIBE (NOPERM), empty if it did not. Kept
  // as code and text, not as an absl::Status: a Status shares its text by a
  // reference count that TSan cannot see in Debian's uninstrumented Abseil,
  // so each waiter builds its own.
  absl::StatusCode refused_code = absl::StatusCode::kOk;
  std::string refused;
  CondVar cv;
  std::vector<WakeSignal*> signals;  // of the Subscriptions that have one
  // The Subscriptions that have a listener; those of them that are armed
  // (see armable()), in the order they armed.
  std::vector<Subscription*> listening;
  std::deque<Subscription*> armed;
  int unsubscribing = 0;  // our (S)UNSUBSCRIBEs whose reply is not read yet
  // Times the server unsubscribed the channel by itself (sharded: its slot
  // moved away); the channel then stays unsubscribed, refused as kMoved.
  uint64_t moved = 0;
  // Notifies the signals, and adds every listener to `*tell` (called after
  // mu_ is released: Subscriber::Tell).
  void NotifySignals(std::vector<std::shared_ptr<const Listener>>* tell) {
    for (WakeSignal* s : signals) s->Notify();
    for (Subscription* s : listening) tell->push_back(s->listener_);
  }
  // For one permit added: notifies the signals, and adds to `*tell` the
  // listeners that are not armable and the first armed one.
  void NotifyPermit(std::vector<std::shared_ptr<const Listener>>* tell) {
    for (WakeSignal* s : signals) s->Notify();
    for (Subscription* s : listening) {
      if (!s->armable()) tell->push_back(s->listener_);
    }
    if (armed.empty()) return;
    Subscription* next = armed.front();
    armed.pop_front();
    next->armed_ = false;
    tell->push_back(next->listener_);
  }
};

class Subscriber : public std::enable_shared_from_this<Subscriber> {
 public:
  // Creates the connection on `loop` (which must outlive the subscriber's
  // Close()). With `connect_now`, connects first and fails when pub/sub is
  // impossible; without, connects (and keeps retrying) in the background,
  // for servers that may be down at start.
  enum class Mode { kClassic, kSharded };
  static absl::StatusOr<std::shared_ptr<Subscriber>> Start(
      io::EventLoop* loop, io::ConnectionOptions options,
      bool connect_now = true, Mode mode = Mode::kClassic);
  ~Subscriber();

  // Closes the connection and wakes every waiter with kClosed. Idempotent.
  void Close();

  // `signal`, if given, is also notified for this subscription's events,
  // and `listener`, if given, called (see Listener). `waiter`: the name of a
  // kWakeNamed subscription.
  std::unique_ptr<Subscription> Subscribe(
      const std::string& channel, std::shared_ptr<WakeSignal> signal = nullptr,
      WakePolicy policy = WakePolicy::kWakeOne, std::string waiter = "",
      Listener listener = nullptr);

 private:
  friend class Subscription;
  using Channel = Subscription::Channel;
  enum class Op { kSubscribe, kUnsubscribe };
  struct Command {
    Op op;
    std::string channel;
    uint64_t generation;
  };

  Subscriber(io::EventLoop* loop, std::shared_ptr<io::Connection> conn,
             Mode mode);
  bool Confirmed(const Channel& c) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues a (UN)SUBSCRIBE for SendQueued(), which must follow once mu_ is
  // released.
  void Enqueue(Op op, const std::string& name, Channel* c)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Has the loop thread send what is queued, in order (DrainOutbox).
  void SendQueued() ABSL_LOCKS_EXCLUDED(mu_);
  void DrainOutbox() ABSL_LOCKS_EXCLUDED(mu_);
  void Unref(const std::string& name, Channel* c);
  // Calls `listeners` on the loop thread (any thread).
  void Tell(std::vector<std::shared_ptr<const Listener>> listeners);
  // Loop thread.
  void OnConnectionState(bool connected, const absl::Status& why);
  bool OnPush(const redis::Reply& reply);
  // `message`: the push {"message" or "smessage", channel, text}.
  void OnMessage(const redis::ReplyView& message,
                 std::vector<std::shared_ptr<const Listener>>* tell)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnAnswer(const Command& command, const io::Result& result);
  void OnAnswerLocked(const Command& command, const io::Result& result,
                      std::vector<std::shared_ptr<const Listener>>* tell)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SchedulePing();

  io::EventLoop* const loop_;
  const std::shared_ptr<io::Connection> conn_;
  const Mode mode_;
  const absl::Duration ping_every_;
  asio::steady_timer ping_timer_;  // loop thread only

  mutable Mutex mu_;
  absl::node_hash_map<std::string, Channel> channels_ ABSL_GUARDED_BY(mu_);
  std::vector<Command> outbox_ ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool connected_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace pubsub
}  // namespace relock

#endif  // RELOCK_LIB_PUBSUB_SUBSCRIBER_H_
