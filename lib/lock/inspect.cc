#include "lib/lock/inspect.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lib/common/deadline.h"
#include "lib/lock/algorithm.h"
#include "lib/lock/fair_lock.h"
#include "lib/lock/lock_scripts.h"
#include "lib/lock/owner.h"
#include "lib/lock/permit_semaphore.h"
#include "lib/lock/rw_lock.h"
#include "lib/lock/semaphore.h"
#include "lib/redis/errors.h"

namespace relock {
namespace lock {
namespace {

constexpr absl::string_view kWriteSuffix = ":write";

// The status of an answer that is no reply (or an error reply) to `what`.
absl::Status AnswerError(const backend::Answer& answer,
                         absl::string_view what) {
  if (!answer.reply.ok()) {
    return absl::Status(
        answer.reply.status().code(),
        absl::StrCat(what, ": ", answer.reply.status().message()));
  }
  if (answer.reply->is_error()) {
    return redis::ErrorReplyToStatus(what, answer.reply->str());
  }
  return absl::OkStatus();
}

absl::Status UnexpectedReply(const redis::ReplyView& reply,
                             absl::string_view what) {
  return absl::InternalError(
      absl::StrCat(what, ": unexpected reply ", reply.Describe()));
}

// Each administrative command gets the time a lock call gets.
Deadline CallDeadline(LockEnv& env) {
  return Deadline::After(env.confirm_timeout(), &env.clock());
}

// Whether the ACL user may not read `key` itself: its PTTL is refused too.
bool KeyDenied(LockEnv& env, const std::string& key) {
  const absl::string_view argv[] = {"PTTL", key};
  return absl::IsPermissionDenied(AnswerError(
      env.backend().CommandForKey(key, argv, CallDeadline(env)), "PTTL"));
}

// Subscribers of `channel` on the master of its slot: classic and, where
// the server has sharded pub/sub (Redis >= 7), sharded.
absl::StatusOr<int64_t> Subscribers(LockEnv& env, const std::string& channel,
                                    absl::string_view what) {
  int64_t total = 0;
  for (absl::string_view sub : {"NUMSUB", "SHARDNUMSUB"}) {
    const absl::string_view argv[] = {"PUBSUB", sub, channel};
    backend::Answer answer =
        env.backend().CommandForKey(channel, argv, CallDeadline(env));
    if (sub == "SHARDNUMSUB" && answer.reply.ok() && answer.reply->is_error()) {
      continue;  // a server without sharded pub/sub
    }
    if (absl::Status s = AnswerError(answer, what); !s.ok()) return s;
    const redis::ReplyView v = answer.reply->view();
    if (!v.is_array() || v.size() != 2 || !v[1].is_integer()) {
      return UnexpectedReply(v, what);
    }
    total += v[1].integer();
  }
  return total;
}

// The info record of client `id`, if it has one. A record that cannot be
// read (an ACL user without access to it) is treated as absent: the lock's
// own state is what the caller asked for.
absl::StatusOr<absl::optional<HolderClient>> ReadClientInfo(
    LockEnv& env, const std::string& id, absl::string_view what) {
  const std::string key = ClientInfoKey(id);
  const absl::string_view argv[] = {"HGETALL", key};
  backend::Answer answer =
      env.backend().CommandForKey(key, argv, CallDeadline(env));
  if (answer.reply.ok() && answer.reply->is_error()) return absl::nullopt;
  if (absl::Status s = AnswerError(answer, what); !s.ok()) return s;
  const redis::ReplyView v = answer.reply->view();
  if (!v.is_array()) return UnexpectedReply(v, what);
  if (v.size() == 0) return absl::nullopt;
  HolderClient client;
  for (size_t i = 0; i + 1 < v.size(); i += 2) {
    const absl::string_view field = v[i].str();
    const absl::string_view value = v[i + 1].str();
    int64_t number = 0;
    if (field == "host") {
      client.host = std::string(value);
    } else if (field == "pid" && absl::SimpleAtoi(value, &number)) {
      client.pid = number;
    } else if (field == "started" && absl::SimpleAtoi(value, &number)) {
      client.started = absl::FromUnixMillis(number);
    } else if (field == "version") {
      client.version = std::string(value);
    }
  }
  return client;
}

}  // namespace

std::string ClientInfoKey(absl::string_view client_id) {
  return absl::StrCat("relock:client:", client_id);
}

absl::StatusOr<LockInfo> InspectLock(LockEnv& env, absl::string_view name) {
  if (absl::Status s = env.CheckBlockingCall(); !s.ok()) return s;
  const std::string key(name);
  if (absl::Status s = ValidateName(key); !s.ok()) return s;
  const std::string what = absl::StrCat("inspect lock \"", name, "\"");
  const std::string queue = FairQueueKey(name);
  const absl::string_view keys[] = {key, queue};
  backend::ScriptCall call;
  call.script = internal::kLockInfoScript;
  call.keys = keys;
  call.deadline = CallDeadline(env);
  call.resend = backend::Resend::kIfDropped;
  backend::Answer answer = std::move(env.backend().Run(call)[0]);
  if (absl::Status s = AnswerError(answer, what); !s.ok()) return s;
  const redis::ReplyView v = answer.reply->view();
  if (!v.is_array() || v.size() != 4 || !v[0].is_string() ||
      !v[1].is_integer() || !v[2].is_integer() || !v[3].is_array()) {
    return UnexpectedReply(v, what);
  }
  LockInfo info;
  info.name = key;
  const absl::string_view shape = v[0].str();
  if (shape == "free") {
    info.shape = LockShape::kFree;
  } else if (shape == "lock") {
    info.shape = LockShape::kLock;
  } else if (shape == "rwlock") {
    info.shape = LockShape::kReadWriteLock;
  } else {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": the key holds a ", shape,
                     shape == "hash" ? " whose fields are not lock owners" : "",
                     ", not a lock"));
  }
  const int64_t pttl = v[1].integer();
  if (pttl == -1) {
    info.remaining_lease = absl::InfiniteDuration();
  } else if (pttl > 0) {
    info.remaining_lease = absl::Milliseconds(pttl);
  }
  info.queue_length = v[2].integer();
  const redis::ReplyView fields = v[3];
  for (size_t i = 0; i + 1 < fields.size(); i += 2) {
    const absl::string_view field = fields[i].str();
    if (field == "mode") {
      info.mode = std::string(fields[i + 1].str());
      continue;
    }
    LockHolder holder;
    holder.owner = std::string(field);
    holder.client_id = std::string(field.substr(0, field.find(':')));
    holder.write = info.shape == LockShape::kReadWriteLock &&
                   absl::EndsWith(field, kWriteSuffix);
    if (!absl::SimpleAtoi(fields[i + 1].str(), &holder.hold_count)) {
      return UnexpectedReply(fields[i + 1], what);
    }
    info.holders.push_back(std::move(holder));
  }
  std::sort(info.holders.begin(), info.holders.end(),
            [](const LockHolder& a, const LockHolder& b) {
              return a.owner < b.owner;
            });

