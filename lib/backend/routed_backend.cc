#include "lib/backend/routed_backend.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/types/optional.h"
#include "lib/backend/async_answers.h"

namespace relock {
namespace backend {
namespace {

// The slot a call goes to: its first key's (0 without keys).
int SlotOf(absl::Span<const absl::string_view> keys) {
  return keys.empty() ? 0 : redis::KeySlot(keys[0]);
}

std::vector<Answer> OneAnswer(absl::Status status) {
  std::vector<Answer> answers;
  answers.push_back(Answer{std::move(status), false});
  return answers;
}

// The call's answers once `step` ended it (kDone, kFail, or a redirection
// that found the backend closed), shown to `enough` as the one node's
// answer.
std::vector<Answer> Conclude(RouteStep step, std::vector<Answer> answers,
                             const Enough& enough) {
  if (step.kind == RouteStep::Kind::kFail) {
    answers = OneAnswer(std::move(step.status));
  }
  if (enough) enough(0, answers[0]);
  return answers;
}

}  // namespace

// An asynchronous call that follows redirections: owns copies of its keys
// and arguments, and sends itself again as its RedirectRules say.
class RoutedBackend::AsyncCall
    : public std::enable_shared_from_this<AsyncCall> {
 public:
  AsyncCall(RoutedBackend* backend, size_t script,
            absl::Span<const absl::string_view> keys,
            absl::Span<const absl::string_view> args, Deadline deadline,
            Resend resend, Enough enough, AnswersDone done,
            const WaitReplicas* wait)
      : backend_(backend),
        script_(script),
        keys_(keys.begin(), keys.end()),
        args_(args.begin(), args.end()),
        slot_(SlotOf(keys)),
        deadline_(deadline),
        resend_(resend),
        wait_(wait != nullptr ? absl::make_optional(*wait) : absl::nullopt),
        enough_(std::move(enough)),
        done_(std::move(done)),
        rules_(backend->name_, deadline, resend, kFailoverWait) {}

  void Start(NodeBackend* node) {
    hop_.node = node;
    Send();
  }

 private:
  void Send() {
    const std::vector<absl::string_view> keys(keys_.begin(), keys_.end());
    const std::vector<absl::string_view> args(args_.begin(), args_.end());
    std::shared_ptr<AsyncCall> self = shared_from_this();
    auto on_answers = [self](std::vector<Answer> answers) {
      self->OnAnswers(std::move(answers));
    };
    const WaitReplicas* wait = wait_.has_value() ? &*wait_ : nullptr;
    if (hop_.asking) {
      hop_.node->RunAskingAsync(script_, keys, args, deadline_, resend_,
                                std::move(on_answers), wait);
    } else {
      ScriptCall call;
      call.script = script_;
      call.keys = keys;
      call.args = args;
      call.deadline = deadline_;
      call.resend = resend_;
      call.wait = wait;
      hop_.node->RunAsync(std::move(call), std::move(on_answers));
    }
  }

  // Does what the rules say; the blocking Run() does the same, sleeping
  // where this sets a timer.
  void OnAnswers(std::vector<Answer> answers) {
    RouteStep step = rules_.Next(answers[0], hop_.node->endpoint());
    if (step.refresh) backend_->RefreshSoon();
    if (step.kind == RouteStep::Kind::kRetry) {
      if (timer_ == nullptr) timer_ = backend_->NewTimer();
      std::shared_ptr<AsyncCall> self = shared_from_this();
      timer_->At(Deadline::After(step.pause), [self] {
        self->hop_ = self->backend_->Retried(self->slot_, self->hop_.node);
        self->Send();
      });
      return;
    }
    if (step.kind == RouteStep::Kind::kRedirect) {
      const Hop next = backend_->Redirected(step.redirect);
      if (next.node != nullptr) {
        hop_ = next;
        return Send();
      }
    }
    AnswersDone done = std::move(done_);
    done(Conclude(std::move(step), std::move(answers), enough_));
  }

  RoutedBackend* const backend_;
  const size_t script_;
  const std::vector<std::string> keys_;
  const std::vector<std::string> args_;
  const int slot_;
  const Deadline deadline_;
  const Resend resend_;
  const absl::optional<WaitReplicas> wait_;  // a copy: the caller's may go
  Enough enough_;
  AnswersDone done_;
  // Loop thread only (each step runs in a callback of the previous one).
  RedirectRules rules_;
  Hop hop_;
  std::unique_ptr<Timer> timer_;
};

// A wait that follows its slot: it listens on the slot's master and moves
// to the new master when the slot map says the slot moved.
class RoutedBackend::RoutedWaiter : public Waiter {
 public:
  RoutedWaiter(RoutedBackend* backend, std::string channel,
               pubsub::WakePolicy policy, std::string waiter,
               std::shared_ptr<const Watch> watch, NodeBackend* node)
      : backend_(backend),
        channel_(std::move(channel)),
        policy_(policy),
        waiter_(std::move(waiter)),
        watch_(std::move(watch)),
        node_(node),
        inner_(node->Subscribe(channel_, policy_, waiter_, watch_->listener)) {}

