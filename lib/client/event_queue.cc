#include "lib/client/event_queue.h"

#include <iostream>
#include <utility>

#include "lib/lock/owner.h"

namespace relock {
namespace internal {

std::function<void(const LockEvent&)> EventDeliverer(
    std::function<void(const LockEvent&)> callback, std::string prefix) {
  if (callback) return callback;
  return [prefix = std::move(prefix)](const LockEvent& event) {
    std::cerr << "relock: " << LockEventTypeName(event.type) << " " << prefix
              << lock::QuoteName(event.lock_name) << ": " << event.status
              << "\n";
  };
}

EventQueue::EventQueue(std::function<void(const LockEvent&)> deliver)
    : state_(std::make_shared<State>(std::move(deliver))) {
  MutexLock lock(&join_mu_);
  thread_ = std::thread([state = state_] { Run(state); });
}

EventQueue::~EventQueue() { Stop(); }

void EventQueue::Post(LockEvent event) {
  MutexLock lock(&state_->mu);
  if (state_->stop) return;
  state_->queue.push_back(std::move(event));
}

void EventQueue::Stop() {
  {
    MutexLock lock(&state_->mu);
    state_->stop = true;
  }
  MutexLock lock(&join_mu_);
  if (!thread_.joinable()) return;
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();  // a callback is stopping its own queue
  } else {
    thread_.join();
  }
}

void EventQueue::Run(const std::shared_ptr<State>& state) {
  while (true) {
    LockEvent event;
    {
      MutexLock lock(&state->mu);
      auto ready = [&state]() ABSL_SHARED_LOCKS_REQUIRED(state->mu) {
        return !state->queue.empty() || state->stop;
      };
      state->mu.Await(absl::Condition(&ready));
      if (state->queue.empty()) return;  // stopped and drained
      event = std::move(state->queue.front());
      state->queue.pop_front();
    }
    state->deliver(event);
  }
}

}  // namespace internal
}  // namespace relock
