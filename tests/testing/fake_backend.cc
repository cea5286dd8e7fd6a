#include "tests/testing/fake_backend.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lib/lock/lock_scripts.h"

namespace relock {
namespace testing {
namespace {

using backend::Answer;
using SteadyTime = SteadyClock::time_point;

// How long the loop, with only timers left, waits in real time for another
// thread's next step before it moves the clock to the earliest timer.
constexpr absl::Duration kIdleBeforeJump = absl::Milliseconds(2);

int64_t ToInt(const std::string& s) {
  int64_t n = 0;
  return absl::SimpleAtoi(s, &n) ? n : 0;
}

int64_t PttlMs(const FakeNode::Lock& lock, SteadyTime now) {
  if (lock.expires_at == SteadyTime::max()) return -1;
  return std::chrono::duration_cast<std::chrono::milliseconds>(lock.expires_at -
                                                               now)
      .count();
}

SteadyTime LeaseEnd(SteadyTime now, int64_t lease_ms) {
  return now + std::chrono::milliseconds(lease_ms);
}

}  // namespace

// --- The model.

const FakeNode::Lock* FakeNode::Find(const std::string& name, SteadyTime now) {
  auto it = locks_.find(name);
  if (it == locks_.end()) return nullptr;
  if (it->second.expires_at <= now) {
    locks_.erase(it);
    return nullptr;
  }
  return &it->second;
}

redis::Reply FakeNode::Run(
    const FakeCall& call, SteadyTime now,
    std::vector<std::pair<std::string, std::string>>* published) {
  const std::vector<std::string>& keys = call.keys;
  const std::vector<std::string>& args = call.args;
  const auto free_lock = [&](const std::string& name,
                             const std::string& channel,
                             const std::string& message) {
    locks_.erase(name);
    published->emplace_back(channel, message);
  };
  switch (call.script) {
    case ::relock::internal::kAcquireScript: {
      const std::string& name = keys[0];
      const bool fresh = args.size() < 3 || args[2] == "1";
      const size_t token_at = fresh ? 2 : 1;
      const std::string* token_key =
          keys.size() > token_at ? &keys[token_at] : nullptr;
      const int64_t lease_ms = ToInt(args[0]);
      const std::string& owner = args[1];
      const Lock* found = Find(name, now);
      if (found != nullptr && found->counts.count(owner) == 0) {
        const int64_t pttl = PttlMs(*found, now);
        if (token_key != nullptr) {
          return ArrayReply({absl::StrCat(pttl), "-1"});
        }
        return IntReply(pttl);
      }
      Lock& lock = locks_[name];
      if (found == nullptr || fresh) {
        lock.counts[owner] = 1;
        lock.expires_at = LeaseEnd(now, lease_ms);
      } else {
        ++lock.counts[owner];
        lock.expires_at = std::max(lock.expires_at, LeaseEnd(now, lease_ms));
      }
      if (token_key != nullptr) {
        return ArrayReply({"-1", absl::StrCat(++counters_[*token_key])});
      }
      return NilReply();
    }
    case ::relock::internal::kReleaseScript: {
      // KEYS: name, channel[, queue]; ARGV: message, lease ms, owner[, pub].
      if (Find(keys[0], now) == nullptr ||
          locks_[keys[0]].counts.count(args[2]) == 0) {
        return NilReply();
      }
      Lock& lock = locks_[keys[0]];
      if (--lock.counts[args[2]] > 0) {
        if (args[1] != "0") lock.expires_at = LeaseEnd(now, ToInt(args[1]));
        return IntReply(0);
      }
      free_lock(keys[0], keys[1], args[0]);
      return IntReply(1);
    }
    case ::relock::internal::kReleaseAllScript: {
      // KEYS: name, channel, queue; ARGV: message, owner, publish.
      const Lock* lock = Find(keys[0], now);
      if (lock == nullptr || lock->counts.count(args[1]) == 0) {
        return IntReply(0);
      }
      free_lock(keys[0], keys[1], args[0]);
      return IntReply(1);
    }
    case ::relock::internal::kForceReleaseScript: {
      if (Find(keys[0], now) == nullptr) return IntReply(0);
      free_lock(keys[0], keys[1], args[0]);
      return IntReply(1);
    }
    case ::relock::internal::kRenewScript: {
      // KEYS[i]: name i; ARGV[1]: lease ms; ARGV[i+1]: owner of name i;
      // then "set" to set the leases, else a lease is only raised.
      const bool set =
          args.size() > keys.size() + 1 && args[keys.size() + 1] == "set";
      std::vector<std::string> out;
      for (size_t i = 0; i < keys.size(); ++i) {
        const Lock* found = Find(keys[i], now);
        const bool held =
            found != nullptr && found->counts.count(args[i + 1]) > 0;
        if (held) {
          Lock& lock = locks_[keys[i]];
          const auto end = LeaseEnd(now, ToInt(args[0]));
          // (A lock without a TTL gets the lease, as PTTL -1 in Redis.)
          if (set || lock.expires_at == SteadyTime::max() ||
              lock.expires_at < end) {
            lock.expires_at = end;
          }
        }
        out.emplace_back(held ? "1" : "0");
      }
      return ArrayReply(out);
    }
    case ::relock::internal::kInspectScript: {
      const Lock* lock = Find(keys[0], now);
      if (lock == nullptr) return ArrayReply({"0", "-2", "0"});
      auto own = lock->counts.find(args[0]);
      return ArrayReply(
          {"1", absl::StrCat(PttlMs(*lock, now)),
           absl::StrCat(own == lock->counts.end() ? 0 : own->second)});
    }
    case ::relock::internal::kTokenScript: {
      auto it = counters_.find(keys[0]);
      return IntReply(it == counters_.end() ? 0 : it->second);
    }
    default:
      return ErrorReply(
          absl::StrCat("ERR the fake backend has no model of script ",
                       call.script, " (give the node a responder)"));
  }
}

// --- Timers and waiters.

class FakeBackend::FakeTimer final : public backend::Timer {
 public:
  explicit FakeTimer(FakeBackend* backend) : backend_(backend) {}
  ~FakeTimer() override { Cancel(); }
  // Thread-safe, as the real timers are: the loop may run (and re-arm) the
  // timer before At() returns.
  void At(Deadline when, std::function<void()> fn) override {
    MutexLock lock(&mu_);
    if (id_ != 0) backend_->CancelTimer(id_);
    id_ = backend_->SetTimer(when, std::move(fn));
  }
  void Cancel() override {
    MutexLock lock(&mu_);
    if (id_ != 0) backend_->CancelTimer(id_);
    id_ = 0;
  }

