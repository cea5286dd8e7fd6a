#include "lib/pubsub/subscriber.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace relock {
namespace pubsub {
namespace {

// Longest single condition-variable sleep: bounds the effect of wall-clock
// jumps on absl's timed waits; the loops re-check the steady clock.
constexpr absl::Duration kMaxSleepSlice = absl::Seconds(1);
// Unlock message payload (Redisson's LockPubSub.UNLOCK_MESSAGE).
constexpr absl::string_view kUnlockMessage = "0";

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
  if (signal_ != nullptr) {
    MutexLock lock(&owner_->mu_);
    auto& v = channel_->signals;
    v.erase(std::find(v.begin(), v.end(), signal_.get()));
  }
  owner_->Unref(name_, channel_);
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
                         owner_->options_.endpoint.ToString(),
                         " is down: ", owner_->last_error_.message()));
      }
      return absl::DeadlineExceededError(
          absl::StrCat("SUBSCRIBE ", name_, " not confirmed by Redis at ",
                       owner_->options_.endpoint.ToString()));
    }
    channel_->cv.WaitWithTimeout(&owner_->mu_, SliceUntil(deadline));
  }
  if (owner_->closed_) return absl::CancelledError("the client was closed");
  seen_generation_ = owner_->generation_;
  return absl::OkStatus();
}

WakeReason Subscription::Wait(Deadline deadline) {
  MutexLock lock(&owner_->mu_);
  while (true) {
    if (owner_->closed_) return WakeReason::kClosed;
    if (owner_->generation_ != seen_generation_) {
      return WakeReason::kResubscribed;
    }
    if (channel_->permits > 0) {
      --channel_->permits;
      return WakeReason::kNotified;
    }
    if (deadline.Expired()) return WakeReason::kTimeout;
    channel_->cv.WaitWithTimeout(&owner_->mu_, SliceUntil(deadline));
  }
}

void Subscription::PassOn() {
  MutexLock lock(&owner_->mu_);
  ++channel_->permits;
  channel_->cv.Signal();
}

// ------------------------------------------------------------------ Subscriber

Subscriber::Subscriber(redis::ConnectionOptions options)
    : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<Subscriber>> Subscriber::Start(
    redis::ConnectionOptions options, bool connect_now) {
  absl::StatusOr<std::unique_ptr<redis::Connection>> conn;
  if (connect_now) {
    conn = redis::Connection::Open(options);
    if (!conn.ok()) {
      return absl::Status(
          conn.status().code(),
          absl::StrCat("pub/sub connection: ", conn.status().message()));
    }
  }
  std::unique_ptr<Subscriber> s(new Subscriber(std::move(options)));
  s->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s->wake_fd_ < 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("eventfd: ", ErrnoText(errno)));
  }
  if (connect_now) s->OnConnected(*std::move(conn));
  {
    MutexLock lock(&s->join_mu_);
    s->thread_ = std::thread([p = s.get()] { p->Run(); });
  }
  return s;
}

Subscriber::~Subscriber() {
  Close();
  if (wake_fd_ >= 0) close(wake_fd_);
}

void Subscriber::Close() {
  {
    MutexLock lock(&mu_);
    closed_ = true;
    for (auto& [name, c] : channels_) {
      c.cv.SignalAll();
      c.NotifySignals();
    }
  }
  Wake();
  MutexLock lock(&join_mu_);
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) {
    thread_.join();
  }
}

bool Subscriber::Confirmed(const Channel& c) const {
  return connected_ && c.wanted && c.in_flight == 0 &&
         c.refused_code == absl::StatusCode::kOk;
}

void Subscriber::Wake() {
  uint64_t one = 1;
  ssize_t ignored = write(wake_fd_, &one, sizeof(one));
  (void)ignored;  // a full counter already means "wake up"
}

void Subscriber::Enqueue(Op op, const std::string& name, Channel* c) {
  c->wanted = op == Op::kSubscribe;
  if (!connected_) return;  // OnConnected() subscribes what is wanted
  ++c->in_flight;
  outbox_.emplace_back(op, name);
}