  std::vector<std::string> channels;
  if (info.shape != LockShape::kReadWriteLock) {
    channels.push_back(UnlockChannel(name));
  }
  if (info.shape != LockShape::kLock) {
    channels.push_back(ReadWriteChannel(name));
  }
  for (const std::string& channel : channels) {
    absl::StatusOr<int64_t> n = Subscribers(env, channel, what);
    if (!n.ok()) return n.status();
    info.waiters += *n;
  }

  // One record per client, however many of its threads hold the lock.
  absl::flat_hash_map<std::string, absl::optional<HolderClient>> clients;
  for (LockHolder& holder : info.holders) {
    auto it = clients.find(holder.client_id);
    if (it == clients.end()) {
      absl::StatusOr<absl::optional<HolderClient>> client =
          ReadClientInfo(env, holder.client_id, what);
      if (!client.ok()) return client.status();
      it = clients.emplace(holder.client_id, *std::move(client)).first;
    }
    holder.client = it->second;
  }
  return info;
}

absl::StatusOr<SemaphoreInfo> InspectSemaphore(LockEnv& env,
                                               absl::string_view name) {
  if (absl::Status s = env.CheckBlockingCall(); !s.ok()) return s;
  const std::string key(name);
  absl::StatusOr<SemaphoreInfo> info =
      ReadSemaphore(env, key, kMaxListedPermits);
  if (!info.ok()) return info.status();
  absl::StatusOr<int64_t> waiters =
      Subscribers(env, SemaphoreChannel(name),
                  absl::StrCat("inspect semaphore \"", name, "\""));
  if (!waiters.ok()) return waiters.status();
  info->waiters = *waiters;
  return info;
}

