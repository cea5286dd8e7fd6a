#include "tests/testing/raw_connection.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "lib/common/sigpipe.h"

namespace relock {
namespace testing {

std::string InfoField(absl::string_view info, absl::string_view field) {
  for (absl::string_view line : absl::StrSplit(info, "\r\n")) {
    if (absl::ConsumePrefix(&line, field) && absl::ConsumePrefix(&line, ":")) {
      return std::string(line);
    }
  }
  return "";
}

std::string PercentEncode(absl::string_view s) {
  std::string out;
  for (const char c : s) {
    if (absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' ||
        c == '.' || c == '_' || c == '~') {
      out.push_back(c);
    } else {
      absl::StrAppendFormat(&out, "%%%02X", static_cast<unsigned char>(c));
    }
  }
  return out;
}

std::string RedisValue::DebugString() const {
  switch (type) {
    case Type::kNil:
      return "nil";
    case Type::kInteger:
      return absl::StrCat("(integer) ", integer);
    case Type::kString:
      return absl::StrCat("\"", absl::CHexEscape(str), "\"");
    case Type::kStatus:
      return absl::StrCat("(status) ", str);
    case Type::kError:
      return absl::StrCat("(error) ", str);
    case Type::kArray: {
      std::string out = "[";
      for (size_t i = 0; i < elements.size(); ++i) {
        absl::StrAppend(&out, i ? ", " : "", elements[i].DebugString());
      }
      return out + "]";
    }
  }
  return "?";
}

bool operator==(const RedisValue& a, const RedisValue& b) {
  if (a.type != b.type) return false;
  switch (a.type) {
    case RedisValue::Type::kNil:
      return true;
    case RedisValue::Type::kInteger:
      return a.integer == b.integer;
    case RedisValue::Type::kArray:
      return a.elements == b.elements;
    default:
      return a.str == b.str;
  }
}

RedisValue DecodeReply(const redisReply& reply) {
  RedisValue v;
  switch (reply.type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
      v.type = reply.type == REDIS_REPLY_STRING   ? RedisValue::Type::kString
               : reply.type == REDIS_REPLY_STATUS ? RedisValue::Type::kStatus
                                                  : RedisValue::Type::kError;
      v.str.assign(reply.str, reply.len);
      break;
    case REDIS_REPLY_INTEGER:
      v.type = RedisValue::Type::kInteger;
      v.integer = reply.integer;
      break;
    case REDIS_REPLY_ARRAY:
      v.type = RedisValue::Type::kArray;
      v.elements.reserve(reply.elements);
      for (size_t i = 0; i < reply.elements; ++i) {
        v.elements.push_back(DecodeReply(*reply.element[i]));
      }
      break;
    case REDIS_REPLY_NIL:
    default:
      v.type = RedisValue::Type::kNil;
      break;
  }
  return v;
}

absl::StatusOr<RawConnection> RawConnection::Connect(
    int port, const RawConnectionOptions& options) {
  return Connect("127.0.0.1", port, options);
}

absl::StatusOr<RawConnection> RawConnection::Connect(
    const std::string& host, int port, const RawConnectionOptions& options) {
  return Finish(
      redisConnectWithTimeout(host.c_str(), port,
                              absl::ToTimeval(options.connect_timeout)),
      absl::StrCat(host, ":", port), options);
}

absl::StatusOr<RawConnection> RawConnection::ConnectUnix(
    const std::string& path, const RawConnectionOptions& options) {
  return Finish(redisConnectUnixWithTimeout(
                    path.c_str(), absl::ToTimeval(options.connect_timeout)),
                path, options);
}

absl::StatusOr<RawConnection> RawConnection::Finish(
    redisContext* context, std::string where,
    const RawConnectionOptions& options) {
  const int saved_errno = errno;
  if (context == nullptr) {
    return absl::ResourceExhaustedError("hiredis: cannot allocate a context");
  }
  RawConnection c(ContextPtr(context), std::move(where),
                  options.suppress_sigpipe);
  if (context->err != 0) {
    return c.Error(absl::StrCat("connecting to ", c.where_), saved_errno);
  }
  if (absl::Status s = c.SetTimeout(options.command_timeout); !s.ok()) {
    return s;
  }
  if (!options.password.empty()) {
    std::vector<std::string> argv = {"AUTH"};
    if (!options.user.empty()) argv.push_back(options.user);
    argv.push_back(options.password);
    absl::StatusOr<RedisValue> auth = c.Command(argv);
    if (!auth.ok()) return auth.status();
    if (auth->is_error()) {
      return absl::PermissionDeniedError(
          absl::StrCat("AUTH on ", c.where_, ": ", auth->str));
    }
  }
  if (options.db != 0) {
    absl::StatusOr<RedisValue> select =
        c.Command({"SELECT", absl::StrCat(options.db)});
    if (!select.ok()) return select.status();
    if (select->is_error()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "SELECT ", options.db, " on ", c.where_, ": ", select->str));
    }
  }
  return c;
}

