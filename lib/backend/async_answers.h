// AsyncAnswers: gathers one answer per node for an asynchronous call
// (Backend::RunAsync) and delivers them once, when every node answered,
// `enough` said stop, or the deadline or backstop passed (a timer on the
// client's event loop). The asynchronous twin of AwaitAnswers.

#ifndef RELOCK_LIB_BACKEND_ASYNC_ANSWERS_H_
#define RELOCK_LIB_BACKEND_ASYNC_ANSWERS_H_

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "asio/steady_timer.hpp"
#include "lib/backend/backend.h"
#include "lib/common/deadline.h"
#include "lib/io/event_loop.h"

namespace relock {
namespace backend {

// backend::Timer on an event loop.
class LoopTimer : public Timer {
 public:
  explicit LoopTimer(io::EventLoop* loop);
  ~LoopTimer() override;
  void At(Deadline when, std::function<void()> fn) override;
  void Cancel() override;

 private:
  struct State;
  io::EventLoop* const loop_;
  std::shared_ptr<State> state_;
};

class AsyncAnswers : public std::enable_shared_from_this<AsyncAnswers> {
 public:
  // Arms the timer for Earliest(deadline, now + backstop). `done` runs once:
  // on the loop thread, or on the thread whose answer completes the call.
  static std::shared_ptr<AsyncAnswers> Start(
      io::EventLoop* loop, size_t n, Deadline deadline, absl::Duration backstop,
      Enough enough, std::function<std::string(size_t)> where,
      AnswersDone done);

  // The callback that delivers node i's answer (any thread, once).
  Done Slot(size_t i);
  // Set once the call ended: give it to the requests, which are then
  // dropped at their next step.
  const std::shared_ptr<std::atomic<bool>>& abandon() const { return abandon_; }

 private:
  AsyncAnswers(io::EventLoop* loop, size_t n, Deadline deadline,
               absl::Duration backstop, Enough enough,
               std::function<std::string(size_t)> where, AnswersDone done);
  void Arm();
  void Deliver(size_t i, Answer answer);
  // Ends the call (once): missing answers become errors, `done` runs.
  void Finish(bool stopped);

  io::EventLoop* const loop_;
  const Deadline deadline_;
  const absl::Duration backstop_;
  const Deadline limit_;
  const Enough enough_;
  const std::function<std::string(size_t)> where_;
  AnswersDone done_;
  const std::shared_ptr<std::atomic<bool>> abandon_ =
      std::make_shared<std::atomic<bool>>(false);
  asio::steady_timer timer_;  // loop thread only

  std::mutex mu_;
  std::vector<absl::optional<Answer>> got_;  // guarded by mu_
  size_t arrived_ = 0;                       // guarded by mu_
  bool finished_ = false;                    // guarded by mu_
};

}  // namespace backend
}  // namespace relock

#endif  // RELOCK_LIB_BACKEND_ASYNC_ANSWERS_H_
