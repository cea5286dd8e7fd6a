// Replies as a server sends them, made from RESP text by hiredis's reader
// (as a connection's bytes would be), for tests of what relock does with
// replies without a server: the fake backend, the redirect rules, slot maps.

#ifndef RELOCK_TESTS_TESTING_RESP_REPLY_H_
#define RELOCK_TESTS_TESTING_RESP_REPLY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "lib/redis/reply.h"

namespace relock {
namespace testing {

// The one whole reply `resp` holds (aborts, naming it, if it holds none).
redis::Reply RespReply(absl::string_view resp);
redis::Reply NilReply();
redis::Reply IntReply(int64_t n);
redis::Reply BulkReply(absl::string_view s);
redis::Reply ErrorReply(absl::string_view text);
// An array of integers and (as "s:<text>") bulk strings.
redis::Reply ArrayReply(const std::vector<std::string>& elements);

}  // namespace testing
}  // namespace relock

#endif  // RELOCK_TESTS_TESTING_RESP_REPLY_H_