absl::Status RawConnection::SetTimeout(absl::Duration timeout) {
  if (redisSetTimeout(context_.get(), absl::ToTimeval(timeout)) != REDIS_OK) {
    return Error(absl::StrCat("setting timeouts for ", where_), errno);
  }
  return absl::OkStatus();
}

absl::Status RawConnection::Error(absl::string_view what,
                                  int saved_errno) const {
  const redisContext* c = context_.get();
  const bool timeout = c->err == REDIS_ERR_IO &&
                       (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK ||
                        saved_errno == ETIMEDOUT || saved_errno == EINPROGRESS);
  const std::string message = absl::StrCat(
      what, ": ", c->errstr[0] != '\0' ? c->errstr : "hiredis error");
  return timeout ? absl::DeadlineExceededError(message)
                 : absl::UnavailableError(message);
}

absl::StatusOr<RawReply> RawConnection::Take(void* raw,
                                             absl::string_view what) const {
  const int saved_errno = errno;
  RawReply reply(static_cast<redisReply*>(raw));
  if (reply == nullptr) {
    return Error(absl::StrCat(what, " on ", where_), saved_errno);
  }
  return reply;
}

absl::StatusOr<RawReply> RawConnection::Call(
    const std::vector<std::string>& argv) {
  if (argv.empty()) return absl::InvalidArgumentError("empty command");
  std::vector<const char*> args;
  std::vector<size_t> lens;
  args.reserve(argv.size());
  lens.reserve(argv.size());
  for (const std::string& a : argv) {
    args.push_back(a.data());
    lens.push_back(a.size());
  }
  std::optional<ScopedSigpipeSuppression> no_sigpipe;
  if (suppress_sigpipe_) no_sigpipe.emplace();
  return Take(redisCommandArgv(context_.get(), static_cast<int>(args.size()),
                               args.data(), lens.data()),
              argv[0]);
}

absl::StatusOr<RedisValue> RawConnection::Command(
    const std::vector<std::string>& argv) {
  absl::StatusOr<RawReply> reply = Call(argv);
  if (!reply.ok()) return reply.status();
  return DecodeReply(**reply);
}

absl::StatusOr<RawReply> RawConnection::NextRawReply() {
  void* raw = nullptr;
  std::optional<ScopedSigpipeSuppression> no_sigpipe;
  if (suppress_sigpipe_) no_sigpipe.emplace();
  if (redisGetReply(context_.get(), &raw) != REDIS_OK) {
    freeReplyObject(raw);  // none, by hiredis's contract
    raw = nullptr;
  }
  return Take(raw, "reading a reply");
}

absl::StatusOr<RedisValue> RawConnection::NextReply() {
  absl::StatusOr<RawReply> reply = NextRawReply();
  if (!reply.ok()) return reply.status();
  return DecodeReply(**reply);
}

}  // namespace testing
}  // namespace relock
