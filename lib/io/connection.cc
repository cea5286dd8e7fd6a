#include "lib/io/connection.h"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <hiredis/read.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <system_error>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "asio/error.hpp"
#include "asio/ssl/error.hpp"
#include "lib/common/unshared.h"
#include "lib/redis/errors.h"

namespace relock {
namespace io {
namespace {

constexpr size_t kReadChunk = size_t{64} * 1024;

absl::Status Closed() {
  return absl::FailedPreconditionError("the client is closed");
}

std::shared_ptr<const BackoffStrategy> DefaultReconnectBackoff() {
  ExponentialBackoffOptions o;
  o.initial = absl::Milliseconds(10);
  o.maximum = absl::Seconds(1);
  return *ExponentialBackoff(o);
}

// strerror(), thread-safe.
std::string ErrnoText(int error) {
  return std::error_code(error, std::system_category()).message();
}

// Whether a parked socket (no request outstanding) is still quiet: OK, or
// why it cannot be used (the server closed it, or sent something nobody
// asked for, such as an error before closing).
absl::Status CheckParked(int fd, const redis::Endpoint& endpoint) {
  char byte = 0;
  const ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    return absl::OkStatus();
  }
  const std::string where = endpoint.ToString();
  if (n == 0) {
    return absl::UnavailableError(
        absl::StrCat("Redis at ", where, ": server closed the connection"));
  }
  if (n < 0) {
    return absl::UnavailableError(
        absl::StrCat("Redis at ", where, ": ", ErrnoText(errno)));
  }
  return absl::UnavailableError(absl::StrCat(
      "Redis at ", where, " sent data while no request was outstanding"));
}

// Why a connect failed when the server's first answer was not RESP (the
// reader refused it): `answer` is what it sent. A TLS record (a plaintext
// client at a TLS port) is a wrong setting, FailedPrecondition; anything
// else (an HTTP server, a wrong port) makes the address unusable,
// Unavailable, so that a cluster or Sentinel client tries the next one.
absl::Status NotRedis(const redis::Endpoint& endpoint, bool tls,
                      absl::string_view answer) {
  const std::string where = endpoint.ToString();
  if (!tls && answer.size() >= 2 && (answer[0] == 0x15 || answer[0] == 0x16) &&
      answer[1] == 0x03) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the server at ", where,
        " speaks TLS (it answered with a TLS record): use a rediss:// URL "
        "and ClientOptions::tls for a TLS port"));
  }
  absl::string_view line = answer.substr(0, answer.find_first_of("\r\n"));
  const bool more = line.size() > 60;
  line = line.substr(0, 60);
  return absl::UnavailableError(
      absl::StrCat("the server at ", where,
                   " does not speak the Redis protocol (RESP): it answered \"",
                   absl::CHexEscape(line), more ? "..." : "", "\"",
                   absl::StartsWith(answer, "HTTP/") ? " (an HTTP server)" : "",
                   "; is the address right?"));
}

// Waits until `fd` is ready for `events` (or has failed) or `until`
// passes: false when the time ran out.
bool AwaitFd(int fd, decltype(pollfd::events) events,
             SteadyClock::time_point until) {
  for (;;) {
    const SteadyClock::time_point now = SteadyClock::now();
    if (now >= until) return false;
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(until - now).count();
    pollfd p{fd, events, 0};
    const int r =
        ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, INT_MAX)));
    if (r > 0) return true;  // the next send/recv says what happened
    if (r < 0 && errno != EINTR) return true;
  }
}

// A parked socket waits for direct callers in blocking mode, so that a
// caller's recv() itself sleeps until the reply (one system call, not poll()
// and then recv()); SO_RCVTIMEO = `timeout` bounds each wait. Sends stay
// non-blocking (MSG_DONTWAIT). False, leaving the socket non-blocking, when
// `timeout` has no such form or the kernel refuses.
bool ParkBlocking(int fd, absl::Duration timeout) {
  if (timeout < absl::Milliseconds(1) || timeout > absl::Hours(24)) {
    return false;
  }
  const timeval tv = absl::ToTimeval(timeout);
  if (::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0) {
    return false;
  }
  const int flags = ::fcntl(fd, F_GETFL);
  return flags >= 0 && ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0;
}

// Undoes ParkBlocking() before the loop takes the socket back (Asio sets
// O_NONBLOCK again on its own, but only once it starts an operation).
void UnparkBlocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

}  // namespace

