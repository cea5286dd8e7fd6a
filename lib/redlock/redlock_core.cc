#include "lib/redlock/redlock_core.h"

#include <algorithm>
#include <iostream>
#include <numeric>
#include <random>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/client/client_core.h"
#include "lib/lock/owner.h"
#include "lib/lock/reentrant_lock.h"
#include "lib/redis/connection.h"
#include "lib/redis/parallel.h"
#include "lib/redis/url.h"

namespace relock {
namespace internal {
namespace {

absl::Status Annotate(const absl::Status& s, absl::string_view op,
                      const std::string& name) {
  if (s.ok()) return s;
  return absl::Status(
      s.code(),
      absl::StrCat(op, " redlock ", lock::QuoteName(name), ": ", s.message()));
}

absl::Status ValidateRedlockOptions(const RedlockOptions& o) {
  auto invalid = [](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("RedlockOptions: ", what));
  };
  if (o.urls.empty() || o.urls.size() > 15) {
    return invalid(
        absl::StrCat("urls must name 1 to 15 masters, not ", o.urls.size()));
  }
  if (!(o.drift_factor >= 0 && o.drift_factor < 0.5)) {
    return invalid("drift_factor must be in [0, 0.5)");
  }
  if (!(o.timeout_factor > 0 && o.timeout_factor <= 1)) {
    return invalid("timeout_factor must be in (0, 1]");
  }
  if (o.tries < 1) return invalid("tries must be at least 1");
  if (absl::Status s = ValidateClientOptions(o.connection); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("RedlockOptions.connection: ", s.message()));
  }
  return absl::OkStatus();
}

// Blocking connections per master (until Redlock moves to the I/O core).
constexpr int kPoolSizePerMaster = 8;

// Counts of the masters' answers to one script call.
struct Tally {
  int ok = 0;      // answered with the expected type
  int errors = 0;  // I/O failure, timeout or error reply
  std::vector<std::string> details;
  absl::StatusCode error_code = absl::StatusCode::kUnavailable;
};

}  // namespace

RedlockCore::RedlockCore(RedlockOptions options, std::string id)
    : options_(std::move(options)),
      deliver_(EventDeliverer(options_.connection.on_lock_event, "redlock ")),
      id_(std::move(id)),
      quorum_(static_cast<int>(options_.urls.size()) / 2 + 1),
      scripts_(LockScripts()),
      holds_(&timers_) {}

RedlockCore::~RedlockCore() { Close(); }

absl::StatusOr<std::shared_ptr<RedlockCore>> RedlockCore::Create(
    RedlockOptions options) {
  if (absl::Status s = ValidateRedlockOptions(options); !s.ok()) return s;
  std::string id = options.connection.client_id;
  if (options.owner_id_generator) id = options.owner_id_generator();
  if (id.empty() && !options.owner_id_generator) id = lock::NewClientId();
  if (id.empty() || absl::StrContains(id, ':')) {
    return absl::InvalidArgumentError(
        "RedlockOptions: the owner id must be non-empty and contain no ':'");
  }
  std::vector<redis::ConnectionOptions> endpoints;
  for (const std::string& url : options.urls) {
    absl::StatusOr<redis::Endpoint> ep = redis::ParseRedisUrl(url);
    if (!ep.ok()) return ep.status();
    if (ep->tls) {
      return absl::UnimplementedError(
          "rediss:// (TLS) is not supported yet by the blocking transport");
    }
    redis::ConnectionOptions c;
    c.endpoint = *std::move(ep);
    c.connect_timeout = options.connection.connect_timeout;
    c.command_timeout = options.connection.command_timeout;
    endpoints.push_back(std::move(c));
  }
  std::shared_ptr<RedlockCore> core(
      new RedlockCore(std::move(options), std::move(id)));
  RedlockCore* raw = core.get();
  const int n = static_cast<int>(endpoints.size());
  int reachable = 0;
  absl::Status first_error;
  for (const redis::ConnectionOptions& c : endpoints) {
    Master m;
    m.label = c.endpoint.ToString();
    m.pool = std::make_unique<redis::ConnectionPool>(c, kPoolSizePerMaster);
    absl::StatusOr<redis::PooledConnection> conn = m.pool->Get();
    absl::Status s = conn.ok() ? core->scripts_.Load(**conn) : conn.status();
    if (s.ok()) {
      ++reachable;
    } else if (s.code() != absl::StatusCode::kUnavailable &&
               s.code() != absl::StatusCode::kDeadlineExceeded) {
      return s;  // wrong credentials or permissions: a configuration error
    } else if (first_error.ok()) {
      first_error = s;
    }
    // The subscriber connects (and reconnects) in the background, so a master
    // that is down now joins when it comes back.
    io::ConnectionOptions io_options;
    io_options.endpoint = c.endpoint;
    io_options.connect_timeout = c.connect_timeout;
    io_options.command_timeout = c.command_timeout;
    absl::StatusOr<std::shared_ptr<pubsub::Subscriber>> sub =
        pubsub::Subscriber::Start(&core->loop_, io_options,
                                  /*connect_now=*/false);
    if (!sub.ok()) return sub.status();
    m.subscriber = *std::move(sub);
    core->masters_.push_back(std::move(m));
  }
  if (reachable < core->quorum_) {
    return absl::UnavailableError(
        absl::StrCat("only ", reachable, " of ", n,
                     " Redlock masters are reachable (quorum ", core->quorum_,
                     "): ", first_error.message()));
  }
  core->backoff_ = core->options_.retry_backoff;
  if (core->backoff_ == nullptr) core->backoff_ = *ExponentialBackoff();
  core->events_ = std::make_unique<EventQueue>(core->deliver_);
  core->watchdog_ = std::make_unique<watchdog::Watchdog>(
      core->options_.connection.lock_watchdog_timeout, &core->holds_,
      &core->timers_,
      [raw](const std::vector<watchdog::RenewItem>& items) {
        return raw->RenewBatch(items);
      },
      [raw](const watchdog::LostHold& hold, const absl::Status& why) {
        raw->events_->Post(LockEvent{LockEventType::kLockLost, hold.name, why,
                                     lock::OwnerField(raw->id_, hold.thread)});
      });
  return core;
}

