// libFuzzer target: server replies. Arbitrary bytes go through a hiredis
// reader (as they would from a socket), and every reply it produces goes
// through what relock does with replies: relock::redis::Reply / ReplyView
// (lib/redis/reply.h) and its accessors on every nested element, Describe(),
// ScriptSet::IsNoScript(), ErrorReplyToStatus(), and the cluster routing
// parsers (lib/redis/cluster.h): SlotMap::FromShards() / FromSlots() of every
// reply and ParseRedirect() of every error.
//
// Not reached from here (they are not functions of a reply): the script
// result checks inside lib/lock/attempt.cc, release.cc and holds.cc
// (acquire, release and renewal tallies) and Subscriber::OnPush.
//
// Checked besides "no crash, no ASan/UBSan report": exactly one type
// predicate holds per reply; an error reply maps to a non-OK status that
// quotes the server's text; IsNoScript() is true exactly for "-NOSCRIPT...";
// a slot map that parses has sorted, disjoint ranges of valid slots, each
// with a master that has a port, and Find() agrees with its ranges; a parsed
// redirection names a valid slot and port.
//
//   build-fuzz/fuzz/reply_fuzzer fuzz/corpus/reply_fuzzer   (see
//   scripts/test.sh)

#include <hiredis/hiredis.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "lib/redis/cluster.h"
#include "lib/redis/errors.h"
#include "lib/redis/reply.h"
#include "lib/redis/script.h"

namespace {

using relock::redis::Reply;
using relock::redis::ReplyView;

// hiredis 0.14.1 allocates an array reply's element vector as soon as it
// reads the header: "*2147483647\r\n" asks for 16 GiB, which libFuzzer
// reports as out-of-memory inside hiredis (a hiredis issue, not relock's;
// hiredis 1.0 added redisReader::maxelements). Skip inputs that declare
// aggregates larger than this, so the fuzzer spends its time on relock.
constexpr long long kMaxElements = 1 << 16;

bool DeclaresHugeAggregate(absl::string_view in) {
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '*') continue;
    size_t j = i + 1;
    if (j < in.size() && in[j] == '-') ++j;
    long long n = 0;
    for (; j < in.size() && absl::ascii_isdigit(in[j]); ++j) {
      n = n * 10 + (in[j] - '0');
      if (n > kMaxElements) return true;
    }
  }
  return false;
}

[[noreturn]] void Fail(const char* what, const ReplyView& v) {
  fprintf(stderr, "reply_fuzzer: invariant violated: %s\n  reply: %s\n", what,
          v.Describe().c_str());
  abort();
}

#define REPLY_CHECK(cond, v)     \
  do {                           \
    if (!(cond)) Fail(#cond, v); \
  } while (0)

void Walk(const ReplyView& v, int depth) {
  const int kinds = v.is_nil() + v.is_error() + v.is_integer() + v.is_string() +
                    v.is_status() + v.is_array();
  REPLY_CHECK(kinds == 1, v);
  REPLY_CHECK(depth < 64, v);
  const std::string described = v.Describe();
  REPLY_CHECK(!described.empty(), v);
  const absl::string_view s = v.str();
  if (v.is_error() || v.is_status()) {
    REPLY_CHECK(absl::StrContains(described, s), v);
  }
  (void)v.integer();
  if (!v.is_array()) REPLY_CHECK(v.size() == 0, v);
  for (size_t i = 0; i < v.size(); ++i) Walk(v[i], depth + 1);
}

void CheckSlotMap(const relock::redis::SlotMap& map, const ReplyView& v) {
  int next = 0;  // the first slot the next range may start at
  for (const relock::redis::SlotRange& r : map.ranges()) {
    REPLY_CHECK(r.first >= next && r.first <= r.last &&
                    r.last < relock::redis::kClusterSlots,
                v);
    REPLY_CHECK(r.master.endpoint.port > 0 && r.master.endpoint.port < 65536,
                v);
    REPLY_CHECK(map.Find(r.first) == &r && map.Find(r.last) == &r, v);
    if (r.first > next) REPLY_CHECK(map.Find(r.first - 1) == nullptr, v);
    next = r.last + 1;
  }
  REPLY_CHECK(map.unassigned() >= 0, v);
}

void ExerciseCluster(const Reply& reply) {
  const ReplyView v = reply.view();
  relock::redis::Endpoint from;
  from.host = "10.0.0.1";
  from.port = 7000;
  for (const bool tls : {false, true}) {
    from.tls = tls;
    for (const auto& map : {relock::redis::SlotMap::FromShards(v, from),
                            relock::redis::SlotMap::FromSlots(v, from)}) {
      if (map.ok()) CheckSlotMap(*map, v);
    }
  }
  if (reply.is_error()) {
    const absl::optional<relock::redis::Redirect> redirect =
        relock::redis::ParseRedirect(reply.str(), from);
    if (redirect.has_value()) {
      REPLY_CHECK(redirect->slot >= 0 &&
                      redirect->slot < relock::redis::kClusterSlots &&
                      redirect->endpoint.port > 0 &&
                      redirect->endpoint.port < 65536,
                  v);
    }
  }
}

void Exercise(const Reply& reply) {
  const ReplyView v = reply.view();
  Walk(v, 0);
  // The top-level shortcuts agree with the view.
  REPLY_CHECK(reply.is_nil() == v.is_nil() &&
                  reply.is_error() == v.is_error() &&
                  reply.is_integer() == v.is_integer() &&
                  reply.integer() == v.integer() && reply.str() == v.str(),
              v);
  REPLY_CHECK((*reply).is_array() == v.is_array(), v);

  const bool noscript = relock::redis::ScriptSet::IsNoScript(reply);
  REPLY_CHECK(
      noscript == (v.is_error() && absl::StartsWith(v.str(), "NOSCRIPT")), v);
  if (reply.is_error()) {
    const absl::Status status =
        relock::redis::ErrorReplyToStatus("fuzz", reply.str());
    REPLY_CHECK(!status.ok(), v);
    REPLY_CHECK(absl::StrContains(status.message(), reply.str()), v);
  }
  ExerciseCluster(reply);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view in(reinterpret_cast<const char*>(data), size);
  if (DeclaresHugeAggregate(in)) return 0;
  redisReader* reader = redisReaderCreate();
  if (reader == nullptr) return 0;
  // Feed in two pieces, as a socket might deliver them.
  const size_t half = size / 2;
  if (redisReaderFeed(reader, in.data(), half) == REDIS_OK &&
      redisReaderFeed(reader, in.data() + half, size - half) == REDIS_OK) {
    while (true) {
      void* raw = nullptr;
      if (redisReaderGetReply(reader, &raw) != REDIS_OK) break;  // bad protocol
      if (raw == nullptr) break;  // needs more bytes
      Exercise(Reply(static_cast<redisReply*>(raw)));
    }
  }
  redisReaderFree(reader);
  return 0;
}
