// ClientAccess: reaches the core behind a relock::Client, for tests and
// benchmarks of internals (the watchdog, the hold registry). Only the API
// layer knows both sides; nothing in lib/ below it includes this.

#ifndef RELOCK_LIB_API_CLIENT_ACCESS_H_
#define RELOCK_LIB_API_CLIENT_ACCESS_H_

#include "lib/client/client_core.h"
#include "relock/client.h"

namespace relock {
namespace internal {

struct ClientAccess {
  static ClientCore& Core(Client& client) { return *client.core_; }
};

}  // namespace internal
}  // namespace relock

#endif  // RELOCK_LIB_API_CLIENT_ACCESS_H_
