// relock::lock::Lease: the lease a script sets on a lock, and its one wire
// form.
//
// Every script that sets a lease (acquire, release, extend, renew) takes it
// as whole milliseconds in decimal, and a release takes "0" to mean "keep
// the key's TTL" (lua/release.lua and its kin). Lease::wire() is the only
// place that text is made; the algorithms pass Leases, not strings.
//
//   Lease            | wire() | where
//   -----------------+--------+-------------------------------------------
//   Lease::Of(30s)   | "30000"| acquire, extend, renew; a release whose
//                    |        | holds remain, of a watchdog hold
//   Lease::Keep()    | "0"    | a release whose holds remain, of an
//                    |        | explicit-lease hold, and an undo

#ifndef RELOCK_LIB_LOCK_LEASE_H_
#define RELOCK_LIB_LOCK_LEASE_H_

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace relock {
namespace lock {

class Lease {
 public:
  // Keep the TTL the key has (a release only).
  static Lease Keep() { return Lease(absl::ZeroDuration()); }
  // A lease of `length`, at least 1 ms (the algorithms check kMinLease
  // first; a shorter one would read as Keep() on the wire).
  static Lease Of(absl::Duration length) { return Lease(length); }

  // The scripts' argument: whole milliseconds, "0" for Keep().
  std::string wire() const {
    return absl::StrCat(absl::ToInt64Milliseconds(length_));
  }

 private:
  explicit Lease(absl::Duration length) : length_(length) {}
  absl::Duration length_;
};

}  // namespace lock
}  // namespace relock

#endif  // RELOCK_LIB_LOCK_LEASE_H_
