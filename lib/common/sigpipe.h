// ScopedSigpipeSuppression: writes to a socket the peer closed fail with
// EPIPE instead of killing the process, without changing the process's
// SIGPIPE disposition (a library must not).

#ifndef RELOCK_LIB_COMMON_SIGPIPE_H_
#define RELOCK_LIB_COMMON_SIGPIPE_H_

#include <pthread.h>
#include <signal.h>

#include <cerrno>

namespace relock {

// Blocks SIGPIPE on the calling thread for its lifetime; on destruction
// consumes a SIGPIPE raised meanwhile (unless one was already pending or the
// thread had it blocked) and restores the mask. A write to a socket the peer
// closed then fails with EPIPE instead of killing the process.
class ScopedSigpipeSuppression {
 public:
  ScopedSigpipeSuppression() {
    sigemptyset(&sigpipe_);
    sigaddset(&sigpipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &sigpipe_, &old_mask_);
    was_blocked_ = sigismember(&old_mask_, SIGPIPE) == 1;
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
  }
  ~ScopedSigpipeSuppression() {
    if (was_blocked_) return;  // the thread's own business
    if (!was_pending_) {
      sigset_t pending;
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        const timespec zero{0, 0};
        while (sigtimedwait(&sigpipe_, nullptr, &zero) < 0 && errno == EINTR) {
        }
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  }
  ScopedSigpipeSuppression(const ScopedSigpipeSuppression&) = delete;
  ScopedSigpipeSuppression& operator=(const ScopedSigpipeSuppression&) = delete;

 private:
  sigset_t sigpipe_;
  sigset_t old_mask_;
  bool was_blocked_ = false;
  bool was_pending_ = false;
};

}  // namespace relock

#endif  // RELOCK_LIB_COMMON_SIGPIPE_H_
