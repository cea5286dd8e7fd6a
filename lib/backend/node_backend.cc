#include "lib/backend/node_backend.h"

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/types/optional.h"
#include "lib/backend/async_answers.h"
#include "lib/backend/gather.h"
#include "lib/common/event_count.h"
#include "lib/redis/errors.h"
#include "lib/redis/resp.h"

namespace relock {
namespace backend {

// One call on its way: re-sent after a drop or a NOSCRIPT.
struct NodeBackend::Pending {
  std::string wire;  // EVALSHA (or a command); EVAL after NOSCRIPT
  bool script = false;
  size_t index = 0;  // the script
  bool evaled = false;
  bool asking = false;  // sent after ASKING (a slot being imported)
  std::string wait;     // WAIT sent after it (Backend::Run's `wait`), or ""
  Resend resend = Resend::kNever;
  int sends = 0;
  bool resent = false;
  std::shared_ptr<std::atomic<bool>> abandon;
  Done done;

  // Whether a send is the wire alone, which the request then borrows
  // (PrepareSend()).
  bool lends_wire() const { return !asking && wait.empty(); }
};

// A blocking call that goes through the loop (its connection was busy): the
// call, its first request and the caller's wait in one allocation, which the
// caller and the connection share (the request is an aliasing pointer into
// it), so that handing the call to the loop and back allocates nothing else.
// A resend (after a drop, or as EVAL after NOSCRIPT) goes through Send()
// like any other call's.
struct NodeBackend::LoopCall : std::enable_shared_from_this<LoopCall> {
  LoopCall(NodeBackend* node, Pending p) : node(node), pending(std::move(p)) {}
  // Hands the answer to the waiting caller (any thread, once).
  void Deliver(Answer answer) {
    {
      std::lock_guard<std::mutex> lock(mu);
      got.emplace(std::move(answer));
    }
    // After unlocking: a waiter woken under the lock would at once block on
    // it again. The connection's reference keeps the call alive.
    events.Notify();
  }

  NodeBackend* const node;
  Pending pending;
  io::Request request;  // the first send
  std::atomic<bool> abandon{false};
  std::mutex mu;
  EventCount events;
  absl::optional<Answer> got;  // guarded by mu
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

std::vector<Answer> AwaitAnswers(
    size_t n, Deadline deadline, absl::Duration backstop, const Enough& enough,
    const StartCall& start, const std::function<std::string(size_t)>& where,
    const std::vector<size_t>* order) {
  Gather<Answer> gather(n);
  for (size_t k = 0; k < n; ++k) {
    const size_t i = order != nullptr ? (*order)[k] : k;
    start(i, gather.Slot(i));
  }
  // The connections fail requests after command_timeout without replies;
  // `backstop` only backs that up (a connect may take connect_timeout).
  const Deadline limit_backstop = Deadline::After(backstop);
  bool stopped = false;
  const Deadline limit = Earliest(deadline, limit_backstop);
  std::vector<absl::optional<Answer>> got =
      gather.Wait(limit, enough, &stopped);
  std::vector<Answer> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (got[i].has_value()) {
      out.push_back(std::move(*got[i]));
    } else {
      out.push_back(Answer{
          MissingAnswer(where(i), stopped, deadline, limit, backstop), false});
    }
  }
  return out;
}

absl::Status MissingAnswer(const std::string& where, bool stopped,
                           Deadline deadline, Deadline limit,
                           absl::Duration backstop) {
  if (stopped) return absl::CancelledError("answer not awaited");
  if (!(limit < deadline)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "Redis at ", where, ": no reply before the call's deadline"));
  }
  return absl::UnavailableError(absl::StrCat("Redis at ", where,
                                             ": no reply within ",
                                             absl::FormatDuration(backstop)));
}

NodeBackend::NodeBackend(io::EventLoop* loop, NodeOptions options,
                         std::vector<redis::ScriptSource> scripts)
    : loop_(loop),
      options_(std::move(options)),
      name_(options_.connection.endpoint.ToString()),
      scripts_(std::move(scripts)) {}

NodeBackend::~NodeBackend() { Close(); }

