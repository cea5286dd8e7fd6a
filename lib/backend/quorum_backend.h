// The N independent masters of a Redlock as one Backend: every call goes to
// all of them at once (requests first, answers as they arrive, each node
// within the call's deadline), and the lock algorithm counts the answers
// against quorum() = N/2 + 1. A wait listens on every master and wakes on
// any master's unlock message, subscription confirmation or reconnect; it is
// confirmed once a quorum of masters confirmed it (any quorum of
// subscriptions shares a master with the holder's quorum).

#ifndef RELOCK_LIB_BACKEND_QUORUM_BACKEND_H_
#define RELOCK_LIB_BACKEND_QUORUM_BACKEND_H_

#include <memory>
#include <string>
#include <vector>

#include "lib/backend/backend.h"
#include "lib/backend/node_backend.h"

namespace relock {
namespace backend {

class QuorumBackend : public Backend {
 public:
  // `shuffle`: send to the masters in a random order each call (redsync's
  // shuffle option), so no master is always asked first.
  QuorumBackend(std::vector<std::unique_ptr<NodeBackend>> nodes, bool shuffle);
  ~QuorumBackend() override;

  size_t nodes() const override { return nodes_.size(); }
  size_t quorum() const override { return nodes_.size() / 2 + 1; }
  const std::string& node_name(size_t i) const override {
    return nodes_[i]->node_name(0);
  }

  std::vector<Answer> Run(const ScriptCall& call) override;
  void RunAsync(ScriptCall call, AnswersDone done) override;
  std::unique_ptr<Timer> NewTimer() override;
  BatchReplies RunBatch(const std::vector<Call>& calls, Deadline deadline,
                        std::atomic<uint64_t>* round_trips = nullptr,
                        const WaitReplicas* wait = nullptr) override;
  std::vector<Answer> Command(absl::Span<const absl::string_view> argv,
                              Deadline deadline) override;
  absl::StatusOr<std::vector<std::string>> Masters() override;
  Answer CommandOn(absl::string_view master,
                   absl::Span<const absl::string_view> argv,
                   Deadline deadline) override;
  Answer CommandForKey(absl::string_view key,
                       absl::Span<const absl::string_view> argv,
                       Deadline deadline) override;
  void SendForKey(absl::string_view key,
                  std::vector<std::vector<std::string>> commands,
                  std::function<void(absl::Status)> done) override;
  std::unique_ptr<Waiter> Subscribe(const std::string& channel,
                                    pubsub::WakePolicy policy,
                                    const std::string& waiter,
                                    pubsub::Listener listener) override;
  void CancelWaits() override;
  void Close() override;

 private:
  std::vector<NodeBackend*> Nodes() const;
  std::vector<size_t> Order() const;

  std::vector<std::unique_ptr<NodeBackend>> nodes_;
  const bool shuffle_;
};

}  // namespace backend
}  // namespace relock

#endif  // RELOCK_LIB_BACKEND_QUORUM_BACKEND_H_
