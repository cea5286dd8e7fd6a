// The client's event loop: one thread running one asio::io_context, which
// owns every socket and I/O timer of the client (see lib/io/connection.h).
//
// Work reaches the loop with Post() from any thread; handlers run on the
// loop thread one at a time, so state touched only by handlers needs no
// mutex. Stop() lets the handlers already posted run, drops what the
// droppables (DropOnStop()) hold, then ends the thread and joins it (or
// detaches when called from the loop thread itself, e.g. by a handler that
// drops the last reference to a closed client). Idempotent.

#ifndef RELOCK_LIB_IO_EVENT_LOOP_H_
#define RELOCK_LIB_IO_EVENT_LOOP_H_

#include <atomic>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "asio/executor_work_guard.hpp"
#include "asio/io_context.hpp"
#include "lib/common/mutex.h"

namespace relock {
namespace io {

// Something that holds work for the loop that never comes once it stops (a
// timer's pending callback): Drop() lets go of it, on the loop thread.
class Droppable {
 public:
  virtual void Drop() = 0;

 protected:
  ~Droppable() = default;
};

class EventLoop {
 public:
  EventLoop();
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  asio::io_context& context() { return *context_; }
  // Runs `fn` on the loop thread. Once Stop() has begun, `fn` is destroyed
  // at once, unrun, on the calling thread: queued behind the stop, it would
  // never run, and what it holds (an acquire waiting for it) would live on
  // with the loop's context until the client is destroyed.
  void Post(std::function<void()> fn);
  // Runs `fn` now when called on the loop thread (so it must not rely on
  // running after its caller), else Post()s it.
  void Dispatch(std::function<void()> fn);
  // Whether the calling thread is the loop thread.
  bool InLoopThread() const;
  // Whether the calling thread is the loop thread of any EventLoop.
  static bool InAnyLoopThread();
  // Has Stop() call `d`'s Drop() on the loop thread, if `d` is still alive
  // then. A handler waiting for a timer is never run once the loop stops,
  // and what it holds would live on with the loop's context (until the
  // client is destroyed): a call waiting for it would wait for good.
  // Dropped, it goes at Close(): an acquire's wait then ends with
  // Cancelled.
  void DropOnStop(std::weak_ptr<Droppable> d);
  void Stop();

 private:
  // The droppables, shared with the stop handler (which may outlive this
  // object, see context_).
  struct Droppables {
    Mutex mu;
    std::vector<std::weak_ptr<Droppable>> live ABSL_GUARDED_BY(mu);
    size_t pruned_at ABSL_GUARDED_BY(mu) = 0;  // `live`'s size after pruning
  };

  // Shared with the thread, which may outlive this object when Stop() is
  // called from a handler (the thread then detaches).
  std::shared_ptr<asio::io_context> context_;
  const std::shared_ptr<Droppables> droppables_ =
      std::make_shared<Droppables>();
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::atomic<bool> stopping_{false};  // Stop() has begun
  std::atomic<int> posting_{0};        // Post()s between check and queue
  Mutex mu_;
  std::thread thread_ ABSL_GUARDED_BY(mu_);
  std::thread::id thread_id_;
};

}  // namespace io
}  // namespace relock

#endif  // RELOCK_LIB_IO_EVENT_LOOP_H_