absl::StatusOr<std::unique_ptr<NodeBackend>> NodeBackend::Create(
    io::EventLoop* loop, NodeOptions options,
    std::vector<redis::ScriptSource> scripts) {
  std::unique_ptr<NodeBackend> node(
      new NodeBackend(loop, std::move(options), std::move(scripts)));
  io::ConnectionOptions command = node->options_.connection;
  command.direct_calls = node->options_.direct_calls;
  for (int i = 0; i < node->options_.command_connections; ++i) {
    absl::StatusOr<std::shared_ptr<io::Connection>> conn =
        io::Connection::Create(loop, command);
    if (!conn.ok()) return conn.status();
    node->connections_.push_back(*std::move(conn));
  }
  if (node->options_.connect_now) {
    // Connects (so that a client fails to start when Redis cannot be used)
    // and loads the scripts (so that a server refusing them says so now).
    if (absl::Status s = node->Probe(Deadline::Never()); !s.ok()) return s;
  }
  absl::StatusOr<std::shared_ptr<pubsub::Subscriber>> sub =
      pubsub::Subscriber::Start(loop, node->options_.connection,
                                node->options_.connect_now,
                                node->options_.pubsub_mode);
  if (!sub.ok()) return sub.status();
  node->subscriber_ = *std::move(sub);
  return node;
}

absl::Duration NodeBackend::backstop() const {
  return options_.connection.connect_timeout +
         options_.connection.command_timeout;
}

io::Connection& NodeBackend::Pick() {
  const size_t i = next_connection_.fetch_add(1, std::memory_order_relaxed);
  return *connections_[i % connections_.size()];
}

std::shared_ptr<NodeBackend::Pending> NodeBackend::MakePending(
    Resend resend, std::shared_ptr<std::atomic<bool>> abandon, Done done) {
  auto p = std::make_shared<Pending>();
  p->resend = resend;
  p->abandon = std::move(abandon);
  p->done = std::move(done);
  return p;
}

std::shared_ptr<NodeBackend::Pending> NodeBackend::MakeScriptCall(
    size_t script, absl::Span<const absl::string_view> keys,
    absl::Span<const absl::string_view> args, Resend resend,
    std::shared_ptr<std::atomic<bool>> abandon, Done done,
    const WaitReplicas* wait) {
  std::shared_ptr<Pending> p =
      MakePending(resend, std::move(abandon), std::move(done));
  WriteScriptCall(script, keys, args, wait, p.get());
  return p;
}

void NodeBackend::WriteScriptCall(size_t script,
                                  absl::Span<const absl::string_view> keys,
                                  absl::Span<const absl::string_view> args,
                                  const WaitReplicas* wait,
                                  Pending* pending) const {
  scripts_.AppendEvalsha(script, keys, args, &pending->wire);
  pending->script = true;
  pending->index = script;
  if (wait != nullptr) pending->wait = WaitCommand(*wait);
}

void NodeBackend::RunOnNode(size_t script,
                            absl::Span<const absl::string_view> keys,
                            absl::Span<const absl::string_view> args,
                            Resend resend,
                            std::shared_ptr<std::atomic<bool>> abandon,
                            Done done, bool asking, const WaitReplicas* wait) {
  std::shared_ptr<Pending> p = MakeScriptCall(
      script, keys, args, resend, std::move(abandon), std::move(done), wait);
  p->asking = asking;
  Send(p);
}

void NodeBackend::RunAskingAsync(size_t script,
                                 absl::Span<const absl::string_view> keys,
                                 absl::Span<const absl::string_view> args,
                                 Deadline deadline, Resend resend,
                                 AnswersDone done, const WaitReplicas* wait) {
  std::shared_ptr<AsyncAnswers> answers = AsyncAnswers::Start(
      loop_, 1, deadline, backstop(), nullptr,
      [name = name_](size_t) { return name; }, std::move(done));
  RunOnNode(script, keys, args, resend, answers->abandon(), answers->Slot(0),
            /*asking=*/true, wait);
}

