// Owner identity and Redis names of a lock (Redisson's data model).

#ifndef RELOCK_LIB_LOCK_OWNER_H_
#define RELOCK_LIB_LOCK_OWNER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/string_view.h"
#include "lib/common/concat.h"

namespace relock {
namespace lock {

// A number unique to the calling thread for the life of the process (taken
// from an atomic counter on the thread's first call; never reused, unlike
// std::thread::id).
uint64_t CurrentThreadNumber();
// A new number from the same counter, for an explicit owner (relock::Owner):
// never a thread's.
uint64_t NewOwnerNumber();

// The owner a lock call acts for, the library's one owner type (the API's
// relock::Owner becomes one at the call, lib/api/calls.h): the number in
// its owner field, and whether it is the calling thread (whose exit the
// client watches).
struct OwnerId {
  uint64_t number = 0;
  bool thread = true;
};
// The calling thread's OwnerId.
inline OwnerId ThisThread() { return OwnerId{CurrentThreadNumber(), true}; }

// Told when a thread that holds locks exits (see NotifyOnThreadExit).
class ThreadExitListener {
 public:
  virtual void OnThreadExit(uint64_t thread_number) = 0;

 protected:
  ~ThreadExitListener() = default;
};

// Makes the calling thread call `listener->OnThreadExit(its number)` when it
// exits, if the listener is still alive then. Registering the same listener
// again is a no-op. Not for the process's main thread, whose exit ends the
// process (the listener is not called for it).
void NotifyOnThreadExit(const std::weak_ptr<ThreadExitListener>& listener);

// A random (version 4) UUID, the default client id.
std::string NewClientId();
// Whether `id` has the form of a client id: a UUID in its text form, 8-4-4-4-12
// hex digits of either case (any version), as relock's and Redisson's are. The
// scripts (lua/shape_lib.lua) count a hash as a lock only when its owner
// fields have this form.
bool IsClientId(absl::string_view id);

// An owner's write hold of a read-write lock is registered (HoldRegistry)
// under its number with this bit set, beside its read hold under the plain
// number (a downgrade holds both). Thread and relock::Owner numbers come from
// a counter that never reaches it.
inline constexpr uint64_t kWriteHoldBit = uint64_t{1} << 63;

// A lock's name: the Redis key of its hash, from which its companion keys
// and channels are named (PrefixName). A view of the caller's text, which
// must outlive it; as cheap to pass as an absl::string_view.
class LockName {
 public:
  explicit LockName(absl::string_view key) : key_(key) {}
  explicit LockName(const char* key) : key_(key) {}
  // Not of a temporary string, which would end before the view.
  explicit LockName(std::string&& key) = delete;
  absl::string_view key() const { return key_; }

 private:
  absl::string_view key_;
};

// The hash field that names a lock's owner in Redis: "<client-id>:<number>"
// for OwnerId `number` of client `client_id`; for a number with
// kWriteHoldBit, the writer's field of the owner's number without it,
// "<client-id>:<number>:write" (Redisson's). What the scripts take as the
// owner, what events report; OwnerId is the owner within this process.
class OwnerField {
 public:
  OwnerField(absl::string_view client_id, uint64_t number);
  // A field kept as text (the hold registry's Hold::owner, which the
  // constructor above made).
  static OwnerField FromWire(absl::string_view field) {
    OwnerField owner;
    AppendConcat({field}, &owner.field_);
    return owner;
  }
  // No owner: what a query passes that counts nobody's holds.
  static OwnerField None() { return OwnerField(); }

  // The field's text, as the scripts take it.
  absl::string_view wire() const {
    return absl::string_view(field_.data(), field_.size());
  }

 private:
  OwnerField() = default;
  // Inline: a client id (a UUID, 36 bytes), a number and ":write" fit, so
  // making the field of a lock call allocates nothing.
  absl::InlinedVector<char, 64> field_;
};

// The name of a companion key or channel of `name` (Redisson's
// RedissonObject.prefixName): "<prefix>:{<name>}", or "<prefix>:<name>" when
// the name already contains "{" (its hash tag then decides the cluster slot).
// Either way it shares the name's Redis Cluster slot, and Redisson clients
// use the same names.
std::string PrefixName(absl::string_view prefix, absl::string_view name);
// PrefixName()'s pieces, to be concatenated by a caller that writes the name
// in place (StepTexts::AddPrefixName()).
std::array<absl::string_view, 4> PrefixNamePieces(absl::string_view prefix,
                                                  absl::string_view name);

// PrefixName(kUnlockChannelPrefix, name): where releases announce a free
// lock.
inline constexpr absl::string_view kUnlockChannelPrefix =
    "redisson_lock__channel";
std::string UnlockChannel(absl::string_view lock_name);

// PrefixName(kTokenKeyPrefix, name): a fenced lock's token counter
// (Redisson's RFencedLock).
inline constexpr absl::string_view kTokenKeyPrefix = "redisson_lock_token";
std::string TokenKey(absl::string_view lock_name);

// The unlock message published on that channel.
inline constexpr absl::string_view kUnlockMessage = "0";

// The name as it appears in error messages: quoted, non-printable bytes
// escaped, at most ~100 bytes.
std::string QuoteName(absl::string_view lock_name);

}  // namespace lock
}  // namespace relock

#endif  // RELOCK_LIB_LOCK_OWNER_H_
