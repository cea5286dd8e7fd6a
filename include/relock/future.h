// relock/future.h
//
// `relock::Future<T>`: the result of an asynchronous call
// (Lock::AcquireAsync, TryAcquireAsync, ReleaseAsync,
// FencedLock::LockAndGetTokenAsync, ...), which arrives later on the
// client's event loop thread. T is absl::Status or an absl::StatusOr.
//
//   relock::Future<absl::Status> f = lock.AcquireAsync(task);
//   f.Then([](absl::Status s) { ... });   // or: absl::Status s = f.Get();
//
// Get() and Wait*() block the calling thread until the value arrives; Then()
// does not: its callback runs once, with the value, on the thread that
// delivers it (the client's event loop thread), or at once on the calling
// thread if the value is already there. At most one Then() per future.
//
// The event loop thread. A callback on it must not block: no long work, no
// blocking relock call (they return FailedPrecondition there at once); it
// may start other asynchronous calls. Nothing here blocks on an event loop
// thread of any relock client either (the value may need that very thread):
//
//   on an event loop thread   | value there       | value not there yet
//   --------------------------+-------------------+-------------------------
//   Get()                     | the value         | FailedPrecondition, at
//                             |                   | once
//   Wait()                    | returns           | returns at once
//   WaitFor(timeout)          | true              | false, at once
//
// Timeouts: WaitFor(absl::InfiniteDuration()) (or any timeout of a century
// or more) waits like Wait(); a zero or negative timeout does not wait, it
// says whether the value is there.
//
// A callback that throws: the exception is caught and logged at kError
// through the client's ClientOptions::logger (std::cerr where no client is
// known: Then() on a future whose value is already there, a call on an
// unbound handle), then dropped; the thread goes on as if the callback had
// returned. Nothing relock calls may throw through it.
//
// Copies of a Future share its state. A default-constructed Future is not
// valid(); nothing may be called on it but valid(). Thread-safe.
//
// The callback overloads of the asynchronous calls (taking a
// std::function<void(absl::Status)>) avoid the shared state; their callbacks
// follow the same rules (the event loop thread, exceptions).

#ifndef RELOCK_FUTURE_H_
#define RELOCK_FUTURE_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"

namespace relock {

namespace internal {
template <class T>
class Promise;
// Whether the calling thread is the event loop thread of a relock client.
bool OnEventLoopThread();
// Reports the exception being handled, thrown by a callback (`what` names
// it), on std::cerr; for the callbacks no client is known for.
void ReportCallbackException(absl::string_view what) noexcept;
}  // namespace internal

template <class T>
class Future {
  static_assert(std::is_constructible<T, absl::Status>::value,
                "relock::Future<T>: T is absl::Status or an absl::StatusOr");

 public:
  Future() = default;

  bool valid() const { return state_ != nullptr; }
  // Whether the value has arrived.
  bool Ready() const {
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->value.has_value();
  }
  // Blocks until the value has arrived (on an event loop thread: returns at
  // once, see above).
  void Wait() const { WaitFor(absl::InfiniteDuration()); }
  // Blocks at most `timeout` (see above); whether the value has arrived.
  bool WaitFor(absl::Duration timeout) const {
    std::unique_lock<std::mutex> lock(state_->mu);
    auto ready = [this] { return state_->value.has_value(); };
    if (ready() || timeout <= absl::ZeroDuration() ||
        internal::OnEventLoopThread()) {
      return ready();
    }
    // A century or more is forever (steady_clock::now() + the duration
    // must not overflow, nor its conversion to another clock).
    if (timeout >= absl::Hours(24 * 365 * 100)) {
      state_->cv.wait(lock, ready);
      return true;
    }
    return state_->cv.wait_until(
        lock,
        std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(timeout),
        ready);
  }
  // Blocks until the value has arrived; returns a copy of it. On an event
  // loop thread before the value is there: FailedPrecondition at once.
  T Get() const {
    if (!WaitFor(absl::InfiniteDuration())) {
      return T(absl::FailedPreconditionError(
          "relock::Future::Get() on a relock event loop thread (in a callback "
          "of an asynchronous call) before the value arrived: it would wait "
          "for that thread; use Then() there"));
    }
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
    try {
      f(std::move(value));
    } catch (...) {
      internal::ReportCallbackException("a relock::Future::Then() callback");
    }
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
  // Delivers the value (once). What the Then() callback throws propagates
  // (to relock's callback wrapper, which reports it).
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
