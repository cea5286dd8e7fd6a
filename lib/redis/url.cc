#include "lib/redis/url.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace relock {
namespace redis {
namespace {

// The URL as error messages show it: never a password, neither in userinfo
// (everything before the last '@' is dropped) nor in the query (the value of
// a "password" parameter becomes "***").
// `text` with every "password=" value (up to '&' or the end) as "***".
std::string MaskPasswords(std::string shown) {
  for (size_t key = shown.find("password="); key != std::string::npos;
       key = shown.find("password=", key + 1)) {
    const size_t value = key + 9;
    const size_t end = std::min(shown.find('&', value), shown.size());
    shown.replace(value, end - value, "***");
  }
  return shown;
}

std::string Redacted(absl::string_view url) {
  const size_t at = url.rfind('@');
  return MaskPasswords(at == absl::string_view::npos
                           ? std::string(url)
                           : absl::StrCat("...", url.substr(at)));
}

absl::Status Invalid(absl::string_view url, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid Redis URL \"", Redacted(url),
                   "\": ", MaskPasswords(std::string(why))));
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = absl::ascii_tolower(c);
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// Percent-decodes `in`, which is the URL's `part` (for the message): why not,
// naming the escape and its position in the part (the escape's text only
// when the part is not secret).
absl::Status PercentDecode(absl::string_view in, absl::string_view part,
                           bool secret, std::string* out) {
  out->clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out->push_back(in[i]);
      continue;
    }
    const int hi = i + 1 < in.size() ? HexValue(in[i + 1]) : -1;
    const int lo = i + 2 < in.size() ? HexValue(in[i + 2]) : -1;
    if (hi < 0 || lo < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad percent-escape ",
          secret ? "" : absl::StrCat("\"", in.substr(i, 3), "\" "),
          "at character ", i + 1, " of the ", part,
          " ('%' must be followed by two hex digits; write '%' as %25)"));
    }
    out->push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return absl::OkStatus();
}

// `text` in quotes, or "(not shown)" when it may be part of a password:
// a URL whose query holds an '@' may have a '?' in an unencoded password,
// and then the "host", port and db are the password's tail.
std::string Shown(absl::string_view text, bool echo) {
  // Masked as the URL is (a part may hold "password=...": url_fuzzer).
  return echo ? absl::StrCat("\"", MaskPasswords(std::string(text)), "\"")
              : std::string("(not shown)");
}

constexpr int kMaxDb = 1000000;

// `echo`: quote `text` in messages (see Shown()).
absl::Status ParseDb(absl::string_view text, int* db, bool echo = true) {
  if (text.empty()) return absl::InvalidArgumentError("db is empty");
  const std::string shown = Shown(text, echo);
  int value = 0;
  const bool number = absl::SimpleAtoi(text, &value);
  if (number && value < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "db ", shown, " is negative (databases are numbered from 0)"));
  }
  if (!number || !absl::ascii_isdigit(text[0])) {
    return absl::InvalidArgumentError(absl::StrCat(
        "db ", shown, " is not a number (expected 0..", kMaxDb, ")"));
  }
  if (value > kMaxDb) {
    return absl::InvalidArgumentError(
        absl::StrCat("db ", shown, " is out of range 0..", kMaxDb));
  }
  *db = value;
  return absl::OkStatus();
}

absl::Status ParsePort(absl::string_view text, int* port, bool echo) {
  if (text.empty()) return absl::InvalidArgumentError("port is empty");
  const std::string shown = Shown(text, echo);
  int value = 0;
  if (!absl::ascii_isdigit(text[0]) || !absl::SimpleAtoi(text, &value)) {
    // Digits only, but too many for an int, are out of range too.
    if (std::all_of(text.begin(), text.end(), absl::ascii_isdigit)) {
      return absl::InvalidArgumentError(
          absl::StrCat("port ", shown, " is out of range 1..65535"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("port ", shown, " is not a number (expected 1..65535)"));
  }
  if (value < 1 || value > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("port ", shown, " is out of range 1..65535"));
  }
  *port = value;
  return absl::OkStatus();
}

// With `echo` false (the query may hold part of a password, see
// ParseRedisUrl), no parameter's name or value is quoted.
absl::Status ParseQuery(absl::string_view query, Endpoint* ep,
                        bool echo = true) {
  for (absl::string_view pair : absl::StrSplit(query, '&', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(pair, absl::MaxSplits('=', 1));
    const bool secret = !echo || kv.first == "password";
    const std::string what =
        echo ? absl::StrCat("query parameter \"", kv.first, "\"")
             : std::string("a query parameter");
    std::string value;
    if (absl::Status s = PercentDecode(kv.second, what, secret, &value);
        !s.ok()) {
      return s;
    }
    if (kv.first == "db") {
      if (absl::Status s = ParseDb(value, &ep->db, echo); !s.ok()) return s;
    } else if (kv.first == "password") {
      ep->password = value;
    } else if (kv.first == "user" || kv.first == "username") {
      ep->username = value;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown query parameter",
          echo ? absl::StrCat(" \"", kv.first, "\"") : std::string(),
          " (known: db, password, user, username)"));
    }
  }
  return absl::OkStatus();
}

