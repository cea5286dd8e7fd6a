// Waiting for events in tests instead of sleeping. A test that sleeps "to
// let something happen" (300 ms, let it subscribe) is a wait for an event in
// disguise: on a loaded 2-core machine the event comes later and the test
// flakes; on an idle one it came long before and the test wastes the rest.
// Wait for the event itself:
//
// clang-format off
//   ASSERT_TRUE(Eventually([&] { return done.load() == 3; }));
//   ASSERT_OK(WaitUntil("three done", [&] { return done.load() == 3; }));
//   ASSERT_OK(WaitForSubscribers(redis(), "redisson_lock__channel:{n}", 1));
//   ASSERT_OK(WaitForKeyGone(redis(), "n"));        // its lease ran out
//   ASSERT_OK(WaitForField(redis(), "n", owner));   // it was taken
// clang-format on
//
// Every wait polls with short pauses that grow (from 0.1 ms, doubling, up to
// 20 ms), so an event that comes at once is seen at once and one that takes
// seconds costs a few hundred looks. Every limit is generous by design
// (kEventuallyLimit, a minute): reaching it is a failure, never a slow pass,
// so it only has to be long enough for the slowest machine.
//
// The Redis waits poll one plain connection to the server (tests/testing/
// raw_connection.h; AUTH with its requirepass), made again after an error, so
// they survive a server that restarts or kills clients meanwhile. A sleep
// that is meant to let time pass (a lease that must run out on the server's
// clock, a period in which something must NOT happen) stays a sleep; say so
// where it is.
//
// Thread-safe: each call uses its own connection.

#ifndef RELOCK_TESTS_TESTING_EVENTUALLY_H_
#define RELOCK_TESTS_TESTING_EVENTUALLY_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/testing/raw_connection.h"
#include "tests/testing/redis_server.h"

namespace relock {
namespace testing {

// The limit of every wait here unless the caller gives one.
inline constexpr absl::Duration kEventuallyLimit = absl::Seconds(60);
// The longest pause between two looks.
inline constexpr absl::Duration kEventuallyMaxPause = absl::Milliseconds(20);

// Polls `ready` (a callable returning bool) until it returns true or `limit`
// has passed (then it looks once more): whether it held. Pauses start at
// `first_pause` and double up to kEventuallyMaxPause. On the steady clock.
template <class Ready>
bool Eventually(Ready&& ready, absl::Duration limit = kEventuallyLimit,
                absl::Duration first_pause = absl::Microseconds(100)) {
  const auto end =
      std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(limit);
  absl::Duration pause = std::min(first_pause, kEventuallyMaxPause);
  while (std::chrono::steady_clock::now() < end) {
    if (ready()) return true;
    absl::SleepFor(pause);
    pause = std::min(pause * 2, kEventuallyMaxPause);
  }
  return ready();
}

// Eventually() as a Status: OK, or DeadlineExceeded "<what>: not within
// <limit>" (for ASSERT_OK, which prints it).
template <class Ready>
absl::Status WaitUntil(absl::string_view what, Ready&& ready,
                       absl::Duration limit = kEventuallyLimit) {
  if (Eventually(ready, limit)) return absl::OkStatus();
  return absl::DeadlineExceededError(
      absl::StrCat(what, ": not within ", absl::FormatDuration(limit)));
}

// Runs `argv` on `server` (one connection, made again after an error) until
// `done` holds for its reply: OK, or DeadlineExceeded naming `what` and the
// last reply (or error). A Redis error reply is a reply here, not an error.
absl::Status WaitForReply(RedisServer& server,
                          const std::vector<std::string>& argv,
                          const std::function<bool(const RedisValue&)>& done,
                          absl::string_view what,
                          absl::Duration limit = kEventuallyLimit);

// Classic pub/sub (SUBSCRIBE, PUBSUB NUMSUB) or sharded (SSUBSCRIBE, PUBSUB
// SHARDNUMSUB: Redis >= 7; on a cluster, ask the master of the channel's
// slot).
enum class PubSub { kClassic, kSharded };

// The number of clients subscribed to `channel` on `server` (a relock client
// counts once, however many of its threads wait there).
absl::StatusOr<int64_t> Subscribers(RedisServer& server,
                                    const std::string& channel,
                                    PubSub kind = PubSub::kClassic);

// Waits until exactly `n` clients are subscribed to `channel` on `server`.
absl::Status WaitForSubscribers(RedisServer& server, const std::string& channel,
                                int64_t n, PubSub kind = PubSub::kClassic,
                                absl::Duration limit = kEventuallyLimit);

// Waits until `key` no longer exists on `server` (deleted, or expired: the
// EXISTS of each look expires a key whose TTL has passed).
absl::Status WaitForKeyGone(RedisServer& server, const std::string& key,
                            absl::Duration limit = kEventuallyLimit);

// Waits until the hash `key` on `server` has `field` (HEXISTS).
absl::Status WaitForField(RedisServer& server, const std::string& key,
                          const std::string& field,
                          absl::Duration limit = kEventuallyLimit);

}  // namespace testing
}  // namespace relock

#endif  // RELOCK_TESTS_TESTING_EVENTUALLY_H_
