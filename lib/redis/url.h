// Parsing of Redis server addresses ("redis://..." and "unix://..." URLs).

#ifndef RELOCK_LIB_REDIS_URL_H_
#define RELOCK_LIB_REDIS_URL_H_

#include <string>

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

}  // namespace redis
}  // namespace relock

#endif  // RELOCK_LIB_REDIS_URL_H_
