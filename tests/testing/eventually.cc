#include "tests/testing/eventually.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "tests/testing/raw_connection.h"
#include "tests/testing/redis_server.h"

namespace relock {
namespace testing {
namespace {

const char* NumSub(PubSub kind) {
  return kind == PubSub::kSharded ? "SHARDNUMSUB" : "NUMSUB";
}

// The count in a PUBSUB [SHARD]NUMSUB reply for one channel, or -1.
int64_t SubscriberCount(const RedisValue& reply) {
  if (reply.elements.size() != 2 || !reply.elements[1].is_integer()) return -1;
  return reply.elements[1].integer;
}

}  // namespace

absl::Status WaitForReply(RedisServer& server,
                          const std::vector<std::string>& argv,
                          const std::function<bool(const RedisValue&)>& done,
                          absl::string_view what, absl::Duration limit) {
  RawConnectionOptions options;
  options.password = server.requirepass();
  std::optional<RawConnection> connection;
  std::string last = "no reply yet";
  const bool seen = Eventually(
      [&] {
        if (!connection.has_value()) {
          absl::StatusOr<RawConnection> made =
              RawConnection::Connect(server.port(), options);
          if (!made.ok()) {
            last = made.status().ToString();
            return false;
          }
          connection.emplace(*std::move(made));
        }
        absl::StatusOr<RedisValue> reply = connection->Command(argv);
        if (!reply.ok()) {
          last = reply.status().ToString();
          connection.reset();  // unusable after an error
          return false;
        }
        last = reply->DebugString();
        return done(*reply);
      },
      limit);
  if (seen) return absl::OkStatus();
  return absl::DeadlineExceededError(
      absl::StrCat(what, ": not within ", absl::FormatDuration(limit), " (",
                   argv[0], " on port ", server.port(), ": ", last, ")"));
}

absl::StatusOr<int64_t> Subscribers(RedisServer& server,
                                    const std::string& channel, PubSub kind) {
  absl::StatusOr<RedisValue> reply =
      server.Command({"PUBSUB", NumSub(kind), channel});
  if (!reply.ok()) return reply.status();
  const int64_t n = SubscriberCount(*reply);
  if (n < 0) {
    return absl::InternalError(absl::StrCat(
        "PUBSUB ", NumSub(kind), " ", channel, ": ", reply->DebugString()));
  }
  return n;
}

absl::Status WaitForSubscribers(RedisServer& server, const std::string& channel,
                                int64_t n, PubSub kind, absl::Duration limit) {
  return WaitForReply(
      server, {"PUBSUB", NumSub(kind), channel},
      [n](const RedisValue& reply) { return SubscriberCount(reply) == n; },
      absl::StrCat(n, " subscriber(s) of ", channel), limit);
}

absl::Status WaitForKeyGone(RedisServer& server, const std::string& key,
                            absl::Duration limit) {
  return WaitForReply(
      server, {"EXISTS", key},
      [](const RedisValue& reply) {
        return reply.is_integer() && reply.integer == 0;
      },
      absl::StrCat(key, " gone"), limit);
}

absl::Status WaitForField(RedisServer& server, const std::string& key,
                          const std::string& field, absl::Duration limit) {
  return WaitForReply(
      server, {"HEXISTS", key, field},
      [](const RedisValue& reply) {
        return reply.is_integer() && reply.integer == 1;
      },
      absl::StrCat("field ", field, " of ", key), limit);
}

}  // namespace testing
}  // namespace relock
