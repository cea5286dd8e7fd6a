#include "tests/testing/resp_reply.h"

#include <hiredis/hiredis.h>

#include <cstdlib>
#include <iostream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace relock {
namespace testing {

redis::Reply RespReply(absl::string_view resp) {
  redisReader* reader = redisReaderCreate();
  redisReaderFeed(reader, resp.data(), resp.size());
  void* out = nullptr;
  const int rc = redisReaderGetReply(reader, &out);
  redisReaderFree(reader);
  if (rc != REDIS_OK || out == nullptr) {
    std::cerr << "RespReply: not one whole RESP reply: " << resp << "\n";
    std::abort();
  }
  return redis::Reply(static_cast<redisReply*>(out));
}

redis::Reply NilReply() { return RespReply("$-1\r\n"); }
redis::Reply IntReply(int64_t n) {
  return RespReply(absl::StrCat(":", n, "\r\n"));
}
redis::Reply BulkReply(absl::string_view s) {
  return RespReply(absl::StrCat("$", s.size(), "\r\n", s, "\r\n"));
}
redis::Reply ErrorReply(absl::string_view text) {
  return RespReply(absl::StrCat("-", text, "\r\n"));
}
redis::Reply ArrayReply(const std::vector<std::string>& elements) {
  std::string resp = absl::StrCat("*", elements.size(), "\r\n");
  for (const std::string& e : elements) {
    if (absl::StartsWith(e, "s:")) {
      absl::StrAppend(&resp, "$", e.size() - 2, "\r\n", e.substr(2), "\r\n");
    } else {
      absl::StrAppend(&resp, ":", e, "\r\n");
    }
  }
  return RespReply(resp);
}

}  // namespace testing
}  // namespace relock
