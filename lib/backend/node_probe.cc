// NodeBackend::Probe(): what a server allows relock to do (its role, the
// scripts, EVALSHA and EVAL under its ACL), checked in one round trip when
// a client connects.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "lib/backend/node_backend.h"
#include "lib/redis/reply.h"
#include "lib/redis/resp.h"

namespace relock {
namespace backend {

namespace {

// Probe()'s checks of what a server allows, each made with a call that runs
// nothing: a negative key count fails after the ACL check, so "Number of
// keys can't be negative" means allowed and NOPERM denied.
constexpr absl::string_view kNoSuchSha =
    "0000000000000000000000000000000000000000";

// The user the connection authenticates as, for messages.
std::string UserName(const redis::Endpoint& endpoint) {
  return endpoint.username.empty() ? "default" : endpoint.username;
}

// Whether ROLE's reply (an array led by "master", "slave" or "sentinel")
// says the server cannot take relock's writes; OK when it can, or when the
// server would not say (ROLE denied, renamed or unknown: no verdict).
absl::Status CheckRole(const redis::Endpoint& endpoint,
                       const redis::Reply& role) {
  const redis::ReplyView view = role.view();
  if (role.is_error() || !view.is_array() || view.size() == 0 ||
      !(view[0].is_string() || view[0].is_status())) {
    return absl::OkStatus();
  }
  const absl::string_view kind = view[0].str();
  if (kind == "slave" || kind == "replica") {
    std::string master = "its master";
    if (view.size() >= 3 && view[1].is_string() && view[2].is_integer()) {
      master = absl::StrCat(view[1].str(), ":", view[2].integer());
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "Redis at ", endpoint.ToString(), " is a replica of ", master,
        " (ROLE), which refuses writes or keeps them to itself: locks are "
        "taken on the master; connect to the master (or "
        "use redis-sentinel:// to follow it through failovers)"));
  }
  if (kind == "sentinel") {
    return absl::FailedPreconditionError(
        absl::StrCat("Redis at ", endpoint.ToString(),
                     " is a Redis Sentinel, not a data node (ROLE): use "
                     "redis-sentinel://",
                     endpoint.ToString(), "#<master-name>"));
  }
  return absl::OkStatus();
}

// The answer to a probe of `command` (see kNoSuchSha): PermissionDenied when
// the user may not run it; OK otherwise, including answers that give no
// verdict.
absl::Status CheckAllowed(const redis::Endpoint& endpoint,
                          absl::string_view command, absl::string_view why,
                          const redis::Reply& reply) {
  if (!reply.is_error() || !absl::StartsWith(reply.str(), "NOPERM")) {
    return absl::OkStatus();
  }
  const std::string user = UserName(endpoint);
  return absl::PermissionDeniedError(absl::StrCat(
      "Redis at ", endpoint.ToString(), ": user \"", user, "\" may not run ",
      command, ", which relock needs ", why, " (Redis replied: ", reply.str(),
      "); grant it, e.g. ACL SETUSER ", user, " +",
      absl::AsciiStrToLower(command)));
}

}  // namespace

absl::Status NodeBackend::Probe(Deadline deadline) {
  // One round trip: ROLE (when the node must be a master), SCRIPT LOAD of
  // every script, and probes of EVALSHA and EVAL (see kNoSuchSha).
  std::string wire;
  size_t commands = scripts_.size() + 2;
  if (options_.require_master) {
    redis::AppendCommand({"ROLE"}, &wire);
    ++commands;
  }
  scripts_.AppendLoadAll(&wire);
  redis::AppendCommand({"EVALSHA", kNoSuchSha, "-1"}, &wire);
  redis::AppendCommand({"EVAL", "", "-1"}, &wire);
  io::Result loaded = io::Call(Pick(), std::move(wire), commands,
                               Earliest(deadline, Deadline::After(backstop())));
  if (!loaded.status.ok()) return loaded.status;
  const redis::Endpoint& endpoint = options_.connection.endpoint;
  io::Replies& replies = loaded.replies;
  size_t next = 0;
  if (options_.require_master) {
    if (absl::Status s = CheckRole(endpoint, replies[next++]); !s.ok()) {
      return s;
    }
  }
  std::vector<redis::Reply> loads;
  for (size_t i = 0; i < scripts_.size(); ++i) {
    loads.push_back(std::move(replies[next++]));
  }
  if (absl::Status s = scripts_.CheckLoaded(loads); !s.ok()) return s;
  if (absl::Status s = CheckAllowed(
          endpoint, "EVALSHA", "for every lock operation", replies[next++]);
      !s.ok()) {
    return s;
  }
  return CheckAllowed(endpoint, "EVAL",
                      "to run its scripts again after the server lost them "
                      "(SCRIPT FLUSH, a restart)",
                      replies[next]);
}

}  // namespace backend
}  // namespace relock
