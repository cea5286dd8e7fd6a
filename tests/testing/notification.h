// relock::testing::Notification: a one-shot event for tests, with the
// absl::Notification API (Notify, HasBeenNotified, WaitForNotification,
// WaitForNotificationWithTimeout).
//
// Use it instead of absl::Notification: it is built on relock::Mutex
// (lib/common/mutex.h), which ThreadSanitizer can see through, whereas
// Debian's uninstrumented libabsl hides absl::Notification's synchronization
// from TSan and every test using it reports false races.
//
// Thread-safe. Notify() may be called once; the object may be destroyed as
// soon as a waiter has returned.

#ifndef RELOCK_TESTS_TESTING_NOTIFICATION_H_
#define RELOCK_TESTS_TESTING_NOTIFICATION_H_

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "lib/common/mutex.h"

namespace relock {
namespace testing {

class Notification {
 public:
  Notification() = default;
  Notification(const Notification&) = delete;
  Notification& operator=(const Notification&) = delete;

  void Notify() {
    MutexLock lock(&mu_);
    notified_ = true;
  }
  bool HasBeenNotified() const {
    MutexLock lock(&mu_);
    return notified_;
  }
  void WaitForNotification() const {
    MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&notified_));
  }
  // Returns whether it was notified within `timeout`.
  bool WaitForNotificationWithTimeout(absl::Duration timeout) const {
    MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&notified_), timeout);
  }

 private:
  mutable Mutex mu_;
  bool notified_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace testing
}  // namespace relock

#endif  // RELOCK_TESTS_TESTING_NOTIFICATION_H_