absl::Duration RedlockCore::PerMasterTimeout(absl::Duration lease) const {
  return std::clamp(
      lease * options_.timeout_factor, absl::Milliseconds(2),
      std::max(absl::Milliseconds(2), options_.connection.command_timeout));
}

absl::Duration RedlockCore::Drift(absl::Duration lease) const {
  return lease * options_.drift_factor + absl::Milliseconds(2);
}

RedlockCore::Replies RedlockCore::OnAll(
    ScriptId script, absl::Span<const absl::string_view> keys,
    absl::Span<const absl::string_view> args, Deadline deadline,
    const redis::OnAnswer& enough) {
  const size_t n = masters_.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  if (options_.shuffle_masters) {
    thread_local absl::BitGen gen;
    std::shuffle(order.begin(), order.end(), gen);
  }
  // Borrow one connection per master, in request order.
  std::vector<absl::optional<redis::PooledConnection>> borrowed(n);
  std::vector<redis::Connection*> conns(n, nullptr);  // in request order
  std::vector<absl::Status> borrow_errors(n);
  for (size_t k = 0; k < n; ++k) {
    absl::StatusOr<redis::PooledConnection> c =
        masters_[order[k]].pool->Get(deadline);
    if (c.ok()) {
      borrowed[k].emplace(*std::move(c));
      conns[k] = &**borrowed[k];
    } else {
      borrow_errors[k] = c.status();
      if (enough) enough(borrow_errors[k]);  // counts as an answer
    }
  }
  Replies by_request =
      redis::EvalOnAll(scripts_, conns, script, keys, args, deadline, enough);
  std::vector<absl::optional<absl::StatusOr<redis::Reply>>> by_master(n);
  for (size_t k = 0; k < n; ++k) {
    if (conns[k] == nullptr) {
      by_master[order[k]].emplace(borrow_errors[k]);
    } else {
      by_master[order[k]].emplace(std::move(by_request[k]));
    }
  }
  Replies out;
  out.reserve(n);
  for (auto& r : by_master) out.push_back(std::move(*r));
  return out;
}

