// RESP (the Redis protocol) encoding of commands. Replies are parsed by
// hiredis's redisReader (lib/io/connection*.cc), never by hand.

#ifndef RELOCK_LIB_REDIS_RESP_H_
#define RELOCK_LIB_REDIS_RESP_H_

#include <cstring>
#include <initializer_list>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace relock {
namespace redis {

namespace internal {
// What a length line announces: a bulk string's length or an array's size.
enum class LengthTag : char { kBulk = '$', kArray = '*' };

// The size of "<tag><n>\r\n".
inline size_t LengthLineSize(size_t n) {
  size_t digits = 1;
  for (; n >= 10; n /= 10) ++digits;
  return digits + 3;
}

// The size of one bulk string ("$<len>\r\n<bytes>\r\n").
inline size_t BulkSize(absl::string_view arg) {
  return LengthLineSize(arg.size()) + arg.size() + 2;
}

// Writes "<tag><n>\r\n" (LengthLineSize(n) bytes) at `out`; returns its end.
inline char* WriteLengthLine(LengthTag tag, size_t n, char* out) {
  char* end = out + LengthLineSize(n);
  char* p = end;
  *--p = '\n';
  *--p = '\r';
  do {
    *--p = static_cast<char>('0' + n % 10);
    n /= 10;
  } while (n != 0);
  *--p = static_cast<char>(tag);
  return end;
}

// Writes one bulk string (BulkSize(arg) bytes) at `out`; returns its end.
inline char* WriteBulk(absl::string_view arg, char* out) {
  out = WriteLengthLine(LengthTag::kBulk, arg.size(), out);
  if (!arg.empty()) std::memcpy(out, arg.data(), arg.size());
  out += arg.size();
  *out++ = '\r';
  *out++ = '\n';
  return out;
}

// Grows `wire` by `size` bytes and returns where they begin: a command is
// sized first and then written in place, so that it costs one (amortized)
// allocation and no per-piece append (callgrind: about 3,900 instructions
// per script call with appends, most of them in std::string's append).
inline char* Extend(size_t size, std::string* wire) {
  const size_t old = wire->size();
  wire->resize(old + size);
  return &(*wire)[old];
}
}  // namespace internal

// Appends one bulk string ("$<len>\r\n<bytes>\r\n"); binary-safe.
inline void AppendBulk(absl::string_view arg, std::string* wire) {
  internal::WriteBulk(arg, internal::Extend(internal::BulkSize(arg), wire));
}

// Appends the header of a command of `argc` arguments; the arguments follow
// with AppendBulk().
inline void AppendArrayHeader(size_t argc, std::string* wire) {
  internal::WriteLengthLine(
      internal::LengthTag::kArray, argc,
      internal::Extend(internal::LengthLineSize(argc), wire));
}

// Appends the command whose arguments are the concatenation of `parts`.
inline void AppendCommandOf(
    std::initializer_list<absl::Span<const absl::string_view>> parts,
    std::string* wire) {
  size_t argc = 0;
  size_t size = 0;
  for (absl::Span<const absl::string_view> part : parts) {
    argc += part.size();
    for (absl::string_view arg : part) size += internal::BulkSize(arg);
  }
  size += internal::LengthLineSize(argc);
  // A lock call's command (a few hundred bytes) is written on the stack and
  // appended at once: std::string::resize() is not inlined and zero-fills.
  constexpr size_t kOnStack = 1024;
  char stack[kOnStack];
  char* const begin = size <= kOnStack ? stack : internal::Extend(size, wire);
  char* p = internal::WriteLengthLine(internal::LengthTag::kArray, argc, begin);
  for (absl::Span<const absl::string_view> part : parts) {
    for (absl::string_view arg : part) p = internal::WriteBulk(arg, p);
  }
  if (begin == stack) wire->append(stack, size);
}

// Appends `argv` as one command.
inline void AppendCommand(absl::Span<const absl::string_view> argv,
                          std::string* wire) {
  AppendCommandOf({argv}, wire);
}
inline void AppendCommand(std::initializer_list<absl::string_view> argv,
                          std::string* wire) {
  AppendCommand(absl::MakeConstSpan(argv.begin(), argv.size()), wire);
}

}  // namespace redis
}  // namespace relock

#endif  // RELOCK_LIB_REDIS_RESP_H_