  absl::Status AwaitConfirmed(Deadline deadline) override {
    while (true) {
      MaybeMove();
      const Deadline slice = Earliest(deadline, Deadline::After(kWaitSlice));
      absl::Status s = inner_->AwaitConfirmed(slice);
      if (s.ok() || s.code() == absl::StatusCode::kCancelled ||
          s.code() == absl::StatusCode::kPermissionDenied) {
        return s;
      }
      if (s.code() != absl::StatusCode::kDeadlineExceeded) {
        // Refused here (sharded: the slot moved away, or MOVED): not
        // confirmed yet; the map says where to go once refreshed.
        backend_->RefreshSoon();
        s = absl::DeadlineExceededError(s.message());
        if (!deadline.Expired()) absl::SleepFor(slice.Remaining());
      }
      if (deadline.Expired()) return s;
    }
  }

  pubsub::WakeReason Wait(Deadline deadline) override {
    while (true) {
      if (MaybeMove()) return pubsub::WakeReason::kResubscribed;
      pubsub::WakeReason r =
          inner_->Wait(Earliest(deadline, Deadline::After(kWaitSlice)));
      if (r != pubsub::WakeReason::kTimeout || deadline.Expired()) return r;
    }
  }

  void PassOn() override { inner_->PassOn(); }

 private:
  // Subscribes on the slot's master if it is another node now.
  bool MaybeMove() {
    NodeBackend* master = backend_->MasterOf(watch_->slot);
    if (master == nullptr || master == node_) return false;
    inner_ = master->Subscribe(channel_, policy_, waiter_, watch_->listener);
    node_ = master;
    return true;
  }

