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

#include "absl/container/inlined_vector.h"
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
  // dropped at their next step. (It points into this object and keeps it
  // alive.)
  std::shared_ptr<std::atomic<bool>> abandon() {
    return std::shared_ptr<std::atomic<bool>>(shared_from_this(), &abandon_);
  }

 private:
  // Start() makes it (one allocation, with its control block).
  struct Key {};

 public:
  AsyncAnswers(Key, io::EventLoop* loop, size_t n, Deadline deadline,
               absl::Duration backstop, Enough enough,
               std::function<std::string(size_t)> where, AnswersDone done);

 private:
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
  std::atomic<bool> abandon_{false};
  asio::steady_timer timer_;  // loop thread only

  std::mutex mu_;
  // One per node; inline for a single node's call.
  absl::InlinedVector<absl::optional<Answer>, 1> got_;  // guarded by mu_
  size_t arrived_ = 0;                                  // guarded by mu_
  bool finished_ = false;                               // guarded by mu_
};

}  // namespace backend
}  // namespace relock

#endif  // RELOCK_LIB_BACKEND_ASYNC_ANSWERS_H_
