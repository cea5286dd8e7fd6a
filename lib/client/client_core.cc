#include "lib/client/client_core.h"

#include <algorithm>
#include <iostream>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "lib/lock/owner.h"
#include "lib/redis/url.h"

namespace relock {
namespace internal {
absl::Status ValidateClientOptions(const ClientOptions& o) {
  auto invalid = [](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("ClientOptions: ", what));
  };
  if (o.connect_timeout <= absl::ZeroDuration() ||
      o.connect_timeout == absl::InfiniteDuration()) {
    return invalid("connect_timeout must be positive and finite");
  }
  if (o.command_timeout <= absl::ZeroDuration() ||
      o.command_timeout == absl::InfiniteDuration()) {
    return invalid("command_timeout must be positive and finite");
  }
  if (o.pool_size < 1 || o.pool_size > 1024) {
    return invalid(
        absl::StrCat("pool_size must be in [1, 1024], not ", o.pool_size));
  }
  if (o.lock_watchdog_timeout < absl::Milliseconds(30) ||
      o.lock_watchdog_timeout > absl::Hours(365 * 24)) {
    return invalid("lock_watchdog_timeout must be in [30ms, 365 days]");
  }
  if (absl::StrContains(o.client_id, ':')) {
    return invalid("client_id must not contain ':'");
  }
  return absl::OkStatus();
}

ClientCore::ClientCore(ClientOptions options, std::string id,
                       redis::ConnectionOptions conn_options)
    : options_(std::move(options)),
      id_(std::move(id)),
      watchdog_lease_ms_(absl::StrCat(
          absl::ToInt64Milliseconds(options_.lock_watchdog_timeout))),
      pool_(std::move(conn_options), options_.pool_size),
      scripts_(LockScripts()) {}

ClientCore::~ClientCore() { Close(); }

absl::StatusOr<std::shared_ptr<ClientCore>> ClientCore::Create(
    ClientOptions options) {
  if (absl::Status s = ValidateClientOptions(options); !s.ok()) return s;
  absl::StatusOr<redis::Endpoint> endpoint = redis::ParseRedisUrl(options.url);
  if (!endpoint.ok()) return endpoint.status();
  redis::ConnectionOptions conn_options;
  conn_options.endpoint = *std::move(endpoint);
  conn_options.connect_timeout = options.connect_timeout;
  conn_options.command_timeout = options.command_timeout;
  std::string id =
      options.client_id.empty() ? lock::NewClientId() : options.client_id;
  std::shared_ptr<ClientCore> core(
      new ClientCore(std::move(options), std::move(id), conn_options));
  {
    absl::StatusOr<redis::PooledConnection> conn = core->pool_.Get();
    if (!conn.ok()) return conn.status();
    if (absl::Status s = core->scripts_.Load(**conn); !s.ok()) return s;
  }
  absl::StatusOr<std::unique_ptr<pubsub::Subscriber>> sub =
      pubsub::Subscriber::Start(conn_options);
  if (!sub.ok()) return sub.status();
  core->subscriber_ = *std::move(sub);
  ClientCore* raw = core.get();
  core->events_ = std::make_unique<EventQueue>(
      [raw](const LockEvent& event) { raw->Deliver(event); });
  core->watchdog_ = std::make_unique<watchdog::Watchdog>(
      core->options_.lock_watchdog_timeout, &core->holds_, &core->timers_,
      [raw](const std::vector<lock::RenewItem>& items) {
        return raw->RenewBatch(items);
      },
      [raw](const lock::LostHold& hold, const absl::Status& why) {
        raw->PostEvent(LockEvent{LockEventType::kLockLost, hold.name, why,
                                 lock::OwnerField(raw->id_, hold.thread)});
      });
  return core;
}

absl::Status ClientCore::CheckOpen() const {
  if (closed()) return absl::FailedPreconditionError("the client is closed");
  return absl::OkStatus();
}

absl::StatusOr<redis::Reply> ClientCore::RunScript(
    ScriptId script, std::initializer_list<absl::string_view> keys,
    std::initializer_list<absl::string_view> args, Deadline deadline,
    bool retry_if_dropped, bool* retried) {
  if (retried != nullptr) *retried = false;
  for (int attempt = 0;; ++attempt) {
    absl::StatusOr<redis::PooledConnection> conn = pool_.Get(deadline);
    if (!conn.ok()) return conn.status();
    absl::StatusOr<redis::Reply> r =
        scripts_.Eval(**conn, script, keys, args, deadline);
    if (r.ok() || !retry_if_dropped || attempt > 0 || !(*conn)->dropped()) {
      return r;
    }
    if (retried != nullptr) *retried = true;
  }
}

absl::StatusOr<redis::Reply> ClientCore::RunCommand(
    std::initializer_list<absl::string_view> argv) {
  absl::StatusOr<redis::PooledConnection> conn = pool_.Get();
  if (!conn.ok()) return conn.status();
  return (*conn)->Command(argv);
}

absl::StatusOr<std::vector<bool>> ClientCore::RenewBatch(
    const std::vector<lock::RenewItem>& items) {
  absl::StatusOr<redis::PooledConnection> conn = pool_.Get();
  if (!conn.ok()) return conn.status();
  const size_t calls =
      (items.size() + kRenewKeysPerCall - 1) / kRenewKeysPerCall;
  std::vector<absl::string_view> keys, args;
  auto build = [&](size_t call) {
    keys.clear();
    args.assign(1, watchdog_lease_ms_);
    const size_t end = std::min(items.size(), (call + 1) * kRenewKeysPerCall);
    for (size_t i = call * kRenewKeysPerCall; i < end; ++i) {
      keys.push_back(items[i].name);
      args.push_back(items[i].owner);
    }
  };
  auto parse = [&](size_t call, const redis::Reply& reply,
                   std::vector<bool>* out) -> absl::Status {
    if (reply.is_error()) {
      return redis::ErrorReplyToStatus("renew script", reply.str());
    }
    const redis::ReplyView v = reply.view();
    const size_t first = call * kRenewKeysPerCall;
    const size_t n = std::min(kRenewKeysPerCall, items.size() - first);
    if (!v.is_array() || v.size() != n) {
      return absl::InternalError(
          absl::StrCat("renew script: unexpected reply ", v.Describe()));
    }
    for (size_t i = 0; i < n; ++i) {
      if (!v[i].is_integer()) {
        return absl::InternalError(
            absl::StrCat("renew script: unexpected element ", v[i].Describe()));
      }
      (*out)[first + i] = v[i].integer() == 1;
    }
    return absl::OkStatus();
  };
  for (size_t call = 0; call < calls; ++call) {
    build(call);
    if (absl::Status s = scripts_.Append(**conn, kRenewScript, keys, args);
        !s.ok()) {
      return s;
    }
  }
  renew_round_trips_.fetch_add(1, std::memory_order_relaxed);
  std::vector<bool> renewed(items.size());
  std::vector<size_t> noscript;
  for (size_t call = 0; call < calls; ++call) {
    absl::StatusOr<redis::Reply> reply = (*conn)->GetReply();
    if (!reply.ok()) return reply.status();
    if (redis::ScriptSet::IsNoScript(*reply)) {
      noscript.push_back(call);  // the script cache was flushed: redo below
      continue;
    }
    if (absl::Status s = parse(call, *reply, &renewed); !s.ok()) return s;
  }
  for (size_t call : noscript) {
    build(call);
    absl::StatusOr<redis::Reply> reply =
        scripts_.Eval(**conn, kRenewScript, keys, args);
    renew_round_trips_.fetch_add(1, std::memory_order_relaxed);
    if (!reply.ok()) return reply.status();
    if (absl::Status s = parse(call, *reply, &renewed); !s.ok()) return s;
  }
  return renewed;
}

void ClientCore::Deliver(const LockEvent& event) const {
  if (options_.on_lock_event) {
    options_.on_lock_event(event);
    return;
  }
  std::cerr << "relock: " << LockEventTypeName(event.type) << " "
            << lock::QuoteName(event.lock_name) << ": " << event.status << "\n";
}

void ClientCore::Report(LockEventType type, absl::string_view lock_name,
                        absl::Status status) {
  Deliver(LockEvent{type, std::string(lock_name), std::move(status),
                    lock::OwnerField(id_, lock::CurrentThreadNumber())});
}

void ClientCore::PostEvent(LockEvent event) {
  if (events_ != nullptr) events_->Post(std::move(event));
}

void ClientCore::Close() {
  if (closed_.exchange(true, std::memory_order_acq_rel)) return;
  // No renewal after this point, so none can land after the releases below.
  if (watchdog_ != nullptr) watchdog_->Stop();
  if (subscriber_ != nullptr) subscriber_->Close();  // wakes waiters
  for (auto& [key, hold] : holds_.TakeAll()) {
    const std::string& name = key.first;
    const std::string owner = lock::OwnerField(id_, key.second);
    const std::string channel = lock::UnlockChannel(name);
    absl::StatusOr<redis::Reply> r = RunScript(
        kReleaseAllScript, {name, channel}, {lock::kUnlockMessage, owner});
    absl::Status status = r.status();
    if (r.ok() && r->is_error()) {
      status = redis::ErrorReplyToStatus("release on close", r->str());
    } else if (r.ok() && !r->is_integer()) {
      status = absl::InternalError(absl::StrCat(
          "release on close: unexpected reply ", r->view().Describe()));
    } else if (r.ok() && r->integer() == 0) {
      status = absl::AbortedError(
          "the lock's lease had already been lost before the client closed");
    }
    Deliver(LockEvent{LockEventType::kReleasedOnClose, name, status, owner});
  }
  timers_.Shutdown();
  if (events_ != nullptr) events_->Stop();  // delivers queued events first
  pool_.Close();
}

}  // namespace internal

const char* LockEventTypeName(LockEventType type) {
  switch (type) {
    case LockEventType::kUnlockFailed:
      return "unlock-failed";
    case LockEventType::kLockLost:
      return "lock-lost";
    case LockEventType::kReleasedOnClose:
      return "released-on-close";
  }
  return "unknown";
}

}  // namespace relock
