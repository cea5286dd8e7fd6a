#include "lib/redis/url.h"

#include <algorithm>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
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
std::string Redacted(absl::string_view url) {
  const size_t at = url.rfind('@');
  std::string shown = at == absl::string_view::npos
                          ? std::string(url)
                          : absl::StrCat("...", url.substr(at));
  for (size_t key = shown.find("password="); key != std::string::npos;
       key = shown.find("password=", key + 1)) {
    const size_t value = key + 9;
    const size_t end = std::min(shown.find('&', value), shown.size());
    shown.replace(value, end - value, "***");
  }
  return shown;
}

absl::Status Invalid(absl::string_view url, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid Redis URL \"", Redacted(url), "\": ", why));
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = absl::ascii_tolower(c);
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

bool PercentDecode(absl::string_view in, std::string* out) {
  out->clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out->push_back(in[i]);
      continue;
    }
    if (i + 2 >= in.size()) return false;  // needs two hex digits
    int hi = HexValue(in[i + 1]);
    int lo = HexValue(in[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return true;
}

bool ParseDb(absl::string_view text, int* db) {
  return absl::SimpleAtoi(text, db) && *db >= 0 && *db <= 1000000 &&
         !text.empty() && absl::ascii_isdigit(text[0]);
}

absl::Status ParseQuery(absl::string_view url, absl::string_view query,
                        Endpoint* ep) {
  for (absl::string_view pair : absl::StrSplit(query, '&', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(pair, absl::MaxSplits('=', 1));
    std::string value;
    if (!PercentDecode(kv.second, &value)) {
      return Invalid(url, "bad percent-encoding in query");
    }
    if (kv.first == "db") {
      if (!ParseDb(value, &ep->db)) return Invalid(url, "db is not a number");
    } else if (kv.first == "password") {
      ep->password = value;
    } else if (kv.first == "user" || kv.first == "username") {
      ep->username = value;
    } else {
      return Invalid(url, absl::StrCat("unknown parameter \"", kv.first, "\""));
    }
  }
  return absl::OkStatus();
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
  Endpoint ep;
  absl::string_view rest = url;
  if (absl::ConsumePrefix(&rest, "unix://")) {
    ep.kind = Endpoint::Kind::kUnix;
    absl::string_view query;
    size_t q = rest.find('?');
    if (q != absl::string_view::npos) {
      query = rest.substr(q + 1);
      rest = rest.substr(0, q);
    }
    if (rest.empty() || rest[0] != '/') {
      return Invalid(url, "unix socket path must be absolute (unix:///path)");
    }
    ep.path = std::string(rest);
    if (absl::Status s = ParseQuery(url, query, &ep); !s.ok()) return s;
    return ep;
  }
  if (absl::ConsumePrefix(&rest, "rediss://")) {
    ep.tls = true;
  } else if (!absl::ConsumePrefix(&rest, "redis://")) {
    return Invalid(url, "expected redis://, rediss:// or unix://");
  }
  // Optional "?query" after the path.
  absl::string_view query;
  if (size_t q = rest.find('?'); q != absl::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  // Userinfo ends at the last '@' (passwords may contain '@' only encoded,
  // but be lenient).
  if (size_t at = rest.rfind('@'); at != absl::string_view::npos) {
    absl::string_view userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
    size_t colon = userinfo.find(':');
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
    if (!PercentDecode(user, &ep.username) ||
        !PercentDecode(pass, &ep.password)) {
      return Invalid(url, "bad percent-encoding in user or password");
    }
    if (!ep.username.empty() && ep.password.empty()) {
      return Invalid(url, "a user needs a password");
    }
  }
  absl::string_view hostport = rest;
  absl::string_view path;
  if (size_t slash = rest.find('/'); slash != absl::string_view::npos) {
    hostport = rest.substr(0, slash);
    path = rest.substr(slash + 1);
  }
  absl::string_view port_text;
  if (absl::ConsumePrefix(&hostport, "[")) {
    size_t close = hostport.find(']');
    if (close == absl::string_view::npos) {
      return Invalid(url, "unterminated IPv6 address");
    }
    ep.host = std::string(hostport.substr(0, close));
    absl::string_view after = hostport.substr(close + 1);
    if (!after.empty()) {
      if (!absl::ConsumePrefix(&after, ":")) {
        return Invalid(url, "expected ':' after IPv6 address");
      }
      port_text = after;
      if (port_text.empty()) return Invalid(url, "empty port");
    }
  } else {
    size_t colon = hostport.rfind(':');
    if (colon != absl::string_view::npos) {
      port_text = hostport.substr(colon + 1);
      hostport = hostport.substr(0, colon);
      if (port_text.empty()) return Invalid(url, "empty port");
    }
    ep.host = std::string(hostport);
  }
  if (ep.host.empty()) return Invalid(url, "missing host");
  if (!port_text.empty()) {
    if (!absl::ascii_isdigit(port_text[0]) ||
        !absl::SimpleAtoi(port_text, &ep.port) || ep.port < 1 ||
        ep.port > 65535) {
      return Invalid(url, "port must be a number in 1..65535");
    }
  }
  if (!path.empty() && !ParseDb(path, &ep.db)) {
    return Invalid(url, "database must be a non-negative number");
  }
  if (absl::Status s = ParseQuery(url, query, &ep); !s.ok()) return s;
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
  } else {
    absl::StatusOr<Endpoint> single = ParseRedisUrl(url);
    if (!single.ok()) {
      return Invalid(url,
                     "expected redis://, rediss://, unix://, redis-cluster://, "
                     "rediss-cluster://, redis-sentinel:// or "
                     "rediss-sentinel://");
    }
    topology.endpoints.push_back(*std::move(single));
    return topology;
  }
  const bool sentinel = topology.kind == Topology::Kind::kSentinel;
  if (sentinel) {
    const size_t hash = rest.find('#');
    if (hash == absl::string_view::npos || hash + 1 == rest.size()) {
      return Invalid(url, "a Sentinel URL needs #master-name at the end");
    }
    if (!PercentDecode(rest.substr(hash + 1), &topology.master_name)) {
      return Invalid(url, "bad percent-encoding in the master name");
    }
    rest = rest.substr(0, hash);
  } else if (absl::StrContains(rest, '#')) {
    return Invalid(url, "a cluster URL takes no #fragment");
  }
  if (absl::StrContains(rest, '?')) {
    return Invalid(url, "a cluster or Sentinel URL takes no ?query");
  }
  // Userinfo ends at the last '@'; the host list ends at the first '/'
  // after it.
  std::string userinfo;
  if (size_t at = rest.rfind('@'); at != absl::string_view::npos) {
    userinfo = absl::StrCat(rest.substr(0, at), "@");
    rest = rest.substr(at + 1);
  }
  if (!userinfo.empty()) {
    absl::StatusOr<Endpoint> credentials =
        ParseRedisUrl(absl::StrCat("redis://", userinfo, "host"));
    if (!credentials.ok()) {
      return Invalid(url,
                     "bad percent-encoding in user or password, or a "
                     "user without a password");
    }
  }
  absl::string_view hosts = rest;
  if (size_t slash = rest.find('/'); slash != absl::string_view::npos) {
    hosts = rest.substr(0, slash);
    absl::string_view db = rest.substr(slash + 1);
    if (!sentinel) return Invalid(url, "Redis Cluster has only db 0");
    if (!ParseDb(db, &topology.db)) {
      return Invalid(url, "database must be a non-negative number");
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
    const bool has_port =
        absl::StartsWith(host, "[")
            ? absl::StrContains(host.substr(host.find(']') + 1), ':')
            : absl::StrContains(host, ':');
    absl::StatusOr<Endpoint> ep = ParseRedisUrl(
        absl::StrCat(tls ? "rediss://" : "redis://", userinfo, host,
                     has_port ? "" : absl::StrCat(":", default_port)));
    if (!ep.ok()) {
      return Invalid(url, absl::StrCat("address ", index, " (\"", host,
                                       "\") is not host[:port]"));
    }
    topology.endpoints.push_back(*std::move(ep));
  }
  return topology;
}

}  // namespace redis
}  // namespace relock