 private:
  FakeBackend* const backend_;
  Mutex mu_;  // before the backend's
  uint64_t id_ ABSL_GUARDED_BY(mu_) = 0;
};

class FakeBackend::FakeWaiter final : public backend::Waiter {
 public:
  FakeWaiter(FakeBackend* backend, std::string channel,
             pubsub::WakePolicy policy, std::string name,
             pubsub::Listener listener)
      : backend_(backend),
        channel_(std::move(channel)),
        policy_(policy),
        name_(std::move(name)),
        listener_(std::move(listener)) {}
  ~FakeWaiter() override {
    MutexLock lock(&backend_->mu_);
    auto& all = backend_->waiters_;
    all.erase(std::remove(all.begin(), all.end(), this), all.end());
  }

  absl::Status AwaitConfirmed(Deadline /*deadline*/) override {
    MutexLock lock(&backend_->mu_);
    if (backend_->cancelled_) return absl::CancelledError("waits cancelled");
    return backend_->subscribe_status_;
  }
  pubsub::WakeReason Wait(Deadline deadline) override {
    {
      MutexLock lock(&backend_->mu_);
      if (backend_->cancelled_) return pubsub::WakeReason::kClosed;
      if (permits_ > 0) {
        --permits_;
        return pubsub::WakeReason::kNotified;
      }
    }
    // No message: the wait lasts until its deadline (simulated time).
    if (!deadline.is_never()) backend_->clock_->SleepUntil(deadline.time());
    return pubsub::WakeReason::kTimeout;
  }
  void PassOn() override {
    MutexLock lock(&backend_->mu_);
    ++passed_on_;
  }