RedlockCore::Attempt RedlockCore::TryOnce(const std::string& name,
                                          const std::string& owner,
                                          absl::Duration lease, bool reentry) {
  Attempt a;
  a.start = SteadyClock::now();
  const int n = static_cast<int>(masters_.size());
  const std::string lease_ms = absl::StrCat(absl::ToInt64Milliseconds(lease));
  redis::OnAnswer enough;
  int granted_so_far = 0, refused_so_far = 0;
  if (options_.fail_fast) {
    enough = [&, n](const absl::StatusOr<redis::Reply>& answer) {
      if (answer.ok() && answer->is_nil()) {
        ++granted_so_far;
      } else {
        ++refused_so_far;
      }
      return granted_so_far >= quorum_ || refused_so_far > n - quorum_;
    };
  }
  Replies replies =
      OnAll(kAcquireScript, {name}, {lease_ms, owner, reentry ? "0" : "1"},
            Deadline::After(PerMasterTimeout(lease)), enough);
  int granted = 0, held = 0, errors = 0;
  std::vector<bool> granted_at(n), unknown_at(n);
  std::vector<std::string> details;
  for (int i = 0; i < n; ++i) {
    const absl::StatusOr<redis::Reply>& r = replies[i];
    const std::string& who = masters_[i].label;
    if (!r.ok()) {
      ++errors;
      unknown_at[i] = true;  // the request may still run
      details.push_back(
          absl::StrCat(who, ": unavailable: ", r.status().message()));
    } else if (r->is_nil()) {
      ++granted;
      granted_at[i] = true;
      details.push_back(absl::StrCat(who, ": acquired"));
    } else if (r->is_integer()) {
      ++held;
      const int64_t pttl = r->integer();
      if (pttl >= 0 && (a.min_pttl_ms < 0 || pttl < a.min_pttl_ms)) {
        a.min_pttl_ms = pttl;
      }
      details.push_back(absl::StrCat(
          who, ": held by another owner (lease left ", pttl, "ms)"));
    } else {
      ++errors;
      details.push_back(absl::StrCat(
          who, ": ",
          redis::ErrorReplyToStatus("acquire script", r->str()).ToString()));
    }
  }
  const absl::Duration elapsed = absl::FromChrono(SteadyClock::now() - a.start);
  const absl::Duration validity = lease - elapsed - Drift(lease);
  if (granted >= quorum_ && validity > absl::ZeroDuration()) {
    a.kind = Attempt::kAcquired;
    return a;
  }
  if (granted >= quorum_) {
    details.push_back(absl::StrCat("validity used up: the attempt took ",
                                   absl::FormatDuration(elapsed), " of a ",
                                   absl::FormatDuration(lease), " lease"));
  }
  a.details = absl::StrJoin(details, "; ");
  a.kind = granted < quorum_ && errors <= n - quorum_ ? Attempt::kHeldByOther
                                                      : Attempt::kFailed;
  // Undo what this attempt may have taken. A fresh acquire removes our owner
  // field wherever it may exist (granted, or outcome unknown); a re-entry
  // only counts down where it counted up.
  std::vector<bool> undo(n);
  bool any = false;
  for (int i = 0; i < n; ++i) {
    undo[i] = granted_at[i] || (!reentry && unknown_at[i]);
    any = any || undo[i];
  }
  if (any) {
    const std::string channel = lock::UnlockChannel(name);
    // Best effort, bounded like the attempt: an undo that does not land in
    // time leaves a key that expires with the lease.
    const Deadline d = Deadline::After(PerMasterTimeout(lease));
    // Masters not to touch get no request: run per subset.
    std::vector<absl::optional<redis::PooledConnection>> borrowed(n);
    std::vector<redis::Connection*> conns(n, nullptr);
    for (int i = 0; i < n; ++i) {
      if (!undo[i]) continue;
      absl::StatusOr<redis::PooledConnection> c = masters_[i].pool->Get(d);
      if (c.ok()) {
        borrowed[i].emplace(*std::move(c));
        conns[i] = &**borrowed[i];
      }
    }
    if (reentry) {
      redis::EvalOnAll(scripts_, conns, kReleaseScript, {name, channel},
                       {lock::kUnlockMessage, "0", owner}, d);
    } else {
      redis::EvalOnAll(scripts_, conns, kReleaseAllScript, {name, channel},
                       {lock::kUnlockMessage, owner}, d);
    }
  }
  return a;
}

