// Connection (connection.h): direct calls, the uncontended fast path. A
// Ready connection with nothing to do parks its socket; one blocking caller
// borrows it (TryDirect), writes its request and reads the replies on its
// own thread, and hands the socket back, to the loop when there is work for
// it (Adopt). Also Call(), the blocking call that tries that first and
// otherwise submits its request and waits.

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

#include "absl/strings/str_cat.h"
#include "lib/common/unshared.h"
#include "lib/io/connection.h"
#include "lib/redis/errors.h"

namespace relock {
namespace io {
namespace {

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
  Replies replies;
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
      rest->abandoned = std::make_shared<std::atomic<bool>>(true);
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
  request->abandoned = std::make_shared<std::atomic<bool>>(false);
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