std::unique_ptr<Subscription> Subscriber::Subscribe(
    const std::string& name, std::shared_ptr<WakeSignal> signal) {
  Channel* c;
  bool queued = false;
  {
    MutexLock lock(&mu_);
    c = &channels_[name];
    if (signal != nullptr) c->signals.push_back(signal.get());
    if (c->refs++ == 0) {
      c->permits = 0;
      c->refused_code = absl::StatusCode::kOk;
      if (!c->wanted) {
        Enqueue(Op::kSubscribe, name, c);
        queued = connected_;
      }
    }
  }
  if (queued) Wake();
  return std::unique_ptr<Subscription>(
      new Subscription(this, name, c, std::move(signal)));
}

void Subscriber::Unref(const std::string& name, Channel* c) {
  bool queued = false;
  {
    MutexLock lock(&mu_);
    if (--c->refs > 0) return;
    c->permits = 0;
    if (connected_ && !closed_) {
      Enqueue(Op::kUnsubscribe, name, c);
      queued = true;
    } else if (c->in_flight == 0) {
      c->wanted = false;
      channels_.erase(name);
    }
  }
  if (queued) Wake();
}

// ----------------------------------------------------------------- loop thread

void Subscriber::OnConnected(std::unique_ptr<redis::Connection> conn) {
  conn_ = std::move(conn);
  ping_outstanding_ = false;
  awaiting_.clear();
  MutexLock lock(&mu_);
  connected_ = true;
  ++generation_;
  outbox_.clear();
  for (auto it = channels_.begin(); it != channels_.end();) {
    Channel& c = it->second;
    c.in_flight = 0;
    if (c.refs == 0) {
      channels_.erase(it++);
      continue;
    }
    c.wanted = false;
    c.refused_code = absl::StatusCode::kOk;
    Enqueue(Op::kSubscribe, it->first, &c);
    c.cv.SignalAll();  // generation changed: waiters re-check
    c.NotifySignals();
    ++it;
  }
}

void Subscriber::OnDisconnected(const absl::Status& why) {
  conn_.reset();
  awaiting_.clear();
  MutexLock lock(&mu_);
  connected_ = false;
  last_error_ = why;
  outbox_.clear();
  for (auto it = channels_.begin(); it != channels_.end();) {
    it->second.in_flight = 0;
    if (it->second.refs == 0) {
      channels_.erase(it++);
    } else {
      ++it;
    }
  }
}

absl::Status Subscriber::Send(bool ping) {
  std::vector<std::pair<Op, std::string>> batch;
  {
    MutexLock lock(&mu_);
    batch.swap(outbox_);
  }
  if (ping) batch.emplace_back(Op::kPing, std::string());
  if (batch.empty()) return absl::OkStatus();
  for (const auto& [op, name] : batch) {
    absl::Status s;
    if (op == Op::kPing) {
      absl::string_view argv[] = {"PING"};
      s = conn_->Append(argv);
    } else {
      absl::string_view argv[] = {
          op == Op::kSubscribe ? "SUBSCRIBE" : "UNSUBSCRIBE", name};
      s = conn_->Append(argv);
    }
    if (!s.ok()) return s;
  }
  awaiting_.insert(awaiting_.end(), std::make_move_iterator(batch.begin()),
                   std::make_move_iterator(batch.end()));
  return conn_->Flush("write to the pub/sub connection");
}

void Subscriber::Dispatch(const redis::ReplyView& reply) {
  const bool pushed_message =
      reply.is_array() && reply.size() >= 3 && reply[0].str() == "message";
  if (pushed_message) {
    MutexLock lock(&mu_);
    auto it = channels_.find(reply[1].str());
    if (it == channels_.end()) return;
    Channel& c = it->second;
    if (reply[2].str() == kUnlockMessage && c.refs > 0) {
      ++c.permits;
      c.cv.Signal();
      c.NotifySignals();
    }
    return;
  }
  // Every other reply answers the oldest command sent.
  if (awaiting_.empty()) return;
  const auto [op, name] = std::move(awaiting_.front());
  awaiting_.pop_front();
  if (op == Op::kPing) {
    ping_outstanding_ = false;  // "PONG", or ["pong", ""] while subscribed
    return;
  }
  MutexLock lock(&mu_);
  auto it = channels_.find(name);
  if (it == channels_.end()) return;
  Channel& c = it->second;
  if (c.in_flight > 0) --c.in_flight;
  if (reply.is_error() && op == Op::kSubscribe) {
    const absl::Status refused = redis::ErrorReplyToStatus(
        absl::StrCat("SUBSCRIBE to channel \"", name, "\" on Redis at ",
                     options_.endpoint.ToString(),
                     " (needed to wait for the lock)"),
        reply.str());
    c.refused_code = refused.code();
    c.refused = std::string(refused.message());
  }
  if (c.refs == 0 && c.in_flight == 0) {
    channels_.erase(it);
  } else if (Confirmed(c) || c.refused_code != absl::StatusCode::kOk) {
    c.cv.SignalAll();
    c.NotifySignals();
  }
}