  RoutedBackend* const backend_;
  const std::string channel_;
  const pubsub::WakePolicy policy_;
  const std::string waiter_;
  const std::shared_ptr<const Watch> watch_;
  NodeBackend* node_;
  std::unique_ptr<Waiter> inner_;
};

RoutedBackend::RoutedBackend(io::EventLoop* loop, NodeOptions node,
                             std::vector<redis::ScriptSource> scripts,
                             std::string name)
    : loop_(loop),
      node_options_(std::move(node)),
      scripts_(std::move(scripts)),
      name_(std::move(name)) {}

RoutedBackend::~RoutedBackend() { Close(); }

NodeBackend* RoutedBackend::NodeAt(const redis::Endpoint& endpoint) {
  const std::string key = endpoint.ToString();
  MutexLock lock(&mu_);
  if (closed_) return nullptr;
  auto it = nodes_.find(key);
  if (it != nodes_.end()) return it->second.get();
  NodeOptions node = node_options_;
  node.connection.endpoint = endpoint;
  node.connect_now = false;  // never blocks; the first call connects
  node.pubsub_mode = sharded_.load() ? pubsub::Subscriber::Mode::kSharded
                                     : pubsub::Subscriber::Mode::kClassic;
  absl::StatusOr<std::unique_ptr<NodeBackend>> made =
      NodeBackend::Create(loop_, std::move(node), scripts_);
  // Without connect_now only bad options fail, and those passed the seeds.
  if (!made.ok()) return nullptr;
  NodeBackend* raw = made->get();
  nodes_.emplace(key, *std::move(made));
  return raw;
}

NodeBackend* RoutedBackend::MasterOf(int slot) {
  std::shared_ptr<const redis::SlotMap> map = slot_map();
  const redis::SlotRange* range = map == nullptr ? nullptr : map->Find(slot);
  if (range == nullptr) return nullptr;
  return NodeAt(range->master.endpoint);
}

std::shared_ptr<const redis::SlotMap> RoutedBackend::slot_map() const {
  MutexLock lock(&mu_);
  return map_;
}

std::vector<NodeBackend*> RoutedBackend::AllNodes() const {
  MutexLock lock(&mu_);
  std::vector<NodeBackend*> all;
  all.reserve(nodes_.size());
  for (const auto& [name, node] : nodes_) all.push_back(node.get());
  return all;
}

void RoutedBackend::Adopt(std::unique_ptr<NodeBackend> node) {
  const std::string key = node->endpoint().ToString();
  MutexLock lock(&mu_);
  nodes_[key] = std::move(node);
}

void RoutedBackend::Retire(const redis::Endpoint& endpoint) {
  MutexLock lock(&mu_);
  auto it = nodes_.find(endpoint.ToString());
  if (it == nodes_.end()) return;
  it->second->Close();
  retired_.push_back(std::move(it->second));
  nodes_.erase(it);
}

bool RoutedBackend::closed() const {
  MutexLock lock(&mu_);
  return closed_;
}

void RoutedBackend::Install(redis::SlotMap map) {
  auto shared = std::make_shared<const redis::SlotMap>(std::move(map));
  std::vector<pubsub::Listener> moved;  // waits whose slot moved
  bool master_changed = false;
  {
    MutexLock lock(&mu_);
    const std::shared_ptr<const redis::SlotMap> old = std::move(map_);
    map_ = shared;
    auto master = [](const redis::SlotMap* m, int slot) {
      const redis::SlotRange* r = m == nullptr ? nullptr : m->Find(slot);
      return r == nullptr ? std::string() : r->master.endpoint.ToString();
    };
    // A slot served by another master: a failover (whose new master may
    // lack the last writes of the old one) or a resharding. Either way
    // the client renews every lease at once (Observer::on_reconnect).
    if (old != nullptr) {
      for (const redis::SlotRange& r : shared->ranges()) {
        if (master(old.get(), r.first) != r.master.endpoint.ToString()) {
          master_changed = true;
          break;
        }
      }
    }
    auto live = watches_.begin();
    for (const std::weak_ptr<const Watch>& weak : watches_) {
      std::shared_ptr<const Watch> watch = weak.lock();
      if (watch == nullptr) continue;
      if (watch->listener != nullptr &&
          master(old.get(), watch->slot) != master(shared.get(), watch->slot)) {
        moved.push_back(watch->listener);
      }
      *live++ = weak;
    }
    watches_.erase(live, watches_.end());
  }
  refreshes_.fetch_add(1, std::memory_order_relaxed);
  if (master_changed && node_options_.connection.observer != nullptr) {
    node_options_.connection.observer->on_reconnect.Run();
  }
  // On the loop, after this refresh's callback: each looks (and moves).
  for (pubsub::Listener& listener : moved) loop_->Post(std::move(listener));
}

void RoutedBackend::ScheduleRefresh() {
  if (refresh_timer_ == nullptr) refresh_timer_ = NewTimer();
  refresh_timer_->At(Deadline::After(kRefreshInterval), [this] {
    if (closed()) return;
    RefreshSoon();
    ScheduleRefresh();
  });
}

void RoutedBackend::RefreshSoon() {
  // Asked for first: a refresh running now either sees it in its
  // RefreshDone(), or is done already and this call starts the next.
  refresh_again_.store(true);
  if (refreshing_.exchange(true)) return;
  refresh_again_.store(false);  // this refresh answers every ask so far
  if (closed()) return RefreshDone();
  StartRefresh();
}

void RoutedBackend::RefreshDone() {
  refreshing_.store(false);
  if (refresh_again_.exchange(false)) RefreshSoon();
}

RoutedBackend::Hop RoutedBackend::Redirected(const redis::Redirect& redirect) {
  return Hop{NodeAt(redirect.endpoint),
             redirect.kind == redis::Redirect::Kind::kAsk};
}

RoutedBackend::Hop RoutedBackend::Retried(int slot, NodeBackend* from) {
  NodeBackend* master = MasterOf(slot);
  return Hop{master != nullptr ? master : from, false};
}

absl::StatusOr<NodeBackend*> RoutedBackend::FirstNode(
    int slot, const std::vector<bool>* only) {
  if (only != nullptr && !(*only)[0]) return absl::CancelledError("not sent");
  NodeBackend* node = MasterOf(slot);
  if (node == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        name_, ": no master serves slot ", slot, " (or the client is closed)"));
  }
  return node;
}

