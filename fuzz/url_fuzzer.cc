// libFuzzer target: relock::redis::ParseRedisUrl (lib/redis/url.h) on
// arbitrary bytes. ClientOptions::url comes from the user's configuration,
// so the parser must hold up against anything.
//
// Checked on every input, besides "no crash, no ASan/UBSan report":
//   - a TCP endpoint has a non-empty host and a port in 1..65535; a unix
//     endpoint has an absolute path; db is in 0..1000000;
//   - Endpoint::ToString() never includes credentials: it is the same with
//     username and password cleared;
//   - a TCP endpoint with a plain host name round-trips through ToString();
//   - an error never echoes a "user:password@" userinfo.
//
//   build-fuzz/fuzz/url_fuzzer fuzz/corpus/url_fuzzer   (see scripts/test.sh)

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "lib/redis/url.h"

namespace {

using relock::redis::Endpoint;
using relock::redis::ParseRedisUrl;

[[noreturn]] void Fail(const char* what, absl::string_view url,
                       absl::string_view detail = "") {
  fprintf(stderr, "url_fuzzer: invariant violated: %s\n  url: \"%s\"\n  %s\n",
          what, absl::CHexEscape(url).c_str(), std::string(detail).c_str());
  abort();
}

#define URL_CHECK(cond, url, detail)       \
  do {                                     \
    if (!(cond)) Fail(#cond, url, detail); \
  } while (0)

bool IsPlainHost(absl::string_view host) {
  if (host.empty()) return false;
  for (char c : host) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' &&
        c != '-' && c != ':') {
      return false;
    }
  }
  return true;
}

void CheckEndpoint(const Endpoint& ep, absl::string_view url) {
  const std::string shown = ep.ToString();
  URL_CHECK(ep.db >= 0 && ep.db <= 1000000, url, shown);
  if (ep.kind == Endpoint::Kind::kTcp) {
    URL_CHECK(!ep.host.empty(), url, shown);
    URL_CHECK(ep.port >= 1 && ep.port <= 65535, url, shown);
  } else {
    URL_CHECK(!ep.path.empty() && ep.path[0] == '/', url, shown);
  }

  Endpoint bare = ep;
  bare.username.clear();
  bare.password.clear();
  URL_CHECK(bare.ToString() == shown, url, shown);

  if (ep.kind == Endpoint::Kind::kTcp && IsPlainHost(ep.host)) {
    const std::string again_url = absl::StrCat("redis://", shown);
    absl::StatusOr<Endpoint> again = ParseRedisUrl(again_url);
    URL_CHECK(again.ok(), url,
              absl::StrCat(again_url, " -> ", again.status().ToString()));
    URL_CHECK(again->host == ep.host && again->port == ep.port &&
                  again->db == ep.db && again->password.empty(),
              url, absl::StrCat(again_url, " -> ", again->ToString()));
  }
}

void CheckError(const absl::Status& status, absl::string_view url) {
  const std::string message(status.message());
  URL_CHECK(!message.empty(), url, status.ToString());
  URL_CHECK(status.code() == absl::StatusCode::kInvalidArgument ||
                status.code() == absl::StatusCode::kUnimplemented,
            url, status.ToString());

  // The userinfo of a redis:// URL, as the parser finds it ("user:pass@"),
  // must not appear in the message (unless the query repeats it: unknown
  // parameter names are quoted, and a fuzzer will happily name one after the
  // password).
  absl::string_view rest = url;
  if (absl::ConsumePrefix(&rest, "redis://")) {
    const size_t q = rest.find('?');
    const absl::string_view query =
        q == absl::string_view::npos ? absl::string_view() : rest.substr(q);
    rest = rest.substr(0, q);
    const size_t at = rest.rfind('@');
    if (at != absl::string_view::npos && at >= 3) {
      const std::string userinfo = absl::StrCat(rest.substr(0, at), "@");
      absl::string_view body = message;
      absl::ConsumePrefix(&body, "invalid Redis URL \"...");
      if (!absl::StrContains(query, userinfo)) {
        URL_CHECK(!absl::StrContains(body, userinfo), url, status.ToString());
      }
    }
  }

  // A password given as a query parameter is never echoed either: wherever
  // the message shows "password=", the mask "***" follows, then '&' or the
  // closing quote of the shown URL.
  for (size_t k = message.find("password="); k != std::string::npos;
       k = message.find("password=", k + 1)) {
    absl::string_view rest = absl::string_view(message).substr(k + 9);
    URL_CHECK(absl::StartsWith(rest, "***") &&
                  (rest.size() == 3 || rest[3] == '&' || rest[3] == '"'),
              url, status.ToString());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view url(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<Endpoint> ep = ParseRedisUrl(url);
  if (ep.ok()) {
    CheckEndpoint(*ep, url);
  } else {
    CheckError(ep.status(), url);
  }
  return 0;
}
