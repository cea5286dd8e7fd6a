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
#include "lib/redis/resp.h"
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
  if (o.command_connections < 1 || o.command_connections > 64) {
    return invalid(absl::StrCat("command_connections must be in [1, 64], not ",
                                o.command_connections));
  }
  const TlsOptions& tls = o.tls;
  const bool tls_set = !tls.ca_file.empty() || !tls.ca_dir.empty() ||
                       !tls.cert_file.empty() || !tls.key_file.empty() ||
                       !tls.server_name.empty() ||
                       tls.dangerously_skip_verification;
  if (tls_set && !absl::StartsWith(o.url, "rediss://")) {
    return invalid("tls is set, but the url is not rediss:// (TLS)");
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

ClientCore::ClientCore(ClientOptions options, std::string id)
    : options_(std::move(options)),
      deliver_(EventDeliverer(options_.on_lock_event)),
      id_(std::move(id)),
      watchdog_lease_ms_(absl::StrCat(
          absl::ToInt64Milliseconds(options_.lock_watchdog_timeout))),
      scripts_(LockScripts()),
      holds_(&timers_) {}

ClientCore::~ClientCore() { Close(); }

absl::StatusOr<std::shared_ptr<ClientCore>> ClientCore::Create(
    ClientOptions options) {
  if (absl::Status s = ValidateClientOptions(options); !s.ok()) return s;
  absl::StatusOr<redis::Endpoint> endpoint = redis::ParseRedisUrl(options.url);
  if (!endpoint.ok()) return endpoint.status();
  io::ConnectionOptions io_options;
  io_options.endpoint = *std::move(endpoint);
  io_options.tls = options.tls;
  io_options.connect_timeout = options.connect_timeout;
  io_options.command_timeout = options.command_timeout;
  std::string id =
      options.client_id.empty() ? lock::NewClientId() : options.client_id;
  std::shared_ptr<ClientCore> core(
      new ClientCore(std::move(options), std::move(id)));
  for (int i = 0; i < core->options_.command_connections; ++i) {
    absl::StatusOr<std::shared_ptr<io::Connection>> conn =
        io::Connection::Create(&core->loop_, io_options);
    if (!conn.ok()) return conn.status();
    core->connections_.push_back(*std::move(conn));
  }
  {
    // Connects (so that a client fails to start when Redis cannot be used)
    // and loads the scripts.
    std::string wire;
    core->scripts_.AppendLoadAll(&wire);
    io::Result loaded =
        io::Call(core->Pick(), std::move(wire), core->scripts_.size(),
                 Deadline::After(core->options_.connect_timeout +
                                 core->options_.command_timeout));
    if (!loaded.status.ok()) return loaded.status;
    if (absl::Status s = core->scripts_.SetShas(loaded.replies); !s.ok()) {
      return s;
    }
  }
  absl::StatusOr<std::shared_ptr<pubsub::Subscriber>> sub =
      pubsub::Subscriber::Start(&core->loop_, io_options);
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

io::Connection& ClientCore::Pick() {
  const size_t i = next_connection_.fetch_add(1, std::memory_order_relaxed);
  return *connections_[i % connections_.size()];
}

io::Result ClientCore::Send(const std::string& wire, size_t commands,
                            Deadline deadline, Resend resend, bool* resent) {
  if (resent != nullptr) *resent = false;
  for (int sends = 1;; ++sends) {
    io::Result r = io::Call(Pick(), wire, commands, deadline);
    if (r.status.ok() || resend == Resend::kNever || !r.resendable ||
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
  const absl::Span<const absl::string_view> k(keys.begin(), keys.size());
  const absl::Span<const absl::string_view> a(args.begin(), args.size());
  std::string wire;
  scripts_.AppendEvalsha(script, k, a, &wire);
  io::Result r = Send(wire, 1, deadline, resend, resent);
  if (r.status.ok() && redis::ScriptSet::IsNoScript(r.replies[0])) {
    // The server lost its script cache: EVAL with the source caches it
    // again. The EVALSHA did not run, so this is still the first run.
    bool resent_eval = false;
    wire.clear();
    scripts_.AppendEval(script, k, a, &wire);
    r = Send(wire, 1, deadline, resend, &resent_eval);
    if (resent != nullptr) *resent = *resent || resent_eval;
  }
  if (!r.status.ok()) return r.status;
  return std::move(r.replies[0]);
}

absl::StatusOr<redis::Reply> ClientCore::RunCommand(
    std::initializer_list<absl::string_view> argv, Deadline deadline) {
  std::string wire;
  redis::AppendCommand(argv, &wire);
  io::Result r = Send(wire, 1, deadline, Resend::kIfDropped, nullptr);
  if (!r.status.ok()) return r.status;
  return std::move(r.replies[0]);
}

absl::StatusOr<std::vector<redis::Reply>> ClientCore::RunPipelined(
    ScriptId script, const std::vector<ScriptCall>& calls, Deadline deadline,
    std::atomic<uint64_t>* round_trips) {
  std::vector<redis::Reply> replies;
  if (calls.empty()) return replies;
  // Sends calls[i] for every i in `which` together (EVALSHA, or EVAL with
  // the source when `eval`) and stores their replies; collects the NOSCRIPT
  // ones into `*noscript`.
  auto send = [&](const std::vector<size_t>& which, bool eval,
                  std::vector<size_t>* noscript) -> absl::Status {
    std::string wire;
    for (size_t i : which) {
      if (eval) {
        scripts_.AppendEval(script, calls[i].keys, calls[i].args, &wire);
      } else {
        scripts_.AppendEvalsha(script, calls[i].keys, calls[i].args, &wire);
      }
    }
    if (round_trips != nullptr) {
      round_trips->fetch_add(1, std::memory_order_relaxed);
    }
    io::Result r = io::Call(Pick(), std::move(wire), which.size(), deadline);
    if (!r.status.ok()) return r.status;
    for (size_t k = 0; k < which.size(); ++k) {
      if (redis::ScriptSet::IsNoScript(r.replies[k])) {
        noscript->push_back(which[k]);
      }
      replies[which[k]] = std::move(r.replies[k]);
    }
    return absl::OkStatus();
  };
  replies.reserve(calls.size());
  for (size_t i = 0; i < calls.size(); ++i) replies.emplace_back(nullptr);
  std::vector<size_t> all(calls.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  std::vector<size_t> noscript;
  if (absl::Status s = send(all, /*eval=*/false, &noscript); !s.ok()) return s;
  if (noscript.empty()) return replies;
  // The server lost its script cache (SCRIPT FLUSH, restart): the source
  // with EVAL, which caches it again.
  std::vector<size_t> again;
  if (absl::Status s = send(noscript, /*eval=*/true, &again); !s.ok()) {
    return s;
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
  for (const std::shared_ptr<io::Connection>& conn : connections_) {
    conn->Close();
  }
  loop_.Stop();
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