// "[[user]:password@]" (without the '@') into ep.
absl::Status ParseUserinfo(absl::string_view userinfo, Endpoint* ep) {
  const size_t colon = userinfo.find(':');
  absl::string_view user = userinfo.substr(0, colon);
  absl::string_view pass = colon == absl::string_view::npos
                               ? absl::string_view()
                               : userinfo.substr(colon + 1);
  if (colon == absl::string_view::npos) {
    // "redis://secret@host": Redis convention treats a lone userinfo as the
    // password.
    pass = user;
    user = absl::string_view();
  }
  if (absl::Status s = PercentDecode(user, "user", false, &ep->username);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = PercentDecode(pass, "password", true, &ep->password);
      !s.ok()) {
    return s;
  }
  if (!ep->username.empty() && ep->password.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "user \"", ep->username, "\" has no password (user:password@host)"));
  }
  return absl::OkStatus();
}

// Where the host part of `rest` (a URL after its scheme, without its query)
// begins: after the last '@', which ends the credentials; 0 without any. A
// '#' before it is part of the password (unencoded, but accepted).
size_t HostStart(absl::string_view rest) {
  const size_t at = rest.rfind('@');
  return at == absl::string_view::npos ? 0 : at + 1;
}

// "host[:port]" or "[v6][:port]" into ep (the port stays ep->port when
// absent).
absl::Status ParseHostPort(absl::string_view hostport, Endpoint* ep,
                           bool echo = true) {
  absl::string_view port_text;
  bool has_port = false;
  if (absl::ConsumePrefix(&hostport, "[")) {
    const size_t close = hostport.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "IPv6 address ", Shown(absl::StrCat("[", hostport), echo),
          " has no closing ']'"));
    }
    ep->host = std::string(hostport.substr(0, close));
    absl::string_view after = hostport.substr(close + 1);
    if (!after.empty()) {
      if (!absl::ConsumePrefix(&after, ":")) {
        return absl::InvalidArgumentError(
            absl::StrCat("expected ':port' after the IPv6 address, not ",
                         Shown(after, echo)));
      }
      port_text = after;
      has_port = true;
    }
  } else {
    const size_t colon = hostport.rfind(':');
    if (colon != absl::string_view::npos) {
      port_text = hostport.substr(colon + 1);
      hostport = hostport.substr(0, colon);
      has_port = true;
    }
    ep->host = std::string(hostport);
    if (absl::StrContains(ep->host, ':')) {
      return absl::InvalidArgumentError(
          absl::StrCat("host ", Shown(ep->host, echo),
                       " contains ':' (write an IPv6 address in "
                       "brackets: [::1]:6379)"));
    }
  }
  if (ep->host.empty()) return absl::InvalidArgumentError("host is empty");
  for (const char c : ep->host) {
    if (c == ',') {
      return absl::InvalidArgumentError(absl::StrCat(
          "host ", Shown(ep->host, echo),
          " contains ',' (a list of servers needs redis-cluster:// or "
          "redis-sentinel://)"));
    }
    if (absl::ascii_isspace(c) || absl::ascii_iscntrl(c) || c == '@' ||
        c == '#' || c == '[' || c == ']') {
      return absl::InvalidArgumentError(absl::StrCat(
          "host ", Shown(absl::CHexEscape(ep->host), echo), " contains '",
          absl::CHexEscape(absl::string_view(&c, 1)), "'"));
    }
  }
  if (has_port) return ParsePort(port_text, &ep->port, echo);
  return absl::OkStatus();
}

