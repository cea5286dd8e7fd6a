// One script call on several connections at once (one per Redis master), on
// the calling thread: every request is written first, then the replies are
// read as they arrive (poll), so the whole call costs about one round trip of
// the slowest master, bounded by a deadline. A connection that has not
// answered by the deadline (or when `enough` says to stop early) is marked
// broken, since its reply is still owed. NOSCRIPT replies are retried once
// through ScriptSet::Eval.

#ifndef RELOCK_LIB_REDIS_PARALLEL_H_
#define RELOCK_LIB_REDIS_PARALLEL_H_

#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "lib/common/deadline.h"
#include "lib/redis/connection.h"
#include "lib/redis/script.h"

namespace relock {
namespace redis {

// Called with each answer as it arrives (replies, and failures to send or
// read); returning true ends the wait for the others.
using OnAnswer = std::function<bool(const absl::StatusOr<Reply>& answer)>;

// `conns[i]` may be null (no connection to that master): its result is
// Unavailable.
std::vector<absl::StatusOr<Reply>> EvalOnAll(
    const ScriptSet& scripts, absl::Span<Connection* const> conns,
    size_t script, absl::Span<const absl::string_view> keys,
    absl::Span<const absl::string_view> args, Deadline deadline,
    const OnAnswer& enough = nullptr);

}  // namespace redis
}  // namespace relock

#endif  // RELOCK_LIB_REDIS_PARALLEL_H_
