// What every benchmark binary needs beside relock: the smoke-mode switch,
// raw hiredis connections for the baselines (RawConnection, from
// tests/testing/raw_connection.h; a command sent as an argument vector, a
// command formatted once and sent many times), and relock's own lock scripts
// sent raw (exactly the keys and arguments the library sends, from
// lib/lock/lock_model.h).

#ifndef RELOCK_BENCHMARKS_BENCH_UTIL_H_
#define RELOCK_BENCHMARKS_BENCH_UTIL_H_

#include <hiredis/hiredis.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "lib/backend/backend.h"
#include "lib/lock/lock_model.h"
#include "lib/lock/lock_scripts.h"
#include "lib/lock/owner.h"
#include "relock/options.h"
#include "tests/testing/raw_connection.h"

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

// The raw baselines' connections: tests/testing/raw_connection.h (owned
// contexts and replies).
using testing::RawConnection;
using testing::RawConnectionOptions;
using testing::RawReply;

// `reply`, read for `what`, or an error Status for an error reply (Internal,
// quoting it).
inline absl::StatusOr<RawReply> NoErrorReply(absl::StatusOr<RawReply> reply,
                                             absl::string_view what) {
  if (reply.ok() && (*reply)->type == REDIS_REPLY_ERROR) {
    return absl::InternalError(absl::StrCat(
        what, ": ", absl::string_view((*reply)->str, (*reply)->len)));
  }
  return reply;
}

// Takes the reply of a command just sent on `c` with hiredis's own calls
// (`what` names it for errors): a broken connection or an error reply is an
// error Status.
inline absl::StatusOr<RawReply> TakeReply(redisContext* c, void* raw,
                                          absl::string_view what) {
  RawReply reply(static_cast<redisReply*>(raw));
  if (reply == nullptr) {
    return absl::UnavailableError(
        absl::StrCat(what, ": ", c->err != 0 ? c->errstr : "no reply"));
  }
  return NoErrorReply(std::move(reply), what);
}

// Sends `argv` (binary-safe) on `c` and waits for its reply; an error reply
// is an error Status.
inline absl::StatusOr<RawReply> RawCommand(
    RawConnection& c, const std::vector<std::string>& argv) {
  return NoErrorReply(c.Call(argv),
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

// The EVALSHA argv of `step`, a Step of lib/lock/lock_model.h (the keys and
// arguments relock itself sends), `sha` being its script's SHA.
inline std::vector<std::string> StepArgv(const std::string& sha,
                                         const lock::Step& step) {
  const backend::Call views = step.Views();
  std::vector<std::string> argv = {"EVALSHA", sha,
                                   absl::StrCat(views.keys.size())};
  for (absl::string_view key : views.keys) argv.emplace_back(key);
  for (absl::string_view arg : views.args) argv.emplace_back(arg);
  return argv;
}

// The owner field of raw baseline `n` (a relock-shaped field: a UUID, a
// thread number).
inline std::string RawOwner(uint64_t n) {
  return std::string(
      lock::OwnerField("00000000-0000-4000-8000-00000000b0b0", n).wire());
}

// Loads relock's lock script `id` through `c`: its SHA.
inline absl::StatusOr<std::string> LoadLockScript(RawConnection& c,
                                                  internal::ScriptId id) {
  absl::StatusOr<RawReply> sha = RawCommand(
      c, {"SCRIPT", "LOAD", std::string(internal::LockScripts()[id].source)});
  if (!sha.ok()) return sha.status();
  return std::string((*sha)->str, (*sha)->len);
}

// What relock sends for an uncontended lock+unlock pair of the reentrant lock
// `key` by raw owner `owner`: a first hold with the default watchdog lease,
// and its release, each formatted once.
struct PairWire {
  std::string acquire;
  std::string release;
};
inline absl::StatusOr<PairWire> RelockPairWire(RawConnection& c,
                                               const std::string& key,
                                               uint64_t owner) {
  absl::StatusOr<std::string> acquire_sha =
      LoadLockScript(c, internal::kAcquireScript);
  if (!acquire_sha.ok()) return acquire_sha.status();
  absl::StatusOr<std::string> release_sha =
      LoadLockScript(c, internal::kReleaseScript);
  if (!release_sha.ok()) return release_sha.status();
  const lock::LockName name(key);
  const lock::OwnerField field = lock::OwnerField::FromWire(RawOwner(owner));
  const absl::Duration lease = ClientOptions().lock_watchdog_timeout;
  const lock::LockModel& model = lock::ReentrantModel();
  PairWire wire;
  wire.acquire = Formatted(StepArgv(
      *acquire_sha,
      model.Acquire(name, field, lock::Lease::Of(lease), /*fresh=*/true,
                    /*queue=*/true, {}, "publish")));
  wire.release = Formatted(
      StepArgv(*release_sha,
               model.Release(name, field, lock::Lease::Of(lease), "publish",
                             /*last=*/true)));
  if (wire.acquire.empty() || wire.release.empty()) {
    return absl::ResourceExhaustedError("redisFormatCommandArgv");
  }
  return wire;
}

}  // namespace bench
}  // namespace relock

#endif  // RELOCK_BENCHMARKS_BENCH_UTIL_H_
