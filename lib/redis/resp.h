// RESP (the Redis protocol) encoding of commands. Replies are parsed by
// hiredis's redisReader (lib/io/connection*.cc), never by hand.

#ifndef RELOCK_LIB_REDIS_RESP_H_
#define RELOCK_LIB_REDIS_RESP_H_

#include <initializer_list>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace relock {
namespace redis {

namespace internal {
// What a length line announces: a bulk string's length or an array's size.
enum class LengthTag : char { kBulk = '$', kArray = '*' };
// Appends "<tag><n>\r\n". Formats the number by hand: absl::StrAppend would
// zero-fill the string's new bytes before writing them (about 2,000
// instructions per script call, measured with callgrind, for what is a few
// dozen).
inline void AppendLengthLine(LengthTag tag, size_t n, std::string* wire) {
  char line[24];  // tag, at most 20 digits, CR LF
  char* end = line + sizeof(line);
  char* p = end;
  *--p = '\n';
  *--p = '\r';
  do {
    *--p = static_cast<char>('0' + n % 10);
    n /= 10;
  } while (n != 0);
  *--p = static_cast<char>(tag);
  wire->append(p, static_cast<size_t>(end - p));
}
}  // namespace internal

// Appends one bulk string ("$<len>\r\n<bytes>\r\n"); binary-safe.
inline void AppendBulk(absl::string_view arg, std::string* wire) {
  internal::AppendLengthLine(internal::LengthTag::kBulk, arg.size(), wire);
  wire->append(arg.data(), arg.size());
  wire->append("\r\n", 2);
}

// Appends the header of a command of `argc` arguments; the arguments follow
// with AppendBulk().
inline void AppendArrayHeader(size_t argc, std::string* wire) {
  internal::AppendLengthLine(internal::LengthTag::kArray, argc, wire);
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
