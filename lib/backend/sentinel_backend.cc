#include "lib/backend/sentinel_backend.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/optional.h"
#include "lib/redis/cluster.h"
#include "lib/redis/errors.h"
#include "lib/redis/resp.h"

namespace relock {
namespace backend {
namespace {

constexpr absl::string_view kSwitchMaster = "+switch-master";

std::string SentinelName(const SentinelOptions& options) {
  return absl::StrCat(
      "Redis Sentinel master \"", options.master_name, "\" (sentinels ",
      absl::StrJoin(options.sentinels, ",",
                    [](std::string* out, const redis::Endpoint& ep) {
                      out->append(ep.ToString());
                    }),
      ")");
}

bool Unreachable(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable ||
         s.code() == absl::StatusCode::kDeadlineExceeded;
}

// Whether a ROLE reply names a master.
bool IsMasterRole(const redis::Reply& reply) {
  const redis::ReplyView view = reply.view();
  return view.is_array() && view.size() > 0 &&
         (view[0].is_string() || view[0].is_status()) &&
         view[0].str() == "master";
}

}  // namespace

SentinelBackend::SentinelBackend(io::EventLoop* loop, SentinelOptions options,
                                 std::vector<redis::ScriptSource> scripts)
    : RoutedBackend(loop, options.node, std::move(scripts),
                    SentinelName(options)),
      master_name_(std::move(options.master_name)),
      sentinel_endpoints_(std::move(options.sentinels)) {}

SentinelBackend::~SentinelBackend() { Close(); }

absl::StatusOr<std::unique_ptr<SentinelBackend>> SentinelBackend::Create(
    io::EventLoop* loop, SentinelOptions options,
    std::vector<redis::ScriptSource> scripts) {
  if (options.sentinels.empty()) {
    return absl::InvalidArgumentError("Redis Sentinel: no sentinel addresses");
  }
  if (options.master_name.empty()) {
    return absl::InvalidArgumentError("Redis Sentinel: no master name");
  }
  std::unique_ptr<SentinelBackend> backend(
      new SentinelBackend(loop, std::move(options), std::move(scripts)));
  for (const redis::Endpoint& endpoint : backend->sentinel_endpoints_) {
    NodeOptions sentinel;
    sentinel.connection = backend->node_options().connection;
    sentinel.connection.endpoint = endpoint;
    sentinel.connection.endpoint.db = 0;  // sentinels have no databases
    sentinel.connect_now = false;         // one may be down
    sentinel.direct_calls = false;
    absl::StatusOr<std::unique_ptr<NodeBackend>> made =
        NodeBackend::Create(loop, std::move(sentinel), {});
    if (!made.ok()) return made.status();
    backend->sentinels_.push_back(*std::move(made));
  }
  std::vector<std::string> failures;
  bool all_not_found = true;
  for (size_t i = 0; i < backend->sentinels_.size(); ++i) {
    NodeBackend& sentinel = *backend->sentinels_[i];
    const Deadline deadline = Deadline::After(sentinel.backstop());
    absl::StatusOr<redis::Endpoint> at = backend->AskBlocking(i, deadline);
    if (!at.ok()) {
      // A refusal (bad sentinel credentials, ACL) is the same on every
      // sentinel: say it now.
      if (!Unreachable(at.status()) &&
          at.status().code() != absl::StatusCode::kNotFound &&
          at.status().code() != absl::StatusCode::kInternal) {
        return at.status();
      }
      all_not_found &= at.status().code() == absl::StatusCode::kNotFound;
      failures.push_back(std::string(at.status().message()));
      continue;
    }
    all_not_found = false;
    NodeOptions node = backend->node_options();
    node.connection.endpoint = *at;
    node.connect_now = true;
    node.require_master = false;  // CheckMaster() below: Unavailable
    absl::StatusOr<std::unique_ptr<NodeBackend>> master =
        NodeBackend::Create(loop, std::move(node), backend->scripts());
    if (!master.ok()) {
      if (!Unreachable(master.status())) return master.status();
      failures.push_back(absl::StrCat("master ", at->ToString(), " (from ",
                                      sentinel.node_name(0),
                                      "): ", master.status().message()));
      continue;
    }
    NodeBackend* raw = master->get();
    backend->Adopt(*std::move(master));
    if (absl::Status s = backend->CheckMaster(raw, deadline); !s.ok()) {
      backend->Retire(*at);
      if (!Unreachable(s)) return s;
      failures.push_back(std::string(s.message()));
      continue;
    }
    backend->preferred_.store(i);
    backend->Install(redis::SlotMap::OneMaster(*at));
    backend->Watch();
    backend->ScheduleRefresh();
    return backend;
  }
  const std::string why =
      absl::StrCat(backend->name(), ": ", absl::StrJoin(failures, "; "));
  if (all_not_found) return absl::NotFoundError(why);
  return absl::UnavailableError(why);
}

absl::optional<redis::Endpoint> SentinelBackend::MasterAt(
    const redis::Reply& reply) const {
  const redis::ReplyView view = reply.view();
  int port = 0;
  if (!view.is_array() || view.size() != 2 || !view[0].is_string() ||
      !view[1].is_string() || view[0].str().empty() ||
      !absl::SimpleAtoi(view[1].str(), &port) || port <= 0 || port > 65535) {
    return absl::nullopt;
  }
  redis::Endpoint endpoint = node_options().connection.endpoint;
  endpoint.kind = redis::Endpoint::Kind::kTcp;
  endpoint.host = std::string(view[0].str());
  endpoint.port = port;
  return endpoint;
}

absl::StatusOr<redis::Endpoint> SentinelBackend::AskBlocking(
    size_t i, Deadline deadline) {
  NodeBackend& sentinel = *sentinels_[i];
  const absl::string_view argv[] = {"SENTINEL", "get-master-addr-by-name",
                                    master_name_};
  std::vector<Answer> answers = sentinel.Command(argv, deadline);
  if (!answers[0].reply.ok()) return answers[0].reply.status();
  const redis::Reply& reply = *answers[0].reply;
  const std::string what = absl::StrCat("SENTINEL get-master-addr-by-name on ",
                                        sentinel.node_name(0));
  if (reply.is_error()) return redis::ErrorReplyToStatus(what, reply.str());
  if (reply.is_nil()) {
    return absl::NotFoundError(absl::StrCat(sentinel.node_name(0),
                                            " monitors no master named \"",
                                            master_name_, "\""));
  }
  absl::optional<redis::Endpoint> at = MasterAt(reply);
  if (!at.has_value()) {
    return absl::InternalError(
        absl::StrCat(what, ": not an address: ", reply.view().Describe()));
  }
  return *std::move(at);
}

absl::Status SentinelBackend::CheckMaster(NodeBackend* node,
                                          Deadline deadline) {
  const absl::string_view argv[] = {"ROLE"};
  std::vector<Answer> answers = node->Command(argv, deadline);
  if (!answers[0].reply.ok()) return answers[0].reply.status();
  if (answers[0].reply->is_error()) {
    return redis::ErrorReplyToStatus(
        absl::StrCat("ROLE on ", node->node_name(0)), answers[0].reply->str());
  }
  if (!IsMasterRole(*answers[0].reply)) {
    return absl::UnavailableError(absl::StrCat(
        "the sentinels name ", node->node_name(0),
        " as the master, but it is not one (a failover in progress?): ROLE ",
        answers[0].reply->view().Describe()));
  }
  return absl::OkStatus();
}

void SentinelBackend::Watch() {
  for (const std::unique_ptr<NodeBackend>& sentinel : sentinels_) {
    // Told of every message, and of every (re)subscription: either may mean
    // a new master.
    switch_watches_.push_back(sentinel->Subscribe(
        std::string(kSwitchMaster), pubsub::WakePolicy::kWakeAll, "",
        [this] { RefreshSoon(); }));
  }
}

std::string SentinelBackend::master() const {
  std::shared_ptr<const redis::SlotMap> map = slot_map();
  if (map == nullptr || map->ranges().empty()) return "";
  return map->ranges()[0].master.endpoint.ToString();
}

void SentinelBackend::StartRefresh() { RefreshStep(0); }

void SentinelBackend::RefreshStep(size_t asked) {
  if (asked >= sentinels_.size() || closed()) return RefreshDone();
  const size_t i = (preferred_.load() + asked) % sentinels_.size();
  std::string wire;
  redis::AppendCommand({"SENTINEL", "get-master-addr-by-name", master_name_},
                       &wire);
  sentinels_[i]->SendOnNode(std::move(wire), Resend::kIfDropped, nullptr,
                            [this, asked, i](Answer answer) {
                              absl::optional<redis::Endpoint> at;
                              if (answer.reply.ok())
                                at = MasterAt(*answer.reply);
                              if (!at.has_value())
                                return RefreshStep(asked + 1);
                              if (at->ToString() == master()) {
                                preferred_.store(i);
                                return RefreshDone();  // no news
                              }
                              Confirm(*std::move(at), asked);
                            });
}

void SentinelBackend::Confirm(redis::Endpoint master, size_t asked) {
  NodeBackend* node = NodeAt(master);
  if (node == nullptr) return RefreshDone();  // closed
  std::string wire;
  redis::AppendCommand({"ROLE"}, &wire);
  node->SendOnNode(
      std::move(wire), Resend::kIfDropped, nullptr,
      [this, master = std::move(master), asked](Answer answer) {
        if (!answer.reply.ok() || !IsMasterRole(*answer.reply)) {
          // Not (yet) a master: a sentinel that has not heard
          // of the switch, or one still in progress.
          return RefreshStep(asked + 1);
        }
        preferred_.store((preferred_.load() + asked) % sentinels_.size());
        const std::string before = this->master();
        if (!before.empty() && before != master.ToString() &&
            node_options().connection.observer != nullptr) {
          node_options().connection.observer->Log(
              absl::LogSeverity::kInfo,
              absl::StrCat("Sentinel master \"", master_name_, "\" moved from ",
                           before, " to ", master.ToString()));
        }
        Install(redis::SlotMap::OneMaster(master));
        RefreshDone();
      });
}

void SentinelBackend::Close() {
  RoutedBackend::Close();
  for (const std::unique_ptr<NodeBackend>& sentinel : sentinels_) {
    sentinel->Close();
  }
}

}  // namespace backend
}  // namespace relock
