// Connection (connection.h): making one, and the loop-driven path: Submit,
// Pump, writes, reads, completing requests from their replies, failures and
// the stall timer, Close. Connecting and the handshake are in
// connection_connect.cc; direct calls (a blocking caller's own I/O on a
// parked socket) and Call() in connection_direct.cc.

#include "lib/io/connection.h"

#include <hiredis/hiredis.h>
#include <hiredis/read.h>

#include <algorithm>
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

std::shared_ptr<const BackoffStrategy> DefaultReconnectBackoff() {
  ExponentialBackoffOptions o;
  o.initial = absl::Milliseconds(10);
  o.maximum = absl::Seconds(1);
  return *ExponentialBackoff(o);
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

}  // namespace

absl::Status Connection::Closed() {
  return absl::FailedPreconditionError("the client is closed");
}

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
        std::any_of(batch.begin(), batch.end(),
                    [](const auto& r) { return !r->Abandoned(); });
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

void Connection::StartWrite() {
  if (state_ != State::kReady || writing_ || queued_.empty()) return;
  const bool was_idle = written_.empty();
  write_buf_.clear();
  while (!queued_.empty()) {
    std::shared_ptr<Request> r = std::move(queued_.front());
    queued_.pop_front();
    if (r->Abandoned()) {
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

}  // namespace io
}  // namespace relock
