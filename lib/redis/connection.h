// One Redis connection: owns a hiredis context, used by one thread at a time.
//
// After any I/O error (including a command timeout) the connection is
// "broken": hiredis contexts cannot be reused after an error, so every later
// call fails at once and the pool replaces it. An error reply after which the
// server closes the connection ("max number of clients reached", "DENIED",
// "Protocol error") breaks it too, as a dropped connection.
//
// Writes never raise SIGPIPE in the host process: SIGPIPE is blocked on the
// writing thread for the duration of each write, and a SIGPIPE that the write
// caused is consumed before the mask is restored (libpq's technique). A write
// to a connection the server closed fails with EPIPE instead, which marks the
// connection dropped.

#ifndef RELOCK_LIB_REDIS_CONNECTION_H_
#define RELOCK_LIB_REDIS_CONNECTION_H_

#include <hiredis/hiredis.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "lib/common/deadline.h"
#include "lib/redis/errors.h"
#include "lib/redis/reply.h"
#include "lib/redis/url.h"

namespace relock {
namespace redis {

struct ConnectionOptions {
  Endpoint endpoint;
  absl::Duration connect_timeout = absl::Seconds(2);
  absl::Duration command_timeout = absl::Seconds(2);
};

class Connection {
 public:
  // Connects, then AUTH and SELECT as the endpoint asks, within
  // connect_timeout (and `deadline`, if earlier). Unavailable if the server
  // cannot be reached; Unauthenticated for a wrong password/user.
  static absl::StatusOr<std::unique_ptr<Connection>> Open(
      const ConnectionOptions& options, Deadline deadline = Deadline::Never());

  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Sends one command and reads its reply, within command_timeout (and
  // `deadline`, if earlier). Error replies are returned as replies
  // (is_error()); I/O failures and command_timeout are Unavailable, running
  // into `deadline` is DeadlineExceeded; both break the connection.
  absl::StatusOr<Reply> Command(absl::Span<const absl::string_view> argv,
                                Deadline deadline = Deadline::Never());
  absl::StatusOr<Reply> Command(std::initializer_list<absl::string_view> argv,
                                Deadline deadline = Deadline::Never()) {
    return Command(absl::MakeConstSpan(argv.begin(), argv.size()), deadline);
  }

  // Pipelining: Append() buffers commands, GetReply() flushes and reads one
  // reply per appended command, in order.
  absl::Status Append(absl::Span<const absl::string_view> argv);
  absl::StatusOr<Reply> GetReply(Deadline deadline = Deadline::Never());
  // Takes ownership of a reply read from context() by a loop that drives the
  // context itself; breaks the connection after a connection-closing error.
  Reply Received(void* raw);
  // Writes everything appended so far (blocking, within the socket timeout).
  absl::Status Flush(absl::string_view what = "write command");

  bool broken() const { return broken_; }
  // The connection broke because the peer dropped it (EOF, reset), not by a
  // timeout: a request sent on it either never ran or ran and lost its
  // reply; it is not still queued somewhere.
  bool dropped() const { return dropped_; }
  const ConnectionOptions& options() const { return options_; }

  // The pool's generation when this connection was opened (see
  // ConnectionPool).
  uint64_t generation() const { return generation_; }
  void set_generation(uint64_t g) { generation_ = g; }

  // For the pub/sub loop, which drives the context itself.
  redisContext* context() { return ctx_; }
  // Marks the connection broken and returns Unavailable describing
  // `what` and the context's error.
  absl::Status Fail(absl::string_view what);
  // Marks the connection broken (e.g. a reply is still owed on it).
  void MarkBroken() { broken_ = true; }

 private:
  Connection(redisContext* ctx, const ConnectionOptions& options)
      : ctx_(ctx), options_(options) {}
  // Sets the socket timeout to `limit` capped by `deadline`; remembers whether
  // the deadline is what limits the next I/O. DeadlineExceeded if it passed.
  absl::Status SetTimeout(absl::Duration limit, Deadline deadline);

  redisContext* ctx_;
  ConnectionOptions options_;
  bool broken_ = false;
  bool dropped_ = false;
  uint64_t generation_ = 0;
  absl::Duration socket_timeout_;  // currently set on the socket
  bool deadline_bound_ = false;    // socket_timeout_ < the option's
  std::vector<const char*> argv_buf_;
  std::vector<size_t> argvlen_buf_;
};

}  // namespace redis
}  // namespace relock

#endif  // RELOCK_LIB_REDIS_CONNECTION_H_