absl::StatusOr<std::vector<LockInfo>> ListLocks(LockEnv& env,
                                                absl::string_view pattern) {
  if (absl::Status s = env.CheckBlockingCall(); !s.ok()) return s;
  const std::string what = absl::StrCat("list locks \"", pattern, "\"");
  if (pattern.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": the pattern is empty (\"*\" matches every name)"));
  }
  absl::StatusOr<std::vector<std::string>> masters = env.backend().Masters();
  if (!masters.ok()) return masters.status();
  // Sorted, and each key once (a slot that moved during the scan may show a
  // key on two masters).
  std::set<std::string> keys;
  for (const std::string& master : *masters) {
    std::string cursor = "0";
    do {
      const absl::string_view argv[] = {"SCAN", cursor, "MATCH", pattern,
                                        "TYPE", "hash", "COUNT", "1000"};
      backend::Answer answer =
          env.backend().CommandOn(master, argv, CallDeadline(env));
      if (absl::Status s = AnswerError(answer, what); !s.ok()) return s;
      const redis::ReplyView v = answer.reply->view();
      if (!v.is_array() || v.size() != 2 || !v[0].is_string() ||
          !v[1].is_array()) {
        return UnexpectedReply(v, what);
      }
      cursor = std::string(v[0].str());
      for (size_t i = 0; i < v[1].size(); ++i) {
        keys.insert(std::string(v[1][i].str()));
      }
    } while (cursor != "0");
  }
  std::vector<LockInfo> locks;
  for (const std::string& key : keys) {
    absl::StatusOr<LockInfo> info = InspectLock(env, key);
    if (!info.ok()) {
      // A hash that is not a lock, or a name no lock can have: not listed.
      if (info.status().code() == absl::StatusCode::kFailedPrecondition &&
          env.CheckOpen().ok()) {
        continue;
      }
      if (info.status().code() == absl::StatusCode::kInvalidArgument) continue;
      // A key this ACL user may not read itself (SCAN lists every key): not
      // listed. A refusal of anything else (the script, or a companion key
      // such as the fair lock's queue) fails the listing, as it fails
      // InspectLock().
      if (absl::IsPermissionDenied(info.status()) && KeyDenied(env, key)) {
        continue;
      }
      return info.status();
    }
    if (info->shape == LockShape::kFree) continue;  // released meanwhile
    locks.push_back(*std::move(info));
  }
  return locks;
}

}  // namespace lock

const char* SemaphoreShapeName(SemaphoreShape shape) {
  switch (shape) {
    case SemaphoreShape::kAbsent:
      return "absent";
    case SemaphoreShape::kSemaphore:
      return "semaphore";
    case SemaphoreShape::kPermitExpirable:
      return "permit-expirable";
  }
  return "unknown";
}

const char* LockShapeName(LockShape shape) {
  switch (shape) {
    case LockShape::kFree:
      return "free";
    case LockShape::kLock:
      return "lock";
    case LockShape::kReadWriteLock:
      return "read-write";
  }
  return "unknown";
}

}  // namespace relock
