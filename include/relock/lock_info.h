// relock/lock_info.h
//
// `relock::LockInfo`: what Client::InspectLock() and Client::ListLocks()
// (relock/client.h) report about a lock, for operators and tools (the
// `relock status` and `relock list` commands): whether it is held, by whom
// (owner field, hold count, and the holder's host and process where the
// holder is a relock client that publishes its info record), for how much
// longer, and who waits for it; and `relock::SemaphoreInfo`, what
// Client::InspectSemaphore() reports about a semaphore (its available
// permits, and the permits out of a permit-expirable one with their lease
// ends).
//
// Everything is read from Redis as it is at the moment of the call and may
// be stale at once; it is for looking, never for deciding who holds a lock.
//
// The info record of a client (ClientOptions::publish_client_info) is the
// hash "relock:client:<client-id>" with the fields host, pid, started (unix
// time in ms) and version, and a TTL of 30 s that the client renews every
// 10 s and deletes on Close(). It sits beside the locks: the locks keep
// Redisson's data model, and a holder without a record (a Redisson client,
// a relock client that does not publish) is shown without host and pid.

#ifndef RELOCK_LOCK_INFO_H_
#define RELOCK_LOCK_INFO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "absl/types/optional.h"

namespace relock {

// What a lock's key holds.
enum class LockShape {
  // The key does not exist: nobody holds the lock.
  kFree,
  // A lock, plain, fenced or fair (relock::Lock, FencedLock, FairLock): a
  // hash whose every field is an owner "<client-id>:<thread>" (the client id
  // a UUID in text form, 8-4-4-4-12 hex digits; the thread a decimal number)
  // and whose value is that owner's hold count. A hash of any other form
  // ("x:1", "job:42") is not a lock, whatever its values.
  kLock,
  // A read-write lock (relock::ReadWriteLock): a hash with a "mode" field
  // ("read" or "write"), the readers' owner fields and the writer's
  // "<client-id>:<thread>:write" field (owner fields as for kLock), each
  // with its hold count.
  kReadWriteLock,
};

// Returns "free", "lock" or "read-write".
const char* LockShapeName(LockShape shape);

// The info record of the client a holder belongs to.
struct HolderClient {
  // The host the client runs on (gethostname()).
  std::string host;
  // Its process id.
  int64_t pid = 0;
  // When it connected (its wall clock); absl::InfinitePast() if the record
  // does not say.
  absl::Time started = absl::InfinitePast();
  // The relock version it runs; empty if the record does not say.
  std::string version;
};

// One owner of a held lock.
struct LockHolder {
  // The owner field as it is in Redis: "<client-id>:<thread>", with
  // ":write" after it for a read-write lock's writer.
  std::string owner;
  // The client id part of `owner` (before the first ':').
  std::string client_id;
  // Its hold count (Redis's; a relock holder's re-entries of a watchdog hold
  // are counted in its process, not here: see relock/lock.h).
  int64_t hold_count = 0;
  // For a read-write lock: true for the writer's field, false for a
  // reader's. Always false for a lock.
  bool write = false;
  // The holder client's info record, if it has one.
  absl::optional<HolderClient> client;
};

// A lock as Redis holds it now.
struct LockInfo {
  // The lock's name (its Redis key).
  std::string name;
  LockShape shape = LockShape::kFree;
  // A read-write lock's mode: "read" or "write"; empty otherwise.
  std::string mode;
  // Its owners, sorted by owner field; empty when free.
  std::vector<LockHolder> holders;
  // The key's remaining TTL (the lease); absl::InfiniteDuration() if it has
  // none (set by hand); zero when free.
  absl::Duration remaining_lease = absl::ZeroDuration();
  // Clients subscribed to the lock's unlock channel
  // ("redisson_lock__channel:{N}" for a lock, "redisson_rwlock:{N}" for a
  // read-write lock, the sum of both when free), counting classic and
  // sharded subscribers; on a cluster, those on the master of the channel's
  // slot, where waiters listen. A relock client counts once however many of
  // its threads wait; waiters of a fair lock listen on channels of their
  // own and are counted by `queue_length` instead.
  int64_t waiters = 0;
  // The length of the fair lock's queue ("redisson_lock_queue:{N}"): the
  // owners waiting for a FairLock, in order. 0 for other locks.
  int64_t queue_length = 0;
};

// What a semaphore's keys hold (Client::InspectSemaphore()).
enum class SemaphoreShape {
  // Neither key exists: no permits were ever set (or the count was deleted).
  kAbsent,
  // A count at the name and no "{N}:timeout" sorted set: a Semaphore
  // (relock/semaphore.h), or a PermitExpirableSemaphore with no permit out,
  // which Redisson's data model cannot tell apart from one.
  kSemaphore,
  // The sorted set "{N}:timeout" of the permits out exists: a
  // PermitExpirableSemaphore (relock/permit_expirable_semaphore.h).
  kPermitExpirable,
};

// Returns "absent", "semaphore" or "permit-expirable".
const char* SemaphoreShapeName(SemaphoreShape shape);

// One permit out of a permit-expirable semaphore.
struct PermitInfo {
  // The permit's id as the API gives it: its bytes in lower-case hex.
  std::string id;
  // When its lease ends, on the Redis server's clock; InfiniteFuture() for
  // a permit without a lease (Redisson's, never reclaimed).
  absl::Time lease_end = absl::InfiniteFuture();
  // `lease_end` minus the server's time when it was read; zero or less for
  // a permit whose lease is over but which no call has reclaimed yet;
  // InfiniteDuration() without a lease.
  absl::Duration remaining_lease = absl::InfiniteDuration();
};

// A semaphore as Redis holds it now, read in one script (nothing is
// reclaimed or published).
struct SemaphoreInfo {
  // The semaphore's name (the key of its count).
  std::string name;
  SemaphoreShape shape = SemaphoreShape::kAbsent;
  // The count at the name: the available permits, expired permits not yet
  // given back left out (0 when absent; may be negative after AddPermits).
  int64_t available = 0;
  // How many permits are out ("{N}:timeout"'s size), expired ones included.
  int64_t permits_out = 0;
  // The permits out, by lease end, soonest first: at most the first 1000.
  std::vector<PermitInfo> permits;
  // Clients subscribed to the semaphore's channel ("redisson_sc:{N}"),
  // classic and sharded: the waiting clients, as LockInfo::waiters counts
  // them.
  int64_t waiters = 0;
};

}  // namespace relock

#endif  // RELOCK_LOCK_INFO_H_
