// A master that Redis Sentinel manages, as one Backend (a RoutedBackend whose
// slot map gives every slot to the master the sentinels name: see
// routed_backend.h for how calls, batches and waits follow it).
//
// Finding the master: the sentinels are asked in turn
// (SENTINEL get-master-addr-by-name <name>), starting with the one that
// answered last; an address is taken only once ROLE there says "master" (a
// sentinel that has not heard of a failover yet names the old master).
//
// Following it: every sentinel's "+switch-master" channel is subscribed
// (each sentinel's own pub/sub connection on the client's loop), and the
// master is looked up again when a message arrives there, when that
// subscription is made again after a reconnect (messages may have been
// missed), when the master refuses a write (READONLY: it was demoted) or
// cannot be reached, and every RoutedBackend::kRefreshInterval. A new master
// is installed as a new slot map, so every wait moves to it and re-checks at
// once, and later calls go there.
//
//   event                      what a caller sees
//   master killed              calls harmless to send twice (acquire
//                              attempts, renewals) wait for the promotion
//                              (within their deadline, at most
//                              kFailoverWait); a release fails with
//                              Unavailable (it may have run)
//   SENTINEL FAILOVER          the old master answers READONLY until the
//                              switch: calls are sent again to the new one
//   switch installed           waits re-check against the new master; the
//                              watchdog's next round renews each hold whose
//                              owner field reached the new master and
//                              reports the others lost (kLockLost)
//
// Credentials: SentinelOptions::sentinels carry the sentinels' own, and
// SentinelOptions::node the data nodes' (with the db and TLS).

#ifndef RELOCK_LIB_BACKEND_SENTINEL_BACKEND_H_
#define RELOCK_LIB_BACKEND_SENTINEL_BACKEND_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/backend/node_backend.h"
#include "lib/backend/routed_backend.h"
#include "lib/io/event_loop.h"
#include "lib/redis/script.h"
#include "lib/redis/url.h"

namespace relock {
namespace backend {

struct SentinelOptions {
  // The sentinels, with their credentials and TLS setting; asked in turn.
  std::vector<redis::Endpoint> sentinels;
  // The name the sentinels monitor the master by.
  std::string master_name;
  // For the master (its connection's endpoint is set to the address the
  // sentinels give, keeping the credentials, db and TLS setting given here).
  NodeOptions node;
};

class SentinelBackend final : public RoutedBackend {
 public:
  // Asks the sentinels for the master, connects to it (loading the scripts)
  // and checks that it is one: Unavailable if no sentinel answers (naming
  // each) or the master they name cannot be used; NotFound if the sentinels
  // that answer know no master of that name; a sentinel's or the master's
  // refusal as it is (Unauthenticated, PermissionDenied, ...). `loop` as for
  // NodeBackend::Create.
  static absl::StatusOr<std::unique_ptr<SentinelBackend>> Create(
      io::EventLoop* loop, SentinelOptions options,
      std::vector<redis::ScriptSource> scripts);
  ~SentinelBackend() override;

  void Close() override;

  // The master in use now ("host:port"), for tests and messages.
  std::string master() const;

 private:
  SentinelBackend(io::EventLoop* loop, SentinelOptions options,
                  std::vector<redis::ScriptSource> scripts);

  // The data node's endpoint at the address a sentinel gave
  // ([host, port]), or nullopt if the reply is not one.
  absl::optional<redis::Endpoint> MasterAt(const redis::Reply& reply) const;
  // Asks sentinel `i` for the master (blocking, within `deadline`):
  // its address, NotFound if it knows no such master, or why it did not
  // answer.
  absl::StatusOr<redis::Endpoint> AskBlocking(size_t i, Deadline deadline);
  // Whether ROLE on `node` says master (blocking).
  absl::Status CheckMaster(NodeBackend* node, Deadline deadline);
  // Asks the sentinels in turn from the preferred one, on the loop; `asked`
  // counts the sentinels asked so far in this refresh.
  void StartRefresh() override;
  void RefreshStep(size_t asked);
  // Installs `master` (a new address) once ROLE there says master; else
  // goes on with the next sentinel.
  void Confirm(redis::Endpoint master, size_t asked);
  // Subscribes to every sentinel's +switch-master.
  void Watch();

  const std::string master_name_;
  const std::vector<redis::Endpoint> sentinel_endpoints_;
  // One per sentinel, without scripts; made in Create().
  std::vector<std::unique_ptr<NodeBackend>> sentinels_;
  std::vector<std::unique_ptr<Waiter>> switch_watches_;
  // The sentinel to ask first (the last one that named a master).
  std::atomic<size_t> preferred_{0};
};

}  // namespace backend
}  // namespace relock

#endif  // RELOCK_LIB_BACKEND_SENTINEL_BACKEND_H_
