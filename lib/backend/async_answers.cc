#include "lib/backend/async_answers.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace relock {
namespace backend {

// The timer lives on the loop: At() and Cancel() act there (at once when
// called there), and a generation number makes a superseded or cancelled
// wait a no-op. A time already reached is a post, not an asio timer. The
// pending callback is kept here, not in the asio handler, so that the loop's
// Stop() can drop it (io::Droppable): a handler waiting for its time would
// otherwise keep it, and what it holds (an acquire's wait), until the
// client is destroyed.
struct LoopTimer::State final : io::Droppable {
  explicit State(io::EventLoop* loop) : timer(loop->context()) {}
  // Cancels the asio wait, if one is pending.
  void Stop() {
    if (!waiting) return;
    waiting = false;
    timer.cancel();
  }
  // Ends the pending wait, if any, and lets go of its callback (destroyed
  // after it was taken out: what it holds may cancel this very timer).
  void Drop() override {
    ++generation;
    Stop();
    std::function<void()> dropped = std::move(fn);
    fn = nullptr;
  }
  // Runs the callback of wait `g`, unless it was superseded or dropped.
  void Fire(uint64_t g) {
    if (g != generation || !fn) return;
    std::function<void()> run = std::move(fn);
    fn = nullptr;
    run();
  }
  asio::steady_timer timer;  // loop thread only, as the rest
  uint64_t generation = 0;
  bool waiting = false;      // an asio wait is pending
  std::function<void()> fn;  // the pending wait's callback
};

LoopTimer::LoopTimer(io::EventLoop* loop)
    : loop_(loop), state_(std::make_shared<State>(loop)) {
  loop_->DropOnStop(state_);
}

LoopTimer::~LoopTimer() { Cancel(); }

void LoopTimer::At(Deadline when, std::function<void()> fn) {
  io::EventLoop* loop = loop_;
  loop->Dispatch([loop, state = state_, when, fn = std::move(fn)]() mutable {
    const uint64_t generation = ++state->generation;
    std::function<void()> superseded = std::move(state->fn);
    state->fn = std::move(fn);
    if (when.Expired()) {
      state->Stop();
      loop->Post([state, generation] { state->Fire(generation); });
      return;
    }
    state->waiting = true;
    state->timer.expires_at(when.time());
    state->timer.async_wait([state, generation](const asio::error_code& ec) {
      if (ec || generation != state->generation) return;
      state->waiting = false;
      state->Fire(generation);
    });
  });
}

void LoopTimer::Cancel() {
  loop_->Dispatch([state = state_] { state->Drop(); });
}

std::shared_ptr<AsyncAnswers> AsyncAnswers::Start(
    io::EventLoop* loop, size_t n, Deadline deadline, absl::Duration backstop,
    Enough enough, std::function<std::string(size_t)> where, AnswersDone done) {
  auto a = std::make_shared<AsyncAnswers>(Key{}, loop, n, deadline, backstop,
                                          std::move(enough), std::move(where),
                                          std::move(done));
  a->Arm();
  return a;
}

AsyncAnswers::AsyncAnswers(Key /*only Start()*/, io::EventLoop* loop, size_t n,
                           Deadline deadline, absl::Duration backstop,
                           Enough enough,
                           std::function<std::string(size_t)> where,
                           AnswersDone done)
    : loop_(loop),
      deadline_(deadline),
      backstop_(backstop),
      limit_(Earliest(deadline, Deadline::After(backstop))),
      enough_(std::move(enough)),
      where_(std::move(where)),
      done_(std::move(done)),
      timer_(loop->context()),
      got_(n) {}

void AsyncAnswers::Arm() {
  loop_->Dispatch([self = shared_from_this()] {
    {
      std::lock_guard<std::mutex> lock(self->mu_);
      if (self->finished_) return;
    }
    self->timer_.expires_at(self->limit_.time());
    self->timer_.async_wait([self](const asio::error_code& ec) {
      if (!ec) self->Finish(/*stopped=*/false);
    });
  });
}

Done AsyncAnswers::Slot(size_t i) {
  return [self = shared_from_this(), i](Answer answer) {
    self->Deliver(i, std::move(answer));
  };
}

void AsyncAnswers::Deliver(size_t i, Answer answer) {
  bool finish = false, stopped = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_ || got_[i].has_value()) return;
    got_[i].emplace(std::move(answer));
    ++arrived_;
    stopped = enough_ && enough_(i, *got_[i]);
    finish = stopped || arrived_ == got_.size();
  }
  if (finish) Finish(stopped);
}

void AsyncAnswers::Finish(bool stopped) {
  absl::InlinedVector<absl::optional<Answer>, 1> got;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    got.swap(got_);
  }
  abandon_.store(true, std::memory_order_relaxed);
  // The timer keeps this object alive until it fires or is cancelled.
  loop_->Dispatch([self = shared_from_this()] { self->timer_.cancel(); });
  std::vector<Answer> answers;
  answers.reserve(got.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i].has_value()) {
      answers.push_back(*std::move(got[i]));
    } else {
      answers.push_back(Answer{
          MissingAnswer(where_(i), stopped, deadline_, limit_, backstop_),
          false});
    }
  }
  AnswersDone done = std::move(done_);
  done(std::move(answers));
}

}  // namespace backend
}  // namespace relock
