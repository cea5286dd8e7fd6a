// RawConnection: one plain hiredis connection to a Redis server, owned (freed
// by the destructor, so a failed ASSERT between connect and free leaks
// nothing), for code that talks to Redis beside relock: tests that inspect or
// set up state and listen on channels as a foreign client would, the safety
// harness's counters (tools/harness/), and the raw baselines of the
// benchmarks. RedisValue is the decoded form of a reply.
//
// clang-format off
//   absl::StatusOr<RawConnection> c = RawConnection::Connect(port);
//   ASSERT_OK(c);
//   absl::StatusOr<RedisValue> v = c->Command({"HGETALL", "lock"});
//   ASSERT_OK(c->Command({"SUBSCRIBE", channel}));   // the confirmation
//   absl::StatusOr<RedisValue> message = c->NextReply();  // a push
// clang-format on
//
// Errors: a failure to connect or to talk to the server is a Status
// (Unavailable, or DeadlineExceeded on a timeout); a Redis error reply is not
// (a RedisValue of kError, a raw reply of REDIS_REPLY_ERROR). After a failed
// call the context is unusable (hiredis's rule): connect again.
//
// Its own library (relock_raw_connection in CMakeLists.txt,
// //tests/testing:raw_connection in Bazel), on hiredis and Abseil only: the
// redis-server fixture, the harness and the benchmarks all use it. Not
// thread-safe (a redisContext is not); movable (a moved-from one may only be
// assigned or destroyed), not copyable.

#ifndef RELOCK_TESTS_TESTING_RAW_CONNECTION_H_
#define RELOCK_TESTS_TESTING_RAW_CONNECTION_H_

#include <hiredis/hiredis.h>

#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace relock {
namespace testing {

// The value of `field` in the text of an INFO reply ("" if absent).
std::string InfoField(absl::string_view info, absl::string_view field);

// `s` percent-encoded for the userinfo or fragment of a redis:// URL: RFC
// 3986's unreserved characters (letters, digits, "-._~") kept, every other
// byte as %XX.
std::string PercentEncode(absl::string_view s);

// A decoded Redis reply, for tests that inspect Redis with plain commands.
struct RedisValue {
  enum class Type { kNil, kInteger, kString, kStatus, kError, kArray };

  Type type = Type::kNil;
  long long integer = 0;             // kInteger.
  std::string str;                   // kString, kStatus, kError.
  std::vector<RedisValue> elements;  // kArray.

  bool is_nil() const { return type == Type::kNil; }
  bool is_integer() const { return type == Type::kInteger; }
  bool is_string() const { return type == Type::kString; }
  bool is_status() const { return type == Type::kStatus; }
  bool is_error() const { return type == Type::kError; }
  bool is_array() const { return type == Type::kArray; }
  // True for a kStatus reply "OK".
  bool is_ok() const { return type == Type::kStatus && str == "OK"; }

  // E.g. `nil`, `(integer) 3`, `"v\x00"`, `(status) OK`, `(error) ERR ...`,
  // `["a", (integer) 1]`.
  std::string DebugString() const;

  friend bool operator==(const RedisValue& a, const RedisValue& b);
  friend bool operator!=(const RedisValue& a, const RedisValue& b) {
    return !(a == b);
  }
  friend std::ostream& operator<<(std::ostream& os, const RedisValue& v) {
    return os << v.DebugString();
  }
};

// `reply` decoded (RESP2 types; anything else reads as nil).
RedisValue DecodeReply(const redisReply& reply);

// A raw hiredis reply, owned.
struct RawReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using RawReply = std::unique_ptr<redisReply, RawReplyFree>;

struct RawConnectionOptions {
  absl::Duration connect_timeout = absl::Seconds(1);
  // Each command's (and NextReply()'s) read and write timeout: generous, for
  // a pub/sub message that a test expects to come.
  absl::Duration command_timeout = absl::Seconds(10);
  // If `password` is not empty, AUTH [user] password right after connecting
  // (a refusal is PermissionDenied).
  std::string user;
  std::string password;
  // If not 0, SELECT it (after AUTH; a refusal is InvalidArgument).
  int db = 0;
  // Block SIGPIPE around each call, so that a write to a server that went
  // away fails with an error instead of killing the process. Costs a few
  // system calls per call: the benchmarks' raw baselines turn it off.
  bool suppress_sigpipe = true;
};

class RawConnection {
 public:
  // 127.0.0.1:`port`.
  static absl::StatusOr<RawConnection> Connect(
      int port, const RawConnectionOptions& options = {});
  static absl::StatusOr<RawConnection> Connect(
      const std::string& host, int port,
      const RawConnectionOptions& options = {});
  // The unix socket at `path`.
  static absl::StatusOr<RawConnection> ConnectUnix(
      const std::string& path, const RawConnectionOptions& options = {});

  RawConnection(RawConnection&&) = default;
  RawConnection& operator=(RawConnection&&) = default;
  ~RawConnection() = default;  // redisFree()

  // Sends `argv` (binary-safe) and waits for its reply, decoded.
  absl::StatusOr<RedisValue> Command(const std::vector<std::string>& argv);
  // The same, the reply kept raw (no copy: for benchmarks' baselines).
  absl::StatusOr<RawReply> Call(const std::vector<std::string>& argv);
  // The next reply that arrives without a command: a pub/sub push, a reply
  // to a command appended on get() (redisAppendCommand...).
  absl::StatusOr<RedisValue> NextReply();
  absl::StatusOr<RawReply> NextRawReply();

  // The read and write timeout from now on.
  absl::Status SetTimeout(absl::Duration timeout);

  // For what the calls above do not cover (pipelines, formatted commands).
  redisContext* get() const { return context_.get(); }
  // "127.0.0.1:6380" or the socket path: for messages.
  const std::string& where() const { return where_; }

 private:
  struct ContextFree {
    void operator()(redisContext* c) const { redisFree(c); }
  };
  using ContextPtr = std::unique_ptr<redisContext, ContextFree>;

  RawConnection(ContextPtr context, std::string where, bool suppress_sigpipe)
      : context_(std::move(context)),
        where_(std::move(where)),
        suppress_sigpipe_(suppress_sigpipe) {}
  static absl::StatusOr<RawConnection> Finish(
      redisContext* context, std::string where,
      const RawConnectionOptions& options);
  // The Status for a failed call on the context (`what` names it).
  absl::Status Error(absl::string_view what, int saved_errno) const;
  // `raw`, the reply to `what` just read, owned; or the context's error.
  absl::StatusOr<RawReply> Take(void* raw, absl::string_view what) const;

  ContextPtr context_;
  std::string where_;
  bool suppress_sigpipe_;
};

}  // namespace testing
}  // namespace relock

#endif  // RELOCK_TESTS_TESTING_RAW_CONNECTION_H_