std::vector<Answer> NodeBackend::RunAskingBlocking(
    size_t script, absl::Span<const absl::string_view> keys,
    absl::Span<const absl::string_view> args, Deadline deadline, Resend resend,
    const WaitReplicas* wait) {
  auto abandon = std::make_shared<std::atomic<bool>>(false);
  std::vector<Answer> answers = AwaitAnswers(
      1, deadline, backstop(), nullptr,
      [&](size_t, Done done) {
        RunOnNode(script, keys, args, resend, abandon, std::move(done),
                  /*asking=*/true, wait);
      },
      [this](size_t) { return name_; });
  abandon->store(true, std::memory_order_relaxed);
  return answers;
}

void NodeBackend::SendOnNode(std::string wire, Resend resend,
                             std::shared_ptr<std::atomic<bool>> abandon,
                             Done done) {
  std::shared_ptr<Pending> p =
      MakePending(resend, std::move(abandon), std::move(done));
  p->wire = std::move(wire);
  Send(p);
}

void NodeBackend::PrepareSend(Pending& p, io::Request* request) {
  ++p.sends;
  request->abandoned = p.abandon;
  if (p.lends_wire()) {
    request->wire = std::move(p.wire);
    return;
  }
  if (p.asking) {
    redis::AppendCommand({"ASKING"}, &request->wire);
    ++request->commands;
  }
  request->wire += p.wire;
  if (!p.wait.empty()) {
    request->wire += p.wait;
    ++request->commands;
  }
}

void NodeBackend::TakeBackWire(Pending& p, io::Request& request) {
  if (p.lends_wire()) p.wire = std::move(request.wire);
}

void NodeBackend::Send(const std::shared_ptr<Pending>& pending) {
  auto request = std::make_shared<io::Request>();
  PrepareSend(*pending, request.get());
  io::Request* const sent = request.get();
  request->done = [this, pending, sent](io::Result r) {
    // The connection holds the request while this runs.
    TakeBackWire(*pending, *sent);
    OnResult(pending, std::move(r));
  };
  Pick().Submit(std::move(request));
}

void NodeBackend::SettleWait(const redis::Reply& waited, Answer* answer) const {
  if (waited.is_integer()) {
    answer->acked = waited.integer();
    return;
  }
  // The call's own error reply (MOVED, READONLY...) says more: keep it.
  if (answer->reply->is_error()) return;
  const std::string what = absl::StrCat(
      "Redis at ", name_, ": WAIT after the call (which ran) gave no count");
  answer->wait_error =
      waited.is_error()
          ? redis::ErrorReplyToStatus(what, waited.str())
          : absl::InternalError(absl::StrCat(what, ": unexpected reply ",
                                             waited.view().Describe()));
}

absl::optional<Answer> NodeBackend::Settle(Pending& p, io::Result r) {
  const bool abandoned =
      p.abandon != nullptr && p.abandon->load(std::memory_order_relaxed);
  if (r.status.ok()) {
    // After ASKING, the call's reply is the second (ASKING's is +OK, or an
    // error that the call's reply repeats).
    redis::Reply& reply = r.replies[p.asking ? 1 : 0];
    if (p.script && !p.evaled && !abandoned &&
        redis::ScriptSet::IsNoScript(reply)) {
      // The server lost its script cache: EVAL of the source caches it
      // again. The EVALSHA did not run, so this is still the first run.
      p.evaled = true;
      --p.sends;
      p.wire = scripts_.EvalFromEvalsha(p.index, p.wire);
      return absl::nullopt;
    }
    Answer answer{std::move(reply), p.resent};
    if (!p.wait.empty()) SettleWait(r.replies.back(), &answer);
    return answer;
  }
  if (p.resend == Resend::kIfDropped && r.resendable && p.sends < kMaxSends &&
      !abandoned) {
    p.resent = true;
    return absl::nullopt;
  }
  return Answer{std::move(r.status), p.resent};
}

void NodeBackend::OnResult(const std::shared_ptr<Pending>& p, io::Result r) {
  absl::optional<Answer> answer = Settle(*p, std::move(r));
  if (!answer.has_value()) return Send(p);
  p->done(*std::move(answer));
}