 private:
  friend class FakeBackend;
  FakeBackend* const backend_;
  const std::string channel_;
  const pubsub::WakePolicy policy_;
  const std::string name_;
  const pubsub::Listener listener_;
  int permits_ = 0;    // guarded by backend_->mu_
  int passed_on_ = 0;  // guarded by backend_->mu_
};

// --- The backend.

FakeBackend::FakeBackend(FakeClock* clock, size_t nodes, size_t quorum)
    : clock_(clock),
      quorum_(quorum != 0 ? quorum : nodes / 2 + 1),
      nodes_(nodes),
      faults_(nodes, FakeFault::kNone),
      responders_(nodes) {
  for (size_t i = 0; i < nodes; ++i) {
    names_.push_back(absl::StrCat("fake-node-", i, ":6379"));
  }
  loop_ = std::thread([this] { Loop(); });
}

FakeBackend::~FakeBackend() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  loop_.join();
  // What never ran is destroyed outside the mutex: its destructors (an
  // acquire machine's, its timer's) call back in.
  std::deque<std::function<void()>> ready;
  std::map<uint64_t, TimerEntry> timers;
  {
    MutexLock lock(&mu_);
    ready.swap(ready_);
    timers.swap(timers_);
  }
}

void FakeBackend::SetFault(size_t node, FakeFault fault) {
  MutexLock lock(&mu_);
  faults_[node] = fault;
}

void FakeBackend::SetResponder(size_t node, Responder responder) {
  MutexLock lock(&mu_);
  responders_[node] = std::move(responder);
}

void FakeBackend::Hold(size_t node, const std::string& name,
                       const std::string& owner, int64_t count,
                       absl::Duration lease) {
  MutexLock lock(&mu_);
  FakeNode::Lock& l = nodes_[node].locks()[name];
  l = FakeNode::Lock();  // whatever was there before is gone
  l.counts[owner] = count;
  l.expires_at = lease == absl::InfiniteDuration()
                     ? SteadyTime::max()
                     : clock_->Now() + absl::ToChronoNanoseconds(lease);
}

int64_t FakeBackend::CountOf(size_t node, const std::string& name,
                             const std::string& owner) {
  MutexLock lock(&mu_);
  const FakeNode::Lock* l = nodes_[node].Find(name, clock_->Now());
  if (l == nullptr) return 0;
  auto it = l->counts.find(owner);
  return it == l->counts.end() ? 0 : it->second;
}

void FakeBackend::Publish(const std::string& channel,
                          const std::string& message) {
  MutexLock lock(&mu_);
  PublishLocked(channel, message);
}

void FakeBackend::PublishLocked(const std::string& channel,
                                const std::string& message) {
  bool woke_one = false;
  for (FakeWaiter* w : waiters_) {
    if (w->channel_ != channel) continue;
    bool wake = false;
    switch (w->policy_) {
      case pubsub::WakePolicy::kWakeAll:
        wake = true;
        break;
      case pubsub::WakePolicy::kWakeNamed:
        wake = message == w->name_;
        break;
      case pubsub::WakePolicy::kReadWrite:
        wake = message == "1" || !woke_one;
        break;
      case pubsub::WakePolicy::kWakeOne:
        wake = !woke_one;
        break;
    }
    if (!wake) continue;
    woke_one = true;
    ++w->permits_;
    if (w->listener_) Post(w->listener_);
  }
}

void FakeBackend::SetAutoAdvance(bool on) {
  MutexLock lock(&mu_);
  auto_advance_ = on;
  cv_.SignalAll();
}

void FakeBackend::Poke() {
  MutexLock lock(&mu_);
  cv_.SignalAll();
}

void FakeBackend::SetSubscribeStatus(absl::Status status) {
  MutexLock lock(&mu_);
  subscribe_status_ = std::move(status);
}

std::vector<FakeCall> FakeBackend::calls() const {
  MutexLock lock(&mu_);
  return calls_;
}

size_t FakeBackend::CallsOf(size_t script) const {
  MutexLock lock(&mu_);
  return static_cast<size_t>(std::count_if(
      calls_.begin(), calls_.end(),
      [script](const FakeCall& c) { return c.script == script; }));
}

void FakeBackend::ClearCalls() {
  MutexLock lock(&mu_);
  calls_.clear();
}

bool FakeBackend::WaitIdle(absl::Duration timeout) {
  const SteadyTime until =
      SteadyClock::now() + absl::ToChronoNanoseconds(timeout);
  MutexLock lock(&mu_);
  while (!ready_.empty() || running_fn_) {
    if (SteadyClock::now() >= until) return false;
    cv_.WaitWithTimeout(&mu_, absl::Milliseconds(1));
  }
  return true;
}

Answer FakeBackend::AnswerLocked(const FakeCall& call, Deadline deadline,
                                 bool* silent) {
  calls_.push_back(call);
  *silent = false;
  switch (faults_[call.node]) {
    case FakeFault::kDown:
      return Answer{absl::UnavailableError(
          absl::StrCat(names_[call.node], ": connection refused (fake)"))};
    case FakeFault::kSilent:
      *silent = true;
      return Answer{
          deadline.is_never()
              ? absl::UnavailableError(
                    absl::StrCat(names_[call.node],
                                 ": no answer within the command "
                                 "timeout (fake)"))
              : absl::DeadlineExceededError(absl::StrCat(
                    names_[call.node], ": no answer by the deadline (fake)"))};
    case FakeFault::kLoseReply:
    case FakeFault::kNone:
      break;
  }
  std::vector<std::pair<std::string, std::string>> published;
  Answer answer;
  if (responders_[call.node]) {
    answer = responders_[call.node](call, nodes_[call.node]);
  } else {
    answer.reply = nodes_[call.node].Run(call, clock_->Now(), &published);
  }
  for (const auto& [channel, message] : published) {
    PublishLocked(channel, message);
  }
  if (faults_[call.node] == FakeFault::kLoseReply) {
    return Answer{absl::UnavailableError(absl::StrCat(
        names_[call.node], ": connection lost before the reply (fake)"))};
  }
  return answer;
}

FakeBackend::Sent FakeBackend::Send(const backend::ScriptCall& c, bool async) {
  const FakeCall proto{0,
                       c.script,
                       {c.keys.begin(), c.keys.end()},
                       {c.args.begin(), c.args.end()},
                       false,
                       async,
                       c.resend};
  const Deadline deadline = c.deadline;
  const backend::Enough& enough = c.enough;
  const std::vector<bool>* only = c.only;
  const backend::WaitReplicas* wait = c.wait;
  Sent sent;
  sent.answers.resize(names_.size());
  bool stopped = false;
  for (size_t i = 0; i < sent.answers.size(); ++i) {
    Answer& answer = sent.answers[i];
    if (only != nullptr && !(*only)[i]) {
      answer.reply = absl::CancelledError("not sent");
      continue;
    }
    FakeCall call = proto;
    call.node = i;
    bool silent = false;
    {
      MutexLock lock(&mu_);
      if (closed_) {
        answer.reply = absl::FailedPreconditionError("the backend is closed");
        continue;
      }
      answer = AnswerLocked(call, deadline, &silent);
    }
    if (silent) {
      sent.silent = true;
    } else if (stopped) {
      answer.reply = absl::CancelledError("not awaited");  // sent, it ran
    } else if (enough && enough(i, answer)) {
      stopped = true;
    }
    if (wait != nullptr && answer.reply.ok() && answer.acked < 0) {
      answer.acked = wait->replicas;  // every replica, unless a responder
    }
  }
  sent.silent = sent.silent && !stopped;
  return sent;
}

SteadyTime FakeBackend::SilentUntil(Deadline deadline) const {
  // Without a deadline, the transport's command timeout ends the call.
  return deadline.is_never() ? clock_->Now() + std::chrono::seconds(2)
                             : deadline.time();
}

std::vector<Answer> FakeBackend::Run(const backend::ScriptCall& call) {
  {
    MutexLock lock(&mu_);
    ++in_call_;
  }
  Sent sent = Send(call, /*async=*/false);
  if (sent.silent) clock_->SleepUntil(SilentUntil(call.deadline));
  {
    MutexLock lock(&mu_);
    --in_call_;
  }
  cv_.SignalAll();
  return std::move(sent.answers);
}

void FakeBackend::RunAsync(backend::ScriptCall call,
                           backend::AnswersDone done) {
  // The answers are made now; a silent node's arrive at the deadline (in
  // simulated time, so the caller's other events come first).
  Sent sent = Send(call, /*async=*/true);
  auto answers = std::make_shared<std::vector<Answer>>(std::move(sent.answers));
  std::function<void()> finish = [answers, done = std::move(done)] {
    done(std::move(*answers));
  };
  if (sent.silent) {
    SetTimer(Deadline::At(SilentUntil(call.deadline), clock_),
             std::move(finish));
    return;
  }
  MutexLock lock(&mu_);
  Post(std::move(finish));
}

std::unique_ptr<backend::Timer> FakeBackend::NewTimer() {
  return std::make_unique<FakeTimer>(this);
}

backend::BatchReplies FakeBackend::RunBatch(
    const std::vector<backend::Call>& calls, Deadline deadline,
    std::atomic<uint64_t>* round_trips, const backend::WaitReplicas* wait) {
  backend::BatchReplies out(names_.size());
  bool any_silent = false;
  MutexLock lock(&mu_);
  for (size_t node = 0; node < names_.size(); ++node) {
    if (round_trips != nullptr) ++*round_trips;
    for (const backend::Call& c : calls) {
      FakeCall call{node,
                    c.script,
                    {c.keys.begin(), c.keys.end()},
                    {c.args.begin(), c.args.end()},
                    /*batch=*/true};
      bool silent = false;
      Answer a =
          closed_
              ? Answer{absl::FailedPreconditionError("the backend is closed")}
              : AnswerLocked(call, deadline, &silent);
      any_silent = any_silent || silent;
      if (wait == nullptr) {
        a.acked = -1;
      } else if (a.reply.ok() && a.acked < 0) {
        a.acked = wait->replicas;  // every replica, unless a responder
      }
      out[node].push_back(std::move(a));
    }
  }
  if (any_silent) clock_->SleepUntil(SilentUntil(deadline));
  return out;
}

std::vector<Answer> FakeBackend::Command(
    absl::Span<const absl::string_view> /*argv*/, Deadline /*deadline*/) {
  std::vector<Answer> out(names_.size());
  for (Answer& a : out) {
    a.reply = absl::UnimplementedError("the fake backend runs no commands");
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> FakeBackend::Masters() {
  return absl::UnimplementedError("the fake backend has no masters");
}

Answer FakeBackend::CommandOn(absl::string_view /*master*/,
                              absl::Span<const absl::string_view> /*argv*/,
                              Deadline /*deadline*/) {
  return Answer{absl::UnimplementedError("the fake backend runs no commands")};
}

Answer FakeBackend::CommandForKey(absl::string_view /*key*/,
                                  absl::Span<const absl::string_view> /*argv*/,
                                  Deadline /*deadline*/) {
  return Answer{absl::UnimplementedError("the fake backend runs no commands")};
}

void FakeBackend::SendForKey(absl::string_view /*key*/,
                             std::vector<std::vector<std::string>> /*commands*/,
                             std::function<void(absl::Status)> done) {
  if (done) done(absl::UnimplementedError("the fake backend runs no commands"));
}

std::unique_ptr<backend::Waiter> FakeBackend::Subscribe(
    const std::string& channel, pubsub::WakePolicy policy,
    const std::string& waiter, pubsub::Listener listener) {
  auto w = std::make_unique<FakeWaiter>(this, channel, policy, waiter,
                                        std::move(listener));
  MutexLock lock(&mu_);
  waiters_.push_back(w.get());
  return w;
}

void FakeBackend::CancelWaits() {
  MutexLock lock(&mu_);
  cancelled_ = true;
  for (FakeWaiter* w : waiters_) {
    if (w->listener_) Post(w->listener_);
  }
}

void FakeBackend::Close() {
  CancelWaits();
  MutexLock lock(&mu_);
  closed_ = true;
}

void FakeBackend::Post(std::function<void()> fn) {
  ready_.push_back(std::move(fn));
  cv_.SignalAll();
}

uint64_t FakeBackend::SetTimer(Deadline when, std::function<void()> fn) {
  MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  timers_[id] = TimerEntry{when.time(), id, std::move(fn)};
  ++timer_changes_;
  cv_.SignalAll();
  return id;
}

void FakeBackend::CancelTimer(uint64_t id) {
  std::function<void()> dropped;  // destroyed outside the mutex
  MutexLock lock(&mu_);
  auto it = timers_.find(id);
  if (it == timers_.end()) return;
  dropped = std::move(it->second.fn);
  timers_.erase(it);
  ++timer_changes_;
}

void FakeBackend::Loop() {
  MutexLock lock(&mu_);
  while (!stop_) {
    if (!ready_.empty()) {
      std::function<void()> fn = std::move(ready_.front());
      ready_.pop_front();
      running_fn_ = true;
      mu_.Unlock();
      fn();
      fn = nullptr;
      mu_.Lock();
      running_fn_ = false;
      cv_.SignalAll();
      continue;
    }
    auto earliest = std::min_element(
        timers_.begin(), timers_.end(), [](const auto& a, const auto& b) {
          return std::tie(a.second.when, a.second.seq) <
                 std::tie(b.second.when, b.second.seq);
        });
    if (earliest == timers_.end()) {
      cv_.WaitWithTimeout(&mu_, absl::Milliseconds(10));
      continue;
    }
    if (earliest->second.when <= clock_->Now()) {
      ready_.push_back(std::move(earliest->second.fn));
      timers_.erase(earliest);
      continue;
    }
    // Only timers are left. Give other threads a moment to start their
    // next step, then (nothing else happening) jump to the earliest.
    const SteadyTime when = earliest->second.when;
    const uint64_t changes = timer_changes_;
    const bool timed_out = cv_.WaitWithTimeout(&mu_, kIdleBeforeJump);
    if (timed_out && auto_advance_ && ready_.empty() && in_call_ == 0 &&
        timer_changes_ == changes && !stop_) {
      clock_->SleepUntil(when);
    }
  }
}

}  // namespace testing
}  // namespace relock
