// relock/owner.h
//
// `relock::Owner`: who a hold belongs to.
//
// Every hold of a lock belongs to an owner. The calls without an Owner
// argument (lock(), try_lock*(), unlock(), Acquire(), TryAcquire(),
// Release(), and so std::lock_guard & co.) act for the calling thread,
// Owner::ThisThread(). Code whose work moves between threads (an event
// loop, a thread pool, coroutines that resume elsewhere) makes an explicit
// owner instead, Owner::New(), and passes it to the calls that take one:
//
//   relock::Owner task = relock::Owner::New();
//   lock.Acquire(task);   // on one thread...
//   ...
//   lock.Release(task);   // ...released on another: still the same owner
//
// The hold then belongs to the token, whichever thread makes the call: it
// may be taken again (re-entry) and released from any thread, while every
// other owner (another token, any thread, any other client) is excluded,
// also a thread that is running on the token's behalf but calls without it.
//
// Owners are numbers unique in the process and never reused: no token is
// ever a thread's owner or another token's. In Redis the owner field is
// "<client-id>:<number>", exactly as for a thread (Redisson's format), so an
// owner is per client: one token used with two clients is two owners.
//
// A token's holds are tied to no thread: they stay held (and renewed by the
// watchdog) until released or the client closes; there is no
// kOwnerThreadExited event for them. Tokens are small values: copy them
// freely (copies are the same owner), compare them, hash them. A
// default-constructed Owner is no owner: calls given one fail with
// InvalidArgument. Thread-safe.

#ifndef RELOCK_OWNER_H_
#define RELOCK_OWNER_H_

#include <cstdint>
#include <utility>

namespace relock {

class Owner {
 public:
  // No owner (valid() is false).
  Owner() = default;

  // A new owner, distinct from every other owner and every thread.
  static Owner New();
  // The calling thread, as the owner the calls without an Owner use.
  static Owner ThisThread();

  bool valid() const { return number_ != 0; }
  // The number in the owner field "<client-id>:<number>" (0: no owner).
  uint64_t number() const { return number_; }
  // Whether this is a thread's owner (from ThisThread()).
  bool is_thread() const { return thread_; }

  friend bool operator==(const Owner& a, const Owner& b) {
    return a.number_ == b.number_;
  }
  friend bool operator!=(const Owner& a, const Owner& b) { return !(a == b); }
  friend bool operator<(const Owner& a, const Owner& b) {
    return a.number_ < b.number_;
  }
  template <typename H>
  friend H AbslHashValue(H h, const Owner& owner) {
    return H::combine(std::move(h), owner.number_);
  }

 private:
  Owner(uint64_t number, bool thread) : number_(number), thread_(thread) {}
  uint64_t number_ = 0;
  bool thread_ = false;
};

}  // namespace relock

#endif  // RELOCK_OWNER_H_
