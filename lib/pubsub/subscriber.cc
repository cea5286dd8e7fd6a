#include "lib/pubsub/subscriber.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "lib/common/unshared.h"
#include "lib/redis/errors.h"

namespace relock {
namespace pubsub {
namespace {

// Longest single condition-variable sleep: bounds the effect of wall-clock
// jumps on absl's timed waits; the loops re-check the steady clock.
constexpr absl::Duration kMaxSleepSlice = absl::Seconds(1);
// Unlock message payload (Redisson's LockPubSub.UNLOCK_MESSAGE).
constexpr absl::string_view kUnlockMessage = "0";
// Read-unlock message payload (Redisson's LockPubSub.READ_UNLOCK_MESSAGE,
// which a write lock's release publishes): wakes every kReadWrite waiter.
constexpr absl::string_view kReadUnlockMessage = "1";

absl::Duration SliceUntil(Deadline deadline) {
  return std::min(deadline.Remaining(), kMaxSleepSlice);
}

}  // namespace

// ------------------------------------------------------------------ WakeSignal

void WakeSignal::Notify() {
  MutexLock lock(&mu_);
  notified_ = true;
  cv_.Signal();
}

bool WakeSignal::Wait(Deadline deadline) {
  MutexLock lock(&mu_);
  while (!notified_) {
    if (deadline.Expired()) return false;
    cv_.WaitWithTimeout(&mu_, SliceUntil(deadline));
  }
  notified_ = false;
  return true;
}

// ---------------------------------------------------------------- Subscription

Subscription::~Subscription() {
  std::vector<std::shared_ptr<const Listener>> tell;
  {
    MutexLock lock(&owner_->mu_);
    Disarm();
    // A permit this waiter was told of and leaves unconsumed goes on.
    if (armable() && channel_->permits > 0) channel_->NotifyPermit(&tell);
    if (policy_ == WakePolicy::kWakeAll) --channel_->wake_all;
    if (policy_ == WakePolicy::kReadWrite) --channel_->read_write;
    if (policy_ == WakePolicy::kWakeNamed &&
        --channel_->named[waiter_].subscriptions == 0) {
      channel_->named.erase(waiter_);
    }
    if (signal_ != nullptr) {
      auto& v = channel_->signals;
      v.erase(std::find(v.begin(), v.end(), signal_.get()));
    }
    if (listener_ != nullptr) {
      auto& v = channel_->listening;
      v.erase(std::find(v.begin(), v.end(), this));
    }
  }
  owner_->Tell(std::move(tell));
  owner_->Unref(name_, channel_);
}

void Subscription::Disarm() {
  if (!armed_) return;
  auto& v = channel_->armed;
  v.erase(std::find(v.begin(), v.end(), this));
  armed_ = false;
}

absl::Status Subscription::AwaitConfirmed(Deadline deadline) {
  MutexLock lock(&owner_->mu_);
  while (!owner_->closed_ && !owner_->Confirmed(*channel_)) {
    if (channel_->refused_code != absl::StatusCode::kOk) {
      return absl::Status(channel_->refused_code, channel_->refused);
    }
    if (deadline.Expired()) {
      if (!owner_->connected_) {
        return absl::DeadlineExceededError(
            absl::StrCat("pub/sub connection to Redis at ",
                         owner_->conn_->options().endpoint.ToString(),
                         " is down: ", owner_->last_error_.message()));
      }
      return absl::DeadlineExceededError(
          absl::StrCat("SUBSCRIBE ", name_, " not confirmed by Redis at ",
                       owner_->conn_->options().endpoint.ToString()));
    }
    channel_->cv.WaitWithTimeout(&owner_->mu_, SliceUntil(deadline));
  }
  if (owner_->closed_) return absl::CancelledError("the client was closed");
  seen_generation_ = owner_->generation_;
  seen_moved_ = channel_->moved;
  seen_messages_ = Count();  // the caller re-checks after this
  return absl::OkStatus();
}

WakeReason Subscription::Wait(Deadline deadline) {
  MutexLock lock(&owner_->mu_);
  const WakeReason why = WaitLocked(deadline);
  if (why != WakeReason::kTimeout) {
    Disarm();
  } else if (armable() && !armed_) {
    channel_->armed.push_back(this);
    armed_ = true;
  }
  return why;
}

WakeReason Subscription::WaitLocked(Deadline deadline) {
  // Wait() holds it; the annotation cannot name owner_->mu_ in the header,
  // where Subscriber is not yet defined.
  owner_->mu_.AssertHeld();
  while (true) {
    if (owner_->closed_) return WakeReason::kClosed;
    if (owner_->generation_ != seen_generation_ ||
        channel_->moved != seen_moved_) {
      return WakeReason::kResubscribed;
    }
    if (policy_ != WakePolicy::kWakeOne) {
      if (const uint64_t count = Count(); count != seen_messages_) {
        seen_messages_ = count;
        return WakeReason::kNotified;
      }
    }
    if ((policy_ == WakePolicy::kWakeOne ||
         policy_ == WakePolicy::kReadWrite) &&
        channel_->permits > 0) {
      --channel_->permits;
      return WakeReason::kNotified;
    }
    if (deadline.Expired()) return WakeReason::kTimeout;
    channel_->cv.WaitWithTimeout(&owner_->mu_, SliceUntil(deadline));
  }
}

uint64_t Subscription::Count() const {
  if (policy_ == WakePolicy::kWakeAll) return channel_->messages;
  if (policy_ == WakePolicy::kReadWrite) return channel_->read_unlocks;
  auto it = channel_->named.find(waiter_);
  return it == channel_->named.end() ? 0 : it->second.messages;
}

bool Subscription::closed() const {
  MutexLock lock(&owner_->mu_);
  return owner_->closed_;
}

void Subscription::PassOn() {
  std::vector<std::shared_ptr<const Listener>> tell;
  {
    MutexLock lock(&owner_->mu_);
    ++channel_->permits;
    channel_->cv.Signal();
    channel_->NotifyPermit(&tell);
  }
  owner_->Tell(std::move(tell));
}

// ------------------------------------------------------------------ Subscriber

Subscriber::Subscriber(io::EventLoop* loop,
                       std::shared_ptr<io::Connection> conn, Mode mode)
    : loop_(loop),
      conn_(std::move(conn)),
      mode_(mode),
      ping_every_(std::max(absl::Seconds(1), conn_->options().command_timeout)),
      ping_timer_(loop->context()) {}

absl::StatusOr<std::shared_ptr<Subscriber>> Subscriber::Start(
    io::EventLoop* loop, io::ConnectionOptions options, bool connect_now,
    Mode mode) {
  options.keep_connected = true;
  absl::StatusOr<std::shared_ptr<io::Connection>> conn =
      io::Connection::Create(loop, std::move(options));
  if (!conn.ok()) return conn.status();
  std::shared_ptr<Subscriber> s(new Subscriber(loop, *conn, mode));
  std::weak_ptr<Subscriber> weak = s;
  s->conn_->set_push_handler([weak](const redis::Reply& reply) {
    std::shared_ptr<Subscriber> self = weak.lock();
    return self != nullptr && self->OnPush(reply);
  });
  s->conn_->set_state_handler([weak](bool connected, const absl::Status& why) {
    if (std::shared_ptr<Subscriber> self = weak.lock()) {
      self->OnConnectionState(connected, why);
    }
  });
  if (connect_now) {
    std::string wire;
    io::AppendCommand({"PING"}, &wire);
    const io::ConnectionOptions& o = s->conn_->options();
    io::Result r =
        io::Call(*s->conn_, std::move(wire), 1,
                 Deadline::After(o.connect_timeout + o.command_timeout));
    if (!r.status.ok()) {
      s->Close();
      return absl::Status(r.status.code(), absl::StrCat("pub/sub connection: ",
                                                        r.status.message()));
    }
  } else {
    s->conn_->Start();
  }
  loop->Post([weak] {
    if (std::shared_ptr<Subscriber> self = weak.lock()) self->SchedulePing();
  });
  return s;
}

Subscriber::~Subscriber() { Close(); }

void Subscriber::Close() {
  std::vector<std::shared_ptr<const Listener>> tell;
  {
    MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    for (auto& [name, c] : channels_) {
      c.cv.SignalAll();
      c.NotifySignals(&tell);
    }
  }
  Tell(std::move(tell));
  conn_->Close();
  // The ping timer is the loop's: cancel it there.
  loop_->Post([self = weak_from_this()] {
    if (std::shared_ptr<Subscriber> s = self.lock()) s->ping_timer_.cancel();
  });
}

bool Subscriber::Confirmed(const Channel& c) const {
  return connected_ && c.wanted && c.in_flight == 0 &&
         c.refused_code == absl::StatusCode::kOk;
}

void Subscriber::Enqueue(Op op, const std::string& name, Channel* c) {
  c->wanted = op == Op::kSubscribe;
  if (!connected_) return;  // OnConnectionState() subscribes what is wanted
  ++c->in_flight;
  if (op == Op::kUnsubscribe) ++c->unsubscribing;
  outbox_.push_back(Command{op, name, generation_});
}

void Subscriber::SendQueued() {
  // Commands reach the connection in the order they were queued: only the
  // loop thread drains the outbox. (Drained by the queuing threads, a
  // thread's UNSUBSCRIBE could overtake another's later SUBSCRIBE of the
  // same channel, leaving the channel unsubscribed while it looks
  // confirmed.)
  loop_->Post([weak = weak_from_this()] {
    if (std::shared_ptr<Subscriber> self = weak.lock()) self->DrainOutbox();
  });
}

void Subscriber::DrainOutbox() {
  std::vector<Command> batch;
  {
    MutexLock lock(&mu_);
    batch.swap(outbox_);
  }
  std::weak_ptr<Subscriber> weak = weak_from_this();
  const bool sharded = mode_ == Mode::kSharded;
  for (Command& command : batch) {
    auto request = std::make_shared<io::Request>();
    const char* verb = command.op == Op::kSubscribe
                           ? (sharded ? "SSUBSCRIBE" : "SUBSCRIBE")
                           : (sharded ? "SUNSUBSCRIBE" : "UNSUBSCRIBE");
    io::AppendCommand({verb, command.channel}, &request->wire);
    request->done = [weak, command = std::move(command)](const io::Result& r) {
      if (std::shared_ptr<Subscriber> self = weak.lock()) {
        self->OnAnswer(command, r);
      }
    };
    conn_->Submit(std::move(request));
  }
}

std::unique_ptr<Subscription> Subscriber::Subscribe(
    const std::string& name, std::shared_ptr<WakeSignal> signal,
    WakePolicy policy, std::string waiter, Listener listener) {
  std::shared_ptr<const Listener> shared_listener;
  if (listener != nullptr) {
    shared_listener = std::make_shared<const Listener>(std::move(listener));
  }
  std::unique_ptr<Subscription> sub;
  {
    MutexLock lock(&mu_);
    Channel* c = &channels_[name];
    if (signal != nullptr) c->signals.push_back(signal.get());
    sub.reset(new Subscription(this, name, c, std::move(signal), policy,
                               std::move(waiter), std::move(shared_listener)));
    if (sub->listener_ != nullptr) c->listening.push_back(sub.get());
    if (policy == WakePolicy::kWakeAll) ++c->wake_all;
    if (policy == WakePolicy::kReadWrite) ++c->read_write;
    if (policy == WakePolicy::kWakeNamed)
      ++c->named[sub->waiter_].subscriptions;
    if (c->refs++ == 0) {
      c->permits = 0;
      c->refused_code = absl::StatusCode::kOk;
      if (!c->wanted) Enqueue(Op::kSubscribe, name, c);
    }
  }
  SendQueued();
  return sub;
}

void Subscriber::Tell(std::vector<std::shared_ptr<const Listener>> listeners) {
  if (listeners.empty()) return;
  loop_->Post([listeners = std::move(listeners)] {
    for (const std::shared_ptr<const Listener>& l : listeners) (*l)();
  });
}

void Subscriber::Unref(const std::string& name, Channel* c) {
  {
    MutexLock lock(&mu_);
    if (--c->refs > 0) return;
    c->permits = 0;
    if (connected_ && !closed_) {
      Enqueue(Op::kUnsubscribe, name, c);
    } else if (c->in_flight == 0) {
      c->wanted = false;
      channels_.erase(name);
    }
  }
  SendQueued();
}

// ----------------------------------------------------------------- loop thread

void Subscriber::OnConnectionState(bool connected, const absl::Status& why) {
  std::vector<std::shared_ptr<const Listener>> tell;
  {
    MutexLock lock(&mu_);
    connected_ = connected && !closed_;
    if (!connected) {
      last_error_ = Unshared(why);  // waiters read it on their threads
    }
    // Answers to commands of an older connection no longer count.
    ++generation_;
    outbox_.clear();
    for (auto it = channels_.begin(); it != channels_.end();) {
      Channel& c = it->second;
      c.in_flight = 0;
      c.unsubscribing = 0;
      if (c.refs == 0) {
        channels_.erase(it++);
        continue;
      }
      if (connected_) {
        // Messages sent while disconnected are lost: subscribe again, and
        // the new generation makes every waiter re-check.
        c.wanted = false;
        c.refused_code = absl::StatusCode::kOk;
        Enqueue(Op::kSubscribe, it->first, &c);
        c.cv.SignalAll();
        c.NotifySignals(&tell);
      }
      ++it;
    }
  }
  Tell(std::move(tell));
  SendQueued();
}

bool Subscriber::OnPush(const redis::Reply& reply) {
  const redis::ReplyView v = reply.view();
  if (!v.is_array() || v.size() < 3) return false;
  const bool sharded = mode_ == Mode::kSharded;
  const absl::string_view kind = v[0].str();
  std::vector<std::shared_ptr<const Listener>> tell;
  if (kind == (sharded ? "smessage" : "message")) {
    MutexLock lock(&mu_);
    OnMessage(v, &tell);
  } else if (sharded && kind == "sunsubscribe") {
    // The reply to our SUNSUBSCRIBE, or the server dropping the channel
    // because its slot moved away: a push that answers no request.
    MutexLock lock(&mu_);
    auto it = channels_.find(v[1].str());
    if (it != channels_.end() && it->second.unsubscribing > 0) return false;
    if (it != channels_.end()) {
      Channel& c = it->second;
      ++c.moved;
      c.wanted = false;
      c.refused_code = absl::StatusCode::kUnavailable;
      c.refused = absl::StrCat(
          "the slot of channel \"", it->first, "\" moved away from Redis at ",
          conn_->options().endpoint.ToString(), " (sharded pub/sub)");
      c.cv.SignalAll();
      c.NotifySignals(&tell);
    }
  } else {
    return false;
  }
  Tell(std::move(tell));
  return true;
}

void Subscriber::OnMessage(const redis::ReplyView& message,
                           std::vector<std::shared_ptr<const Listener>>* tell) {
  const absl::string_view text = message[2].str();
  auto it = channels_.find(message[1].str());
  if (it == channels_.end()) return;
  Channel& c = it->second;
  if (c.refs == 0) return;
  ++c.messages;
  bool all = c.wake_all > 0;
  if (text == kReadUnlockMessage) {
    ++c.read_unlocks;
    if (c.read_write > 0) all = true;
  }
  if (auto named = c.named.find(text); named != c.named.end()) {
    ++named->second.messages;
    all = true;
  }
  if (text == kUnlockMessage) ++c.permits;
  if (all) {
    c.cv.SignalAll();  // wake-one waiters re-check the permits
    c.NotifySignals(tell);
  } else if (text == kUnlockMessage) {
    c.cv.Signal();
    c.NotifyPermit(tell);
  } else {
    c.NotifySignals(tell);
  }
}

void Subscriber::OnAnswer(const Command& command, const io::Result& result) {
  std::vector<std::shared_ptr<const Listener>> tell;
  {
    MutexLock lock(&mu_);
    OnAnswerLocked(command, result, &tell);
  }
  Tell(std::move(tell));
}

void Subscriber::OnAnswerLocked(
    const Command& command, const io::Result& result,
    std::vector<std::shared_ptr<const Listener>>* tell) {
  if (command.generation != generation_) return;
  auto it = channels_.find(command.channel);
  if (it == channels_.end()) return;
  Channel& c = it->second;
  if (c.in_flight > 0) --c.in_flight;
  if (command.op == Op::kUnsubscribe && c.unsubscribing > 0) --c.unsubscribing;
  // A failed request means a failed connection: OnConnectionState() starts
  // over on the next one.
  if (!result.status.ok()) return;
  const redis::Reply& reply = result.replies[0];
  if (reply.is_error() && command.op == Op::kSubscribe) {
    const absl::Status refused = redis::ErrorReplyToStatus(
        absl::StrCat("SUBSCRIBE to channel \"", command.channel,
                     "\" on Redis at ", conn_->options().endpoint.ToString(),
                     " (needed to wait for the lock)"),
        reply.str());
    c.refused_code = refused.code();
    c.refused = std::string(refused.message());
  }
  if (c.refs == 0 && c.in_flight == 0) {
    channels_.erase(it);
  } else if (Confirmed(c) || c.refused_code != absl::StatusCode::kOk) {
    c.cv.SignalAll();
    c.NotifySignals(tell);
  }
}

void Subscriber::SchedulePing() {
  ping_timer_.expires_after(absl::ToChronoNanoseconds(ping_every_));
  ping_timer_.async_wait([weak = weak_from_this()](const asio::error_code& ec) {
    std::shared_ptr<Subscriber> self = weak.lock();
    if (ec || self == nullptr) return;
    {
      MutexLock lock(&self->mu_);
      if (self->closed_) return;
    }
    // An idle connection proves it is alive: one that does not answer
    // within command_timeout is replaced by the connection itself.
    auto ping = std::make_shared<io::Request>();
    io::AppendCommand({"PING"}, &ping->wire);
    self->conn_->Submit(std::move(ping));
    self->SchedulePing();
  });
}

}  // namespace pubsub
}  // namespace relock
