// EventCount: lets a thread sleep until another thread says that something
// changed, with exactly one futex call on each side when the sleeper really
// sleeps, and none at all on the notifying side when nobody sleeps.
//
// Why not std::condition_variable: glibc re-takes a condition variable's
// mutex after a wait in its "contended" state, so the waiter's next unlock
// always makes a futex wake call, whether anyone waits for the mutex or not:
// three futex calls per blocking Redis call instead of two (measured with
// `perf record -e syscalls:sys_enter_futex` on 32 threads of lock_benchmark:
// the third was __lll_lock_wake in the waiter's unlock).
//
// Use (the waiter checks its condition between Prepare() and Wait(), so that
// a Notify() after the check is never missed):
//
//   for (;;) {
//     const uint32_t key = events.Prepare();
//     if (condition_holds()) break;   // reads state the notifier published
//     if (!events.Wait(key, deadline)) break;  // timed out
//   }
//
// and the notifier publishes its change (under a mutex, or with a release
// store), then calls Notify(). The state itself must be synchronized by its
// own means (ThreadSanitizer sees those; it does not see the futex).

#ifndef RELOCK_LIB_COMMON_EVENT_COUNT_H_
#define RELOCK_LIB_COMMON_EVENT_COUNT_H_

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>

#include "lib/common/deadline.h"

namespace relock {

class EventCount {
 public:
  EventCount() = default;
  EventCount(const EventCount&) = delete;
  EventCount& operator=(const EventCount&) = delete;

  // The key to pass to Wait(); read before checking the condition.
  uint32_t Prepare() const { return seq_.load(std::memory_order_seq_cst); }

  // Sleeps until a Notify() that came after Prepare() returned `key`, or
  // until `until` passes; may return early (spuriously): the caller checks
  // its condition and its deadline again. Returns false, without waiting,
  // when `until` had passed already.
  bool Wait(uint32_t key, Deadline until) {
    if (until.Expired()) return false;
    waiters_.fetch_add(1, std::memory_order_seq_cst);
    if (seq_.load(std::memory_order_seq_cst) == key) {
      if (until.is_never()) {
        Futex(FUTEX_WAIT_PRIVATE, key, nullptr, 0);
      } else {
        // FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC time, the
        // clock of std::chrono::steady_clock (and so of Deadline).
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            until.time().time_since_epoch())
                            .count();
        timespec at{};
        at.tv_sec = static_cast<time_t>(ns / 1000000000);
        at.tv_nsec = static_cast<long>(ns % 1000000000);  // NOLINT(runtime/int)
        Futex(FUTEX_WAIT_BITSET_PRIVATE, key, &at, FUTEX_BITSET_MATCH_ANY);
      }
    }
    waiters_.fetch_sub(1, std::memory_order_seq_cst);
    return true;
  }

  // Wakes every thread in Wait() (none: no system call).
  void Notify() {
    seq_.fetch_add(1, std::memory_order_seq_cst);
    if (waiters_.load(std::memory_order_seq_cst) > 0) {
      Futex(FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, 0);
    }
  }

 private:
  void Futex(int op, uint32_t value, const timespec* at, uint32_t mask) {
    // EINTR, EAGAIN (the key changed) and ETIMEDOUT all mean: look again.
    ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&seq_), op, value, at,
              nullptr, mask);
  }

  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t),
                "the futex word is the atomic's storage");
  std::atomic<uint32_t> seq_{0};
  std::atomic<uint32_t> waiters_{0};
};

}  // namespace relock

#endif  // RELOCK_LIB_COMMON_EVENT_COUNT_H_
