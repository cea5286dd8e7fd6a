#include "lib/client/event_queue.h"

#include <utility>

namespace relock {
namespace internal {

EventQueue::EventQueue(std::function<void(const LockEvent&)> deliver)
    : deliver_(std::move(deliver)) {
  MutexLock lock(&join_mu_);
  thread_ = std::thread([this] { Run(); });
}

EventQueue::~EventQueue() { Stop(); }

void EventQueue::Post(LockEvent event) {
  MutexLock lock(&mu_);
  if (stop_) return;
  queue_.push_back(std::move(event));
}

void EventQueue::Drain() {
  MutexLock lock(&mu_);
  auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return queue_.empty() && !delivering_;
  };
  mu_.Await(absl::Condition(&idle));
}

void EventQueue::Stop() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  MutexLock lock(&join_mu_);
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) {
    thread_.join();
  }
}

void EventQueue::Run() {
  while (true) {
    LockEvent event;
    {
      MutexLock lock(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return !queue_.empty() || stop_;
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopped and drained
      event = std::move(queue_.front());
      queue_.pop_front();
      delivering_ = true;
    }
    deliver_(event);
    MutexLock lock(&mu_);
    delivering_ = false;
  }
}

}  // namespace internal
}  // namespace relock
