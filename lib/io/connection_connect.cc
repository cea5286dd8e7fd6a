// Connection (connection.h): connecting. A connect attempt (resolve,
// connect, TLS handshake by the Transport; then AUTH, SELECT and PING
// pipelined), its end either way, and the paced reconnects of a
// keep_connected connection.

#include <hiredis/read.h>

#include "absl/strings/str_cat.h"
#include "lib/common/unshared.h"
#include "lib/io/connection.h"
#include "lib/redis/errors.h"

namespace relock {
namespace io {

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
      options_.observer->on_reconnect.Run();
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

}  // namespace io
}  // namespace relock
