// relock/future.h
//
// `relock::Future<T>`: the result of an asynchronous call
// (Lock::AcquireAsync, TryAcquireAsync, ReleaseAsync), which arrives later
// on the client's event loop thread.
//
//   relock::Future<absl::Status> f = lock.AcquireAsync(task);
//   f.Then([](absl::Status s) { ... });   // or: absl::Status s = f.Get();
//
// Get() and Wait*() block the calling thread; Then() does not: its callback
// runs once, with the value, on the thread that delivers it (the client's
// event loop thread), or at once on the calling thread if the value is
// already there. A callback on the loop thread must not block: no blocking
// relock call (they fail there with FailedPrecondition), no long work; it
// may start other asynchronous calls. At most one Then() per future.
//
// Copies of a Future share its state. A default-constructed Future is not
// valid(); nothing may be called on it but valid(). Thread-safe.
//
// The callback overloads of the asynchronous calls (taking a
// std::function<void(absl::Status)>) avoid the shared state; their callbacks
// follow the same rules.

#ifndef RELOCK_FUTURE_H_
#define RELOCK_FUTURE_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>

#include "absl/time/time.h"
#include "absl/types/optional.h"

namespace relock {

namespace internal {
template <class T>
class Promise;
}  // namespace internal

template <class T>
class Future {
 public:
  Future() = default;

  bool valid() const { return state_ != nullptr; }
  // Whether the value has arrived.
  bool Ready() const {
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->value.has_value();
  }
  // Blocks until the value has arrived.
  void Wait() const {
    std::unique_lock<std::mutex> lock(state_->mu);
    state_->cv.wait(lock, [this] { return state_->value.has_value(); });
  }
  // Blocks at most `timeout`; whether the value has arrived.
  bool WaitFor(absl::Duration timeout) const {
    std::unique_lock<std::mutex> lock(state_->mu);
    return state_->cv.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                               [this] { return state_->value.has_value(); });
  }
  // Blocks until the value has arrived; returns a copy of it.
  T Get() const {
    Wait();
    std::lock_guard<std::mutex> lock(state_->mu);
    return *state_->value;
  }
  // Runs `f(value)` once the value arrives (see above).
  void Then(std::function<void(T)> f) {
    std::unique_lock<std::mutex> lock(state_->mu);
    if (!state_->value.has_value()) {
      state_->then = std::move(f);
      return;
    }
    T value = *state_->value;
    lock.unlock();
    f(std::move(value));
  }

 private:
  friend class internal::Promise<T>;
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    absl::optional<T> value;
    std::function<void(T)> then;
  };
  explicit Future(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

namespace internal {

// The writing end of a Future (relock's own).
template <class T>
class Promise {
 public:
  Promise() : state_(std::make_shared<typename Future<T>::State>()) {}
  Future<T> future() const { return Future<T>(state_); }
  // Delivers the value (once).
  void Set(T value) const {
    std::function<void(T)> then;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->value.emplace(value);
      then = std::move(state_->then);
    }
    state_->cv.notify_all();
    if (then) then(std::move(value));
  }

 private:
  std::shared_ptr<typename Future<T>::State> state_;
};

}  // namespace internal
}  // namespace relock

#endif  // RELOCK_FUTURE_H_
