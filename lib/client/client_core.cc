#include "lib/client/client_core.h"

#include <pthread.h>

#include <algorithm>
#include <iostream>
#include <mutex>
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

namespace {

// Every live core, for the fork handlers. The mutex is held across fork()
// (prepare .. parent/child), so the child finds the list consistent.
struct LiveCores {
  Mutex mu;
  std::vector<std::weak_ptr<ClientCore>> cores ABSL_GUARDED_BY(mu);
};

LiveCores& Live() {
  static LiveCores* const live = new LiveCores;
  return *live;
}

void RegisterLiveCore(const std::shared_ptr<ClientCore>& core) {
  static std::once_flag once;
  std::call_once(once, [] {
    pthread_atfork(
        [] { Live().mu.Lock(); }, [] { Live().mu.Unlock(); },
        []() ABSL_NO_THREAD_SAFETY_ANALYSIS {
          for (const std::weak_ptr<ClientCore>& weak : Live().cores) {
            if (std::shared_ptr<ClientCore> core = weak.lock()) {
              core->BecomeInertInForkedChild();
              // Never destroyed in the child: its destructor would join
              // threads that do not exist here and close shared sockets.
              new std::shared_ptr<ClientCore>(std::move(core));
            }
          }
          Live().mu.Unlock();
        });
  });
  LiveCores& live = Live();
  MutexLock lock(&live.mu);
  live.cores.erase(std::remove_if(live.cores.begin(), live.cores.end(),
                                  [](const std::weak_ptr<ClientCore>& w) {
                                    return w.expired();
                                  }),
                   live.cores.end());
  live.cores.push_back(core);
}

}  // namespace

ClientCore::ClientCore(ClientOptions options, std::string id,
                       redis::ConnectionOptions conn_options)
    : options_(std::move(options)),
      deliver_(EventDeliverer(options_.on_lock_event)),
      id_(std::move(id)),
      watchdog_lease_ms_(absl::StrCat(
          absl::ToInt64Milliseconds(options_.lock_watchdog_timeout))),
      pool_(std::move(conn_options), options_.pool_size),
      scripts_(LockScripts()),
      holds_(&timers_) {}

ClientCore::~ClientCore() { Close(); }

absl::StatusOr<std::shared_ptr<ClientCore>> ClientCore::Create(
    ClientOptions options) {
  if (absl::Status s = ValidateClientOptions(options); !s.ok()) return s;
  absl::StatusOr<redis::Endpoint> endpoint = redis::ParseRedisUrl(options.url);
  if (!endpoint.ok()) return endpoint.status();
  if (endpoint->tls) {
    return absl::UnimplementedError(
        "rediss:// (TLS) is not supported yet by the blocking transport");
  }
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
  core->events_ = std::make_unique<EventQueue>(core->deliver_);
  core->watchdog_ = std::make_unique<watchdog::Watchdog>(
      core->options_.lock_watchdog_timeout, &core->holds_, &core->timers_,
      [raw](const std::vector<lock::RenewItem>& items) {
        return raw->RenewBatch(items);
      },
      [raw](const lock::LostHold& hold, const absl::Status& why) {
        raw->PostEvent(LockEvent{LockEventType::kLockLost, hold.name, why,
                                 lock::OwnerField(raw->id_, hold.thread)});
      });
  RegisterLiveCore(core);
  return core;
}

absl::Status ClientCore::CheckOpen() const {
  if (forked_child_.load(std::memory_order_acquire)) {
    return absl::FailedPreconditionError(
        "this client belongs to the parent process: a fork()ed child can "
        "neither use it nor own its locks (connect a new client in the child)");
  }
  if (closed()) return absl::FailedPreconditionError("the client is closed");
  return absl::OkStatus();
}

void ClientCore::WatchCurrentThread() {
  lock::NotifyOnThreadExit(
      std::weak_ptr<lock::ThreadExitListener>(shared_from_this()));
}

