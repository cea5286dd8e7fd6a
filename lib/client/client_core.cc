#include "lib/client/client_core.h"

#include <pthread.h>

#include <algorithm>
#include <iostream>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "lib/backend/cluster_backend.h"
#include "lib/backend/node_backend.h"
#include "lib/backend/sentinel_backend.h"
#include "lib/lock/algorithm.h"
#include "lib/lock/owner.h"
#include "lib/redis/url.h"
#include "relock/limits.h"

namespace relock {
namespace internal {
absl::Status ValidateClientOptions(const ClientOptions& o) {
  auto invalid = [](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("ClientOptions: ", what));
  };
  for (const auto& [what, timeout] :
       {std::pair<absl::string_view, absl::Duration>{"connect_timeout",
                                                     o.connect_timeout},
        {"command_timeout", o.command_timeout}}) {
    if (timeout <= absl::ZeroDuration() || timeout > kMaxTimeout) {
      return invalid(absl::StrCat(what, " must be positive and at most ",
                                  absl::FormatDuration(kMaxTimeout), ", not ",
                                  absl::FormatDuration(timeout)));
    }
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
  if (tls_set && !absl::StartsWith(o.url, "rediss://") &&
      !absl::StartsWith(o.url, "rediss-cluster://") &&
      !absl::StartsWith(o.url, "rediss-sentinel://")) {
    return invalid(
        "tls is set, but the url is not rediss://, rediss-cluster:// or "
        "rediss-sentinel:// (TLS)");
  }
  const bool sentinel_url = absl::StartsWith(o.url, "redis-sentinel://") ||
                            absl::StartsWith(o.url, "rediss-sentinel://");
  if (!sentinel_url &&
      (o.sentinel.password.has_value() || !o.sentinel.username.empty())) {
    return invalid(
        "sentinel is set, but the url is not redis-sentinel:// or "
        "rediss-sentinel://");
  }
  const bool cluster_url = absl::StartsWith(o.url, "redis-cluster://") ||
                           absl::StartsWith(o.url, "rediss-cluster://");
  if (!cluster_url && o.cluster_pubsub != ClusterPubSub::kAuto) {
    return invalid(
        "cluster_pubsub is set, but the url is not redis-cluster:// or "
        "rediss-cluster://");
  }
  if (!o.sentinel.username.empty() &&
      (!o.sentinel.password.has_value() || o.sentinel.password->empty())) {
    return invalid("sentinel.username needs a sentinel.password");
  }
  if (absl::Status s =
          lock::ValidateReplicaSync(o.replica_sync, o.command_timeout);
      !s.ok()) {
    return invalid(s.message());
  }
  if (absl::Status s = lock::ValidateSpinBackoff(o.spin_backoff.get());
      !s.ok()) {
    return invalid(s.message());
  }
  if (o.lock_watchdog_timeout < absl::Milliseconds(30) ||
      o.lock_watchdog_timeout > absl::Hours(365 * 24)) {
    return invalid("lock_watchdog_timeout must be in [30ms, 365 days]");
  }
  if (!o.client_id.empty() && !lock::IsClientId(o.client_id)) {
    return invalid(absl::StrCat(
        "client_id must be a UUID in its text form (8-4-4-4-12 hex digits, "
        "e.g. 123e4567-e89b-42d3-a456-426614174000), not \"",
        absl::CHexEscape(o.client_id),
        "\": owner fields of other forms do not count as locks"));
  }
  return absl::OkStatus();
}

namespace {

// A backend of some kind as the Backend the core keeps.
template <typename T>
absl::StatusOr<std::unique_ptr<backend::Backend>> Generic(
    absl::StatusOr<std::unique_ptr<T>> made) {
  if (!made.ok()) return made.status();
  return std::unique_ptr<backend::Backend>(*std::move(made));
}

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
        []() ABSL_NO_THREAD_SAFETY_ANALYSIS { Live().mu.Lock(); },
        []() ABSL_NO_THREAD_SAFETY_ANALYSIS { Live().mu.Unlock(); },
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
                       lock::LockPolicy policy, const std::string& event_prefix)
    : options_(std::move(options)),
      observer_(std::make_shared<Observer>()),
      deliver_(EventDeliverer(options_.on_lock_event, Logger(options_.logger),
                              event_prefix)),
      id_(std::move(id)),
      policy_(std::move(policy)),
      holds_(&timers_) {
  observer_->log = Logger(options_.logger);
}

ClientCore::~ClientCore() { Close(); }

absl::StatusOr<std::shared_ptr<ClientCore>> ClientCore::Create(
    ClientOptions options) {
  if (absl::Status s = ValidateClientOptions(options); !s.ok()) return s;
  absl::StatusOr<redis::Topology> topology =
      redis::ParseTopologyUrl(options.url);
  if (!topology.ok()) return topology.status();
  io::ConnectionOptions io_options;
  io_options.endpoint = topology->endpoints[0];
  io_options.tls = options.tls;
  io_options.connect_timeout = options.connect_timeout;
  io_options.command_timeout = options.command_timeout;
  std::string id =
      options.client_id.empty() ? lock::NewClientId() : options.client_id;
  lock::LockPolicy policy;
  policy.command_timeout = options.command_timeout;
  policy.notified = options.pubsub;
  policy.spin_backoff = options.spin_backoff;
  policy.replica_sync.replicas = options.replica_sync.replicas;
  policy.replica_sync.timeout = options.replica_sync.timeout;
  backend::NodeOptions node;
  node.connection = std::move(io_options);
  node.command_connections = options.command_connections;
  BackendFactory make_backend;
  switch (topology->kind) {
    case redis::Topology::Kind::kSingle:
      make_backend = [&node](io::EventLoop* loop,
                             const std::shared_ptr<Observer>& observer) {
        node.connection.observer = observer;
        return Generic(
            backend::NodeBackend::Create(loop, std::move(node), LockScripts()));
      };
      break;
    case redis::Topology::Kind::kCluster:
      // One NodeBackend per master; borrowing the idle connection for
      // blocking calls works there as on a single server.
      make_backend = [&node, &topology, pubsub = options.cluster_pubsub](
                         io::EventLoop* loop,
                         const std::shared_ptr<Observer>& observer) {
        node.connection.observer = observer;
        backend::ClusterOptions cluster;
        cluster.seeds = std::move(topology->endpoints);
        cluster.node = std::move(node);
        cluster.pubsub = pubsub;
        return Generic(backend::ClusterBackend::Create(loop, std::move(cluster),
                                                       LockScripts()));
      };
      break;
    case redis::Topology::Kind::kSentinel:
      make_backend = [&node, &topology, auth = options.sentinel](
                         io::EventLoop* loop,
                         const std::shared_ptr<Observer>& observer) {
        node.connection.observer = observer;
        backend::SentinelOptions sentinel;
        sentinel.master_name = topology->master_name;
        for (redis::Endpoint& ep : topology->endpoints) {
          if (auth.password.has_value()) {
            ep.username = auth.username;
            ep.password = *auth.password;
          }
          sentinel.sentinels.push_back(std::move(ep));
        }
        // The data nodes: the URL's credentials, db and TLS setting (the
        // address comes from the sentinels).
        node.connection.endpoint.db = topology->db;
        sentinel.node = std::move(node);
        return Generic(backend::SentinelBackend::Create(
            loop, std::move(sentinel), LockScripts()));
      };
      break;
  }
  const absl::Time connected = absl::Now();
  absl::StatusOr<std::shared_ptr<ClientCore>> core = Create(
      std::move(options), std::move(id), std::move(policy), "", make_backend);
  if (core.ok() && (*core)->options_.publish_client_info) {
    ClientCore& c = **core;
    c.info_ = std::make_unique<ClientInfoPublisher>(
        c.backend_.get(), &c.timers_, c.id_, connected);
    c.info_->Start();
  }
  return core;
}

absl::StatusOr<std::shared_ptr<ClientCore>> ClientCore::Create(
    ClientOptions options, std::string id, lock::LockPolicy policy,
    const std::string& event_prefix, const BackendFactory& make_backend) {
  std::shared_ptr<ClientCore> core(new ClientCore(
      std::move(options), std::move(id), std::move(policy), event_prefix));
  absl::StatusOr<std::unique_ptr<backend::Backend>> backend =
      make_backend(&core->loop_, core->observer_);
  if (!backend.ok()) return backend.status();
  core->backend_ = *std::move(backend);
  ClientCore* raw = core.get();
  core->events_ =
      std::make_unique<EventQueue>(core->deliver_, core->observer_->log);
  core->watchdog_ = std::make_unique<watchdog::Watchdog>(
      core->options_.lock_watchdog_timeout, &core->holds_, &core->timers_,
      [raw](const std::vector<watchdog::RenewItem>& items) {
        return raw->RenewBatch(items);
      },
      [raw](const watchdog::LostHold& hold, const absl::Status& why) {
        raw->ReportLost(hold, why);
      },
      // Told when SafeUntil() ends: the drift of the client's lock policy.
      core->policy_.Drift(core->options_.lock_watchdog_timeout));
  // (Cleared in FinishClose() before the watchdog stops.)
  core->observer_->on_reconnect.Set([raw] { raw->watchdog_->RenewAllSoon(); });
  // An explicit lease that ran out before its release: news for the hold's
  // loss callbacks only (letting an explicit lease run out may be meant).
  core->holds_.set_expiry_handler([raw](const watchdog::LostHold& hold) {
    raw->events_->PostToHolder(
        LockEvent{LockEventType::kLockLost, hold.name,
                  absl::DeadlineExceededError(
                      "the hold's explicit lease ran out before it was "
                      "released"),
                  hold.owner},
        hold.on_lost);
  });
  RegisterLiveCore(core);
  return core;
}

void ClientCore::ReportLost(const watchdog::LostHold& hold,
                            const absl::Status& why) {
  observer_->metrics.locks_lost.Add();
  // When SafeUntil() ended: at its end, or now for a loss found before it
  // (the owner field gone).
  const SteadyClock::time_point safe_end =
      hold.acked_at +
      absl::ToChronoNanoseconds(hold.lease - policy_.Drift(hold.lease));
  events_->Post(LockEvent{LockEventType::kLockLost, hold.name, why, hold.owner,
                          std::min(safe_end, timers_.clock()->Now())},
                hold.on_lost);
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

absl::Status ClientCore::CheckBlockingCall() const {
  if (absl::Status s = CheckOpen(); !s.ok()) return s;
  // Any client's loop, not only this one's: a blocking call to this client
  // from another client's callback would stall that client's every call
  // (and its renewals) until it returns, as Future::Get() would.
  if (!io::EventLoop::InAnyLoopThread()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      "a blocking relock call from a relock client's event loop thread (in "
      "a callback of an asynchronous call) would wait for that thread or "
      "stall it; use the asynchronous calls there");
}

void ClientCore::OnFreshHold() {
  lock::NotifyOnThreadExit(
      std::weak_ptr<lock::ThreadExitListener>(shared_from_this()));
}

void ClientCore::OnThreadExit(uint64_t thread_number) {
  if (forked_child_.load(std::memory_order_acquire) || closed()) return;
  // Its read-write locks' write holds too (registered under kWriteHoldBit).
  std::vector<std::pair<watchdog::HoldRegistry::Key, watchdog::Hold>> held =
      holds_.TakeThread(thread_number);
  for (auto& entry : holds_.TakeThread(thread_number | lock::kWriteHoldBit)) {
    held.push_back(std::move(entry));
  }
  for (auto& [key, hold] : held) {
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

watchdog::RenewResult ClientCore::RenewBatch(
    const std::vector<watchdog::RenewItem>& items) {
  watchdog::RenewResult result =
      lock::RenewHolds(*this, items, &renew_round_trips_);
  observer_->metrics.renew_rounds.Add();
  if (!result.error.ok()) observer_->metrics.renew_failures.Add();
  return result;
}

ClientMetrics ClientCore::Snapshot() const {
  ClientMetrics m = observer_->metrics.Snapshot();
  m.renew_round_trips = renew_round_trips();
  m.held_locks = static_cast<int64_t>(holds_.live());
  return m;
}

void ClientCore::Report(LockEventType type, absl::string_view lock_name,
                        absl::Status status, uint64_t owner_number) {
  Deliver(LockEvent{
      type, std::string(lock_name), std::move(status),
      std::string(lock::OwnerField(id_, owner_number != 0
                                            ? owner_number
                                            : lock::CurrentThreadNumber())
                      .wire())});
}

void ClientCore::PostEvent(LockEvent event) {
  if (events_ != nullptr) events_->Post(std::move(event));
}

void ClientCore::Close() {
  // In a fork()ed child closed_ is already set: nothing here runs there.
  if (closed_.exchange(true, std::memory_order_seq_cst)) return;
  if (io::EventLoop::InAnyLoopThread()) {
    // Waiting here for the releases' answers would wait for this very
    // thread. A thread of its own finishes the close once the callback
    // returns to the loop; it keeps the core (and so the loop) alive until
    // then. (From the destructor there is no owner left to keep it: that
    // close waits, as before, and its releases time out.)
    if (std::shared_ptr<ClientCore> core = weak_from_this().lock()) {
      try {
        std::thread([core] { core->FinishClose(); }).detach();
        return;
      } catch (const std::system_error& e) {
        // No thread to be had (the process's limit): close here, where the
        // releases can only time out, rather than not at all (Close() runs
        // from noexcept destructors).
        Log(absl::LogSeverity::kError,
            absl::StrCat("close: cannot start the closing thread (", e.what(),
                         "); closing on the event loop thread, where the "
                         "releases time out and the locks free at their "
                         "lease end"));
      }
    }
  }
  FinishClose();
}

void ClientCore::FinishClose() {
  // Final releases already under way get their answers meanwhile (one
  // command timeout, beside the renewal round in flight): each then tells
  // its caller, and no hold is released twice.
  const Deadline releases_end = Deadline::After(options_.command_timeout);
  // No renewal after this point, so none can land after the releases below.
  observer_->on_reconnect.Set(nullptr);
  if (watchdog_ != nullptr) watchdog_->Stop();
  if (backend_ != nullptr) backend_->CancelWaits();
  // (Not on the loop thread: it delivers those answers.)
  if (!loop_.InLoopThread()) holds_.AwaitReleases(releases_end.Remaining());
  // Release what is still held in one pipelined round with one deadline, so
  // that a paused or unreachable Redis costs one timeout, not one per lock.
  const std::vector<std::pair<watchdog::HoldRegistry::Key, watchdog::Hold>>
      held = holds_.TakeAll();
  std::vector<absl::Status> released;
  if (!held.empty()) {  // a backend exists: holds are taken through it
    released = lock::ReleaseHolds(
        *this, held,
        Deadline::After(options_.connect_timeout + options_.command_timeout));
  }
  for (size_t i = 0; i < held.size(); ++i) {
    Deliver(LockEvent{LockEventType::kReleasedOnClose, held[i].first.first,
                      std::move(released[i]), held[i].second.owner});
  }
  if (info_ != nullptr) {
    info_->Stop(Deadline::After(options_.command_timeout));
  }
  timers_.Shutdown();
  if (events_ != nullptr) events_->Stop();  // delivers queued events first
  // A lock, permit or semaphore grant that met the close is released or
  // given back by its call (acquire.cc, RegisterHold()): the backend stays
  // until those are answered (another command timeout at most).
  if (!loop_.InLoopThread()) {
    holds_.AwaitReleases(options_.command_timeout);
  }
  if (backend_ != nullptr) backend_->Close();
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
