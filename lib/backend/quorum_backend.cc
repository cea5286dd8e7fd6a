#include "lib/backend/quorum_backend.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/common/random.h"
#include "lib/redis/resp.h"

namespace relock {
namespace backend {
namespace {

// A wait on one channel on every master, woken by any of them.
class QuorumWaiter : public Waiter {
 public:
  QuorumWaiter(size_t quorum, std::shared_ptr<pubsub::WakeSignal> signal,
               std::vector<std::unique_ptr<pubsub::Subscription>> subs)
      : quorum_(quorum), signal_(std::move(signal)), subs_(std::move(subs)) {}

  absl::Status AwaitConfirmed(Deadline deadline) override {
    const Deadline now = Deadline::After(absl::ZeroDuration());
    while (true) {
      size_t confirmed = 0, refused = 0;
      absl::Status refusal, last;
      for (const auto& sub : subs_) {
        absl::Status s = sub->AwaitConfirmed(now);  // no waiting: a look
        if (s.ok()) {
          ++confirmed;
        } else if (s.code() == absl::StatusCode::kCancelled) {
          return s;
        } else if (s.code() == absl::StatusCode::kDeadlineExceeded) {
          last = std::move(s);
        } else {
          ++refused;
          if (refusal.ok()) refusal = std::move(s);
        }
      }
      if (confirmed >= quorum_) return absl::OkStatus();
      if (refused > subs_.size() - quorum_) return refusal;
      if (deadline.Expired()) {
        return absl::DeadlineExceededError(
            absl::StrCat("only ", confirmed, " of ", subs_.size(),
                         " masters confirmed the subscription (quorum ",
                         quorum_, "): ", last.message()));
      }
      // Confirmations notify the signal; re-look at least every 50 ms.
      signal_->Wait(
          Earliest(deadline, Deadline::After(absl::Milliseconds(50))));
    }
  }

  pubsub::WakeReason Wait(Deadline deadline) override {
    const bool woken = signal_->Wait(deadline);
    for (const auto& sub : subs_) {
      if (sub->closed()) return pubsub::WakeReason::kClosed;
    }
    return woken ? pubsub::WakeReason::kNotified : pubsub::WakeReason::kTimeout;
  }

  // Every waiter wakes on every message: nothing to pass on.
  void PassOn() override {}

 private:
  const size_t quorum_;
  const std::shared_ptr<pubsub::WakeSignal> signal_;
  std::vector<std::unique_ptr<pubsub::Subscription>> subs_;
};

}  // namespace

QuorumBackend::QuorumBackend(std::vector<std::unique_ptr<NodeBackend>> nodes,
                             bool shuffle)
    : nodes_(std::move(nodes)), shuffle_(shuffle) {}

QuorumBackend::~QuorumBackend() { Close(); }

std::vector<NodeBackend*> QuorumBackend::Nodes() const {
  std::vector<NodeBackend*> nodes;
  for (const std::unique_ptr<NodeBackend>& node : nodes_) {
    nodes.push_back(node.get());
  }
  return nodes;
}

std::vector<size_t> QuorumBackend::Order() const {
  std::vector<size_t> order(nodes_.size());
  std::iota(order.begin(), order.end(), 0);
  if (shuffle_) {
    std::shuffle(order.begin(), order.end(), ThreadBitGen());
  }
  return order;
}

std::vector<Answer> QuorumBackend::Run(const ScriptCall& call) {
  auto abandon = std::make_shared<std::atomic<bool>>(false);
  const std::vector<size_t> order = Order();
  std::vector<Answer> answers = AwaitAnswers(
      nodes_.size(), call.deadline, nodes_[0]->backstop(), call.enough,
      [&](size_t i, Done done) {
        if (call.only != nullptr && !(*call.only)[i]) {
          return done(Answer{absl::CancelledError("not sent"), false});
        }
        nodes_[i]->RunOnNode(call.script, call.keys, call.args, call.resend,
                             abandon, std::move(done), /*asking=*/false,
                             call.wait);
      },
      [this](size_t i) { return node_name(i); }, &order);
  abandon->store(true, std::memory_order_relaxed);
  return answers;
}

void QuorumBackend::RunAsync(ScriptCall call, AnswersDone done) {
  NodeBackend::RunAsyncOn(Nodes(), Order(), std::move(call), std::move(done));
}

std::unique_ptr<Timer> QuorumBackend::NewTimer() {
  return nodes_[0]->NewTimer();
}

BatchReplies QuorumBackend::RunBatch(const std::vector<Call>& calls,
                                     Deadline deadline,
                                     std::atomic<uint64_t>* round_trips,
                                     const WaitReplicas* wait) {
  return NodeBackend::RunBatchOn(Nodes(), Order(), calls, deadline, round_trips,
                                 wait);
}

std::vector<Answer> QuorumBackend::Command(
    absl::Span<const absl::string_view> argv, Deadline deadline) {
  std::string wire;
  redis::AppendCommand(argv, &wire);
  auto abandon = std::make_shared<std::atomic<bool>>(false);
  std::vector<Answer> answers = AwaitAnswers(
      nodes_.size(), deadline, nodes_[0]->backstop(), nullptr,
      [&](size_t i, Done done) {
        nodes_[i]->SendOnNode(wire, Resend::kIfDropped, abandon,
                              std::move(done));
      },
      [this](size_t i) { return node_name(i); });
  abandon->store(true, std::memory_order_relaxed);
  return answers;
}

// A Redlock's lock lives on every master at once, and its masters are not
// one deployment: administration goes to each of them through a client of
// its own.
namespace {
absl::Status NotForRedlock() {
  return absl::UnimplementedError(
      "lock administration (inspection, listing) is not available on a "
      "Redlock client: connect a relock::Client to each master instead");
}
}  // namespace

absl::StatusOr<std::vector<std::string>> QuorumBackend::Masters() {
  return NotForRedlock();
}

Answer QuorumBackend::CommandOn(absl::string_view /*master*/,
                                absl::Span<const absl::string_view> /*argv*/,
                                Deadline /*deadline*/) {
  return Answer{NotForRedlock()};
}

Answer QuorumBackend::CommandForKey(
    absl::string_view /*key*/, absl::Span<const absl::string_view> /*argv*/,
    Deadline /*deadline*/) {
  return Answer{NotForRedlock()};
}

void QuorumBackend::SendForKey(
    absl::string_view /*key*/,
    std::vector<std::vector<std::string>> /*commands*/,
    std::function<void(absl::Status)> done) {
  if (done != nullptr) done(NotForRedlock());
}

std::unique_ptr<Waiter> QuorumBackend::Subscribe(const std::string& channel,
                                                 pubsub::WakePolicy policy,
                                                 const std::string& waiter,
                                                 pubsub::Listener listener) {
  auto signal = std::make_shared<pubsub::WakeSignal>();
  std::vector<std::unique_ptr<pubsub::Subscription>> subs;
  for (const std::unique_ptr<NodeBackend>& node : nodes_) {
    subs.push_back(node->subscriber().Subscribe(channel, signal, policy, waiter,
                                                listener));
  }
  return std::make_unique<QuorumWaiter>(quorum(), std::move(signal),
                                        std::move(subs));
}

void QuorumBackend::CancelWaits() {
  for (const std::unique_ptr<NodeBackend>& node : nodes_) node->CancelWaits();
}

void QuorumBackend::Close() {
  for (const std::unique_ptr<NodeBackend>& node : nodes_) node->Close();
}

}  // namespace backend
}  // namespace relock
