// RESP (the Redis protocol) encoding of commands. Replies are parsed by
// hiredis's redisReader (lib/io/connection.cc), never by hand.

#ifndef RELOCK_LIB_REDIS_RESP_H_
#define RELOCK_LIB_REDIS_RESP_H_

#include <initializer_list>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace relock {
namespace redis {

// Appends one bulk string ("$<len>\r\n<bytes>\r\n"); binary-safe.
inline void AppendBulk(absl::string_view arg, std::string* wire) {
  absl::StrAppend(wire, "$", arg.size(), "\r\n");
  wire->append(arg.data(), arg.size());
  wire->append("\r\n");
}

// Appends the header of a command of `argc` arguments; the arguments follow
// with AppendBulk().
inline void AppendArrayHeader(size_t argc, std::string* wire) {
  absl::StrAppend(wire, "*", argc, "\r\n");
}

// Appends `argv` as one command.
inline void AppendCommand(absl::Span<const absl::string_view> argv,
                          std::string* wire) {
  AppendArrayHeader(argv.size(), wire);
  for (absl::string_view arg : argv) AppendBulk(arg, wire);
}
inline void AppendCommand(std::initializer_list<absl::string_view> argv,
                          std::string* wire) {
  AppendCommand(absl::MakeConstSpan(argv.begin(), argv.size()), wire);
}

}  // namespace redis
}  // namespace relock

#endif  // RELOCK_LIB_REDIS_RESP_H_
