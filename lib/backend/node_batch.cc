// NodeBackend's batches: many script calls in one round trip (the
// watchdog's renewals, a closing client's releases), on one node or
// gathered from several.

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/optional.h"
#include "absl/types/span.h"
#include "lib/backend/gather.h"
#include "lib/backend/node_backend.h"
#include "lib/redis/reply.h"
#include "lib/redis/resp.h"
#include "lib/redis/script.h"

namespace relock {
namespace backend {

std::vector<Answer> NodeBackend::FailedBatch(const absl::Status& status,
                                             size_t calls) {
  std::vector<Answer> out;
  out.reserve(calls);
  for (size_t i = 0; i < calls; ++i) out.push_back(Answer{status, false});
  return out;
}

void NodeBackend::RunBatchAsync(
    const std::vector<Call>& calls,
    const std::shared_ptr<std::atomic<bool>>& abandon, const WaitReplicas* wait,
    BatchDone done) {
  // One round trip with EVALSHA of every call (and the WAIT, if any); a
  // second, with EVAL of the source, for the calls that met NOSCRIPT (after
  // SCRIPT FLUSH or a restart), with the WAIT again: the first counted the
  // replicas of the first trip's writes only. Each call's EVALSHA is kept:
  // the calls' views do not outlive this function, and the EVAL form is
  // made from it when needed.
  struct Batch {
    io::Replies replies;
    std::vector<std::string> evalshas;
    std::vector<size_t> scripts;  // each call's
    std::string wait;             // the WAIT command, or ""
    // Per call: the reply to the WAIT that followed it (with a WAIT).
    std::vector<std::shared_ptr<const redis::Reply>> waited;
    BatchDone done;
  };
  auto batch = std::make_shared<Batch>();
  batch->done = std::move(done);
  if (calls.empty()) return batch->done({});
  if (wait != nullptr) batch->wait = WaitCommand(*wait);
  const bool waits = !batch->wait.empty();
  auto request = std::make_shared<io::Request>();
  request->commands = calls.size() + (waits ? 1 : 0);
  batch->evalshas.resize(calls.size());
  batch->scripts.reserve(calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    scripts_.AppendEvalsha(calls[i].script, calls[i].keys, calls[i].args,
                           &batch->evalshas[i]);
    batch->scripts.push_back(calls[i].script);
    request->wire += batch->evalshas[i];
  }
  request->wire += batch->wait;
  if (abandon != nullptr) request->abandoned = abandon;
  // Each call's answer from its reply and (with a WAIT) its WAIT's reply.
  auto finish = [this, batch] {
    std::vector<Answer> answers;
    answers.reserve(batch->replies.size());
    for (size_t i = 0; i < batch->replies.size(); ++i) {
      answers.push_back(Answer{std::move(batch->replies[i]), false});
      if (!batch->wait.empty()) SettleWait(*batch->waited[i], &answers.back());
    }
    batch->done(std::move(answers));
  };
  const size_t n = calls.size();
  request->done = [this, batch, abandon, finish, n](io::Result r) {
    if (!r.status.ok()) return batch->done(FailedBatch(r.status, n));
    const bool waits = !batch->wait.empty();
    if (waits) {
      batch->waited.assign(
          n, std::make_shared<const redis::Reply>(std::move(r.replies.back())));
      r.replies.pop_back();
    }
    batch->replies = std::move(r.replies);
    std::vector<size_t> noscript;
    for (size_t i = 0; i < batch->replies.size(); ++i) {
      if (redis::ScriptSet::IsNoScript(batch->replies[i])) {
        noscript.push_back(i);
      }
    }
    if (noscript.empty()) return finish();
    auto again = std::make_shared<io::Request>();
    for (size_t i : noscript) {
      again->wire +=
          scripts_.EvalFromEvalsha(batch->scripts[i], batch->evalshas[i]);
    }
    again->wire += batch->wait;
    again->commands = noscript.size() + (waits ? 1 : 0);
    if (abandon != nullptr) again->abandoned = abandon;
    again->done = [batch, noscript, finish, n](io::Result r2) {
      if (!r2.status.ok()) return batch->done(FailedBatch(r2.status, n));
      std::shared_ptr<const redis::Reply> waited;
      if (!batch->wait.empty()) {
        waited =
            std::make_shared<const redis::Reply>(std::move(r2.replies.back()));
      }
      for (size_t k = 0; k < noscript.size(); ++k) {
        batch->replies[noscript[k]] = std::move(r2.replies[k]);
        if (waited != nullptr) batch->waited[noscript[k]] = waited;
      }
      finish();
    };
    Pick().Submit(std::move(again));
  };
  Pick().Submit(std::move(request));
}

BatchReplies NodeBackend::RunBatch(const std::vector<Call>& calls,
                                   Deadline deadline,
                                   std::atomic<uint64_t>* round_trips,
                                   const WaitReplicas* wait) {
  NodeBackend* self = this;
  return RunBatchOn(absl::MakeConstSpan(&self, 1), {0}, calls, deadline,
                    round_trips, wait);
}

BatchReplies NodeBackend::RunBatchOn(absl::Span<NodeBackend* const> nodes,
                                     const std::vector<size_t>& order,
                                     const std::vector<Call>& calls,
                                     Deadline deadline,
                                     std::atomic<uint64_t>* round_trips,
                                     const WaitReplicas* wait) {
  if (round_trips != nullptr) {
    round_trips->fetch_add(1, std::memory_order_relaxed);
  }
  auto abandon = std::make_shared<std::atomic<bool>>(false);
  Gather<std::vector<Answer>> gather(nodes.size());
  for (size_t i : order) {
    nodes[i]->RunBatchAsync(calls, abandon, wait, gather.Slot(i));
  }
  bool stopped = false;
  std::vector<absl::optional<std::vector<Answer>>> got =
      gather.Wait(Earliest(deadline, Deadline::After(nodes[0]->backstop())),
                  nullptr, &stopped);
  abandon->store(true, std::memory_order_relaxed);
  BatchReplies out;
  for (size_t i = 0; i < got.size(); ++i) {
    out.push_back(got[i].has_value()
                      ? *std::move(got[i])
                      : FailedBatch(absl::UnavailableError(absl::StrCat(
                                        "Redis at ", nodes[i]->name_,
                                        ": no reply before the batch's "
                                        "deadline")),
                                    calls.size()));
  }
  return out;
}

}  // namespace backend
}  // namespace relock
