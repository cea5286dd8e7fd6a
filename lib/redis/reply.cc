#include "lib/redis/reply.h"

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace relock {
namespace redis {

bool ReplyView::ToInt64(int64_t* out) const {
  if (is_integer()) {
    *out = integer();
    return true;
  }
  return is_string() && absl::SimpleAtoi(str(), out);
}

std::string ReplyView::Describe() const {
  switch (r_->type) {
    case REDIS_REPLY_NIL:
      return "nil";
    case REDIS_REPLY_INTEGER:
      return absl::StrCat("integer ", r_->integer);
    case REDIS_REPLY_STRING:
      return absl::StrCat("string \"", absl::CHexEscape(str()), "\"");
    case REDIS_REPLY_STATUS:
      return absl::StrCat("status ", str());
    case REDIS_REPLY_ERROR:
      return absl::StrCat("error ", str());
    case REDIS_REPLY_ARRAY:
      return absl::StrCat("array of ", r_->elements);
    default:
      return absl::StrCat("reply type ", r_->type);
  }
}

}  // namespace redis
}  // namespace relock