void ClientCore::OnThreadExit(uint64_t thread_number) {
  if (forked_child_.load(std::memory_order_acquire) || closed()) return;
  for (auto& [key, hold] : holds_.TakeThread(thread_number)) {
    PostEvent(LockEvent{
        LockEventType::kOwnerThreadExited, key.first,
        absl::AbortedError(absl::StrCat(
            "the thread that held the lock (", hold.count,
            hold.count == 1 ? " hold" : " holds",
            ") exited without releasing it; the client no longer renews it "
            "and it frees itself when its lease runs out")),
        hold.owner});
  }
}

void ClientCore::BecomeInertInForkedChild() {
  forked_child_.store(true, std::memory_order_release);
  closed_.store(true, std::memory_order_release);
}

template <class Call>
absl::StatusOr<redis::Reply> ClientCore::Send(Deadline deadline, Resend resend,
                                              bool* resent, Call call) {
  if (resent != nullptr) *resent = false;
  for (int sends = 1;; ++sends) {
    absl::StatusOr<redis::PooledConnection> conn = pool_.Get(deadline);
    if (!conn.ok()) return conn.status();
    absl::StatusOr<redis::Reply> r = call(**conn);
    const bool dropped = (*conn)->dropped();
    if ((r.ok() && !dropped) || resend == Resend::kNever || !dropped ||
        sends >= kMaxSends || deadline.Expired()) {
      return r;
    }
    if (resent != nullptr) *resent = true;
  }
}

absl::StatusOr<redis::Reply> ClientCore::RunScript(
    ScriptId script, std::initializer_list<absl::string_view> keys,
    std::initializer_list<absl::string_view> args, Deadline deadline,
    Resend resend, bool* resent) {
  return Send(deadline, resend, resent, [&](redis::Connection& conn) {
    return scripts_.Eval(conn, script, keys, args, deadline);
  });
}

absl::StatusOr<redis::Reply> ClientCore::RunCommand(
    std::initializer_list<absl::string_view> argv, Deadline deadline) {
  return Send(
      deadline, Resend::kIfDropped, nullptr,
      [&](redis::Connection& conn) { return conn.Command(argv, deadline); });
}