absl::Status RedlockCore::Acquire(const std::string& name,
                                  absl::optional<absl::Duration> lease,
                                  Deadline deadline) {
  if (lease.has_value() && (*lease < kMinLease || *lease > kMaxLease)) {
    return Annotate(absl::InvalidArgumentError(absl::StrCat(
                        "lease ", absl::FormatDuration(*lease), " is outside [",
                        absl::FormatDuration(kMinLease), ", ",
                        absl::FormatDuration(kMaxLease), "]")),
                    "acquire", name);
  }
  if (closed()) {
    return Annotate(absl::FailedPreconditionError("the client is closed"),
                    "acquire", name);
  }
  const uint64_t thread = lock::CurrentThreadNumber();
  const std::string owner = lock::OwnerField(id_, thread);
  const absl::optional<watchdog::Hold> hold = holds_.Find(name, thread);
  const bool reentry = hold.has_value() && !hold->ended();
  // A re-entry never shortens a watchdog hold (see lib/watchdog/hold_registry.h).
  const bool watchdog = !lease.has_value() || (reentry && hold->watchdog);
  const absl::Duration effective =
      watchdog ? options_.connection.lock_watchdog_timeout : *lease;
  int failures = 0;
  std::shared_ptr<pubsub::WakeSignal> signal;
  std::vector<std::unique_ptr<pubsub::Subscription>> subscriptions;
  while (true) {
    Attempt a = TryOnce(name, owner, effective, reentry);
    if (a.kind == Attempt::kAcquired) {
      holds_.OnAcquired(name, thread, owner, watchdog, effective, a.start);
      if (watchdog) watchdog_->Activate();
      return absl::OkStatus();
    }
    if (a.kind == Attempt::kFailed) {
      ++failures;
      absl::optional<absl::Duration> delay =
          failures < options_.tries ? backoff_->NextDelay(failures - 1)
                                    : absl::nullopt;
      if (!delay.has_value()) {
        return Annotate(absl::UnavailableError(absl::StrCat(
                            "no quorum (", quorum_, " of ", masters_.size(),
                            ") after ", failures, " attempt(s): ", a.details)),
                        "acquire", name);
      }
      if (deadline.Remaining() <= *delay) {
        return Annotate(absl::DeadlineExceededError(absl::StrCat(
                            "wait ended without a quorum: ", a.details)),
                        "acquire", name);
      }
      absl::SleepFor(*delay);
      continue;
    }
    // Another owner holds a quorum: wait to be notified.
    if (deadline.Expired()) {
      return Annotate(absl::DeadlineExceededError(
                          absl::StrCat("held by another owner: ", a.details)),
                      "acquire", name);
    }
    if (signal == nullptr) {
      // Every unlock message, subscription confirmation and reconnect on any
      // master wakes this thread to re-check, so a release that happens
      // before a subscription is confirmed is still noticed (at the
      // confirmation); any quorum of subscriptions shares a master with the
      // holder's quorum.
      signal = std::make_shared<pubsub::WakeSignal>();
      const std::string channel = lock::UnlockChannel(name);
      for (Master& m : masters_) {
        subscriptions.push_back(m.subscriber->Subscribe(channel, signal));
      }
    }
    Deadline wake = deadline;
    if (a.min_pttl_ms >= 0) {
      wake = Earliest(deadline,
                      Deadline::After(absl::Milliseconds(a.min_pttl_ms + 1)));
    }
    signal->Wait(wake);
    if (closed()) {
      return Annotate(
          absl::CancelledError("the client was closed while waiting"),
          "acquire", name);
    }
  }
}

