// The owner a public lock call acts for, checked (lib/api only).

#ifndef RELOCK_LIB_API_OWNER_CHECK_H_
#define RELOCK_LIB_API_OWNER_CHECK_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/lock/owner.h"
#include "relock/owner.h"

namespace relock {
namespace internal {

// InvalidArgument for a default-constructed Owner.
inline absl::StatusOr<lock::OwnerId> CheckedOwner(const Owner& owner) {
  if (!owner.valid()) {
    return absl::InvalidArgumentError(
        "relock::Owner: a default-constructed Owner is no owner; make one "
        "with Owner::New() (or Owner::ThisThread())");
  }
  return lock::OwnerId{owner.number(), owner.is_thread()};
}

}  // namespace internal
}  // namespace relock

#endif  // RELOCK_LIB_API_OWNER_CHECK_H_
