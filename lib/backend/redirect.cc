// The rules of a routed call (redirect.h): how an answer is read and what
// the call does next.

#include "lib/backend/redirect.h"

#include <algorithm>
#include <utility>

#include "absl/base/macros.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace relock {
namespace backend {
namespace {

// What an answer asks of the routed backend.
struct Verdict {
  // kFailover: the node is unreachable and the call may be sent again
  // (Resend::kIfDropped): try the slot's master again after a pause, until
  // the failover window ends.
  enum class Next { kDone, kRedirect, kRetryLater, kFailover };
  Next next = Next::kDone;
  absl::optional<redis::Redirect> redirect;  // kRedirect
  bool refresh = false;                      // refresh the slot map
};

Verdict Judge(const Answer& answer, const redis::Endpoint& at, Resend resend) {
  Verdict v;
  if (!answer.reply.ok()) {
    // The node is unreachable or silent: maybe failing over. A call that is
    // harmless to run twice waits for the promotion; another one fails.
    if (answer.reply.status().code() == absl::StatusCode::kUnavailable) {
      v.refresh = true;
      if (resend == Resend::kIfDropped) v.next = Verdict::Next::kFailover;
    }
    return v;
  }
  if (!answer.reply->is_error()) return v;
  const absl::string_view error = answer.reply->str();
  if (absl::optional<redis::Redirect> r = redis::ParseRedirect(error, at)) {
    v.next = Verdict::Next::kRedirect;
    v.refresh = r->kind == redis::Redirect::Kind::kMoved;
    v.redirect = std::move(r);
  } else if (absl::StartsWith(error, "TRYAGAIN")) {
    v.next = Verdict::Next::kRetryLater;
  } else if (absl::StartsWith(error, "CLUSTERDOWN") ||
             absl::StartsWith(error, "READONLY")) {
    // The cluster is healing, or this master was demoted to a replica (a
    // Sentinel failover): the map will say where to go.
    v.next = Verdict::Next::kRetryLater;
    v.refresh = true;
  }
  return v;
}

absl::Status TooManyRedirects(absl::string_view name, const Answer& last) {
  return absl::UnavailableError(
      absl::StrCat(name, ": more than ", RedirectRules::kMaxRedirects,
                   " redirections for one call; last: ", last.reply->str()));
}

absl::Status StillBusy(absl::string_view name, const Answer& last) {
  return absl::DeadlineExceededError(
      absl::StrCat(name,
                   ": the call's deadline passed while the masters "
                   "refused it for now: ",
                   last.reply->str()));
}

// The pause after `pause`: doubled, at most kMaxPause.
absl::Duration NextPause(absl::Duration pause) {
  return std::min(pause * 2, RedirectRules::kMaxPause);
}

}  // namespace

RouteStep RedirectRules::Next(const Answer& answer, const redis::Endpoint& at) {
  Verdict v = Judge(answer, at, resend_);
  RouteStep step;
  step.refresh = v.refresh;
  switch (v.next) {
    case Verdict::Next::kDone:
      return step;
    case Verdict::Next::kRedirect:
      if (++hops_ > kMaxRedirects) {
        step.kind = RouteStep::Kind::kFail;
        step.status = TooManyRedirects(name_, answer);
        return step;
      }
      step.kind = RouteStep::Kind::kRedirect;
      step.redirect = *std::move(v.redirect);
      return step;
    case Verdict::Next::kFailover:
      // The window starts at the first failover verdict, on the steady
      // clock (a step of the wall clock changes nothing).
      if (!failover_end_.has_value()) {
        failover_end_ = Deadline::After(failover_wait_);
      }
      if (Earliest(deadline_, *failover_end_).Remaining() <= pause_) {
        return step;  // the unreachable answer, as it is
      }
      ABSL_FALLTHROUGH_INTENDED;
    case Verdict::Next::kRetryLater:
      if (deadline_.Remaining() <= pause_) {
        if (v.next == Verdict::Next::kRetryLater) {
          step.kind = RouteStep::Kind::kFail;
          step.status = StillBusy(name_, answer);
        }
        return step;
      }
      if (v.next == Verdict::Next::kRetryLater) {
        // Refusals (a migration's TRYAGAIN, CLUSTERDOWN) are waited out for
        // the failover window at most, also by a call without a deadline: a
        // migration left half done must not hold a call forever.
        if (!busy_end_.has_value()) busy_end_ = Deadline::After(failover_wait_);
        if (busy_end_->Remaining() <= pause_) {
          step.kind = RouteStep::Kind::kFail;
          step.status = absl::UnavailableError(absl::StrCat(
              name_, ": the masters kept refusing the call for ",
              absl::FormatDuration(failover_wait_), ": ", answer.reply->str()));
          return step;
        }
      }
      // A pause ends a run of redirections: the limit is on redirections
      // in a row (a loop of them), not on a migration's ASK, TRYAGAIN, ASK...
      // while its slot moves (an importing master refuses a call of several
      // keys until they are all there), which the deadline bounds instead.
      hops_ = 0;
      step.kind = RouteStep::Kind::kRetry;
      step.pause = pause_;
      pause_ = NextPause(pause_);
      return step;
  }
  return step;
}

bool DidNotRun(absl::string_view error) {
  return absl::StartsWith(error, "MOVED ") || absl::StartsWith(error, "ASK ") ||
         absl::StartsWith(error, "TRYAGAIN") ||
         absl::StartsWith(error, "CLUSTERDOWN") ||
         absl::StartsWith(error, "READONLY");
}

}  // namespace backend
}  // namespace relock