absl::StatusOr<std::shared_ptr<Connection>> Connection::Create(
    EventLoop* loop, ConnectionOptions options) {
  std::shared_ptr<TlsContext> tls;
  if (options.endpoint.tls) {
    absl::StatusOr<std::shared_ptr<TlsContext>> made =
        TlsContext::Create(options.tls, options.endpoint.host);
    if (!made.ok()) return made.status();
    tls = *std::move(made);
  }
  if (options.reconnect_backoff == nullptr) {
    options.reconnect_backoff = DefaultReconnectBackoff();
  }
  return std::shared_ptr<Connection>(
      new Connection(loop, std::move(options), std::move(tls)));
}

Connection::Connection(EventLoop* loop, ConnectionOptions options,
                       std::shared_ptr<TlsContext> tls)
    : loop_(loop),
      options_(std::move(options)),
      tls_(std::move(tls)),
      read_buf_(kReadChunk),
      connect_timer_(loop->context()),
      stall_timer_(loop->context()),
      reconnect_timer_(loop->context()) {}

Connection::~Connection() {
  if (reader_ != nullptr) redisReaderFree(reader_);
}

absl::optional<Result> Connection::TryDirect(absl::string_view wire,
                                             size_t commands,
                                             Deadline deadline) {
  // Without the mutex first: under load the connection is never parked,
  // and every call would take mu_ twice.
  if (!parked_hint_.load(std::memory_order_relaxed)) return absl::nullopt;
  std::shared_ptr<Transport> transport;  // keeps the socket open meanwhile
  int fd = -1;
  bool blocking = false;
  {
    MutexLock lock(&mu_);
    if (owner_ != Owner::kIdle || closed_ || !submitted_.empty()) {
      return absl::nullopt;
    }
    SetOwner(Owner::kCaller);
    transport = lent_transport_;
    fd = lent_fd_;
    blocking = lent_blocking_;
  }
  Result result;
  Handback back;
  if (absl::Status quiet = CheckParked(fd, options_.endpoint); !quiet.ok()) {
    back.kind = Handback::Kind::kStale;
    back.why = std::move(quiet);
    back.resendable = true;
  } else {
    direct_calls_.fetch_add(1, std::memory_order_relaxed);
    Outstanding(1);
    back = DirectIo(fd, blocking, wire, commands, deadline, &result);
    Outstanding(-1);
  }
  // The loop's own reference keeps the socket open from here on (while
  // owner_ is kCaller, nothing on the loop drops it): do not let this
  // thread destroy the transport.
  transport = nullptr;
  bool adopt = back.kind != Handback::Kind::kDone;
  bool pump = false;
  {
    MutexLock lock(&mu_);
    if (closed_) {
      adopt = true;
      if (!result.status.ok()) result = Result{Closed(), {}, false};
    }
    if (!adopt) {
      SetOwner(Owner::kIdle);
      pump = !submitted_.empty() && !pump_posted_;
      pump_posted_ = pump_posted_ || pump;
    }
  }
  const bool stale = back.kind == Handback::Kind::kStale;
  if (adopt) {
    loop_->Post([self = shared_from_this(), back = std::move(back)] {
      self->Adopt(back);
    });
  } else if (pump) {
    loop_->Post([self = shared_from_this()] { self->Pump(); });
  }
  if (stale) return absl::nullopt;
  return result;
}