std::vector<Answer> NodeBackend::CallBlocking(Pending p, Deadline deadline,
                                              const Enough& enough) {
  // While the connection is idle, this thread does the I/O itself (see
  // "Direct calls" in lib/io/connection.h): no hand-off to the loop thread
  // and back. Resends and NOSCRIPT go the same way. A direct call ends by
  // the caller's deadline or after command_timeout without a reply; the
  // whole call, by `deadline` or the backstop.
  const Deadline limit = Deadline::After(backstop());
  // The call's one answer; `enough` hears of those Redis gave.
  const auto one = [&enough](Answer answer, bool heard) {
    std::vector<Answer> answers;
    answers.push_back(std::move(answer));
    if (heard && enough) enough(0, answers[0]);
    return answers;
  };
  if (deadline.Expired()) {
    return one(Answer{absl::DeadlineExceededError(absl::StrCat(
                          "Redis at ", name_,
                          ": the call's deadline passed before it was sent")),
                      false},
               false);
  }
  while (!deadline.Expired()) {
    absl::optional<io::Result> r =
        p.wait.empty() ? Pick().TryDirect(p.wire, 1, deadline)
                       : Pick().TryDirect(p.wire + p.wait, 2, deadline);
    if (!r.has_value()) break;
    ++p.sends;
    absl::optional<Answer> answer = Settle(p, *std::move(r));
    if (answer.has_value()) return one(*std::move(answer), true);
    if (limit.Expired()) break;
  }
  if (p.sends > 0 && (deadline.Expired() || limit.Expired())) {
    // A resend (after a drop or a NOSCRIPT) with no time left is not sent:
    // sent and abandoned at once, it might still be written, and run after
    // its caller was told that it failed.
    return one(Answer{MissingAnswer(name_, false, deadline,
                                    Earliest(deadline, limit), backstop()),
                      p.resent},
               false);
  }
  // The connection is busy: through the loop, pipelined with the others.
  auto call = std::make_shared<LoopCall>(this, std::move(p));
  LoopCall* const c = call.get();
  // Non-owning: the flag lives in the call, which owns the pending call and
  // its request.
  c->pending.abandon =
      std::shared_ptr<std::atomic<bool>>(std::shared_ptr<void>(), &c->abandon);
  c->pending.done = [c](Answer answer) { c->Deliver(std::move(answer)); };
  PrepareSend(c->pending, &c->request);
  c->request.done = [c](io::Result r) {
    c->node->OnLoopResult(c, std::move(r));
  };
  Pick().Submit(std::shared_ptr<io::Request>(call, &c->request));

  const absl::Duration backstop_left = limit.Remaining();
  const Deadline until = Earliest(deadline, limit);
  bool timed_out = false;
  for (;;) {
    const uint32_t key = c->events.Prepare();
    {
      std::lock_guard<std::mutex> lock(c->mu);
      // After a timeout, one last look: an answer settled as the wait
      // timed out is still taken.
      if (c->got.has_value() || timed_out) break;
    }
    timed_out = !c->events.Wait(key, until);
  }
  c->abandon.store(true, std::memory_order_relaxed);
  absl::optional<Answer> got;
  {
    std::lock_guard<std::mutex> lock(c->mu);
    got.swap(c->got);
  }
  if (!got.has_value()) {
    // Settled later, if ever: dropped.
    return one(
        Answer{MissingAnswer(name_, false, deadline, until, backstop_left),
               false},
        false);
  }
  return one(*std::move(got), true);
}

void NodeBackend::OnLoopResult(LoopCall* call, io::Result result) {
  Pending& p = call->pending;
  TakeBackWire(p, call->request);
  absl::optional<Answer> answer = Settle(p, std::move(result));
  if (!answer.has_value()) {
    return Send(std::shared_ptr<Pending>(call->shared_from_this(), &p));
  }
  call->Deliver(*std::move(answer));
}

std::vector<Answer> NodeBackend::Run(const ScriptCall& call) {
  if (call.only != nullptr && !(*call.only)[0]) {
    std::vector<Answer> none;
    none.push_back(Answer{absl::CancelledError("not sent"), false});
    return none;
  }
  Pending p;
  p.resend = call.resend;
  WriteScriptCall(call.script, call.keys, call.args, call.wait, &p);
  return CallBlocking(std::move(p), call.deadline, call.enough);
}

