// One pipelined Redis connection on the client's event loop.
//
// Any thread submits a Request (one or more commands, already in RESP form);
// the loop writes everything queued since its last write in one write
// (automatic pipelining: many threads share one connection, nobody waits for
// a connection of their own) and completes each request from its replies,
// in order, with hiredis's redisReader parsing them. Completions run on the
// loop thread and must not block.
//
// Connection states (all transitions on the loop thread):
//
//   state        on Submit               on failure             on Close
//   Idle         connect, queue          -                      Closed
//   Connecting   queue                   fail queued, Idle      Closed
//   Ready        write with the others   fail written, Idle;    Closed
//                                        reconnect for queued
//   Closed       fail: FailedPrecondition                       no-op
//
// Connecting covers resolve, connect, TLS handshake and the handshake
// commands (AUTH, SELECT, PING), all within connect_timeout. A failed connect
// fails every queued request at once (a Redis that is down fails calls fast);
// the next request connects again. With `keep_connected` (the pub/sub
// connection, which nobody else would reconnect), the loop reconnects on its
// own after a failure, paced by `reconnect_backoff` (relock/backoff.h).
//
// Failures of written requests say whether the request may be resent
// (Result::resendable): only when the server dropped the connection (EOF,
// reset, an error reply after which Redis closes the connection), so a
// request either never ran or ran and lost its reply and is not still
// queued somewhere. A connection with requests outstanding that hears nothing
// for command_timeout is replaced; those requests fail with Unavailable, not
// resendable (they may still run).
//
// Abandoning: a caller that stops waiting sets Request::abandoned; the
// request is then skipped if not yet written, and its replies are discarded
// when they arrive. The connection is not broken by it.
//
// Direct calls (the uncontended fast path): a Ready connection with nothing
// queued or outstanding stops reading ("parks") and may be borrowed by one
// blocking caller, which writes its request and reads the replies on its own
// thread (TryDirect), paying no hand-off to and from the loop thread. Who
// may touch the socket (under mu_):
//
//   owner     socket used by         next
//   kLoop     the loop               kIdle when it parks
//   kIdle     nobody (parked)        kCaller (TryDirect), kLoop (Pump)
//   kCaller   one direct caller      kIdle, or kLoop via Adopt() on the loop
//
// While a caller has it, other requests wait in submitted_ (the loop's Pump
// leaves them there) and the caller hands them to the loop when it is done.
// A caller whose deadline passes hands its unfinished request to the loop,
// which discards the reply (or replaces a connection that stays silent, as
// for any request). Only connections with ConnectionOptions::direct_calls
// park; TLS connections and the pub/sub connection never do.

#ifndef RELOCK_LIB_IO_CONNECTION_H_
#define RELOCK_LIB_IO_CONNECTION_H_

#include <atomic>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "absl/types/span.h"
#include "asio/steady_timer.hpp"
#include "lib/common/deadline.h"
#include "lib/common/mutex.h"
#include "lib/common/observer.h"
#include "lib/io/event_loop.h"
#include "lib/io/transport.h"
#include "lib/redis/reply.h"
#include "lib/redis/resp.h"
#include "lib/redis/url.h"
#include "relock/backoff.h"
#include "relock/options.h"

struct redisReader;

namespace relock {
namespace io {

struct ConnectionOptions {
  redis::Endpoint endpoint;
  TlsOptions tls;  // for a TLS endpoint
  absl::Duration connect_timeout = absl::Seconds(2);
  absl::Duration command_timeout = absl::Seconds(2);
  // Reconnect by itself after a failure (see above), paced by
  // reconnect_backoff (null: exponential, 10 ms to 1 s).
  bool keep_connected = false;
  std::shared_ptr<const BackoffStrategy> reconnect_backoff;
  // Park when idle, so that blocking callers may do their own I/O
  // (TryDirect; see "Direct calls" above). Off for connections whose calls
  // all go through the loop anyway (Redlock's fan-outs): parking and taking
  // the socket back would only cost them syscalls.
  bool direct_calls = false;
  // The client's counters (reconnects, pending requests) and log; null:
  // none.
  std::shared_ptr<Observer> observer;
};

using redis::AppendCommand;

// A request's replies: inline for the one or two (a call and its WAIT) of
// a lock call, so that completing one allocates no vector.
using Replies = absl::InlinedVector<redis::Reply, 2>;

struct Result {
  absl::Status status;      // OK: one reply per command
  Replies replies;          // error replies included
  bool resendable = false;  // see above; only when !status.ok()
};

struct Request {
  std::string wire;     // the commands in RESP form
  size_t commands = 1;  // how many replies to expect
  // Called once, on the loop thread (or on the submitting thread when the
  // connection is closed).
  std::function<void(Result)> done;
  // Set (by anyone holding it) when nobody waits for the result any more;
  // null: never abandoned. It may be shared by several requests (the sends
  // of one call), or point into an object that owns the request.
  std::shared_ptr<std::atomic<bool>> abandoned;