std::vector<Answer> RoutedBackend::Run(const ScriptCall& call) {
  const int slot = SlotOf(call.keys);
  absl::StatusOr<NodeBackend*> first = FirstNode(slot, call.only);
  if (!first.ok()) return OneAnswer(first.status());
  // As AsyncCall::OnAnswers, on this thread: the rules decide, this loop
  // sleeps where the asynchronous call sets a timer.
  RedirectRules rules(name_, call.deadline, call.resend, kFailoverWait);
  // Each hop goes to one node, and is asked `enough` only at the end.
  ScriptCall hop_call = call;
  hop_call.enough = nullptr;
  hop_call.only = nullptr;
  Hop hop{*first, false};
  while (true) {
    std::vector<Answer> answers =
        hop.asking
            ? hop.node->RunAskingBlocking(call.script, call.keys, call.args,
                                          call.deadline, call.resend, call.wait)
            : hop.node->Run(hop_call);
    RouteStep step = rules.Next(answers[0], hop.node->endpoint());
    if (step.refresh) RefreshSoon();
    if (step.kind == RouteStep::Kind::kRetry) {
      absl::SleepFor(step.pause);
      hop = Retried(slot, hop.node);
      continue;
    }
    if (step.kind == RouteStep::Kind::kRedirect) {
      const Hop next = Redirected(step.redirect);
      if (next.node != nullptr) {
        hop = next;
        continue;
      }
    }
    return Conclude(std::move(step), std::move(answers), call.enough);
  }
}

void RoutedBackend::RunAsync(ScriptCall call, AnswersDone done) {
  absl::StatusOr<NodeBackend*> first = FirstNode(SlotOf(call.keys), call.only);
  if (!first.ok()) return done(OneAnswer(first.status()));
  std::make_shared<AsyncCall>(
      this, call.script, call.keys, call.args, call.deadline, call.resend,
      std::move(call.enough), std::move(done), call.wait)
      ->Start(*first);
}

std::unique_ptr<Timer> RoutedBackend::NewTimer() {
  return std::make_unique<LoopTimer>(loop_);
}