Connection::Handback Connection::DirectIo(int fd, bool blocking,
                                          absl::string_view wire,
                                          size_t commands, Deadline deadline,
                                          Result* result) {
  auto where = [this] { return options_.endpoint.ToString(); };
  const auto stall = absl::ToChronoNanoseconds(options_.command_timeout);
  Handback back;  // kDone unless something below needs the loop
  back.progress_at = SteadyClock::now();
  auto broken = [&](absl::Status why, bool resendable) {
    back.kind = Handback::Kind::kBroken;
    back.why = Unshared(why);
    back.resendable = resendable;
    *result = Result{std::move(why), {}, resendable};
    return back;
  };
  // After a wait that ran out: the caller's deadline, or command_timeout
  // without progress.
  auto timed_out = [&](size_t remaining, bool partly_written) {
    if (deadline.Expired()) {
      *result = Result{
          absl::DeadlineExceededError(absl::StrCat(
              "Redis at ", where(), ": no reply before the call's deadline")),
          {},
          false};
      if (partly_written) {
        // Half a command on the wire: nothing more can be sent on it.
        back.kind = Handback::Kind::kBroken;
        back.why = absl::UnavailableError(absl::StrCat(
            "Redis at ", where(), ": a request was abandoned half written"));
      } else if (remaining > 0) {
        back.kind = Handback::Kind::kInFlight;
        back.remaining = remaining;
      }
      return back;
    }
    return broken(
        absl::UnavailableError(absl::StrCat(
            "Redis at ", where(), ": no reply within command_timeout ",
            absl::FormatDuration(options_.command_timeout))),
        false);
  };
  if (deadline.Expired()) {
    // As a request abandoned before the loop wrote it: never sent.
    *result = Result{absl::DeadlineExceededError(absl::StrCat(
                         "Redis at ", where(),
                         ": the call's deadline passed before it was sent")),
                     {},
                     false};
    return back;
  }
  // Whether the first wait for the replies may sleep in recv() (see below).
  bool sleep_in_recv_once = blocking;
  for (size_t sent = 0; sent < wire.size();) {
    const ssize_t n = ::send(fd, wire.data() + sent, wire.size() - sent,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      sleep_in_recv_once = false;
      if (!AwaitFd(fd, POLLOUT,
                   std::min(deadline.time(), back.progress_at + stall))) {
        return timed_out(sent == 0 ? 0 : commands, sent > 0);
      }
    } else if (n < 0 && errno != EINTR) {
      return broken(
          absl::UnavailableError(absl::StrCat("write to Redis at ", where(),
                                              " failed: ", ErrnoText(errno))),
          /*resendable=*/true);
    }
  }
  std::vector<redis::Reply> replies;
  bool await = true;  // the reply cannot be there yet: poll before recv
  while (replies.size() < commands) {
    void* raw = nullptr;
    if (redisReaderGetReply(reader_, &raw) != REDIS_OK) {
      return broken(absl::InternalError(absl::StrCat(
                        "Redis at ", where(),
                        " sent a malformed reply: ", reader_->errstr)),
                    false);
    }
    if (raw != nullptr) {
      redis::Reply reply(static_cast<redisReply*>(raw));
      if (reply.is_error() && redis::IsConnectionClosingError(reply.str())) {
        return broken(
            absl::UnavailableError(absl::StrCat(
                "Redis at ", where(), " closed the connection: ", reply.str())),
            /*resendable=*/true);
      }
      replies.push_back(std::move(reply));
      back.progress_at = SteadyClock::now();  // as the loop: a whole reply
      continue;
    }
    const SteadyClock::time_point until =
        std::min(deadline.time(), back.progress_at + stall);
    // The first wait of a call may sleep in a blocking recv(), which waits at
    // most command_timeout from now (SO_RCVTIMEO): only when the caller's
    // deadline is no nearer than that and the send did not wait. Every later
    // wait (after a partial reply, a signal, an early SO_RCVTIMEO) polls
    // until `until`, so a stall is noticed command_timeout after the last
    // whole reply, as on the loop.
    const bool sleep_in_recv = await && sleep_in_recv_once &&
                               deadline.time() >= SteadyClock::now() + stall;
    sleep_in_recv_once = false;
    if (!sleep_in_recv && await && !AwaitFd(fd, POLLIN, until)) {
      return timed_out(commands - replies.size(), false);
    }
    const ssize_t n = ::recv(fd, read_buf_.data(), read_buf_.size(),
                             sleep_in_recv ? 0 : MSG_DONTWAIT);
    await = n < 0 || static_cast<size_t>(n) < read_buf_.size();
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
        SteadyClock::now() >= until) {
      return timed_out(commands - replies.size(), false);  // SO_RCVTIMEO
    }
    if (n > 0) {
      if (redisReaderFeed(reader_, read_buf_.data(), static_cast<size_t>(n)) !=
          REDIS_OK) {
        return broken(absl::InternalError("cannot buffer Redis reply"), false);
      }
    } else if (n == 0) {
      return broken(
          absl::UnavailableError(absl::StrCat(
              "Redis at ", where(), ": server closed the connection")),
          /*resendable=*/true);
    } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return broken(absl::UnavailableError(absl::StrCat(
                        "Redis at ", where(), ": ", ErrnoText(errno))),
                    /*resendable=*/true);
    }
  }
  *result = Result{absl::OkStatus(), std::move(replies), false};
  if (reader_->pos < reader_->len) {
    // More than was asked for: on the loop, a reply nobody asked for fails
    // the connection; here too (this call's own replies are complete), so
    // that the extra bytes never answer the next request.
    back.kind = Handback::Kind::kBroken;
    back.why = absl::InternalError(
        absl::StrCat("Redis at ", where(), " sent more than was asked for"));
  }
  return back;
}

void Connection::SetOwner(Owner owner) {
  owner_ = owner;
  parked_hint_.store(owner == Owner::kIdle, std::memory_order_relaxed);
}

bool Connection::parked() const {
  MutexLock lock(&mu_);
  return owner_ == Owner::kIdle;
}