  bool Abandoned() const {
    return abandoned != nullptr && abandoned->load(std::memory_order_relaxed);
  }
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // InvalidArgument for unusable TLS settings. Does not connect.
  static absl::StatusOr<std::shared_ptr<Connection>> Create(
      EventLoop* loop, ConnectionOptions options);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Any thread.
  void Submit(std::shared_ptr<Request> request);
  // Any thread: a direct call (see above) of `commands` commands in `wire`,
  // waiting until `deadline` at most (a connection silent for
  // command_timeout fails it, as in Submit). nullopt, having done nothing,
  // when the connection cannot be borrowed now (busy, not connected, closed,
  // not parking, TLS, the pub/sub connection): Submit() instead. (If the
  // parked socket turns out closed by the server, the connection is failed
  // too, as the loop would have, and nullopt is returned.) Otherwise the Result
  // Submit() would give, or DeadlineExceeded (not resendable) when
  // `deadline` ended the wait.
  absl::optional<Result> TryDirect(absl::string_view wire, size_t commands,
                                   Deadline deadline);
  // Any thread: connects now if not connected or connecting (with
  // keep_connected: and keeps reconnecting).
  void Start();
  // Any thread: fails everything outstanding with FailedPrecondition
  // "closed" and closes the socket. Idempotent.
  void Close();

  // Offered every reply first, on the loop thread; returning true consumes
  // it as a push that answers no request (the pub/sub connection's
  // messages). Set before the first Submit.
  void set_push_handler(std::function<bool(const redis::Reply&)> handler) {
    push_handler_ = std::move(handler);
  }
  // Called on the loop thread after each successful connect (the pub/sub
  // connection resubscribes) and after each failure.
  void set_state_handler(
      std::function<void(bool connected, const absl::Status& why)> handler) {
    state_handler_ = std::move(handler);
  }

  const ConnectionOptions& options() const { return options_; }
  // Requests submitted and not yet completed (any thread; approximate).
  size_t outstanding() const {
    return outstanding_.load(std::memory_order_relaxed);
  }
  // Successful connects so far.
  uint64_t connects() const {
    return connects_.load(std::memory_order_relaxed);
  }
  // Direct calls so far (TryDirect calls that did the I/O).
  uint64_t direct_calls() const {
    return direct_calls_.load(std::memory_order_relaxed);
  }
  // Whether the connection is parked now, so that a direct call would find
  // it free (any thread; it may change at once).
  bool parked() const;

 private:
  enum class State { kIdle, kConnecting, kReady, kClosed };
  enum class Owner { kLoop, kIdle, kCaller };
  // How a direct call gave the socket back, when it needs the loop.
  struct Handback {
    enum class Kind {
      kStale,     // the parked socket was closed or sent something
      kBroken,    // the call failed the connection: Fail(why, resendable)
      kInFlight,  // the caller gave up; `remaining` replies are still due
      kDone,      // finished, but Close() came meanwhile
    };
    Kind kind = Kind::kDone;
    absl::Status why;
    bool resendable = false;
    size_t remaining = 0;
    SteadyClock::time_point progress_at;
  };

  Connection(EventLoop* loop, ConnectionOptions options,
             std::shared_ptr<TlsContext> tls);

  // FailedPrecondition "the client is closed": what a request gets once
  // Close() was called.
  static absl::Status Closed();

