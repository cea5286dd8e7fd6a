// Concat({a, b, ...}): the concatenation of string pieces, sized once.
//
// For the hot path (key, channel and owner-field names on every lock call):
// Debian's Abseil has no uninitialized resize for std::string, so
// absl::StrCat zero-fills its result before writing it, and costs about 300
// instructions (callgrind) where reserve-and-append costs a third of that.
// Elsewhere absl::StrCat is the rule.

#ifndef RELOCK_LIB_COMMON_CONCAT_H_
#define RELOCK_LIB_COMMON_CONCAT_H_

#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <string>

#include "absl/strings/string_view.h"

namespace relock {

inline std::string Concat(std::initializer_list<absl::string_view> pieces) {
  size_t size = 0;
  for (absl::string_view piece : pieces) size += piece.size();
  std::string joined;
  joined.reserve(size);
  for (absl::string_view piece : pieces) {
    joined.append(piece.data(), piece.size());
  }
  return joined;
}

// Appends the concatenation of `pieces` to `out`, a contiguous container of
// chars (absl::InlinedVector<char, N>): sized once, then copied (an insert()
// a piece at a time costs several times as many instructions).
template <typename Chars>
void AppendConcat(std::initializer_list<absl::string_view> pieces, Chars* out) {
  size_t size = 0;
  for (absl::string_view piece : pieces) size += piece.size();
  const size_t at = out->size();
  out->resize(at + size);
  char* p = out->data() + at;
  for (absl::string_view piece : pieces) {
    if (piece.empty()) continue;
    std::memcpy(p, piece.data(), piece.size());
    p += piece.size();
  }
}

}  // namespace relock

#endif  // RELOCK_LIB_COMMON_CONCAT_H_