absl::Status RedlockCore::Release(const std::string& name) {
  if (closed()) {
    return Annotate(absl::FailedPreconditionError("the client is closed"),
                    "release", name);
  }
  const uint64_t thread = lock::CurrentThreadNumber();
  const std::string owner = lock::OwnerField(id_, thread);
  const absl::optional<watchdog::Hold> hold = holds_.BeginRelease(name, thread);
  const std::string lease_ms =
      hold.has_value() && hold->watchdog
          ? absl::StrCat(absl::ToInt64Milliseconds(
                options_.connection.lock_watchdog_timeout))
          : "0";
  Replies replies = OnAll(kReleaseScript, {name, lock::UnlockChannel(name)},
                          {lock::kUnlockMessage, lease_ms, owner},
                          Deadline::After(options_.connection.command_timeout));
  const int n = static_cast<int>(masters_.size());
  int released = 0, freed = 0, not_owner = 0;
  std::vector<std::string> details;
  for (int i = 0; i < n; ++i) {
    const absl::StatusOr<redis::Reply>& r = replies[i];
    const std::string& who = masters_[i].label;
    if (r.ok() && r->is_integer()) {
      ++released;
      freed += r->integer() == 1;
      details.push_back(absl::StrCat(who, ": released"));
    } else if (r.ok() && r->is_nil()) {
      ++not_owner;
      details.push_back(absl::StrCat(who, ": not held by this thread"));
    } else {
      details.push_back(absl::StrCat(
          who, ": ",
          r.ok()
              ? redis::ErrorReplyToStatus("release script", r->str()).ToString()
              : r.status().ToString()));
    }
  }
  if (released >= quorum_) {
    const bool outermost = hold.has_value() && hold->count <= 1;
    if (outermost && freed < released) {
      // Masters still counting holds after our outermost release kept
      // re-entries whose replies were lost: release them there (see
      // lock::Release).
      OnAll(kReleaseAllScript, {name, lock::UnlockChannel(name)},
            {lock::kUnlockMessage, owner},
            Deadline::After(options_.connection.command_timeout));
    }
    holds_.OnReleased(name, thread, /*freed=*/freed >= quorum_ || outermost);
    return absl::OkStatus();
  }
  if (not_owner > n - quorum_) {
    if (absl::optional<watchdog::Hold> lost = holds_.Forget(name, thread)) {
      return Annotate(absl::AbortedError(absl::StrCat(
                          "lease lost: this thread held the lock, but a "
                          "majority of masters no longer have it: ",
                          absl::StrJoin(details, "; "))),
                      "release", name);
    }
    return Annotate(absl::FailedPreconditionError(absl::StrCat(
                        "not held by this thread (owner ", owner, ")")),
                    "release", name);
  }
  // Outcome unknown: a final release abandons the hold (see lock::Release).
  if (hold.has_value() && hold->count <= 1) holds_.Forget(name, thread);
  return Annotate(
      absl::UnavailableError(absl::StrCat("no quorum of masters answered: ",
                                          absl::StrJoin(details, "; "))),
      "release", name);
}

absl::Status RedlockCore::Extend(const std::string& name,
                                 absl::Duration lease) {
  if (lease < kMinLease || lease > kMaxLease) {
    return Annotate(absl::InvalidArgumentError(absl::StrCat(
                        "lease ", absl::FormatDuration(lease), " is outside [",
                        absl::FormatDuration(kMinLease), ", ",
                        absl::FormatDuration(kMaxLease), "]")),
                    "extend", name);
  }
  if (closed()) {
    return Annotate(absl::FailedPreconditionError("the client is closed"),
                    "extend", name);
  }
  const uint64_t thread = lock::CurrentThreadNumber();
  const absl::optional<watchdog::Hold> hold = holds_.Find(name, thread);
  if (!hold.has_value()) {
    return Annotate(absl::FailedPreconditionError("not held by this thread"),
                    "extend", name);
  }
  if (hold->ended()) {
    return Annotate(absl::AbortedError("lease lost"), "extend", name);
  }
  const SteadyClock::time_point start = SteadyClock::now();
  const std::string lease_ms = absl::StrCat(absl::ToInt64Milliseconds(lease));
  Replies replies = OnAll(kRenewScript, {name}, {lease_ms, hold->owner},
                          Deadline::After(PerMasterTimeout(lease)));
  int renewed = 0, gone = 0;
  std::vector<std::string> details;
  for (size_t i = 0; i < replies.size(); ++i) {
    const absl::StatusOr<redis::Reply>& r = replies[i];
    if (r.ok() && r->view().is_array() && r->view().size() == 1 &&
        r->view()[0].is_integer()) {
      const bool ok = r->view()[0].integer() == 1;
      renewed += ok;
      gone += !ok;
      details.push_back(
          absl::StrCat(masters_[i].label, ok ? ": extended" : ": not held"));
    } else {
      details.push_back(
          absl::StrCat(masters_[i].label, ": ",
                       r.ok() ? r->view().Describe() : r.status().ToString()));
    }
  }
  const absl::Duration elapsed = absl::FromChrono(SteadyClock::now() - start);
  if (renewed >= quorum_ &&
      lease - elapsed - Drift(lease) > absl::ZeroDuration()) {
    holds_.OnExtended(name, thread, lease, start);
    return absl::OkStatus();
  }
  const int n = static_cast<int>(masters_.size());
  if (gone > n - quorum_) {
    return Annotate(absl::AbortedError(absl::StrCat(
                        "lease lost: a majority of masters no longer have it: ",
                        absl::StrJoin(details, "; "))),
                    "extend", name);
  }
  return Annotate(
      absl::UnavailableError(absl::StrCat("no quorum extended in time: ",
                                          absl::StrJoin(details, "; "))),
      "extend", name);
}