  // Loop thread.
  void Pump();
  void StartConnect();
  void OnTransportConnected(uint64_t attempt, const absl::Status& status);
  void FinishConnect(uint64_t attempt, const absl::Status& status);
  void StartWrite();
  void StartRead();
  void OnRead(const asio::error_code& ec, size_t n);
  // Completes requests from the replies in reader_ (the last read brought
  // `n` bytes), a few per turn of the loop (see connection.cc), then reads
  // on or parks.
  void ParseReplies(size_t n);
  void OnReply(redis::Reply reply);
  void Complete(const std::shared_ptr<Request>& request, Result result);
  // Fails the connection: written requests get `why`; queued ones were never
  // sent and go out on a new connection (or fail if it cannot be made).
  void Fail(const absl::Status& why, bool resendable);
  void DoWrite();
  void DoClose();
  void FailAll(std::deque<std::shared_ptr<Request>>* requests,
               const absl::Status& why, bool resendable);
  void ArmStallTimer();
  void ScheduleReconnect();
  void SetOwner(Owner owner) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After the replies of OnRead: reads on, or parks the socket when idle.
  void ReadOrPark();
  // Takes the parked socket `fd` back (`blocking`: it was parked in blocking
  // mode): false if it turned out closed (the connection was failed; it is
  // no longer Ready).
  bool Unpark(int fd, bool blocking);
  // A direct caller's socket comes back with work for the loop.
  void Adopt(const Handback& back);
  // The I/O of a direct call, on the caller's thread while it owns the
  // socket (and with it reader_ and read_buf_): fills `result`, and says
  // what the loop must take over (kDone: nothing).
  Handback DirectIo(int fd, bool blocking, absl::string_view wire,
                    size_t commands, Deadline deadline, Result* result);

  EventLoop* const loop_;
  // outstanding_ += delta (+1 or -1), and the observer's pending requests.
  void Outstanding(int delta) {
    if (delta > 0) {
      outstanding_.fetch_add(1, std::memory_order_relaxed);
    } else {
      outstanding_.fetch_sub(1, std::memory_order_relaxed);
    }
    if (options_.observer != nullptr) {
      options_.observer->metrics.pending_requests.Add(delta);
    }
  }

  const ConnectionOptions options_;
  const std::shared_ptr<TlsContext> tls_;
  std::function<bool(const redis::Reply&)> push_handler_;
  std::function<void(bool, const absl::Status&)> state_handler_;
  std::atomic<size_t> outstanding_{0};
  std::atomic<uint64_t> connects_{0};
  std::atomic<uint64_t> direct_calls_{0};

  mutable Mutex mu_;
  std::vector<std::shared_ptr<Request>> submitted_ ABSL_GUARDED_BY(mu_);
  bool pump_posted_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  Owner owner_ ABSL_GUARDED_BY(mu_) = Owner::kLoop;  // set with SetOwner()
  std::atomic<bool> parked_hint_{false};             // owner_ == kIdle
  // While parked or borrowed: the transport (kept open by this reference)
  // and its descriptor.
  std::shared_ptr<Transport> lent_transport_ ABSL_GUARDED_BY(mu_);
  int lent_fd_ ABSL_GUARDED_BY(mu_) = -1;
  // The parked socket is in blocking mode with SO_RCVTIMEO = command_timeout
  // (see ParkBlocking() in connection_direct.cc): a direct caller may wait for
  // its reply in recv() itself rather than in poll() and then recv().
  bool lent_blocking_ ABSL_GUARDED_BY(mu_) = false;

  // Loop thread only (reader_ and read_buf_ also a direct caller's, while
  // it has the socket).
  State state_ = State::kIdle;
  uint64_t attempt_ = 0;  // connect attempts; stale callbacks compare it
  std::shared_ptr<Transport> transport_;
  redisReader* reader_ = nullptr;
  std::deque<std::shared_ptr<Request>> queued_;   // not yet written
  std::deque<std::shared_ptr<Request>> written_;  // awaiting replies
  std::shared_ptr<Request> handshake_;            // while connecting
  Replies partial_;  // replies of written_.front() so far
  std::string write_buf_;
  bool writing_ = false;
  // A ParseReplies() turn is posted: complete replies may wait in reader_.
  bool parse_posted_ = false;
  std::vector<char> read_buf_;
  SteadyClock::time_point progress_at_;  // last reply, or first write
  asio::steady_timer connect_timer_;
  asio::steady_timer stall_timer_;
  bool stall_armed_ = false;
  asio::steady_timer reconnect_timer_;
  int reconnect_failures_ = 0;
};

// Sends `wire` (`commands` commands) on `conn` and waits for its result
// until `deadline`, or connect_timeout + command_timeout, whichever comes
// first; then abandons it: DeadlineExceeded when the caller's deadline ended
// the wait (without sending anything when it had passed already), else
// Unavailable (neither resendable). With `direct`, the calling
// thread does the I/O itself when the connection is parked (TryDirect).
Result Call(Connection& conn, std::string wire, size_t commands,
            Deadline deadline, bool direct = true);

}  // namespace io
}  // namespace relock

#endif  // RELOCK_LIB_IO_CONNECTION_H_