void Connection::Adopt(const Handback& back) {
  int fd = -1;
  {
    MutexLock lock(&mu_);
    SetOwner(Owner::kLoop);
    lent_transport_ = nullptr;
    if (lent_blocking_) fd = lent_fd_;
    lent_fd_ = -1;
    lent_blocking_ = false;
  }
  if (state_ != State::kReady) {
    // Close() came while the caller had the socket, which DoClose() left
    // open for it.
    if (transport_ != nullptr) transport_->Close();
    transport_ = nullptr;
    return;
  }
  if (fd >= 0) UnparkBlocking(fd);
  transport_->Unpark();
  switch (back.kind) {
    case Handback::Kind::kStale:
    case Handback::Kind::kBroken:
      Fail(back.why, back.resendable);
      break;
    case Handback::Kind::kInFlight: {
      // Its replies are read and discarded like any abandoned request's.
      auto rest = std::make_shared<Request>();
      rest->commands = back.remaining;
      rest->abandoned->store(true, std::memory_order_relaxed);
      Outstanding(1);
      written_.push_front(std::move(rest));
      progress_at_ = back.progress_at;
      ArmStallTimer();
      StartRead();
      break;
    }
    case Handback::Kind::kDone:
      StartRead();
      break;
  }
  Pump();
}

void Connection::ReadOrPark() {
  if (options_.direct_calls && state_ == State::kReady && written_.empty() &&
      queued_.empty() && !writing_ && !push_handler_ &&
      !options_.keep_connected) {
    MutexLock lock(&mu_);
    if (submitted_.empty() && !closed_) {
      const int fd = transport_->Park();
      if (fd >= 0) {
        SetOwner(Owner::kIdle);
        lent_transport_ = transport_;
        lent_fd_ = fd;
        lent_blocking_ = ParkBlocking(fd, options_.command_timeout);
        return;
      }
    }
  }
  StartRead();
}

bool Connection::Unpark(int fd, bool blocking) {
  absl::Status quiet = CheckParked(fd, options_.endpoint);
  if (blocking) UnparkBlocking(fd);
  transport_->Unpark();
  if (!quiet.ok()) {
    Fail(quiet, /*resendable=*/true);
    return false;
  }
  StartRead();
  return true;
}

void Connection::Submit(std::shared_ptr<Request> request) {
  Outstanding(1);
  bool post = false;
  {
    MutexLock lock(&mu_);
    if (!closed_) {
      submitted_.push_back(request);
      post = !pump_posted_;
      pump_posted_ = true;
      request = nullptr;
    }
  }
  if (request != nullptr) {
    Complete(request, Result{Closed(), {}, false});
    return;
  }
  if (post) loop_->Post([self = shared_from_this()] { self->Pump(); });
}

void Connection::Start() {
  loop_->Post([self = shared_from_this()] {
    if (self->state_ == State::kIdle) self->StartConnect();
  });
}

void Connection::Close() {
  {
    MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
  }
  loop_->Post([self = shared_from_this()] { self->DoClose(); });
}

void Connection::DoClose() {
  std::vector<std::shared_ptr<Request>> submitted;
  bool lent = false;
  {
    MutexLock lock(&mu_);
    submitted.swap(submitted_);
    if (owner_ == Owner::kCaller) {
      // A direct caller has the socket: wake it (its call fails, or ends if
      // its reply is in). Adopt() closes the socket once the caller is done.
      lent = true;
      ::shutdown(lent_fd_, SHUT_RDWR);
    } else {
      SetOwner(Owner::kLoop);
      lent_transport_ = nullptr;
      lent_fd_ = -1;
      lent_blocking_ = false;
    }
  }
  state_ = State::kClosed;
  ++attempt_;
  connect_timer_.cancel();
  stall_timer_.cancel();
  reconnect_timer_.cancel();
  if (!lent) {
    if (transport_ != nullptr) transport_->Close();
    transport_ = nullptr;
  }
  handshake_ = nullptr;
  partial_.clear();
  queued_.insert(queued_.end(), submitted.begin(), submitted.end());
  FailAll(&written_, Closed(), false);
  FailAll(&queued_, Closed(), false);
}

void Connection::Pump() {
  std::vector<std::shared_ptr<Request>> batch;
  int parked_fd = -1;
  bool parked_blocking = false;
  {
    MutexLock lock(&mu_);
    pump_posted_ = false;
    // A direct caller has the socket; it hands submitted_ over when done.
    if (owner_ == Owner::kCaller) return;
    batch.swap(submitted_);
    // Requests abandoned before they were sent need no socket: a parked
    // connection stays parked for them.
    const bool live =
        std::any_of(batch.begin(), batch.end(), [](const auto& r) {
          return !r->abandoned->load(std::memory_order_relaxed);
        });
    if (owner_ == Owner::kIdle && live) {
      SetOwner(Owner::kLoop);
      parked_fd = lent_fd_;
      parked_blocking = lent_blocking_;
      lent_transport_ = nullptr;
      lent_fd_ = -1;
      lent_blocking_ = false;
    }
  }
  if (parked_fd >= 0) Unpark(parked_fd, parked_blocking);
  if (state_ == State::kClosed) {
    for (std::shared_ptr<Request>& r : batch) {
      Complete(r, Result{Closed(), {}, false});
    }
    return;
  }
  queued_.insert(queued_.end(), std::make_move_iterator(batch.begin()),
                 std::make_move_iterator(batch.end()));
  switch (state_) {
    case State::kIdle:
      if (!queued_.empty()) StartConnect();
      break;
    case State::kReady:
      StartWrite();
      break;
    case State::kConnecting:
    case State::kClosed:
      break;
  }
}

