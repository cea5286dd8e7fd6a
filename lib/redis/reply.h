// RAII ownership of hiredis replies, and a non-owning view for reading them.
// The only place besides lib/io/connection*.cc that knows hiredis reply
// types.

#ifndef RELOCK_LIB_REDIS_REPLY_H_
#define RELOCK_LIB_REDIS_REPLY_H_

#include <hiredis/hiredis.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"

namespace relock {
namespace redis {

// Read-only view of a (sub-)reply. Valid while the owning Reply lives.
class ReplyView {
 public:
  explicit ReplyView(const redisReply* r) : r_(r) {}

  bool is_nil() const { return r_->type == REDIS_REPLY_NIL; }
  bool is_error() const { return r_->type == REDIS_REPLY_ERROR; }
  bool is_integer() const { return r_->type == REDIS_REPLY_INTEGER; }
  bool is_string() const { return r_->type == REDIS_REPLY_STRING; }
  bool is_status() const { return r_->type == REDIS_REPLY_STATUS; }
  bool is_array() const { return r_->type == REDIS_REPLY_ARRAY; }

  int64_t integer() const { return static_cast<int64_t>(r_->integer); }
  // An integer reply, or a bulk string holding a 64-bit decimal integer (a
  // script sends a count beyond 2^53 as its text: a Lua number is a
  // double). False for anything else.
  bool ToInt64(int64_t* out) const;
  // Bulk string, status or error text.
  absl::string_view str() const {
    return r_->str == nullptr ? absl::string_view()
                              : absl::string_view(r_->str, r_->len);
  }
  size_t size() const { return is_array() ? r_->elements : 0; }
  ReplyView operator[](size_t i) const { return ReplyView(r_->element[i]); }

  // Short description for error messages ("nil", "integer 3", "error ...").
  std::string Describe() const;

 private:
  const redisReply* r_;
};

// Owns one top-level hiredis reply.
class Reply {
 public:
  explicit Reply(redisReply* r) : r_(r) {}
  ReplyView view() const { return ReplyView(r_.get()); }
  const ReplyView operator*() const { return view(); }

  bool is_nil() const { return view().is_nil(); }
  bool is_error() const { return view().is_error(); }
  bool is_integer() const { return view().is_integer(); }
  int64_t integer() const { return view().integer(); }
  absl::string_view str() const { return view().str(); }

 private:
  struct Free {
    void operator()(redisReply* r) const { freeReplyObject(r); }
  };
  std::unique_ptr<redisReply, Free> r_;
};

}  // namespace redis
}  // namespace relock

#endif  // RELOCK_LIB_REDIS_REPLY_H_
