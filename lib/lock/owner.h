// Owner identity and Redis names of a lock (Redisson's data model).

#ifndef RELOCK_LIB_LOCK_OWNER_H_
#define RELOCK_LIB_LOCK_OWNER_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace relock {
namespace lock {

// A number unique to the calling thread for the life of the process (taken
// from an atomic counter on the thread's first call; never reused, unlike
// std::thread::id).
uint64_t CurrentThreadNumber();

// A random (version 4) UUID, the default client id.
std::string NewClientId();

// "<client-id>:<thread-number>": the hash field that names a lock's owner.
std::string OwnerField(absl::string_view client_id, uint64_t thread_number);

// "redisson_lock__channel:{<name>}": where releases announce a free lock.
std::string UnlockChannel(absl::string_view lock_name);

// The unlock message published on that channel.
inline constexpr absl::string_view kUnlockMessage = "0";

// The name as it appears in error messages: quoted, non-printable bytes
// escaped, at most ~100 bytes.
std::string QuoteName(absl::string_view lock_name);

}  // namespace lock
}  // namespace relock

#endif  // RELOCK_LIB_LOCK_OWNER_H_