void Connection::StartConnect() {
  state_ = State::kConnecting;
  const uint64_t attempt = ++attempt_;
  reconnect_timer_.cancel();
  if (reader_ != nullptr) redisReaderFree(reader_);
  reader_ = redisReaderCreate();
  partial_.clear();
  writing_ = false;
  transport_ = Transport::Create(loop_->context(), options_.endpoint, tls_);
  connect_timer_.expires_after(
      absl::ToChronoNanoseconds(options_.connect_timeout));
  connect_timer_.async_wait([self = shared_from_this(),
                             attempt](const asio::error_code& ec) {
    if (ec) return;
    self->FinishConnect(
        attempt, absl::UnavailableError(absl::StrCat(
                     "connect to Redis at ", self->options_.endpoint.ToString(),
                     ": no answer within connect_timeout ",
                     absl::FormatDuration(self->options_.connect_timeout))));
  });
  transport_->Connect(
      [self = shared_from_this(), attempt](const absl::Status& s) {
        self->OnTransportConnected(attempt, s);
      });
}

void Connection::OnTransportConnected(uint64_t attempt,
                                      const absl::Status& status) {
  if (attempt != attempt_ || state_ != State::kConnecting) return;
  if (!status.ok()) return FinishConnect(attempt, status);
  // AUTH, SELECT and a PING, pipelined: the connection is ready once the
  // server answered them (a server that sends an error and closes, such as
  // one at maxclients, fails the connect rather than a caller's request).
  const redis::Endpoint& ep = options_.endpoint;
  auto handshake = std::make_shared<Request>();
  handshake->commands = 0;
  if (!ep.password.empty()) {
    if (ep.username.empty()) {
      AppendCommand({"AUTH", ep.password}, &handshake->wire);
    } else {
      AppendCommand({"AUTH", ep.username, ep.password}, &handshake->wire);
    }
    ++handshake->commands;
  }
  const std::string db = absl::StrCat(ep.db);
  if (ep.db != 0) {
    AppendCommand({"SELECT", db}, &handshake->wire);
    ++handshake->commands;
  }
  AppendCommand({"PING"}, &handshake->wire);
  ++handshake->commands;
  handshake->done = [self = shared_from_this(), attempt](Result r) {
    if (!r.status.ok()) return self->FinishConnect(attempt, r.status);
    const redis::Endpoint& ep = self->options_.endpoint;
    size_t i = 0;
    if (!ep.password.empty()) {
      const redis::Reply& auth = r.replies[i++];
      if (auth.is_error()) {
        return self->FinishConnect(
            attempt, absl::UnauthenticatedError(absl::StrCat(
                         "AUTH to Redis at ", ep.ToString(), " as user \"",
                         ep.username.empty() ? "default" : ep.username,
                         "\" was refused: ", auth.str())));
      }
    }
    if (ep.db != 0) {
      const redis::Reply& select = r.replies[i++];
      if (select.is_error()) {
        absl::Status s = redis::ErrorReplyToStatus(
            absl::StrCat("SELECT ", ep.db, " on ", ep.ToString()),
            select.str());
        return self->FinishConnect(attempt,
                                   s.code() == absl::StatusCode::kInternal
                                       ? absl::InvalidArgumentError(s.message())
                                       : s);
      }
    }
    const redis::Reply& ping = r.replies[i];
    if (ping.is_error()) {
      return self->FinishConnect(
          attempt,
          redis::ErrorReplyToStatus(
              absl::StrCat("PING Redis at ", ep.ToString()), ping.str()));
    }
    self->FinishConnect(attempt, absl::OkStatus());
  };
  handshake_ = handshake;
  written_.push_front(std::move(handshake));
  write_buf_ = handshake_->wire;
  Outstanding(1);
  StartRead();
  DoWrite();
}

