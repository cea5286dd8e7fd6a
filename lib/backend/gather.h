// Gather<T>: waits for n asynchronous results (one per node) that arrive on
// other threads, within a deadline, stopping early when the caller has
// heard enough. A result that arrives after the wait ended is dropped.

#ifndef RELOCK_LIB_BACKEND_GATHER_H_
#define RELOCK_LIB_BACKEND_GATHER_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/types/optional.h"
#include "lib/common/deadline.h"
#include "lib/common/mutex.h"

namespace relock {
namespace backend {

template <class T>
class Gather {
 public:
  explicit Gather(size_t n) : state_(std::make_shared<State>()) {
    MutexLock lock(&state_->mu);
    state_->results.resize(n);
  }

  // The callback that delivers result `i` (any thread, once).
  std::function<void(T)> Slot(size_t i) const {
    return [state = state_, i](T result) {
      MutexLock lock(&state->mu);
      state->results[i].emplace(std::move(result));
      state->arrivals.push_back(i);
      state->cv.SignalAll();
    };
  }

  // Waits until every result arrived, `enough(i, result)` returned true
  // (asked once per result, in arrival order), or `limit`. Returns what
  // arrived; `*stopped` says whether `enough` ended the wait.
  std::vector<absl::optional<T>> Wait(
      Deadline limit, const std::function<bool(size_t, const T&)>& enough,
      bool* stopped) {
    State& s = *state_;
    MutexLock lock(&s.mu);
    *stopped = false;
    for (size_t seen = 0;;) {
      while (!*stopped && seen < s.arrivals.size()) {
        const size_t i = s.arrivals[seen++];
        *stopped = enough && enough(i, *s.results[i]);
      }
      if (*stopped || seen == s.results.size() || limit.Expired()) break;
      s.cv.WaitWithTimeout(&s.mu, limit.Remaining());
    }
    // Later arrivals land in a fresh vector nobody reads.
    std::vector<absl::optional<T>> out;
    out.swap(s.results);
    s.results.resize(out.size());
    return out;
  }

 private:
  struct State {
    Mutex mu;
    CondVar cv;
    std::vector<absl::optional<T>> results ABSL_GUARDED_BY(mu);
    std::vector<size_t> arrivals ABSL_GUARDED_BY(mu);
  };
  std::shared_ptr<State> state_;
};

}  // namespace backend
}  // namespace relock

#endif  // RELOCK_LIB_BACKEND_GATHER_H_
