#include "lib/redis/connection.h"

#include <poll.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/common/sigpipe.h"

namespace relock {
namespace redis {
namespace {

timeval ClampedTimeval(absl::Duration d) {
  if (d < absl::Milliseconds(1)) d = absl::Milliseconds(1);
  if (d > absl::Hours(24)) d = absl::Hours(24);
  return absl::ToTimeval(d);
}

// A timeout while connecting is Unavailable (the server did not answer within
// connect_timeout) unless the caller's own deadline is what ran out.
absl::Status ConnectFailure(const absl::Status& s,
                            const ConnectionOptions& options,
                            Deadline caller_deadline) {
  if (s.code() != absl::StatusCode::kDeadlineExceeded ||
      caller_deadline.Expired()) {
    return s;
  }
  return absl::UnavailableError(
      absl::StrCat("connect to Redis at ", options.endpoint.ToString(),
                   ": no answer within connect_timeout ",
                   absl::FormatDuration(options.connect_timeout)));
}

}  // namespace

absl::Status Connection::SetTimeout(absl::Duration limit, Deadline deadline) {
  absl::Duration want = limit;
  deadline_bound_ = false;
  if (!deadline.is_never()) {
    const absl::Duration left = deadline.Remaining();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          absl::StrCat("deadline passed before talking to Redis at ",
                       options_.endpoint.ToString()));
    }
    if (left < want) {
      want = left;
      deadline_bound_ = true;
    }
  }
  // Whole milliseconds: hiredis takes a timeval, and equal values skip the
  // two setsockopt calls.
  want = absl::Ceil(want, absl::Milliseconds(1));
  if (want == socket_timeout_) return absl::OkStatus();
  if (redisSetTimeout(ctx_, ClampedTimeval(want)) != REDIS_OK) {
    return Fail("set socket timeout");
  }
  socket_timeout_ = want;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Connection>> Connection::Open(
    const ConnectionOptions& options, Deadline deadline) {
  const Endpoint& ep = options.endpoint;
  absl::Duration connect_limit = options.connect_timeout;
  if (!deadline.is_never()) {
    connect_limit = std::min(connect_limit, deadline.Remaining());
    if (connect_limit <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "deadline passed before connecting to Redis at ", ep.ToString()));
    }
  }
  const timeval connect_tv = ClampedTimeval(connect_limit);
  redisContext* ctx =
      ep.kind == Endpoint::Kind::kUnix
          ? redisConnectUnixWithTimeout(ep.path.c_str(), connect_tv)
          : redisConnectWithTimeout(ep.host.c_str(), ep.port, connect_tv);
  if (ctx == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("connect to Redis at ", ep.ToString(),
                     ": cannot allocate a hiredis context"));
  }
  if (ctx->err != 0) {
    std::string err = ctx->errstr;
    redisFree(ctx);
    return absl::UnavailableError(
        absl::StrCat("connect to Redis at ", ep.ToString(), " failed: ", err,
                     " (connect_timeout ",
                     absl::FormatDuration(options.connect_timeout), ")"));
  }
  std::unique_ptr<Connection> conn(new Connection(ctx, options));
  // AUTH and SELECT are part of connecting: bound them by connect_timeout.
  const Deadline connect_deadline =
      Earliest(deadline, Deadline::After(connect_limit));
  if (absl::Status s =
          conn->SetTimeout(options.connect_timeout, connect_deadline);
      !s.ok()) {
    return s;
  }
  if (ep.kind == Endpoint::Kind::kTcp) redisEnableKeepAlive(ctx);
  if (!ep.password.empty()) {
    absl::StatusOr<Reply> r =
        ep.username.empty()
            ? conn->Command({"AUTH", ep.password}, connect_deadline)
            : conn->Command({"AUTH", ep.username, ep.password},
                            connect_deadline);
    if (!r.ok()) return ConnectFailure(r.status(), options, deadline);
    if (r->is_error()) {
      return absl::UnauthenticatedError(
          absl::StrCat("AUTH to Redis at ", ep.ToString(), " as user \"",
                       ep.username.empty() ? "default" : ep.username,
                       "\" was refused: ", r->str()));
    }
  }
  if (ep.db != 0) {
    std::string db = absl::StrCat(ep.db);
    absl::StatusOr<Reply> r = conn->Command({"SELECT", db}, connect_deadline);
    if (!r.ok()) return ConnectFailure(r.status(), options, deadline);
    if (r->is_error()) {
      absl::Status s = ErrorReplyToStatus(
          absl::StrCat("SELECT ", db, " on ", ep.ToString()), r->str());
      return s.code() == absl::StatusCode::kInternal
                 ? absl::InvalidArgumentError(s.message())
                 : s;
    }
  }
  return conn;
}

Connection::~Connection() { redisFree(ctx_); }

