// What a routed call does with each answer it gets (lib/backend/
// routed_backend.h): the rules for MOVED, ASK, TRYAGAIN, CLUSTERDOWN,
// READONLY and an unreachable master, written once for the blocking call
// (RoutedBackend::Run) and the asynchronous one (RunAsync). Pure: no I/O and
// no node lookups; the backend does what the step says.
//
//   answer                       step                       refresh
//   a reply (not an error below) kDone (as it is)           no
//   MOVED slot host:port         kRedirect there            yes
//   ASK slot host:port           kRedirect there, ASKING    no
//     (past kMaxRedirects in a
//     row, no retry between)     kFail: Unavailable         as above
//   TRYAGAIN                     kRetry after a pause       no
//   CLUSTERDOWN, READONLY        kRetry after a pause       yes
//     (deadline too near)        kFail: DeadlineExceeded    as above
//     (refused for longer than
//     failover_wait since the
//     first refusal)             kFail: Unavailable         as above
//   Unavailable, kIfDropped      kRetry after a pause       yes
//     (deadline or failover
//     window too near)           kDone (as it is)           yes
//   Unavailable, kNever          kDone (as it is)           yes
//   another failure              kDone (as it is)           no
//
// Pauses start at kFirstPause and double up to kMaxPause; a retry happens
// only if the pause ends before the call's deadline (and, for a failover,
// before its window: `failover_wait` after the first unreachable answer, on
// the steady clock).

#ifndef RELOCK_LIB_BACKEND_REDIRECT_H_
#define RELOCK_LIB_BACKEND_REDIRECT_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "lib/backend/backend.h"
#include "lib/common/deadline.h"
#include "lib/redis/cluster.h"
#include "lib/redis/url.h"

namespace relock {
namespace backend {

// What a routed call does next.
struct RouteStep {
  enum class Kind {
    kDone,      // the answer is the call's answer, as it is
    kFail,      // `status` is the call's answer instead
    kRedirect,  // send the call to `redirect.endpoint` (after ASKING: kAsk)
    kRetry,     // after `pause`, send it to the slot's master (per the map
                // then), without ASKING
  };
  Kind kind = Kind::kDone;
  bool refresh = false;      // read the slot map again (whatever the kind)
  absl::Status status;       // kFail
  redis::Redirect redirect;  // kRedirect
  absl::Duration pause = absl::ZeroDuration();  // kRetry
};

// One routed call's rules and what they keep across its attempts (the
// redirections so far, the next pause, the failover window). One per call;
// not thread-safe (a call's attempts follow one another).
class RedirectRules {
 public:
  static constexpr int kMaxRedirects = 5;
  static constexpr absl::Duration kFirstPause = absl::Milliseconds(10);
  static constexpr absl::Duration kMaxPause = absl::Milliseconds(200);

  // `name` names the deployment in messages (it must outlive the rules);
  // `deadline` and `resend` are the call's; `failover_wait` is how long an
  // unreachable master is waited for (RoutedBackend::kFailoverWait).
  RedirectRules(absl::string_view name, Deadline deadline, Resend resend,
                absl::Duration failover_wait)
      : name_(name),
        deadline_(deadline),
        resend_(resend),
        failover_wait_(failover_wait) {}

  // The step after `answer`, which the node at `at` gave.
  RouteStep Next(const Answer& answer, const redis::Endpoint& at);

 private:
  const absl::string_view name_;
  const Deadline deadline_;
  const Resend resend_;
  const absl::Duration failover_wait_;
  int hops_ = 0;  // redirections followed since the last retry
  absl::Duration pause_ = kFirstPause;
  absl::optional<Deadline> failover_end_;  // set by the first failover
  absl::optional<Deadline> busy_end_;      // set by the first refusal
};

// Whether an error reply says the call did not run and may be sent again
// (elsewhere, or later): MOVED, ASK, TRYAGAIN, CLUSTERDOWN, READONLY.
bool DidNotRun(absl::string_view error);

}  // namespace backend
}  // namespace relock

#endif  // RELOCK_LIB_BACKEND_REDIRECT_H_
