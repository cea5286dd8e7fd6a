#include "lib/backend/node_backend.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/types/optional.h"
#include "lib/common/mutex.h"
#include "lib/redis/resp.h"

namespace relock {
namespace backend {

// One call on its way: re-sent after a drop or a NOSCRIPT.
struct NodeBackend::Pending {
  std::string wire;  // EVALSHA (or a command); EVAL after NOSCRIPT
  bool script = false;
  size_t index = 0;  // the script
  std::vector<std::string> keys, args;
  bool evaled = false;
  Resend resend = Resend::kNever;
  int sends = 0;
  bool resent = false;
  std::shared_ptr<std::atomic<bool>> abandon;
  Done done;
};

namespace {

// A subscription on one node.
class NodeWaiter : public Waiter {
 public:
  explicit NodeWaiter(std::unique_ptr<pubsub::Subscription> sub)
      : sub_(std::move(sub)) {}
  absl::Status AwaitConfirmed(Deadline deadline) override {
    return sub_->AwaitConfirmed(deadline);
  }
  pubsub::WakeReason Wait(Deadline deadline) override {
    return sub_->Wait(deadline);
  }
  void PassOn() override { sub_->PassOn(); }

 private:
  std::unique_ptr<pubsub::Subscription> sub_;
};

}  // namespace

NodeBackend::NodeBackend(NodeOptions options,
                         std::vector<redis::ScriptSource> scripts)
    : options_(std::move(options)),
      name_(options_.connection.endpoint.ToString()),
      scripts_(std::move(scripts)) {}

NodeBackend::~NodeBackend() { Close(); }

absl::StatusOr<std::unique_ptr<NodeBackend>> NodeBackend::Create(
    io::EventLoop* loop, NodeOptions options,
    std::vector<redis::ScriptSource> scripts) {
  std::unique_ptr<NodeBackend> node(
      new NodeBackend(std::move(options), std::move(scripts)));
  for (int i = 0; i < node->options_.command_connections; ++i) {
    absl::StatusOr<std::shared_ptr<io::Connection>> conn =
        io::Connection::Create(loop, node->options_.connection);
    if (!conn.ok()) return conn.status();
    node->connections_.push_back(*std::move(conn));
  }
  if (node->options_.connect_now) {
    // Connects (so that a client fails to start when Redis cannot be used)
    // and loads the scripts (so that a server refusing them says so now).
    std::string wire;
    node->scripts_.AppendLoadAll(&wire);
    const io::ConnectionOptions& o = node->options_.connection;
    io::Result loaded =
        io::Call(node->Pick(), std::move(wire), node->scripts_.size(),
                 Deadline::After(o.connect_timeout + o.command_timeout));
    if (!loaded.status.ok()) return loaded.status;
    if (absl::Status s = node->scripts_.CheckLoaded(loaded.replies); !s.ok()) {
      return s;
    }
  }
  absl::StatusOr<std::shared_ptr<pubsub::Subscriber>> sub =
      pubsub::Subscriber::Start(loop, node->options_.connection,
                                node->options_.connect_now);
  if (!sub.ok()) return sub.status();
  node->subscriber_ = *std::move(sub);
  return node;
}

io::Connection& NodeBackend::Pick() {
  const size_t i = next_connection_.fetch_add(1, std::memory_order_relaxed);
  return *connections_[i % connections_.size()];
}

void NodeBackend::RunAsync(size_t script,
                           absl::Span<const absl::string_view> keys,
                           absl::Span<const absl::string_view> args,
                           Resend resend,
                           std::shared_ptr<std::atomic<bool>> abandon,
                           Done done) {
  auto p = std::make_shared<Pending>();
  scripts_.AppendEvalsha(script, keys, args, &p->wire);
  p->script = true;
  p->index = script;
  for (absl::string_view k : keys) p->keys.emplace_back(k);
  for (absl::string_view a : args) p->args.emplace_back(a);
  p->resend = resend;
  p->abandon = std::move(abandon);
  p->done = std::move(done);
  Send(std::move(p));
}

void NodeBackend::SendAsync(std::string wire, Resend resend,
                            std::shared_ptr<std::atomic<bool>> abandon,
                            Done done) {
  auto p = std::make_shared<Pending>();
  p->wire = std::move(wire);
  p->resend = resend;
  p->abandon = std::move(abandon);
  p->done = std::move(done);
  Send(std::move(p));
}

void NodeBackend::Send(std::shared_ptr<Pending> pending) {
  ++pending->sends;
  auto request = std::make_shared<io::Request>();
  request->wire = pending->wire;
  if (pending->abandon != nullptr) request->abandoned = pending->abandon;
  request->done = [this, pending](io::Result r) {
    OnResult(pending, std::move(r));
  };
  Pick().Submit(std::move(request));
}

void NodeBackend::OnResult(std::shared_ptr<Pending> p, io::Result r) {
  const bool abandoned =
      p->abandon != nullptr && p->abandon->load(std::memory_order_relaxed);
  if (r.status.ok()) {
    if (p->script && !p->evaled && !abandoned &&
        redis::ScriptSet::IsNoScript(r.replies[0])) {
      // The server lost its script cache: EVAL of the source caches it
      // again. The EVALSHA did not run, so this is still the first run.
      p->evaled = true;
      --p->sends;
      std::vector<absl::string_view> keys(p->keys.begin(), p->keys.end());
      std::vector<absl::string_view> args(p->args.begin(), p->args.end());
      p->wire.clear();
      scripts_.AppendEval(p->index, keys, args, &p->wire);
      Send(std::move(p));
      return;
    }
    p->done(Answer{std::move(r.replies[0]), p->resent});
    return;
  }
  if (p->resend == Resend::kIfDropped && r.resendable && p->sends < kMaxSends &&
      !abandoned) {
    p->resent = true;
    Send(std::move(p));
    return;
  }
  p->done(Answer{std::move(r.status), p->resent});
}

std::vector<Answer> NodeBackend::Await(
    size_t n, Deadline deadline, const Enough& enough,
    const std::function<void(size_t, Done)>& start) {
  struct State {
    Mutex mu;
    CondVar cv;
    std::vector<absl::optional<Answer>> answers ABSL_GUARDED_BY(mu);
    std::vector<size_t> arrivals ABSL_GUARDED_BY(mu);
  };
  auto state = std::make_shared<State>();
  {
    MutexLock lock(&state->mu);
    state->answers.resize(n);
  }
  for (size_t i = 0; i < n; ++i) {
    start(i, [state, i](Answer a) {
      MutexLock lock(&state->mu);
      state->answers[i].emplace(std::move(a));
      state->arrivals.push_back(i);
      state->cv.SignalAll();
    });
  }
  // The connections fail requests after command_timeout without replies;
  // this bound backs that up (a connect may take connect_timeout first).
  const io::ConnectionOptions& o = options_.connection;
  const Deadline backstop =
      Deadline::After(o.connect_timeout + o.command_timeout);
  const Deadline limit = Earliest(deadline, backstop);
  MutexLock lock(&state->mu);
  bool stopped = false;
  for (size_t seen = 0; !stopped;) {
    while (!stopped && seen < state->arrivals.size()) {
      const size_t i = state->arrivals[seen++];
      stopped = enough && enough(i, *state->answers[i]);
    }
    if (stopped || seen == n || limit.Expired()) break;
    state->cv.WaitWithTimeout(&state->mu, limit.Remaining());
  }
  std::vector<Answer> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (state->answers[i].has_value()) {
      out.push_back(std::move(*state->answers[i]));
    } else if (stopped) {
      out.push_back(Answer{absl::CancelledError("answer not awaited"), false});
    } else if (deadline < backstop) {
      out.push_back(Answer{
          absl::DeadlineExceededError(absl::StrCat(
              "Redis at ", name_, ": no reply before the call's deadline")),
          false});
    } else {
      out.push_back(Answer{
          absl::UnavailableError(absl::StrCat(
              "Redis at ", name_, ": no reply within ",
              absl::FormatDuration(o.connect_timeout + o.command_timeout))),
          false});
    }
  }
  return out;
}

std::vector<Answer> NodeBackend::Run(size_t script,
                                     absl::Span<const absl::string_view> keys,
                                     absl::Span<const absl::string_view> args,
                                     Deadline deadline, Resend resend,
                                     const Enough& enough) {
  auto abandon = std::make_shared<std::atomic<bool>>(false);
  std::vector<Answer> answers =
      Await(1, deadline, enough, [&](size_t, Done done) {
        RunAsync(script, keys, args, resend, abandon, std::move(done));
      });
  abandon->store(true, std::memory_order_relaxed);
  return answers;
}

std::vector<Answer> NodeBackend::Command(
    absl::Span<const absl::string_view> argv, Deadline deadline) {
  std::string wire;
  redis::AppendCommand(argv, &wire);
  auto abandon = std::make_shared<std::atomic<bool>>(false);
  std::vector<Answer> answers =
      Await(1, deadline, nullptr, [&](size_t, Done done) {
        SendAsync(std::move(wire), Resend::kIfDropped, abandon,
                  std::move(done));
      });
  abandon->store(true, std::memory_order_relaxed);
  return answers;
}

std::vector<absl::StatusOr<std::vector<redis::Reply>>> NodeBackend::RunBatch(
    size_t script, const std::vector<Call>& calls, Deadline deadline,
    std::atomic<uint64_t>* round_trips) {
  std::vector<redis::Reply> replies;
  replies.reserve(calls.size());
  for (size_t i = 0; i < calls.size(); ++i) replies.emplace_back(nullptr);
  // Sends calls[i] for every i in `which` together (EVALSHA, or EVAL of the
  // source when `eval`) and stores their replies; collects the NOSCRIPT
  // ones into `*noscript`.
  auto send = [&](const std::vector<size_t>& which, bool eval,
                  std::vector<size_t>* noscript) -> absl::Status {
    std::string wire;
    for (size_t i : which) {
      if (eval) {
        scripts_.AppendEval(script, calls[i].keys, calls[i].args, &wire);
      } else {
        scripts_.AppendEvalsha(script, calls[i].keys, calls[i].args, &wire);
      }
    }
    if (round_trips != nullptr) {
      round_trips->fetch_add(1, std::memory_order_relaxed);
    }
    io::Result r = io::Call(Pick(), std::move(wire), which.size(), deadline);
    if (!r.status.ok()) return r.status;
    for (size_t k = 0; k < which.size(); ++k) {
      if (redis::ScriptSet::IsNoScript(r.replies[k])) {
        noscript->push_back(which[k]);
      }
      replies[which[k]] = std::move(r.replies[k]);
    }
    return absl::OkStatus();
  };
  std::vector<absl::StatusOr<std::vector<redis::Reply>>> out;
  if (calls.empty()) {
    out.emplace_back(std::move(replies));
    return out;
  }
  std::vector<size_t> all(calls.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  std::vector<size_t> noscript;
  absl::Status s = send(all, /*eval=*/false, &noscript);
  if (s.ok() && !noscript.empty()) {
    // The server lost its script cache (SCRIPT FLUSH, restart).
    std::vector<size_t> again;
    s = send(noscript, /*eval=*/true, &again);
  }
  if (s.ok()) {
    out.emplace_back(std::move(replies));
  } else {
    out.emplace_back(std::move(s));
  }
  return out;
}

std::unique_ptr<Waiter> NodeBackend::Subscribe(const std::string& channel,
                                               pubsub::WakePolicy policy) {
  return std::make_unique<NodeWaiter>(
      subscriber_->Subscribe(channel, nullptr, policy));
}

void NodeBackend::CancelWaits() {
  if (subscriber_ != nullptr) subscriber_->Close();  // wakes waiters
}

void NodeBackend::Close() {
  CancelWaits();
  for (const std::shared_ptr<io::Connection>& conn : connections_) {
    conn->Close();
  }
}

}  // namespace backend
}  // namespace relock