// ParseRedisUrl() with the reason alone (no URL) on failure.
absl::StatusOr<Endpoint> ParseEndpoint(absl::string_view url) {
  Endpoint ep;
  absl::string_view rest = url;
  if (absl::ConsumePrefix(&rest, "unix://")) {
    ep.kind = Endpoint::Kind::kUnix;
    absl::string_view query;
    const size_t q = rest.find('?');
    if (q != absl::string_view::npos) {
      query = rest.substr(q + 1);
      rest = rest.substr(0, q);
    }
    if (rest.empty() || rest[0] != '/') {
      return absl::InvalidArgumentError(
          absl::StrCat("unix socket path ", Shown(rest, true),
                       " is not absolute (unix:///path/to/redis.sock)"));
    }
    ep.path = std::string(rest);
    if (absl::Status s = ParseQuery(query, &ep); !s.ok()) return s;
    return ep;
  }
  if (absl::ConsumePrefix(&rest, "rediss://")) {
    ep.tls = true;
  } else if (!absl::ConsumePrefix(&rest, "redis://")) {
    return absl::InvalidArgumentError(
        "expected redis://, rediss:// or unix://");
  }
  // A '#' before the last '@' belongs to the password (unencoded, but
  // accepted); after it, it would be a fragment.
  if (absl::StrContains(rest.substr(HostStart(rest)), '#')) {
    return absl::InvalidArgumentError(
        "a redis:// URL takes no #fragment (redis-sentinel://host#master "
        "names a Sentinel master)");
  }
  // Optional "?query" after the path.
  absl::string_view query;
  if (const size_t q = rest.find('?'); q != absl::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  // Userinfo ends at the last '@' (passwords may contain '@' only encoded,
  // but be lenient).
  if (const size_t at = rest.rfind('@'); at != absl::string_view::npos) {
    if (absl::Status s = ParseUserinfo(rest.substr(0, at), &ep); !s.ok()) {
      return s;
    }
    rest = rest.substr(at + 1);
  }
  const bool echo = !absl::StrContains(query, '@');
  absl::string_view hostport = rest;
  absl::string_view path;
  bool has_path = false;
  if (const size_t slash = rest.find('/'); slash != absl::string_view::npos) {
    hostport = rest.substr(0, slash);
    path = rest.substr(slash + 1);
    has_path = true;
  }
  absl::Status s = ParseHostPort(hostport, &ep, echo);
  if (s.ok() && has_path && !path.empty()) s = ParseDb(path, &ep.db, echo);
  if (s.ok()) s = ParseQuery(query, &ep, echo);
  if (!s.ok() && !echo) {
    // Most likely the host, port, db and query are a password's tail. (The
    // hint names no '@' itself: no userinfo can then match its text, which
    // url_fuzzer checks that a message never shows.)
    return absl::InvalidArgumentError(
        absl::StrCat(s.message(),
                     " (the URL's query holds an at sign: if the password "
                     "has a question mark, percent-encode it as %3F)"));
  }
  if (!s.ok()) return s;
  return ep;
}

}  // namespace

std::string Endpoint::ToString() const {
  std::string s;
  if (kind == Kind::kUnix) {
    s = absl::StrCat("unix:", path);
  } else if (absl::StrContains(host, ':')) {
    s = absl::StrCat("[", host, "]:", port);
  } else {
    s = absl::StrCat(host, ":", port);
  }
  if (db != 0) absl::StrAppend(&s, "/", db);
  return s;
}

absl::StatusOr<Endpoint> ParseRedisUrl(absl::string_view url) {
  absl::StatusOr<Endpoint> ep = ParseEndpoint(url);
  if (!ep.ok()) return Invalid(url, ep.status().message());
  return ep;
}