BatchReplies RoutedBackend::RunBatch(const std::vector<Call>& calls,
                                     Deadline deadline,
                                     std::atomic<uint64_t>* round_trips,
                                     const WaitReplicas* wait) {
  // Per call: the answer or why there is none. One "node": the cluster.
  BatchReplies out(1);
  std::vector<Answer>& answers = out[0];
  for (size_t i = 0; i < calls.size(); ++i) {
    answers.push_back(Answer{absl::UnavailableError("not sent"), false});
  }
  // Group the calls by the master of their slot.
  std::vector<NodeBackend*> masters;
  std::vector<std::vector<size_t>> members;
  for (size_t i = 0; i < calls.size(); ++i) {
    const int slot = SlotOf(calls[i].keys);
    NodeBackend* node = MasterOf(slot);
    if (node == nullptr) {
      answers[i].reply = absl::UnavailableError(
          absl::StrCat(name_, ": no master serves slot ", slot));
      continue;
    }
    auto it = std::find(masters.begin(), masters.end(), node);
    if (it == masters.end()) {
      masters.push_back(node);
      members.emplace_back();
      it = masters.end() - 1;
    }
    members[it - masters.begin()].push_back(i);
  }
  // One batch per master (each followed by its WAIT, if any), all at once.
  struct State {
    Mutex mu;
    size_t pending ABSL_GUARDED_BY(mu) = 0;
    // Set when the wait below ends and takes `results`: an answer that
    // comes later (its master answered, or failed, after the deadline) is
    // dropped, for `results` is gone.
    bool closed ABSL_GUARDED_BY(mu) = false;
    std::vector<absl::optional<std::vector<Answer>>> results
        ABSL_GUARDED_BY(mu);
  };
  auto state = std::make_shared<State>();
  auto abandon = std::make_shared<std::atomic<bool>>(false);
  {
    MutexLock lock(&state->mu);
    state->pending = masters.size();
    state->results.resize(masters.size());
  }
  absl::Duration backstop;
  for (size_t g = 0; g < masters.size(); ++g) {
    std::vector<Call> group;
    group.reserve(members[g].size());
    for (size_t i : members[g]) group.push_back(calls[i]);
    backstop = std::max(backstop, masters[g]->backstop());
    if (round_trips != nullptr) round_trips->fetch_add(1);
    masters[g]->RunBatchAsync(group, abandon, wait,
                              [state, g](std::vector<Answer> r) {
                                MutexLock lock(&state->mu);
                                if (state->closed) return;
                                state->results[g] = std::move(r);
                                --state->pending;
                              });
  }
  std::vector<absl::optional<std::vector<Answer>>> results;
  {
    const Deadline limit = Earliest(deadline, Deadline::After(backstop));
    MutexLock lock(&state->mu);
    auto all_in = [&state]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state->mu) {
      return state->pending == 0;
    };
    state->mu.AwaitWithTimeout(absl::Condition(&all_in), limit.Remaining());
    state->closed = true;
    results = std::move(state->results);
  }
  abandon->store(true);
  // Back in call order. A master that failed fails its calls only; a call
  // redirected or refused for now did not run, so it runs again alone (Run
  // follows the redirections and refreshes the map), with the WAIT too.
  for (size_t g = 0; g < masters.size(); ++g) {
    std::vector<Answer> per_call =
        results[g].has_value()
            ? *std::move(results[g])
            : NodeBackend::FailedBatch(
                  absl::UnavailableError(
                      absl::StrCat("Redis at ", masters[g]->node_name(0),
                                   ": no reply before the batch's deadline")),
                  members[g].size());
    for (size_t k = 0; k < members[g].size(); ++k) {
      const size_t i = members[g][k];
      Answer& answer = per_call[k];
      const absl::StatusOr<redis::Reply>& reply = answer.reply;
      if (!reply.ok() &&
          reply.status().code() == absl::StatusCode::kUnavailable) {
        RefreshSoon();  // maybe failing over: the next round finds out
      }
      if (reply.ok() && reply->is_error() && DidNotRun(reply->str())) {
        ScriptCall again_call;
        again_call.script = calls[i].script;
        again_call.keys = calls[i].keys;
        again_call.args = calls[i].args;
        again_call.deadline = deadline;
        again_call.wait = wait;
        std::vector<Answer> again = Run(again_call);
        answers[i] = std::move(again[0]);
      } else {
        answers[i] = std::move(answer);
      }
    }
  }
  return out;
}

std::vector<Answer> RoutedBackend::Command(
    absl::Span<const absl::string_view> argv, Deadline deadline) {
  std::vector<NodeBackend*> masters;
  if (std::shared_ptr<const redis::SlotMap> map = slot_map()) {
    for (const redis::ClusterNode& m : map->Masters()) {
      if (NodeBackend* node = NodeAt(m.endpoint)) masters.push_back(node);
    }
  }
  if (masters.empty()) {
    return OneAnswer(absl::FailedPreconditionError("the client is closed"));
  }
  std::vector<Answer> first;
  for (NodeBackend* node : masters) {
    std::vector<Answer> answers = node->Command(argv, deadline);
    if (!answers[0].reply.ok() || answers[0].reply->is_error()) return answers;
    if (first.empty()) first = std::move(answers);
  }
  return first;
}