void NodeBackend::RunAsync(ScriptCall call, AnswersDone done) {
  NodeBackend* self = this;
  RunAsyncOn(absl::MakeConstSpan(&self, 1), {0}, std::move(call),
             std::move(done));
}

void NodeBackend::RunAsyncOn(absl::Span<NodeBackend* const> nodes,
                             const std::vector<size_t>& order, ScriptCall call,
                             AnswersDone done) {
  absl::InlinedVector<std::string, 1> names;  // one node's: no vector
  for (NodeBackend* node : nodes) names.push_back(node->name_);
  std::shared_ptr<AsyncAnswers> answers = AsyncAnswers::Start(
      nodes[0]->loop_, nodes.size(), call.deadline, nodes[0]->backstop(),
      std::move(call.enough),
      [names = std::move(names)](size_t i) { return names[i]; },
      std::move(done));
  for (size_t i : order) {
    if (call.only != nullptr && !(*call.only)[i]) {
      answers->Slot(i)(Answer{absl::CancelledError("not sent"), false});
      continue;
    }
    nodes[i]->RunOnNode(call.script, call.keys, call.args, call.resend,
                        answers->abandon(), answers->Slot(i),
                        /*asking=*/false, call.wait);
  }
}

std::unique_ptr<Timer> NodeBackend::NewTimer() {
  return std::make_unique<LoopTimer>(loop_);
}

std::vector<Answer> NodeBackend::Command(
    absl::Span<const absl::string_view> argv, Deadline deadline) {
  Pending p;
  p.resend = Resend::kIfDropped;
  redis::AppendCommand(argv, &p.wire);
  return CallBlocking(std::move(p), deadline, nullptr);
}

absl::StatusOr<std::vector<std::string>> NodeBackend::Masters() {
  return std::vector<std::string>{name_};
}

Answer NodeBackend::CommandOn(absl::string_view master,
                              absl::Span<const absl::string_view> argv,
                              Deadline deadline) {
  if (master != name_) {
    return Answer{absl::NotFoundError(absl::StrCat(
        "no master ", master, " here (the server is ", name_, ")"))};
  }
  return std::move(Command(argv, deadline)[0]);
}

Answer NodeBackend::CommandForKey(absl::string_view /*key*/,
                                  absl::Span<const absl::string_view> argv,
                                  Deadline deadline) {
  return std::move(Command(argv, deadline)[0]);
}

void NodeBackend::SendForKey(absl::string_view /*key*/,
                             std::vector<std::vector<std::string>> commands,
                             std::function<void(absl::Status)> done) {
  auto request = std::make_shared<io::Request>();
  request->commands = commands.size();
  for (const std::vector<std::string>& argv : commands) {
    const std::vector<absl::string_view> views(argv.begin(), argv.end());
    redis::AppendCommand(views, &request->wire);
  }
  request->done = [done = std::move(done)](const io::Result& result) {
    if (done == nullptr) return;
    if (!result.status.ok()) return done(result.status);
    for (const redis::Reply& reply : result.replies) {
      if (reply.is_error()) {
        return done(redis::ErrorReplyToStatus("command", reply.str()));
      }
    }
    done(absl::OkStatus());
  };
  Pick().Submit(std::move(request));
}

std::string NodeBackend::WaitCommand(const WaitReplicas& wait) {
  // WAIT's timeout is in milliseconds, and 0 would wait forever.
  const int64_t ms =
      std::max<int64_t>(1, absl::ToInt64Milliseconds(wait.timeout));
  std::string out;
  redis::AppendCommand({"WAIT", absl::StrCat(wait.replicas), absl::StrCat(ms)},
                       &out);
  return out;
}

std::unique_ptr<Waiter> NodeBackend::Subscribe(const std::string& channel,
                                               pubsub::WakePolicy policy,
                                               const std::string& waiter,
                                               pubsub::Listener listener) {
  return std::make_unique<NodeWaiter>(subscriber_->Subscribe(
      channel, nullptr, policy, waiter, std::move(listener)));
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
