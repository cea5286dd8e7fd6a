// What every benchmark binary needs beside relock: the smoke-mode switch and
// raw hiredis connections for the baselines (owned contexts and replies, a
// command sent as an argument vector, a command formatted once and sent
// many times).

#ifndef RELOCK_BENCHMARKS_BENCH_UTIL_H_
#define RELOCK_BENCHMARKS_BENCH_UTIL_H_

#include <hiredis/hiredis.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace relock {
namespace bench {

// True when the variable is set, not empty and not "0".
inline bool EnvFlag(const char* name) {
  // NOLINTNEXTLINE(concurrency-mt-unsafe): nothing here calls setenv().
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' && absl::string_view(value) != "0";
}

// RELOCK_BENCH_SMOKE: the fewest iterations, for CI (numbers mean nothing).
inline bool SmokeMode() { return EnvFlag("RELOCK_BENCH_SMOKE"); }

struct RawContextFree {
  void operator()(redisContext* c) const { redisFree(c); }
};
struct RawReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using RawContext = std::unique_ptr<redisContext, RawContextFree>;
using RawReply = std::unique_ptr<redisReply, RawReplyFree>;

// Takes the reply of a command just sent on `c` (`what` names it for
// errors): a broken connection or an error reply is an error Status.
inline absl::StatusOr<RawReply> TakeReply(redisContext* c, void* raw,
                                          absl::string_view what) {
  RawReply reply(static_cast<redisReply*>(raw));
  if (reply == nullptr) {
    return absl::UnavailableError(
        absl::StrCat(what, ": ", c->err != 0 ? c->errstr : "no reply"));
  }
  if (reply->type == REDIS_REPLY_ERROR) {
    return absl::InternalError(
        absl::StrCat(what, ": ", absl::string_view(reply->str, reply->len)));
  }
  return reply;
}

// Sends `argv` (binary-safe) and waits for its reply.
inline absl::StatusOr<RawReply> RawCommand(
    redisContext* c, const std::vector<std::string>& argv) {
  std::vector<const char*> args;
  std::vector<size_t> lens;
  for (const std::string& a : argv) {
    args.push_back(a.data());
    lens.push_back(a.size());
  }
  return TakeReply(c,
                   redisCommandArgv(c, static_cast<int>(args.size()),
                                    args.data(), lens.data()),
                   argv.empty() ? absl::string_view() : argv[0]);
}

// `argv` in the Redis protocol, for redisAppendFormattedCommand() (empty if
// hiredis cannot format it).
inline std::string Formatted(const std::vector<std::string>& argv) {
  std::vector<const char*> args;
  std::vector<size_t> lens;
  for (const std::string& a : argv) {
    args.push_back(a.data());
    lens.push_back(a.size());
  }
  char* cmd = nullptr;
  const int len = redisFormatCommandArgv(&cmd, static_cast<int>(args.size()),
                                         args.data(), lens.data());
  if (len < 0 || cmd == nullptr) return std::string();
  std::string formatted(cmd, static_cast<size_t>(len));
  redisFreeCommand(cmd);
  return formatted;
}

}  // namespace bench
}  // namespace relock

#endif  // RELOCK_BENCHMARKS_BENCH_UTIL_H_