void Connection::FinishConnect(uint64_t attempt, const absl::Status& status) {
  if (attempt != attempt_ || state_ != State::kConnecting) return;
  connect_timer_.cancel();
  if (status.ok()) {
    handshake_ = nullptr;
    state_ = State::kReady;
    reconnect_failures_ = 0;
    if (connects_.fetch_add(1, std::memory_order_relaxed) > 0 &&
        options_.observer != nullptr) {
      options_.observer->metrics.reconnects.Add();
      options_.observer->Log(
          absl::LogSeverity::kInfo,
          absl::StrCat("connection to Redis at ", options_.endpoint.ToString(),
                       " open again"));
    }
    if (state_handler_) state_handler_(true, status);
    StartWrite();
    return;
  }
  ++reconnect_failures_;
  ++attempt_;
  state_ = State::kIdle;
  if (transport_ != nullptr) transport_->Close();
  transport_ = nullptr;
  writing_ = false;
  partial_.clear();
  // The handshake is the only request written while connecting.
  FailAll(&written_, status, false);
  handshake_ = nullptr;
  FailAll(&queued_, status, false);
  if (state_handler_) state_handler_(false, Unshared(status));
  if (options_.keep_connected) ScheduleReconnect();
}

void Connection::StartWrite() {
  if (state_ != State::kReady || writing_ || queued_.empty()) return;
  const bool was_idle = written_.empty();
  write_buf_.clear();
  while (!queued_.empty()) {
    std::shared_ptr<Request> r = std::move(queued_.front());
    queued_.pop_front();
    if (r->abandoned->load(std::memory_order_relaxed)) {
      Complete(r, Result{absl::CancelledError("abandoned before it was sent"),
                         {},
                         false});
      continue;
    }
    write_buf_.append(r->wire);
    written_.push_back(std::move(r));
  }
  if (write_buf_.empty()) return;
  if (was_idle) progress_at_ = SteadyClock::now();
  DoWrite();
  ArmStallTimer();
}

void Connection::DoWrite() {
  writing_ = true;
  transport_->Write(asio::buffer(write_buf_), [self = shared_from_this(),
                                               attempt = attempt_](
                                                  const asio::error_code& ec,
                                                  size_t /*n*/) {
    if (attempt != self->attempt_) return;
    self->writing_ = false;
    if ((ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe) &&
        self->state_ == State::kConnecting && self->tls_ != nullptr &&
        self->connects_.load(std::memory_order_relaxed) == 0) {
      // A TLS 1.3 server refuses a client (no or a wrong client
      // certificate) with an alert after the handshake, and closes. If
      // our first command reaches the closed socket before we read the
      // alert, its reset discards the alert: the refusal is all we see.
      // (Only on a first connection: a reconnect that meets a reset is a
      // server going away, Unavailable as below.)
      return self->FinishConnect(
          attempt,
          absl::UnauthenticatedError(absl::StrCat(
              "TLS connection to Redis at ", self->options_.endpoint.ToString(),
              " refused by the server right after the handshake (",
              ec.message(),
              "); a server with tls-auth-clients refuses clients "
              "without a valid certificate (TlsOptions::cert_file)")));
    }
    if (ec) {
      self->Fail(absl::UnavailableError(absl::StrCat(
                     "write to Redis at ", self->options_.endpoint.ToString(),
                     " failed: ", ec.message())),
                 /*resendable=*/true);
      return;
    }
    self->StartWrite();
  });
}

void Connection::StartRead() {
  transport_->ReadSome(asio::buffer(read_buf_),
                       [self = shared_from_this(), attempt = attempt_](
                           const asio::error_code& ec, size_t n) {
                         if (attempt != self->attempt_) return;
                         self->OnRead(ec, n);
                       });
}

void Connection::OnRead(const asio::error_code& ec, size_t n) {
  const uint64_t attempt = attempt_;
  if (ec) {
    const bool eof =
        ec == asio::error::eof || ec == asio::ssl::error::stream_truncated;
    std::string why = eof ? "server closed the connection" : ec.message();
    if ((eof || ec == asio::error::connection_reset) &&
        state_ == State::kConnecting && tls_ == nullptr &&
        options_.endpoint.kind == redis::Endpoint::Kind::kTcp) {
      // A TLS port drops a plaintext client (Redis resets the connection)
      // without a word.
      absl::StrAppend(&why,
                      " before answering (if that port expects TLS, use a "
                      "rediss:// URL)");
    }
    if (state_ == State::kConnecting &&
        ec.category() == asio::error::get_ssl_category()) {
      // A TLS server that refuses the client (no or a wrong client
      // certificate) says so with an alert after the handshake.
      return FinishConnect(attempt, absl::UnauthenticatedError(absl::StrCat(
                                        "TLS connection to Redis at ",
                                        options_.endpoint.ToString(),
                                        " refused by the server: ", why)));
    }
    Fail(absl::UnavailableError(absl::StrCat(
             "Redis at ", options_.endpoint.ToString(), ": ", why)),
         /*resendable=*/true);
    return;
  }
  if (redisReaderFeed(reader_, read_buf_.data(), n) != REDIS_OK) {
    Fail(absl::InternalError("cannot buffer Redis reply"), false);
    return;
  }
  ParseReplies(n);
}