absl::StatusOr<SteadyClock::time_point> RedlockCore::ValidUntil(
    const std::string& name) {
  absl::optional<watchdog::Hold> hold =
      holds_.Find(name, lock::CurrentThreadNumber());
  if (!hold.has_value()) {
    return Annotate(absl::FailedPreconditionError("not held by this thread"),
                    "query", name);
  }
  if (hold->ended())
    return Annotate(absl::AbortedError("lease lost"), "query", name);
  return hold->acked_at +
         absl::ToChronoNanoseconds(hold->lease - Drift(hold->lease));
}

int64_t RedlockCore::LocalHoldCount(const std::string& name) {
  absl::optional<watchdog::Hold> hold =
      holds_.Find(name, lock::CurrentThreadNumber());
  return hold.has_value() && !hold->ended() ? hold->count : 0;
}

absl::StatusOr<std::vector<bool>> RedlockCore::RenewBatch(
    const std::vector<watchdog::RenewItem>& items) {
  const int n = static_cast<int>(masters_.size());
  const absl::Duration lease = options_.connection.lock_watchdog_timeout;
  const std::string lease_ms = absl::StrCat(absl::ToInt64Milliseconds(lease));
  std::vector<bool> out(items.size());
  for (size_t first = 0; first < items.size(); first += lock::kRenewKeysPerCall) {
    const size_t end = std::min(items.size(), first + lock::kRenewKeysPerCall);
    std::vector<absl::string_view> keys, args = {lease_ms};
    for (size_t i = first; i < end; ++i) {
      keys.push_back(items[i].name);
      args.push_back(items[i].owner);
    }
    Replies replies = OnAll(kRenewScript, keys, args,
                            Deadline::After(PerMasterTimeout(lease)));
    for (size_t i = first; i < end; ++i) {
      int renewed = 0, gone = 0;
      for (int m = 0; m < n; ++m) {
        const absl::StatusOr<redis::Reply>& r = replies[m];
        if (!r.ok() || !r->view().is_array() ||
            r->view().size() != end - first) {
          continue;
        }
        const redis::ReplyView element = r->view()[i - first];
        if (!element.is_integer()) continue;  // malformed: no answer
        renewed += element.integer() == 1;
        gone += element.integer() != 1;
      }
      if (renewed >= quorum_) {
        out[i] = true;
      } else if (gone > n - quorum_) {
        out[i] = false;
      } else {
        // Undecided (masters did not answer): retry the round.
        return absl::UnavailableError(
            absl::StrCat("no quorum of masters answered the renewal of ",
                         lock::QuoteName(items[i].name)));
      }
    }
  }
  return out;
}

void RedlockCore::ReportUnlockFailure(absl::string_view name,
                                      absl::Status status) {
  Deliver(LockEvent{LockEventType::kUnlockFailed, std::string(name),
                    std::move(status),
                    lock::OwnerField(id_, lock::CurrentThreadNumber())});
}

void RedlockCore::Close() {
  if (closed_.exchange(true, std::memory_order_acq_rel)) return;
  if (watchdog_ != nullptr) watchdog_->Stop();
  for (Master& m : masters_) {
    if (m.subscriber != nullptr) m.subscriber->Close();
  }
  for (auto& [key, hold] : holds_.TakeAll()) {
    const std::string& name = key.first;
    Replies replies =
        OnAll(kReleaseAllScript, {name, lock::UnlockChannel(name)},
              {lock::kUnlockMessage, hold.owner},
              Deadline::After(options_.connection.command_timeout));
    int answered = 0;
    std::vector<std::string> failures;
    for (size_t i = 0; i < replies.size(); ++i) {
      if (replies[i].ok() && replies[i]->is_integer()) {
        ++answered;
      } else {
        failures.push_back(absl::StrCat(masters_[i].label, ": ",
                                        replies[i].ok()
                                            ? replies[i]->view().Describe()
                                            : replies[i].status().ToString()));
      }
    }
    Deliver(LockEvent{LockEventType::kReleasedOnClose, name,
                      answered >= quorum_
                          ? absl::OkStatus()
                          : absl::UnavailableError(absl::StrCat(
                                "released on only ", answered,
                                " masters: ", absl::StrJoin(failures, "; "))),
                      hold.owner});
  }
  timers_.Shutdown();
  if (events_ != nullptr) events_->Stop();
  for (Master& m : masters_) m.pool->Close();
  loop_.Stop();
}

}  // namespace internal
}  // namespace relock