absl::Status Connection::Fail(absl::string_view what) {
  broken_ = true;
  std::string err = ctx_->err != 0 ? std::string(ctx_->errstr) : "unknown";
  const bool timed_out = ctx_->err == REDIS_ERR_IO &&
                         (absl::StrContains(err, "temporarily unavailable") ||
                          absl::StrContains(err, "timed out"));
  dropped_ =
      !timed_out && (ctx_->err == REDIS_ERR_EOF || ctx_->err == REDIS_ERR_IO);
  if (timed_out && deadline_bound_) {
    return absl::DeadlineExceededError(
        absl::StrCat(what, " on Redis at ", options_.endpoint.ToString(),
                     ": no reply before the call's deadline"));
  }
  if (timed_out) {
    err =
        absl::StrCat("no reply within ", absl::FormatDuration(socket_timeout_));
  }
  return absl::UnavailableError(absl::StrCat(
      what, " on Redis at ", options_.endpoint.ToString(), " failed: ", err));
}

absl::Status Connection::Append(absl::Span<const absl::string_view> argv) {
  if (broken_) {
    return absl::UnavailableError(absl::StrCat(
        "connection to ", options_.endpoint.ToString(), " is broken"));
  }
  argv_buf_.clear();
  argvlen_buf_.clear();
  for (absl::string_view a : argv) {
    argv_buf_.push_back(a.data());
    argvlen_buf_.push_back(a.size());
  }
  if (redisAppendCommandArgv(ctx_, static_cast<int>(argv.size()),
                             argv_buf_.data(),
                             argvlen_buf_.data()) != REDIS_OK) {
    return Fail(argv.empty() ? "command" : argv[0]);
  }
  return absl::OkStatus();
}

absl::StatusOr<Reply> Connection::GetReply(Deadline deadline) {
  if (broken_) {
    return absl::UnavailableError(absl::StrCat(
        "connection to ", options_.endpoint.ToString(), " is broken"));
  }
  // Writes are bounded by the socket timeout; the wait for the reply by one
  // deadline on the steady clock (poll), so that a read interrupted by a
  // signal does not start a fresh timeout as hiredis' blocking read would.
  if (absl::Status s = SetTimeout(options_.command_timeout, deadline);
      !s.ok()) {
    return s;
  }
  const Deadline limit =
      Earliest(deadline, Deadline::After(options_.command_timeout));
  if (absl::Status s = Flush(); !s.ok()) return s;
  void* raw = nullptr;
  while (true) {
    if (redisGetReplyFromReader(ctx_, &raw) != REDIS_OK) {
      return Fail("parse reply");
    }
    if (raw != nullptr) return Received(raw);
    const absl::Duration left = limit.Remaining();
    if (left <= absl::ZeroDuration()) {
      broken_ = true;  // the reply is still owed
      const std::string where = options_.endpoint.ToString();
      if (deadline_bound_) {
        return absl::DeadlineExceededError(absl::StrCat(
            "Redis at ", where, ": no reply before the call's deadline"));
      }
      return absl::UnavailableError(
          absl::StrCat("Redis at ", where, ": no reply within ",
                       absl::FormatDuration(options_.command_timeout)));
    }
    pollfd p{ctx_->fd, POLLIN, 0};
    const int ms = static_cast<int>(std::min<int64_t>(
        absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))),
        1000));
    const int ready = poll(&p, 1, std::max(1, ms));
    if (ready < 0 && errno != EINTR) return Fail("poll");
    if (ready <= 0) continue;  // timeout slice or signal: check the deadline
    if (redisBufferRead(ctx_) != REDIS_OK) return Fail("read reply");
  }
}

Reply Connection::Received(void* raw) {
  Reply reply(static_cast<redisReply*>(raw));
  if (reply.is_error() && IsConnectionClosingError(reply.str())) {
    broken_ = true;  // the server closes the connection after this reply
    dropped_ = true;
  }
  return reply;
}

absl::Status Connection::Flush(absl::string_view what) {
  if (broken_) {
    return absl::UnavailableError(absl::StrCat(
        "connection to ", options_.endpoint.ToString(), " is broken"));
  }
  ScopedSigpipeSuppression no_sigpipe;
  int done = 0;
  while (!done) {
    if (redisBufferWrite(ctx_, &done) != REDIS_OK) return Fail(what);
  }
  return absl::OkStatus();
}

absl::StatusOr<Reply> Connection::Command(
    absl::Span<const absl::string_view> argv, Deadline deadline) {
  // Before Append: redisGetReply writes and reads under the same timeout.
  if (absl::Status s = SetTimeout(options_.command_timeout, deadline);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = Append(argv); !s.ok()) return s;
  absl::StatusOr<Reply> r = GetReply(deadline);
  if (!r.ok()) {
    return absl::Status(
        r.status().code(),
        absl::StrCat(argv.empty() ? "" : argv[0], ": ", r.status().message()));
  }
  return r;
}

}  // namespace redis
}  // namespace relock
