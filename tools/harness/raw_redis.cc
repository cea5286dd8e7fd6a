// The safety harness's plain hiredis connections (raw_redis.h).

#include "tools/harness/raw_redis.h"

#include <hiredis/hiredis.h>

#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "tools/harness/record.h"

namespace relock {
namespace harness {

RawRedis::RawRedis(std::string host, int port, absl::Duration timeout)
    : host_(std::move(host)), port_(port), timeout_(timeout) {}

bool RawRedis::EnsureConnected() {
  if (conn_.has_value()) return true;
  testing::RawConnectionOptions options;
  options.connect_timeout = absl::Seconds(1);
  options.command_timeout = timeout_;
  absl::StatusOr<testing::RawConnection> conn =
      testing::RawConnection::Connect(host_, port_, options);
  if (!conn.ok()) return false;
  conn_.emplace(*std::move(conn));
  testing::RawReply r = Command({"CLIENT", "SETNAME", kRawClientName});
  const bool ok = r != nullptr && r->type == REDIS_REPLY_STATUS;
  if (!ok) conn_.reset();
  return ok;
}

absl::optional<int64_t> RawRedis::Get(const std::string& key) {
  return IntegerOrZero(Command({"GET", key}));
}

bool RawRedis::Set(const std::string& key, int64_t value) {
  testing::RawReply r = Command({"SET", key, absl::StrCat(value)});
  return r != nullptr && r->type == REDIS_REPLY_STATUS;
}

absl::optional<int64_t> RawRedis::Incr(const std::string& key) {
  testing::RawReply r = Command({"INCR", key});
  if (r == nullptr || r->type != REDIS_REPLY_INTEGER) return absl::nullopt;
  return r->integer;
}

namespace {

// The fenced resource (KEYS: the counter, its highest accepted token; ARGV:
// the value, the writer's token): refuses a token below the highest it has
// accepted, and says which it was. An equal token is the same holder's.
constexpr char kFencedSetScript[] = R"lua(
local high = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[2]) < high then return {0, high} end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
return {1, high}
)lua";

}  // namespace

absl::optional<RawRedis::FencedWrite> RawRedis::FencedSet(
    const std::string& key, int64_t value, int64_t token) {
  testing::RawReply r =
      Command({"EVAL", kFencedSetScript, "2", key, FenceKey(key),
               absl::StrCat(value), absl::StrCat(token)});
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
      r->element[0]->type != REDIS_REPLY_INTEGER ||
      r->element[1]->type != REDIS_REPLY_INTEGER) {
    return absl::nullopt;
  }
  return FencedWrite{r->element[0]->integer == 1, r->element[1]->integer};
}

absl::optional<int64_t> RawRedis::IntegerOrZero(const testing::RawReply& r) {
  if (r == nullptr) return absl::nullopt;
  if (r->type == REDIS_REPLY_NIL) return 0;
  int64_t v = 0;
  if (r->type == REDIS_REPLY_STRING &&
      absl::SimpleAtoi(absl::string_view(r->str, r->len), &v)) {
    return v;
  }
  return absl::nullopt;
}

testing::RawReply RawRedis::Command(const std::vector<std::string>& argv) {
  if (!conn_.has_value() && !EnsureConnected()) return nullptr;
  absl::StatusOr<testing::RawReply> r = conn_->Call(argv);
  if (!r.ok()) {
    conn_.reset();
    return nullptr;
  }
  return *std::move(r);
}

RawKeys::RawKeys(std::string host, int port, absl::Duration timeout,
                 std::vector<std::string> sentinels, std::string master_name)
    : seed_(absl::StrCat(host, ":", port)),
      timeout_(timeout),
      sentinels_(std::move(sentinels)),
      master_name_(std::move(master_name)) {}

std::string RawKeys::AskSentinels() {
  for (const std::string& sentinel : sentinels_) {
    testing::RawReply r = Node(sentinel).Command(
        {"SENTINEL", "get-master-addr-by-name", master_name_});
    if (r != nullptr && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_STRING &&
        r->element[1]->type == REDIS_REPLY_STRING) {
      return absl::StrCat(
          absl::string_view(r->element[0]->str, r->element[0]->len), ":",
          absl::string_view(r->element[1]->str, r->element[1]->len));
    }
  }
  return "";
}

absl::optional<int64_t> RawKeys::HGet(const std::string& key,
                                      const std::string& field) {
  return RawRedis::IntegerOrZero(Run(key, {"HGET", key, field}));
}

int64_t RawKeys::PTtl(const std::string& key) {
  testing::RawReply r = Run(key, {"PTTL", key});
  if (r == nullptr) return -3;
  return r->type == REDIS_REPLY_INTEGER ? r->integer : -3;
}

std::vector<std::string> RawKeys::HKeys(const std::string& key) {
  std::vector<std::string> keys;
  testing::RawReply r = Run(key, {"HKEYS", key});
  if (r != nullptr && r->type == REDIS_REPLY_ARRAY) {
    for (size_t i = 0; i < r->elements; ++i) {
      keys.emplace_back(r->element[i]->str, r->element[i]->len);
    }
  }
  return keys;
}

testing::RawReply RawKeys::Run(const std::string& key,
                               const std::vector<std::string>& argv) {
  if (!sentinels_.empty()) {
    const int64_t now = MonotonicNanos();
    if (primary_.empty() || now - primary_asked_ns_ > 1'000'000'000) {
      primary_asked_ns_ = now;
      const std::string named = AskSentinels();
      if (!named.empty()) primary_ = named;
    }
    if (primary_.empty()) return nullptr;
    testing::RawReply r = Node(primary_).Command(argv);
    if (r == nullptr || r->type == REDIS_REPLY_ERROR) {
      primary_asked_ns_ = 0;  // ask again next time
      return nullptr;
    }
    return r;
  }
  auto known = where_.find(key);
  std::string node = known == where_.end() ? seed_ : known->second;
  bool asking = false;
  for (int hop = 0; hop < 6; ++hop) {
    RawRedis& conn = Node(node);
    if (asking && conn.Command({"ASKING"}) == nullptr) return nullptr;
    testing::RawReply r = conn.Command(argv);
    if (r == nullptr) return nullptr;
    if (r->type != REDIS_REPLY_ERROR) {
      if (!asking) where_[key] = node;
      return r;
    }
    // "MOVED <slot> <host>:<port>" or "ASK <slot> <host>:<port>".
    std::vector<std::string> words =
        absl::StrSplit(absl::string_view(r->str, r->len), ' ');
    if (words.size() != 3 || (words[0] != "MOVED" && words[0] != "ASK")) {
      return nullptr;
    }
    asking = words[0] == "ASK";
    node = words[2];
  }
  return nullptr;
}

RawRedis& RawKeys::Node(const std::string& node) {
  std::unique_ptr<RawRedis>& conn = nodes_[node];
  if (conn == nullptr) {
    const size_t colon = node.rfind(':');
    int port = 0;
    (void)absl::SimpleAtoi(node.substr(colon + 1), &port);
    conn = std::make_unique<RawRedis>(node.substr(0, colon), port, timeout_);
  }
  return *conn;
}

}  // namespace harness
}  // namespace relock