absl::StatusOr<std::vector<std::string>> RoutedBackend::Masters() {
  if (closed()) return absl::FailedPreconditionError("the client is closed");
  std::vector<std::string> names;
  if (std::shared_ptr<const redis::SlotMap> map = slot_map()) {
    for (const redis::ClusterNode& m : map->Masters()) {
      names.push_back(m.endpoint.ToString());
    }
  }
  if (names.empty()) {
    return absl::UnavailableError(
        absl::StrCat(name_, ": no master is known (no slot map yet)"));
  }
  return names;
}

Answer RoutedBackend::CommandOn(absl::string_view master,
                                absl::Span<const absl::string_view> argv,
                                Deadline deadline) {
  NodeBackend* node = nullptr;
  if (std::shared_ptr<const redis::SlotMap> map = slot_map()) {
    for (const redis::ClusterNode& m : map->Masters()) {
      if (m.endpoint.ToString() == master) node = NodeAt(m.endpoint);
    }
  }
  if (node == nullptr) {
    if (closed()) {
      return Answer{absl::FailedPreconditionError("the client is closed")};
    }
    return Answer{absl::NotFoundError(
        absl::StrCat(name_, ": ", master, " is not a master now"))};
  }
  return Settled(std::move(node->Command(argv, deadline)[0]));
}

Answer RoutedBackend::CommandForKey(absl::string_view key,
                                    absl::Span<const absl::string_view> argv,
                                    Deadline deadline) {
  NodeBackend* node = MasterOf(redis::KeySlot(key));
  if (node == nullptr) {
    if (closed()) {
      return Answer{absl::FailedPreconditionError("the client is closed")};
    }
    RefreshSoon();
    return Answer{absl::UnavailableError(
        absl::StrCat(name_, ": no master is known for the slot of ", key))};
  }
  return Settled(std::move(node->Command(argv, deadline)[0]));
}

void RoutedBackend::SendForKey(absl::string_view key,
                               std::vector<std::vector<std::string>> commands,
                               std::function<void(absl::Status)> done) {
  NodeBackend* node = MasterOf(redis::KeySlot(key));
  if (node == nullptr) {
    if (!closed()) RefreshSoon();
    if (done != nullptr) {
      done(absl::UnavailableError(
          absl::StrCat(name_, ": no master is known for the slot of ", key)));
    }
    return;
  }
  node->SendForKey(key, std::move(commands), std::move(done));
}

Answer RoutedBackend::Settled(Answer answer) {
  // A redirection or an unreachable master: the map may be stale.
  if (!answer.reply.ok() ||
      (answer.reply->is_error() && DidNotRun(answer.reply->str()))) {
    RefreshSoon();
  }
  return answer;
}

std::unique_ptr<Waiter> RoutedBackend::Subscribe(const std::string& channel,
                                                 pubsub::WakePolicy policy,
                                                 const std::string& waiter,
                                                 pubsub::Listener listener) {
  auto watch = std::make_shared<Watch>();
  watch->slot = redis::KeySlot(channel);
  watch->listener = std::move(listener);
  NodeBackend* node = MasterOf(watch->slot);
  if (node == nullptr) {
    // Closed (or no map): any node's subscriber says so.
    std::vector<NodeBackend*> all = AllNodes();
    node = all.front();
  }
  {
    MutexLock lock(&mu_);
    watches_.push_back(watch);
  }
  return std::make_unique<RoutedWaiter>(this, channel, policy, waiter,
                                        std::move(watch), node);
}

void RoutedBackend::CancelWaits() {
  for (NodeBackend* node : AllNodes()) node->CancelWaits();
}

void RoutedBackend::Close() {
  {
    MutexLock lock(&mu_);
    closed_ = true;
  }
  if (refresh_timer_ != nullptr) refresh_timer_->Cancel();
  for (NodeBackend* node : AllNodes()) node->Close();
}

}  // namespace backend
}  // namespace relock