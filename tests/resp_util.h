// Replies from RESP text, for tests of what relock does with replies without
// a server: the text goes through a hiredis reader, as a connection's bytes
// would.

#ifndef RELOCK_TESTS_RESP_UTIL_H_
#define RELOCK_TESTS_RESP_UTIL_H_

#include <hiredis/hiredis.h>

#include <string>

#include "gtest/gtest.h"
#include "lib/redis/reply.h"

namespace relock {
namespace testing {

// The one reply `resp` holds (a test failure if it holds none whole).
inline redis::Reply ParseResp(const std::string& resp) {
  redisReader* reader = redisReaderCreate();
  redisReaderFeed(reader, resp.data(), resp.size());
  void* out = nullptr;
  const int rc = redisReaderGetReply(reader, &out);
  redisReaderFree(reader);
  EXPECT_EQ(rc, REDIS_OK);
  EXPECT_NE(out, nullptr) << "incomplete RESP: " << resp;
  return redis::Reply(static_cast<redisReply*>(out));
}

}  // namespace testing
}  // namespace relock

#endif  // RELOCK_TESTS_RESP_UTIL_H_
