#include "lib/redis/parallel.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace relock {
namespace redis {

std::vector<absl::StatusOr<Reply>> EvalOnAll(
    const ScriptSet& scripts, absl::Span<Connection* const> conns,
    size_t script, absl::Span<const absl::string_view> keys,
    absl::Span<const absl::string_view> args, Deadline deadline,
    const OnAnswer& enough) {
  const size_t n = conns.size();
  std::vector<absl::optional<absl::StatusOr<Reply>>> results(n);
  std::vector<size_t> pending;
  bool settled = false;  // `enough` said so
  auto answered = [&](size_t i, absl::StatusOr<Reply> answer) {
    results[i] = std::move(answer);
    if (enough && !settled) settled = enough(*results[i]);
  };
  // Write every request before reading any reply.
  for (size_t i = 0; i < n; ++i) {
    Connection* conn = conns[i];
    if (conn == nullptr) {
      answered(i, absl::UnavailableError("no connection"));
      continue;
    }
    absl::Status s = scripts.Append(*conn, script, keys, args);
    if (s.ok()) s = conn->Flush(absl::StrCat("EVALSHA ", scripts.name(script)));
    if (s.ok()) {
      pending.push_back(i);
    } else {
      answered(i, s);
    }
  }
  while (!pending.empty() && !settled) {
    const absl::Duration left = deadline.Remaining();
    if (left <= absl::ZeroDuration()) break;
    std::vector<pollfd> fds;
    fds.reserve(pending.size());
    for (size_t i : pending) {
      fds.push_back({conns[i]->context()->fd, POLLIN, 0});
    }
    const int timeout_ms = static_cast<int>(std::min<int64_t>(
        1000,
        absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1)))));
    const int ready = poll(fds.data(), fds.size(), std::max(1, timeout_ms));
    if (ready < 0 && errno != EINTR) break;
    std::vector<size_t> still;
    for (size_t k = 0; k < pending.size(); ++k) {
      const size_t i = pending[k];
      Connection* conn = conns[i];
      if ((fds[k].revents & (POLLIN | POLLERR | POLLHUP)) == 0) {
        still.push_back(i);
        continue;
      }
      if (redisBufferRead(conn->context()) != REDIS_OK) {
        answered(i, conn->Fail("read reply"));
        continue;
      }
      void* raw = nullptr;
      if (redisGetReplyFromReader(conn->context(), &raw) != REDIS_OK) {
        answered(i, conn->Fail("parse reply"));
      } else if (raw == nullptr) {
        still.push_back(i);  // partial reply so far
      } else {
        answered(i, conn->Received(raw));
      }
    }
    pending.swap(still);
  }
  const bool timed_out = deadline.Expired();
  for (size_t i : pending) {  // not awaited: the reply is still owed
    conns[i]->MarkBroken();
    results[i] = absl::DeadlineExceededError(absl::StrCat(
        "no reply from Redis at ", conns[i]->options().endpoint.ToString(),
        timed_out ? " within the per-master timeout"
                  : " before enough other masters answered"));
  }
  std::vector<absl::StatusOr<Reply>> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    absl::StatusOr<Reply>& r = *results[i];
    if (r.ok() && ScriptSet::IsNoScript(*r) && !conns[i]->broken()) {
      r = scripts.Eval(*conns[i], script, keys, args, deadline);
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace redis
}  // namespace relock
