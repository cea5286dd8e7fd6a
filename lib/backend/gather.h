// Gather<T>: waits for n asynchronous results (one per node) that arrive on
// other threads, within a deadline, stopping early when the caller has
// heard enough. A result that arrives after the wait ended is dropped.
//
// One Gather per call, so it uses std::mutex rather than absl::Mutex: Debian
// builds Abseil with deadlock detection on, which costs every absl::Mutex a
// graph node to create and remove (measured: about 8% of a lock+unlock's
// client instructions when each call made one). The waiter sleeps on an
// EventCount rather than a condition variable: two futex calls per blocking
// call instead of three (see lib/common/event_count.h).

#ifndef RELOCK_LIB_BACKEND_GATHER_H_
#define RELOCK_LIB_BACKEND_GATHER_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "lib/common/deadline.h"
#include "lib/common/event_count.h"

namespace relock {
namespace backend {

template <class T>
class Gather {
 public:
  explicit Gather(size_t n) : state_(std::make_shared<State>()) {
    state_->results.resize(n);  // not shared yet
  }

  // The callback that delivers result `i` (any thread, once).
  std::function<void(T)> Slot(size_t i) const {
    return [state = state_, i](T result) {
      {
        std::lock_guard<std::mutex> lock(state->mu);
        state->results[i].emplace(std::move(result));
        state->arrivals.push_back(i);
      }
      // After unlocking: a waiter woken under the lock would at once block
      // on it again (one more context switch per result). `state` stays
      // alive through this copy of it.
      state->events.Notify();
    };
  }

  // Waits until every result arrived, `enough(i, result)` returned true
  // (asked once per result, in arrival order), or `limit`. Returns what
  // arrived; `*stopped` says whether `enough` ended the wait.
  std::vector<absl::optional<T>> Wait(
      Deadline limit, const std::function<bool(size_t, const T&)>& enough,
      bool* stopped) {
    State& s = *state_;
    *stopped = false;
    for (size_t seen = 0;;) {
      const uint32_t key = s.events.Prepare();
      {
        std::lock_guard<std::mutex> lock(s.mu);
        while (!*stopped && seen < s.arrivals.size()) {
          const size_t i = s.arrivals[seen++];
          *stopped = enough && enough(i, *s.results[i]);
        }
        if (*stopped || seen == s.results.size()) break;
      }
      if (!s.events.Wait(key, limit)) break;
    }
    std::lock_guard<std::mutex> lock(s.mu);
    // Later arrivals land in a fresh vector nobody reads.
    std::vector<absl::optional<T>> out;
    out.swap(s.results);
    s.results.resize(out.size());
    return out;
  }

 private:
  struct State {
    std::mutex mu;
    EventCount events;
    std::vector<absl::optional<T>> results;  // guarded by mu
    std::vector<size_t> arrivals;            // guarded by mu
  };
  std::shared_ptr<State> state_;
};

}  // namespace backend
}  // namespace relock

#endif  // RELOCK_LIB_BACKEND_GATHER_H_