absl::StatusOr<Topology> ParseTopologyUrl(absl::string_view url) {
  Topology topology;
  absl::string_view rest = url;
  bool tls = false;
  int default_port = 6379;
  if (absl::ConsumePrefix(&rest, "redis-cluster://")) {
    topology.kind = Topology::Kind::kCluster;
  } else if (absl::ConsumePrefix(&rest, "rediss-cluster://")) {
    topology.kind = Topology::Kind::kCluster;
    tls = true;
  } else if (absl::ConsumePrefix(&rest, "redis-sentinel://")) {
    topology.kind = Topology::Kind::kSentinel;
    default_port = 26379;
  } else if (absl::ConsumePrefix(&rest, "rediss-sentinel://")) {
    topology.kind = Topology::Kind::kSentinel;
    default_port = 26379;
    tls = true;
  } else if (absl::StartsWith(url, "redis://") ||
             absl::StartsWith(url, "rediss://") ||
             absl::StartsWith(url, "unix://")) {
    absl::StatusOr<Endpoint> single = ParseRedisUrl(url);
    if (!single.ok()) return single.status();
    topology.endpoints.push_back(*std::move(single));
    return topology;
  } else {
    const size_t scheme_end = url.find("://");
    return Invalid(
        url, absl::StrCat(
                 scheme_end == absl::string_view::npos
                     ? std::string("no scheme")
                     : absl::StrCat(
                           "unknown scheme ",
                           Shown(absl::StrCat(url.substr(0, scheme_end), "://"),
                                 true)),
                 "; expected redis://, rediss://, unix://, "
                 "redis-cluster://, rediss-cluster://, redis-sentinel:// "
                 "or rediss-sentinel://"));
  }
  const bool sentinel = topology.kind == Topology::Kind::kSentinel;
  if (sentinel) {
    // The first '#' after the credentials (one in the password, unencoded,
    // is the password's; an '@' in the master name must be percent-encoded).
    const size_t hash = rest.find('#', HostStart(rest));
    if (hash == absl::string_view::npos || hash + 1 == rest.size()) {
      return Invalid(url, "a Sentinel URL needs #master-name at the end");
    }
    if (absl::Status s = PercentDecode(rest.substr(hash + 1), "master name",
                                       false, &topology.master_name);
        !s.ok()) {
      return Invalid(url, s.message());
    }
    rest = rest.substr(0, hash);
  } else if (rest.find('#', HostStart(rest)) != absl::string_view::npos) {
    return Invalid(url, "a cluster URL takes no #fragment");
  }
  if (const size_t q = rest.find('?'); q != absl::string_view::npos) {
    return Invalid(url, absl::StrCat("a cluster or Sentinel URL takes no "
                                     "?query (found \"",
                                     Redacted(rest.substr(q)), "\")"));
  }
  // Userinfo ends at the last '@'; the host list ends at the first '/'
  // after it.
  std::string userinfo;
  if (const size_t at = rest.rfind('@'); at != absl::string_view::npos) {
    Endpoint credentials;
    if (absl::Status s = ParseUserinfo(rest.substr(0, at), &credentials);
        !s.ok()) {
      return Invalid(url, s.message());
    }
    userinfo = absl::StrCat(rest.substr(0, at), "@");
    rest = rest.substr(at + 1);
  }
  absl::string_view hosts = rest;
  if (const size_t slash = rest.find('/'); slash != absl::string_view::npos) {
    hosts = rest.substr(0, slash);
    absl::string_view db = rest.substr(slash + 1);
    if (!sentinel) {
      return Invalid(url, absl::StrCat("Redis Cluster has only db 0 (found \"/",
                                       db, "\")"));
    }
    if (absl::Status s = ParseDb(db, &topology.db); !s.ok()) {
      return Invalid(url, s.message());
    }
  }
  int index = 0;
  for (absl::string_view host : absl::StrSplit(hosts, ',')) {
    ++index;
    if (host.empty()) {
      return Invalid(url, absl::StrCat("address ", index, " is empty"));
    }
    // Each address as a plain URL with the shared credentials; a missing
    // port is the kind's default.
    Endpoint ep;
    ep.port = default_port;
    ep.tls = tls;
    if (absl::Status s = ParseHostPort(host, &ep); !s.ok()) {
      return Invalid(url, absl::StrCat("address ", index, " (",
                                       Shown(host, true), "): ", s.message()));
    }
    if (!userinfo.empty()) {
      if (absl::Status s = ParseUserinfo(
              absl::string_view(userinfo).substr(0, userinfo.size() - 1), &ep);
          !s.ok()) {
        return Invalid(url, s.message());
      }
    }
    topology.endpoints.push_back(std::move(ep));
  }
  return topology;
}

}  // namespace redis
}  // namespace relock
