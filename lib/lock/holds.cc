// A held lock's upkeep (lib/lock/algorithm.h): Extend(), the loss callbacks
// (OnLost()), SafeUntil(), the watchdog's renewal batches (RenewHolds()) and
// a closing client's release batch (ReleaseHolds()).

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "lib/backend/backend.h"
#include "lib/common/deadline.h"
#include "lib/lock/algorithm.h"
#include "lib/lock/attempt.h"
#include "lib/lock/lease.h"
#include "lib/lock/lock_env.h"
#include "lib/lock/lock_model.h"
#include "lib/lock/lock_scripts.h"
#include "lib/lock/owner.h"
#include "lib/redis/errors.h"
#include "lib/redis/reply.h"
#include "lib/watchdog/hold_registry.h"
#include "lib/watchdog/watchdog.h"
#include "relock/limits.h"
#include "relock/options.h"

namespace relock {
namespace lock {

using algorithm_internal::Annotate;
using algorithm_internal::AttemptDeadline;
using algorithm_internal::NodeNotes;
using algorithm_internal::ReplicaTime;
using algorithm_internal::Whom;

namespace {

using backend::Resend;

// Per item of a renewal batch: the nodes that renewed it, and the nodes
// where its owner field is gone; the first error that left some of them
// uncounted.
struct RenewalTally {
  std::vector<size_t> renewed, gone;
  absl::Status error;
};

// Adds one node's answers to a renewal batch to `tally`. A renewal
// that too few replicas acknowledged (an item's RenewItem::ack, against the
// count of the WAIT after the batch) is not counted as renewed: it leaves the
// item undecided, so its safe end does not move.
void CountRenewals(const std::vector<backend::Answer>& answers,
                   const std::vector<backend::Call>& calls,
                   const std::vector<std::vector<size_t>>& call_items,
                   const std::vector<RenewItem>& items, RenewalTally* tally) {
  auto fail = [tally](absl::Status s) {
    if (tally->error.ok()) tally->error = std::move(s);
  };
  for (size_t call = 0; call < calls.size(); ++call) {
    const absl::StatusOr<redis::Reply>& r = answers[call].reply;
    if (!r.ok()) {
      fail(r.status());
      continue;
    }
    const redis::Reply& reply = *r;
    if (reply.is_error()) {
      fail(redis::ErrorReplyToStatus("renew script", reply.str()));
      continue;
    }
    const redis::ReplyView v = reply.view();
    const size_t k = calls[call].keys.size();
    if (!v.is_array() || v.size() != k) {
      fail(absl::InternalError(
          absl::StrCat("renew script: unexpected reply ", v.Describe())));
      continue;
    }
    for (size_t i = 0; i < k; ++i) {
      if (!v[i].is_integer()) {
        fail(absl::InternalError(absl::StrCat(
            "renew script: unexpected element ", v[i].Describe())));
        continue;
      }
      const size_t item = call_items[call][i];
      if (v[i].integer() != 1) {
        tally->gone[item] += 1;
        continue;
      }
      const int needed = items[item].ack.replicas;
      if (needed > 0 && !answers[call].wait_error.ok()) {
        fail(absl::Status(
            answers[call].wait_error.code(),
            absl::StrCat(answers[call].wait_error.message(),
                         " (ReplicaSync): the renewal ran, but its safe end "
                         "does not move")));
        continue;
      }
      if (needed > 0 && answers[call].acked < needed) {
        fail(absl::UnavailableError(absl::StrCat(
            "the renewal ran, but only ",
            std::max<int64_t>(0, answers[call].acked), " of the ", needed,
            " required replicas acknowledged it (ReplicaSync): its safe end "
            "does not move")));
        continue;
      }
      tally->renewed[item] += 1;
    }
  }
}

// Call `i` of a release-all batch, over every node: OK on a quorum, else the
// error (on several nodes, where it was released and what the others said).
// `unanswered`: the hold's own final release was in flight still (Close()
// stopped waiting for it): where the lock is gone, that release may have
// freed it as well as a lost lease, and the error says so.
absl::Status ReleaseResult(backend::Backend& backend,
                           const backend::BatchReplies& batches, size_t i,
                           bool unanswered) {
  const size_t n = backend.nodes();
  size_t released = 0;
  std::vector<std::string> failures;
  absl::Status first;
  for (size_t node = 0; node < n; ++node) {
    const absl::StatusOr<redis::Reply>& reply = batches[node][i].reply;
    absl::Status s =
        reply.ok() ? internal::ReleaseAllResult(*reply, "release on close")
                   : reply.status();
    if (unanswered && reply.ok() && reply->is_integer() &&
        reply->integer() == 0) {
      s = absl::AbortedError(
          "release on close: the lock was no longer held: its own release, "
          "unanswered when Close() stopped waiting for it, may have freed "
          "it, or its lease had been lost before");
    }
    if (s.ok()) {
      ++released;
    } else {
      failures.push_back(
          absl::StrCat(backend.node_name(node), ": ", s.message()));
      if (first.ok()) first = std::move(s);
    }
  }
  if (released >= backend.quorum()) return absl::OkStatus();
  if (n == 1) return first;
  return absl::UnavailableError(
      absl::StrCat("released on only ", released,
                   " masters: ", absl::StrJoin(failures, "; ")));
}

}  // namespace

absl::Status Extend(LockEnv& env, const std::string& name, const OwnerId& by,
                    absl::Duration lease) {
  const std::string& noun = env.policy().noun;
  if (lease < kMinLease || lease > kMaxLease) {
    return Annotate(absl::InvalidArgumentError(absl::StrCat(
                        "lease ", absl::FormatDuration(lease), " is outside [",
                        absl::FormatDuration(kMinLease), ", ",
                        absl::FormatDuration(kMaxLease), "]")),
                    "extend", name, noun);
  }
  if (absl::Status s = env.CheckBlockingCall(); !s.ok()) {
    return Annotate(s, "extend", name, noun);
  }
  backend::Backend& backend = env.backend();
  const LockPolicy& policy = env.policy();
  const size_t n = backend.nodes();
  const size_t quorum = backend.quorum();
  const uint64_t thread = by.number;
  const absl::optional<Hold> hold = env.holds().Find(name, thread);
  if (!hold.has_value()) {
    return Annotate(
        absl::FailedPreconditionError(absl::StrCat("not held by ", Whom(by))),
        "extend", name, noun);
  }
  if (hold->ended()) {
    return Annotate(absl::AbortedError("lease lost"), "extend", name, noun);
  }
  const SteadyClock::time_point start = env.clock().Now();
  const std::string lease_ms = Lease::Of(lease).wire();
  const absl::string_view keys[] = {name};
  // "set": the lease is set, shorter or not (a watchdog renewal only
  // raises it; see lua/renew.lua).
  const absl::string_view args[] = {lease_ms, hold->owner, "set"};
  // The hold's replica acknowledgement (its acquire's ReplicaSync): an
  // extension that too few replicas acknowledged does not count, and the
  // hold's safe end stays where it was.
  const backend::WaitReplicas sync{hold->ack.replicas, hold->ack.timeout};
  const backend::WaitReplicas* wait = sync.replicas > 0 ? &sync : nullptr;
  backend::ScriptCall call;
  call.script = internal::kRenewScript;
  call.keys = keys;
  call.args = args;
  call.deadline =
      AttemptDeadline(env, lease, Deadline::Never(), ReplicaTime(wait));
  call.resend = Resend::kIfDropped;
  call.wait = wait;
  std::vector<backend::Answer> answers = backend.Run(call);
  size_t renewed = 0, gone = 0, unacked = 0;
  absl::Status wait_error;  // the first WAIT that gave no count, if any
  NodeNotes details;
  for (size_t i = 0; i < n; ++i) {
    const absl::StatusOr<redis::Reply>& r = answers[i].reply;
    if (r.ok() && r->view().is_array() && r->view().size() == 1 &&
        r->view()[0].is_integer()) {
      const bool ok = r->view()[0].integer() == 1;
      if (ok && wait != nullptr && answers[i].acked < wait->replicas) {
        ++unacked;
        if (!answers[i].wait_error.ok()) {
          if (wait_error.ok()) wait_error = answers[i].wait_error;
          details.Add(absl::StrCat(backend.node_name(i), ": extended, but ",
                                   answers[i].wait_error.message()));
        } else {
          details.Add(absl::StrCat(
              backend.node_name(i), ": extended, but only ",
              std::max<int64_t>(0, answers[i].acked), " of the ",
              wait->replicas, " required replicas acknowledged it"));
        }
        continue;
      }
      renewed += ok ? 1 : 0;
      gone += ok ? 0 : 1;
      details.Add(backend.node_name(i), ok ? "extended" : "not held");
    } else {
      details.Add(
          absl::StrCat(backend.node_name(i), ": ",
                       r.ok() ? r->view().Describe() : r.status().ToString()));
    }
  }
  const absl::Duration elapsed = absl::FromChrono(env.clock().Now() - start);
  if (renewed >= quorum &&
      lease - elapsed - policy.Drift(lease) > absl::ZeroDuration()) {
    env.holds().OnExtended(name, thread, lease, start);
    return absl::OkStatus();
  }
  if (gone > n - quorum) {
    return Annotate(absl::AbortedError(absl::StrCat(
                        "lease lost: a majority of masters no longer have it: ",
                        details.Join())),
                    "extend", name, noun);
  }
  if (unacked > 0) {
    // Redis may have the longer lease, but a failover may lose it: the
    // holder is not told it is safe for longer.
    // (A WAIT the server refused gives its code: PermissionDenied for an
    // ACL user without it.)
    return Annotate(
        absl::Status(wait_error.ok() ? absl::StatusCode::kUnavailable
                                     : wait_error.code(),
                     absl::StrCat("the extension was not acknowledged by "
                                  "enough replicas (ReplicaSync); SafeUntil() "
                                  "is unchanged: ",
                                  details.Join())),
        "extend", name, noun);
  }
  return Annotate(absl::UnavailableError(absl::StrCat(
                      "no quorum extended in time: ", details.Join())),
                  "extend", name, noun);
}

watchdog::LossFn LossCallback(const std::string& name, const OwnerField& owner,
                              std::function<void(const LockEvent&)> fn) {
  return [name, owner = std::string(owner.wire()),
          fn = std::move(fn)](const absl::Status& why) {
    fn(LockEvent{LockEventType::kLockLost, name, why, owner});
  };
}

absl::Status OnLost(LockEnv& env, const std::string& name, const OwnerId& by,
                    std::function<void(const LockEvent&)> fn) {
  if (!fn) {
    return absl::InvalidArgumentError(
        absl::StrCat("on lost ", QuoteName(name), ": the callback is empty"));
  }
  if (absl::Status s = env.CheckOpen(); !s.ok()) {
    return Annotate(s, "on lost", name, env.policy().noun);
  }
  absl::Status s = env.holds().AddLossCallback(
      name, by.number,
      LossCallback(name, OwnerField(env.id(), by.number), std::move(fn)));
  if (!s.ok()) {
    return Annotate(
        absl::Status(s.code(), absl::StrCat(Whom(by), ": ", s.message())),
        "on lost", name, env.policy().noun);
  }
  return s;
}

absl::StatusOr<SteadyClock::time_point> SafeUntil(LockEnv& env,
                                                  const std::string& name,
                                                  const OwnerId& by) {
  if (absl::Status s = env.CheckOpen(); !s.ok()) {
    return Annotate(s, "query", name);
  }
  absl::optional<Hold> hold = env.holds().Find(name, by.number);
  if (!hold.has_value()) {
    return Annotate(
        absl::FailedPreconditionError(absl::StrCat("not held by ", Whom(by))),
        "query", name);
  }
  if (hold->lost()) {
    return Annotate(absl::AbortedError("lease lost (reported as kLockLost)"),
                    "query", name);
  }
  // Redis set the TTL no earlier than acked_at; allow for clock drift
  // between this host and Redis (by default 1% of the lease plus 2 ms, as
  // Redlock).
  const absl::Duration drift = env.policy().Drift(hold->lease);
  const SteadyClock::time_point safe_until =
      hold->acked_at + absl::ToChronoNanoseconds(hold->lease - drift);
  if (hold->expired() || safe_until <= env.clock().Now()) {
    return Annotate(
        absl::AbortedError(absl::StrCat(
            hold->watchdog ? "no renewal of the watchdog lease was confirmed "
                             "in time"
                           : "its explicit lease ran out",
            ": the lock may already belong to another owner")),
        "query", name);
  }
  return safe_until;
}

watchdog::RenewResult RenewHolds(LockEnv& env,
                                 const std::vector<RenewItem>& items,
                                 std::atomic<uint64_t>* round_trips) {
  backend::Backend& backend = env.backend();
  const absl::Duration lease = env.watchdog_lease();
  const std::string lease_ms = Lease::Of(lease).wire();
  // One WAIT after each node's batch (not one per lock), for the most
  // replicas and the longest timeout any item needs; each item is judged
  // against its own ReplicaAck.
  backend::WaitReplicas sync;
  for (const RenewItem& item : items) {
    sync.replicas = std::max(sync.replicas, item.ack.replicas);
    sync.timeout = std::max(sync.timeout, item.ack.timeout);
  }
  const backend::WaitReplicas* wait = sync.replicas > 0 ? &sync : nullptr;
  const Deadline deadline =
      env.policy().attempt_timeout_factor > 0
          ? AttemptDeadline(env, lease, Deadline::Never(), ReplicaTime(wait))
          : Deadline::Never();
  // Up to kRenewKeysPerCall locks per call, of one key group each (one hash
  // slot on a cluster, where a script's keys must share one) and one renew
  // script (per lock type).
  // The keys the renewals pass (a permit's is not its name); the calls
  // below view them.
  std::vector<std::string> keys(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    keys[i] = ModelOf(items[i].kind).RenewKey(items[i].name);
  }
  std::vector<size_t> order(items.size());
  std::vector<std::pair<int, size_t>> group(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    order[i] = i;
    group[i] = {backend.KeyGroup(items[i].name),
                ModelOf(items[i].kind).renew_script()};
  }
  std::stable_sort(order.begin(), order.end(), [&group](size_t a, size_t b) {
    return group[a] < group[b];
  });
  std::vector<backend::Call> calls;
  std::vector<std::vector<size_t>> call_items;  // the items of each call
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t i = order[k];
    if (calls.empty() || call_items.back().size() == kRenewKeysPerCall ||
        group[call_items.back().front()] != group[i]) {
      calls.emplace_back();
      calls.back().script = group[i].second;
      calls.back().args.push_back(lease_ms);
      call_items.emplace_back();
    }
    calls.back().keys.push_back(keys[i]);
    calls.back().args.push_back(items[i].owner);
    call_items.back().push_back(i);
  }
  const backend::BatchReplies batches =
      backend.RunBatch(calls, deadline, round_trips, wait);
  const size_t n = backend.nodes();
  const size_t quorum = backend.quorum();
  RenewalTally tally;
  tally.renewed.resize(items.size());
  tally.gone.resize(items.size());
  for (size_t node = 0; node < n; ++node) {
    CountRenewals(batches[node], calls, call_items, items, &tally);
  }
  const std::vector<size_t>& renewed = tally.renewed;
  const std::vector<size_t>& gone = tally.gone;
  const absl::Status& error = tally.error;
  watchdog::RenewResult out;
  out.items.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    if (renewed[i] >= quorum) {
      out.items.push_back(watchdog::Renewal::kRenewed);
    } else if (gone[i] > n - quorum) {
      out.items.push_back(watchdog::Renewal::kGone);
    } else {
      // Undecided (nodes did not answer): retried soon; lost only if its
      // lease runs out first.
      out.items.push_back(watchdog::Renewal::kUndecided);
      if (out.error.ok()) {
        const absl::Status why =
            error.ok() ? absl::UnavailableError("no answer") : error;
        out.error = n == 1
                        ? why
                        : absl::UnavailableError(absl::StrCat(
                              "no quorum of masters answered the renewal "
                              "of ",
                              QuoteName(items[i].name), ": ", why.message()));
      }
    }
  }
  return out;
}

std::vector<absl::Status> ReleaseHolds(
    LockEnv& env, const std::vector<std::pair<HoldRegistry::Key, Hold>>& held,
    Deadline deadline) {
  if (held.empty()) return {};
  backend::Backend& backend = env.backend();
  // One batch (each hold with its own type's release-all script).
  std::vector<Step> steps;
  steps.reserve(held.size());
  for (const auto& [key, hold] : held) {
    steps.push_back(ModelOf(hold.kind).ReleaseAll(
        LockName(key.first), OwnerField::FromWire(hold.owner),
        backend.publish_command()));
  }
  std::vector<backend::Call> calls;
  calls.reserve(steps.size());
  for (const Step& step : steps) calls.push_back(step.Views());
  const backend::BatchReplies batches = backend.RunBatch(calls, deadline);
  std::vector<absl::Status> out(held.size());
  for (size_t i = 0; i < held.size(); ++i) {
    out[i] =
        ReleaseResult(backend, batches, i, held[i].second.release_in_flight);
  }
  return out;
}

}  // namespace lock
}  // namespace relock
