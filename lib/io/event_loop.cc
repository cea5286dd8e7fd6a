#include "lib/io/event_loop.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "asio/post.hpp"

namespace relock {
namespace io {
namespace {
thread_local bool tls_loop_thread = false;
}  // namespace

EventLoop::EventLoop()
    : context_(std::make_shared<asio::io_context>(1)),
      work_(asio::make_work_guard(*context_)) {
  MutexLock lock(&mu_);
  thread_ = std::thread([context = context_] {
    tls_loop_thread = true;
    context->run();
  });
  thread_id_ = thread_.get_id();
}

EventLoop::~EventLoop() { Stop(); }

void EventLoop::Post(std::function<void()> fn) {
  // In flight from before the check until the work is queued: Stop() waits
  // for that, so no work is queued behind its stop handler. Sequentially
  // consistent, with Stop()'s store and load: either this reads the flag
  // set, or Stop() reads this post in flight.
  posting_.fetch_add(1);
  if (!stopping_.load()) asio::post(*context_, std::move(fn));
  posting_.fetch_sub(1, std::memory_order_release);
  // `fn`, if not queued, is destroyed unrun after the count drops (its
  // destructor may post in turn).
}

void EventLoop::Dispatch(std::function<void()> fn) {
  if (InLoopThread()) {
    fn();
  } else {
    Post(std::move(fn));
  }
}

bool EventLoop::InAnyLoopThread() { return tls_loop_thread; }

void EventLoop::DropOnStop(std::weak_ptr<Droppable> d) {
  MutexLock lock(&droppables_->mu);
  std::vector<std::weak_ptr<Droppable>>& live = droppables_->live;
  // Forget the dead ones whenever the list doubled: amortized O(1), and a
  // long-lived client's list stays as long as its live droppables, twice.
  if (live.size() >= 2 * droppables_->pruned_at + 16) {
    live.erase(std::remove_if(live.begin(), live.end(),
                              [](const std::weak_ptr<Droppable>& w) {
                                return w.expired();
                              }),
               live.end());
    droppables_->pruned_at = live.size();
  }
  live.push_back(std::move(d));
}

bool EventLoop::InLoopThread() const {
  return std::this_thread::get_id() == thread_id_;
}

void EventLoop::Stop() {
  MutexLock lock(&mu_);
  if (!thread_.joinable()) return;
  // From now on Post() drops what it is given (see there); the posts that
  // read the flag before it was set are queued before the stop handler.
  // (They never block: asio::post() only queues, and none of them waits
  // for this thread, so the wait is short even from the loop thread.)
  stopping_.store(true);
  while (posting_.load() != 0) {
    std::this_thread::yield();
  }
  // Handlers already posted still run (they fail the requests of closed
  // connections); completions they cause are destroyed with the context.
  // The stop handler is queued before the work guard goes, so run() cannot
  // return first; it holds no reference to the context (a handler that
  // never ran would keep its context alive through it: a leak).
  auto stop = [context = context_.get(), droppables = droppables_] {
    // After the handlers posted before Stop(), what they armed included.
    std::vector<std::shared_ptr<Droppable>> drop;
    {
      MutexLock lock(&droppables->mu);
      for (const std::weak_ptr<Droppable>& w : droppables->live) {
        if (std::shared_ptr<Droppable> d = w.lock()) drop.push_back(d);
      }
      droppables->live.clear();
    }
    // (Not under the mutex: what a droppable lets go of may arm others.)
    for (const std::shared_ptr<Droppable>& d : drop) d->Drop();
    context->stop();
  };
  // Queued by the loop thread itself: what a handler posts stays in a queue
  // of the loop thread until it returns (io_context(1)), so a stop handler
  // queued from here meanwhile would come first and that work never run.
  asio::post(*context_, [context = context_.get(), stop = std::move(stop)] {
    asio::post(*context, std::move(stop));
  });
  work_.reset();
  if (InLoopThread()) {
    thread_.detach();  // the handler that called us returns into run()
  } else {
    thread_.join();
  }
}

}  // namespace io
}  // namespace relock