// Replies completed per turn of the loop. One read brings the replies of
// every request written in the last batch (32 and more under load), and
// each completion lets a caller send its next request. Completing all of
// them before writing again would leave Redis idle while the client works
// and the client idle while Redis works. After a few, the loop writes what
// the completions queued (Pump and the write handlers run between two
// turns) and Redis works on those while the client goes on with the rest.
// Measured with hot_path_benchmark's 32 asynchronous chains (on a machine
// loaded by other builds): 19,000 pairs/s completing all replies at once;
// 31,000 with 8 per turn, 32,500 with 12, 42,000-43,500 with 16, 20,000-
// 22,000 with 24.
constexpr size_t kRepliesPerTurn = 16;

void Connection::ParseReplies(size_t n) {
  parse_posted_ = false;
  const uint64_t attempt = attempt_;
  for (size_t parsed = 0; attempt == attempt_; ++parsed) {
    if (parsed == kRepliesPerTurn) {
      parse_posted_ = true;
      loop_->Post([self = shared_from_this(), attempt, n] {
        if (attempt == self->attempt_) self->ParseReplies(n);
      });
      return;
    }
    void* raw = nullptr;
    if (redisReaderGetReply(reader_, &raw) != REDIS_OK) {
      if (state_ == State::kConnecting) {
        // The first answer is not RESP: not a Redis server.
        return FinishConnect(attempt,
                             NotRedis(options_.endpoint, tls_ != nullptr,
                                      absl::string_view(read_buf_.data(), n)));
      }
      Fail(absl::InternalError(
               absl::StrCat("Redis at ", options_.endpoint.ToString(),
                            " sent a malformed reply: ", reader_->errstr)),
           false);
      return;
    }
    if (raw == nullptr) break;
    OnReply(redis::Reply(static_cast<redisReply*>(raw)));
  }
  if (attempt == attempt_) ReadOrPark();
}

void Connection::OnReply(redis::Reply reply) {
  progress_at_ = SteadyClock::now();
  if (push_handler_ && push_handler_(reply)) return;
  if (reply.is_error() && redis::IsConnectionClosingError(reply.str())) {
    // Redis closes the connection after this reply; whatever was written
    // after the answered request never ran.
    Fail(absl::UnavailableError(
             absl::StrCat("Redis at ", options_.endpoint.ToString(),
                          " closed the connection: ", reply.str())),
         /*resendable=*/true);
    return;
  }
  if (written_.empty()) {
    Fail(absl::InternalError(absl::StrCat(
             "Redis at ", options_.endpoint.ToString(),
             " sent a reply nobody asked for: ", reply.view().Describe())),
         false);
    return;
  }
  partial_.push_back(std::move(reply));
  if (partial_.size() < written_.front()->commands) return;
  std::shared_ptr<Request> r = std::move(written_.front());
  written_.pop_front();
  Result result{absl::OkStatus(), std::move(partial_), false};
  partial_.clear();
  Complete(r, std::move(result));
}

void Connection::Complete(const std::shared_ptr<Request>& request,
                          Result result) {
  Outstanding(-1);
  if (request->done) request->done(std::move(result));
}

void Connection::FailAll(std::deque<std::shared_ptr<Request>>* requests,
                         const absl::Status& why, bool resendable) {
  std::deque<std::shared_ptr<Request>> failed;
  failed.swap(*requests);
  for (std::shared_ptr<Request>& r : failed) {
    Complete(r, Result{Unshared(why), {}, resendable});
  }
}

void Connection::Fail(const absl::Status& why, bool resendable) {
  if (state_ == State::kConnecting) return FinishConnect(attempt_, why);
  if (state_ != State::kReady) return;
  if (parse_posted_) {
    // Replies already read wait for their turn (ParseReplies): complete
    // their requests first, rather than fail them as if their replies were
    // lost (a resendable failure would run them twice). A reply among them
    // may fail the connection itself (OnReply).
    parse_posted_ = false;
    const uint64_t attempt = attempt_;
    while (attempt == attempt_) {
      void* raw = nullptr;
      if (redisReaderGetReply(reader_, &raw) != REDIS_OK || raw == nullptr) {
        break;
      }
      OnReply(redis::Reply(static_cast<redisReply*>(raw)));
    }
    if (attempt != attempt_ || state_ != State::kReady) return;
  }
  if (options_.observer != nullptr) {
    // An idle connection that the server closed (its `timeout` setting)
    // lost nothing: news, not a warning.
    options_.observer->Log(
        written_.empty() ? absl::LogSeverity::kInfo
                         : absl::LogSeverity::kWarning,
        absl::StrCat("connection to Redis at ", options_.endpoint.ToString(),
                     " lost: ", why.message()));
  }
  ++attempt_;
  state_ = State::kIdle;
  stall_timer_.cancel();
  stall_armed_ = false;
  transport_->Close();
  transport_ = nullptr;
  writing_ = false;
  partial_.clear();
  FailAll(&written_, why, resendable);
  if (state_handler_) state_handler_(false, Unshared(why));
  if (!queued_.empty()) {
    // Never sent: they go out on a new connection. Posted, so that no
    // connect starts inside a read handler that is still parsing.
    loop_->Post([self = shared_from_this()] { self->Pump(); });
  } else if (options_.keep_connected) {
    ScheduleReconnect();
  }
}

