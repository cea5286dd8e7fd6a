// Parsing of Redis server addresses ("redis://..." and "unix://..." URLs).

#ifndef RELOCK_LIB_REDIS_URL_H_
#define RELOCK_LIB_REDIS_URL_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace relock {
namespace redis {

struct Endpoint {
  enum class Kind { kTcp, kUnix };
  Kind kind = Kind::kTcp;
  std::string host;      // kTcp: host name or IP (IPv6 without brackets)
  int port = 6379;       // kTcp
  std::string path;      // kUnix: socket path
  std::string username;  // empty: AUTH <password> (if any)
  std::string password;  // empty: no AUTH
  int db = 0;
  bool tls = false;  // kTcp: rediss://

  // "host:port" / "[v6]:port" / "unix:/path", plus "/db" when db != 0;
  // never includes credentials. For error messages.
  std::string ToString() const;
};

// Parses
//   redis://[[user]:password@]host[:port][/db]
//   rediss://[[user]:password@]host[:port][/db]   (TLS)
//   unix:///path/to/socket[?db=N]   (also ?password=..., ?user=...)
// User and password are percent-decoded. Errors are InvalidArgument naming the
// problem.
absl::StatusOr<Endpoint> ParseRedisUrl(absl::string_view url);

// What a client URL names: one server, a Redis Cluster (by seed nodes), or a
// master found through Sentinel.
struct Topology {
  enum class Kind { kSingle, kCluster, kSentinel };
  Kind kind = Kind::kSingle;
  // kSingle: the server. kCluster: the seed nodes (any node of the cluster
  // will do; the others are tried in turn). kSentinel: the sentinels. Each
  // with the URL's credentials and TLS setting.
  std::vector<Endpoint> endpoints;
  std::string master_name;  // kSentinel: the master's name ("#name")
  int db = 0;               // kSentinel: the db on the data nodes
};

// Parses what ParseRedisUrl() does (Kind::kSingle), and
//   redis-cluster://[[user]:password@]h1[:p1][,h2[:p2]...]
//   redis-sentinel://[[user]:password@]s1[:p1][,s2[:p2]...][/db]#master-name
// (Lettuce's form; sentinels default to port 26379, cluster nodes to 6379),
// and the same with rediss-cluster:// and rediss-sentinel:// for TLS. The
// credentials are used for every node (and, for Sentinel, for the
// sentinels too). A cluster has only db 0. Errors are InvalidArgument naming
// the problem, never quoting a password.
absl::StatusOr<Topology> ParseTopologyUrl(absl::string_view url);

}  // namespace redis
}  // namespace relock

#endif  // RELOCK_LIB_REDIS_URL_H_