absl::StatusOr<std::vector<redis::Reply>> ClientCore::RunPipelined(
    ScriptId script, const std::vector<ScriptCall>& calls, Deadline deadline,
    std::atomic<uint64_t>* round_trips) {
  std::vector<redis::Reply> replies;
  if (calls.empty()) return replies;
  absl::StatusOr<redis::PooledConnection> conn = pool_.Get(deadline);
  if (!conn.ok()) return conn.status();
  // Sends calls[i] for every i in `which` in one flush and stores their
  // replies; collects the NOSCRIPT ones into `*noscript`.
  replies.reserve(calls.size());
  for (size_t i = 0; i < calls.size(); ++i) replies.emplace_back(nullptr);
  auto pipeline = [&](const std::vector<size_t>& which,
                      std::vector<size_t>* noscript) -> absl::Status {
    for (size_t i : which) {
      if (absl::Status s =
              scripts_.Append(**conn, script, calls[i].keys, calls[i].args);
          !s.ok()) {
        return s;
      }
    }
    if (round_trips != nullptr) {
      round_trips->fetch_add(1, std::memory_order_relaxed);
    }
    for (size_t i : which) {
      absl::StatusOr<redis::Reply> reply = (*conn)->GetReply(deadline);
      if (!reply.ok()) return reply.status();
      if (redis::ScriptSet::IsNoScript(*reply)) noscript->push_back(i);
      replies[i] = *std::move(reply);
    }
    return absl::OkStatus();
  };
  std::vector<size_t> all(calls.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  std::vector<size_t> noscript;
  if (absl::Status s = pipeline(all, &noscript); !s.ok()) return s;
  if (noscript.empty()) return replies;
  // The server lost its script cache (SCRIPT FLUSH, restart): Eval reloads
  // the script with the first of those calls; the rest follow in one flush.
  const size_t first = noscript.front();
  absl::StatusOr<redis::Reply> reply = scripts_.Eval(
      **conn, script, calls[first].keys, calls[first].args, deadline);
  if (!reply.ok()) return reply.status();
  replies[first] = *std::move(reply);
  noscript.erase(noscript.begin());
  std::vector<size_t> again;
  if (!noscript.empty()) {
    if (absl::Status s = pipeline(noscript, &again); !s.ok()) return s;
  }
  if (!again.empty()) {
    return absl::InternalError(
        absl::StrCat("script \"", scripts_.name(script),
                     "\" unknown to Redis right after it was loaded again"));
  }
  return replies;
}

absl::StatusOr<std::vector<bool>> ClientCore::RenewBatch(
    const std::vector<lock::RenewItem>& items) {
  std::vector<ScriptCall> calls((items.size() + kRenewKeysPerCall - 1) /
                                kRenewKeysPerCall);
  for (size_t call = 0; call < calls.size(); ++call) {
    const size_t first = call * kRenewKeysPerCall;
    const size_t end = std::min(items.size(), first + kRenewKeysPerCall);
    calls[call].keys.reserve(end - first);
    calls[call].args.reserve(end - first + 1);
    calls[call].args.push_back(watchdog_lease_ms_);
    for (size_t i = first; i < end; ++i) {
      calls[call].keys.push_back(items[i].name);
      calls[call].args.push_back(items[i].owner);
    }
  }
  absl::StatusOr<std::vector<redis::Reply>> replies =
      RunPipelined(kRenewScript, calls, Deadline::Never(), &renew_round_trips_);
  if (!replies.ok()) return replies.status();
  std::vector<bool> renewed(items.size());
  for (size_t call = 0; call < calls.size(); ++call) {
    const redis::Reply& reply = (*replies)[call];
    if (reply.is_error()) {
      return redis::ErrorReplyToStatus("renew script", reply.str());
    }
    const redis::ReplyView v = reply.view();
    const size_t n = calls[call].keys.size();
    if (!v.is_array() || v.size() != n) {
      return absl::InternalError(
          absl::StrCat("renew script: unexpected reply ", v.Describe()));
    }
    for (size_t i = 0; i < n; ++i) {
      if (!v[i].is_integer()) {
        return absl::InternalError(
            absl::StrCat("renew script: unexpected element ", v[i].Describe()));
      }
      renewed[call * kRenewKeysPerCall + i] = v[i].integer() == 1;
    }
  }
  return renewed;
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
  // In a fork()ed child closed_ is already set: nothing here runs there.
  if (closed_.exchange(true, std::memory_order_acq_rel)) return;
  // No renewal after this point, so none can land after the releases below.
  if (watchdog_ != nullptr) watchdog_->Stop();
  if (subscriber_ != nullptr) subscriber_->Close();  // wakes waiters
  // Release what is still held in one pipelined round with one deadline, so
  // that a paused or unreachable Redis costs one timeout, not one per lock.
  const std::vector<std::pair<lock::HoldRegistry::Key, lock::Hold>> held =
      holds_.TakeAll();
  std::vector<std::string> channels;
  channels.reserve(held.size());
  std::vector<ScriptCall> calls(held.size());
  for (size_t i = 0; i < held.size(); ++i) {
    const std::string& name = held[i].first.first;
    channels.push_back(lock::UnlockChannel(name));
    calls[i].keys = {name, channels.back()};
    calls[i].args = {lock::kUnlockMessage, held[i].second.owner};
  }
  absl::StatusOr<std::vector<redis::Reply>> replies = RunPipelined(
      kReleaseAllScript, calls,
      Deadline::After(options_.connect_timeout + options_.command_timeout));
  for (size_t i = 0; i < held.size(); ++i) {
    absl::Status status = replies.status();
    if (replies.ok()) {
      status = ReleaseAllResult((*replies)[i], "release on close");
    }
    Deliver(LockEvent{LockEventType::kReleasedOnClose, held[i].first.first,
                      std::move(status), held[i].second.owner});
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
    case LockEventType::kOwnerThreadExited:
      return "owner-thread-exited";
  }
  return "unknown";
}

}  // namespace relock
