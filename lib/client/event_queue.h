// A thread that delivers LockEvents to the user's callback, so that a slow
// callback never delays the watchdog's renewals. Events are delivered in
// order; Stop() delivers what is queued, then joins.

#ifndef RELOCK_LIB_CLIENT_EVENT_QUEUE_H_
#define RELOCK_LIB_CLIENT_EVENT_QUEUE_H_

#include <deque>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "lib/common/mutex.h"
#include "relock/options.h"

namespace relock {
namespace internal {

class EventQueue {
 public:
  explicit EventQueue(std::function<void(const LockEvent&)> deliver);
  ~EventQueue();
  EventQueue(const EventQueue&) = delete;
  EventQueue& operator=(const EventQueue&) = delete;

  // Queues `event`; dropped after Stop().
  void Post(LockEvent event);
  // Waits until every event posted so far was delivered.
  void Drain();
  void Stop();

 private:
  void Run();

  const std::function<void(const LockEvent&)> deliver_;
  Mutex mu_;
  std::deque<LockEvent> queue_ ABSL_GUARDED_BY(mu_);
  bool delivering_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  Mutex join_mu_;
  std::thread thread_ ABSL_GUARDED_BY(join_mu_);
};

}  // namespace internal
}  // namespace relock

#endif  // RELOCK_LIB_CLIENT_EVENT_QUEUE_H_
