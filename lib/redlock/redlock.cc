#include "lib/redlock/redlock.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/backend/node_backend.h"
#include "lib/backend/quorum_backend.h"
#include "lib/lock/lock_env.h"
#include "lib/lock/lock_scripts.h"
#include "lib/lock/owner.h"
#include "lib/redis/url.h"

namespace relock {
namespace internal {
namespace {

absl::Status ValidateRedlockOptions(const RedlockOptions& o) {
  auto invalid = [](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("RedlockOptions: ", what));
  };
  if (o.urls.empty() || o.urls.size() > 15) {
    return invalid(
        absl::StrCat("urls must name 1 to 15 masters, not ", o.urls.size()));
  }
  if (!(o.drift_factor >= 0 && o.drift_factor < 0.5)) {
    return invalid("drift_factor must be in [0, 0.5)");
  }
  if (!(o.timeout_factor > 0 && o.timeout_factor <= 1)) {
    return invalid("timeout_factor must be in (0, 1]");
  }
  if (o.tries < 1) return invalid("tries must be at least 1");
  // `connection.url` is not used: check the rest as for the first master.
  ClientOptions connection = o.connection;
  connection.url = o.urls.front();
  if (absl::Status s = ValidateClientOptions(connection); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("RedlockOptions.connection: ", s.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<ClientCore>> ConnectRedlock(
    RedlockOptions options) {
  if (absl::Status s = ValidateRedlockOptions(options); !s.ok()) return s;
  std::string id = options.connection.client_id;
  if (options.owner_id_generator) id = options.owner_id_generator();
  if (id.empty() && !options.owner_id_generator) id = lock::NewClientId();
  // Owner fields of any other form do not count as locks (lock_info.h):
  // other clients would take such a lock for someone else's hash.
  if (!lock::IsClientId(id)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RedlockOptions: the owner id (",
        options.owner_id_generator ? "from owner_id_generator"
                                   : "connection.client_id",
        ") must be a UUID in its text form (8-4-4-4-12 hex digits), not \"",
        absl::CHexEscape(id), "\""));
  }
  std::vector<backend::NodeOptions> masters;
  absl::flat_hash_set<std::string> servers;
  for (const std::string& url : options.urls) {
    absl::StatusOr<redis::Endpoint> ep = redis::ParseRedisUrl(url);
    if (!ep.ok()) return ep.status();
    // One server named twice (another db is the same server) would count
    // twice towards the quorum: losing it could lose the majority.
    redis::Endpoint server = *ep;
    server.db = 0;
    absl::AsciiStrToLower(&server.host);  // (a socket path keeps its case)
    if (!servers.insert(server.ToString()).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "RedlockOptions: urls name the server ", server.ToString(),
          " twice; a Redlock needs independent masters"));
    }
    backend::NodeOptions node;
    node.connection.endpoint = *std::move(ep);
    node.connection.tls = options.connection.tls;
    node.connection.connect_timeout = options.connection.connect_timeout;
    node.connection.command_timeout = options.connection.command_timeout;
    node.command_connections = options.connection.command_connections;
    // Connected (and reconnected) in the background, so a master that is
    // down now joins when it comes back.
    node.connect_now = false;
    node.direct_calls = false;  // every call fans out through the loop
    masters.push_back(std::move(node));
  }
  lock::LockPolicy policy;
  policy.noun = "redlock";
  policy.drift_factor = options.drift_factor;
  policy.check_validity = true;
  policy.attempt_timeout_factor = options.timeout_factor;
  policy.command_timeout = options.connection.command_timeout;
  policy.tries = options.tries;
  policy.retry_backoff = options.retry_backoff;
  if (policy.retry_backoff == nullptr) {
    policy.retry_backoff = *ExponentialBackoff();
  }
  policy.fail_fast = options.fail_fast;
  const bool shuffle = options.shuffle_masters;
  return ClientCore::Create(
      std::move(options.connection), std::move(id), std::move(policy),
      "redlock ",
      [&masters, shuffle](io::EventLoop* loop,
                          const std::shared_ptr<Observer>& observer)
          -> absl::StatusOr<std::unique_ptr<backend::Backend>> {
        std::vector<std::unique_ptr<backend::NodeBackend>> nodes;
        size_t reachable = 0;
        absl::Status first_error;
        for (backend::NodeOptions& m : masters) {
          m.connection.observer = observer;
          absl::StatusOr<std::unique_ptr<backend::NodeBackend>> node =
              backend::NodeBackend::Create(loop, std::move(m), LockScripts());
          if (!node.ok()) return node.status();
          absl::Status s = (*node)->Probe(Deadline::Never());
          if (s.ok()) {
            ++reachable;
          } else if (s.code() != absl::StatusCode::kUnavailable &&
                     s.code() != absl::StatusCode::kDeadlineExceeded) {
            return s;  // wrong credentials or permissions: configuration
          } else if (first_error.ok()) {
            first_error = s;
          }
          nodes.push_back(*std::move(node));
        }
        const size_t quorum = nodes.size() / 2 + 1;
        if (reachable < quorum) {
          return absl::UnavailableError(
              absl::StrCat("only ", reachable, " of ", nodes.size(),
                           " Redlock masters are reachable (quorum ", quorum,
                           "): ", first_error.message()));
        }
        return std::unique_ptr<backend::Backend>(
            new backend::QuorumBackend(std::move(nodes), shuffle));
      });
}

}  // namespace internal
}  // namespace relock