absl::Status Subscriber::ReadAndDispatch() {
  redisContext* ctx = conn_->context();
  if (redisBufferRead(ctx) != REDIS_OK) return conn_->Fail("read pub/sub");
  while (true) {
    void* raw = nullptr;
    if (redisGetReplyFromReader(ctx, &raw) != REDIS_OK) {
      return conn_->Fail("parse pub/sub reply");
    }
    if (raw == nullptr) return absl::OkStatus();
    redis::Reply reply = conn_->Received(raw);
    Dispatch(reply.view());
  }
}

void Subscriber::Run() {
  absl::Duration backoff = absl::Milliseconds(10);
  const absl::Duration ping_every =
      std::max(absl::Seconds(1), options_.command_timeout);
  Deadline next_ping = Deadline::After(ping_every);
  Deadline pong_due = Deadline::Never();
  while (true) {
    {
      MutexLock lock(&mu_);
      if (closed_) break;
    }
    if (conn_ == nullptr) {
      absl::StatusOr<std::unique_ptr<redis::Connection>> conn =
          redis::Connection::Open(options_);
      if (conn.ok()) {
        OnConnected(*std::move(conn));
        backoff = absl::Milliseconds(10);
        next_ping = Deadline::After(ping_every);
        pong_due = Deadline::Never();
      } else {
        {
          MutexLock lock(&mu_);
          last_error_ = conn.status();
          auto closed = [this]()
                            ABSL_SHARED_LOCKS_REQUIRED(mu_) { return closed_; };
          mu_.AwaitWithTimeout(absl::Condition(&closed), backoff);
        }
        backoff = std::min(backoff * 2, absl::Seconds(1));
        continue;
      }
    }
    absl::Status status;
    if (ping_outstanding_ && pong_due.Expired()) {
      status = absl::UnavailableError(absl::StrCat(
          "pub/sub connection to ", options_.endpoint.ToString(),
          ": no PONG within ", absl::FormatDuration(options_.command_timeout)));
    } else {
      const bool ping = !ping_outstanding_ && next_ping.Expired();
      status = Send(ping);
      if (ping) {
        ping_outstanding_ = true;
        pong_due = Deadline::After(options_.command_timeout);
      }
    }
    if (!status.ok()) {
      OnDisconnected(status);
      continue;
    }
    pollfd fds[2] = {{conn_->context()->fd, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    Deadline wake_at =
        ping_outstanding_ ? pong_due : Earliest(next_ping, pong_due);
    int timeout_ms =
        static_cast<int>(absl::ToInt64Milliseconds(SliceUntil(wake_at)) + 1);
    int n = poll(fds, 2, timeout_ms);
    if (n < 0 && errno != EINTR) {
      OnDisconnected(
          absl::InternalError(absl::StrCat("poll: ", ErrnoText(errno))));
      continue;
    }
    if (fds[1].revents & POLLIN) {
      uint64_t count;
      ssize_t ignored = read(wake_fd_, &count, sizeof(count));
      (void)ignored;
    }
    if (fds[0].revents & (POLLIN | POLLERR | POLLHUP)) {
      status = ReadAndDispatch();
      if (!status.ok()) {
        OnDisconnected(status);
        continue;
      }
      next_ping = Deadline::After(ping_every);  // traffic proves liveness
      if (!ping_outstanding_) pong_due = Deadline::Never();
    }
  }
  conn_.reset();
  MutexLock lock(&mu_);
  connected_ = false;
}

}  // namespace pubsub
}  // namespace relock