void Connection::ArmStallTimer() {
  if (stall_armed_) return;
  stall_armed_ = true;
  stall_timer_.expires_at(progress_at_ +
                          absl::ToChronoNanoseconds(options_.command_timeout));
  stall_timer_.async_wait([self = shared_from_this(),
                           attempt = attempt_](const asio::error_code& ec) {
    if (ec) return;  // cancelled: whoever cancelled reset stall_armed_
    self->stall_armed_ = false;
    if (attempt != self->attempt_ || self->state_ != State::kReady ||
        self->written_.empty()) {
      return;
    }
    const absl::Duration quiet =
        absl::FromChrono(SteadyClock::now() - self->progress_at_);
    if (quiet >= self->options_.command_timeout) {
      self->Fail(absl::UnavailableError(absl::StrCat(
                     "Redis at ", self->options_.endpoint.ToString(),
                     ": no reply within command_timeout ",
                     absl::FormatDuration(self->options_.command_timeout))),
                 /*resendable=*/false);
      return;
    }
    self->ArmStallTimer();
  });
}

void Connection::ScheduleReconnect() {
  absl::Duration delay = absl::ZeroDuration();
  if (reconnect_failures_ > 0) {
    absl::optional<absl::Duration> next =
        options_.reconnect_backoff->NextDelay(reconnect_failures_ - 1);
    delay = next.has_value() ? *next : absl::Seconds(1);
  }
  reconnect_timer_.expires_after(absl::ToChronoNanoseconds(delay));
  reconnect_timer_.async_wait(
      [self = shared_from_this()](const asio::error_code& ec) {
        if (ec || self->state_ != State::kIdle) return;
        self->StartConnect();
      });
}

Result Call(Connection& conn, std::string wire, size_t commands,
            Deadline deadline, bool direct) {
  // The connection replaces itself after command_timeout without replies;
  // `backstop` only backs that up (a connect may take connect_timeout).
  const Deadline backstop = Deadline::After(conn.options().connect_timeout +
                                            conn.options().command_timeout);
  const Deadline limit = Earliest(deadline, backstop);
  if (deadline.Expired()) {
    return Result{absl::DeadlineExceededError(absl::StrCat(
                      "Redis at ", conn.options().endpoint.ToString(),
                      ": the call's deadline passed before it was sent")),
                  {},
                  false};
  }
  if (direct) {
    if (absl::optional<Result> done =
            conn.TryDirect(wire, commands, deadline)) {
      return *std::move(done);
    }
  }
  struct Waiter {
    Mutex mu;
    CondVar cv;
    bool done ABSL_GUARDED_BY(mu) = false;
    Result result ABSL_GUARDED_BY(mu);
  };
  auto waiter = std::make_shared<Waiter>();
  auto request = std::make_shared<Request>();
  request->wire = std::move(wire);
  request->commands = commands;
  request->done = [waiter](Result r) {
    MutexLock lock(&waiter->mu);
    waiter->result = std::move(r);
    waiter->done = true;
    waiter->cv.Signal();
  };
  conn.Submit(request);
  MutexLock lock(&waiter->mu);
  while (!waiter->done && !limit.Expired()) {
    waiter->cv.WaitWithTimeout(&waiter->mu, limit.Remaining());
  }
  if (waiter->done) return std::move(waiter->result);
  request->abandoned->store(true, std::memory_order_relaxed);
  const std::string where = conn.options().endpoint.ToString();
  if (deadline < backstop) {
    return Result{
        absl::DeadlineExceededError(absl::StrCat("Redis at ", where,
                                                 ": no reply before the call's "
                                                 "deadline")),
        {},
        false};
  }
  return Result{absl::UnavailableError(absl::StrCat(
                    "Redis at ", where, ": no reply within ",
                    absl::FormatDuration(conn.options().connect_timeout +
                                         conn.options().command_timeout))),
                {},
                false};
}

}  // namespace io
}  // namespace relock
