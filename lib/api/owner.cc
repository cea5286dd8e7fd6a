// relock::Owner: process-wide owner numbers (lib/lock/owner.h).

#include "relock/owner.h"

#include "lib/lock/owner.h"

namespace relock {

Owner Owner::New() { return Owner(lock::NewOwnerNumber(), false); }

Owner Owner::ThisThread() { return Owner(lock::CurrentThreadNumber(), true); }

}  // namespace relock
