// The shared state behind a relock::Client and its Lock handles: options,
// identity, the connection pool, the scripts, the pub/sub subscriber and the
// hold registry. Lock handles keep it alive with a shared_ptr, so a handle
// that outlives its Client finds it closed instead of freed.

#ifndef RELOCK_LIB_CLIENT_CLIENT_CORE_H_
#define RELOCK_LIB_CLIENT_CLIENT_CORE_H_

#include <atomic>
#include <initializer_list>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "lib/lock/hold_registry.h"
#include "lib/pubsub/subscriber.h"
#include "lib/redis/pool.h"
#include "lib/redis/script.h"
#include "relock/options.h"

namespace relock {
namespace internal {

// Indexes into the client's ScriptSet.
enum ScriptId : size_t {
  kAcquireScript,
  kReleaseScript,
  kReleaseAllScript,
  kForceReleaseScript,
  kRenewScript,
};

class ClientCore {
 public:
  static absl::StatusOr<std::shared_ptr<ClientCore>> Create(
      ClientOptions options);
  ~ClientCore();

  const ClientOptions& options() const { return options_; }
  const std::string& id() const { return id_; }
  pubsub::Subscriber& subscriber() { return *subscriber_; }
  lock::HoldRegistry& holds() { return holds_; }
  bool closed() const { return closed_.load(std::memory_order_acquire); }

  // FailedPrecondition once the client is closed.
  absl::Status CheckOpen() const;

  // One script call / one command on a pooled connection.
  absl::StatusOr<redis::Reply> RunScript(
      ScriptId script, std::initializer_list<absl::string_view> keys,
      std::initializer_list<absl::string_view> args);
  absl::StatusOr<redis::Reply> RunCommand(
      std::initializer_list<absl::string_view> argv);

  // Delivers an event to options().on_lock_event (or stderr).
  void Report(LockEventType type, absl::string_view lock_name,
              absl::Status status);

  // See relock::Client::Close(). Idempotent.
  void Close();

 private:
  ClientCore(ClientOptions options, std::string id,
             redis::ConnectionOptions conn_options);

  const ClientOptions options_;
  const std::string id_;
  redis::ConnectionPool pool_;
  redis::ScriptSet scripts_;
  std::unique_ptr<pubsub::Subscriber> subscriber_;
  lock::HoldRegistry holds_;
  std::atomic<bool> closed_{false};
};

}  // namespace internal
}  // namespace relock

#endif  // RELOCK_LIB_CLIENT_CLIENT_CORE_H_
