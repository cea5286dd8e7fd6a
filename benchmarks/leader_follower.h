// LeaderFollowerConnection: blocking threads sharing one Redis connection
// through leader/follower I/O (the design issue 24 suggested for the hot
// path), with nothing else around it: the side "lf" of hot_path_benchmark's
// BM_OwnKeyThreadsVsNaive. It sends what relock sends (relock's own
// scripts, formatted once), so relock's distance from it is that of relock's
// event-loop I/O core from the design it did not take, measured in the same
// run; its distance from the naive client (a connection per thread) is that
// of a shared connection without a loop thread.
//
// A thread that calls while nobody does I/O leads: it writes every request
// queued so far in one write, reads the replies in order until its own
// arrives, handing each earlier one to the thread waiting for it, and then,
// if requests are still in flight or queued, makes the oldest one's thread
// the next leader. The other threads queue their request and sleep until a
// leader hands them their reply, or the lead. No loop thread, no hand-off to
// one, no allocation per call but hiredis's. (A leader that also wrote what
// was queued meanwhile before each read, as a loop thread does, measured
// slower: 0.61-0.71 x the naive client in six runs, against 0.77-1.06 x for
// this one in six runs the same day; its batches got smaller.)
//
// Each calling thread has a slot of its own (its index), so that a leader
// never touches a waiter's state after the waiter has gone.

#ifndef RELOCK_BENCHMARKS_LEADER_FOLLOWER_H_
#define RELOCK_BENCHMARKS_LEADER_FOLLOWER_H_

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/common/event_count.h"
#include "lib/common/mutex.h"
#include "tests/testing/raw_connection.h"

namespace relock {
namespace bench {

class LeaderFollowerConnection {
 public:
  // `threads` calling threads, numbered 0 to threads - 1, on `conn`.
  LeaderFollowerConnection(testing::RawConnection conn, int threads);
  LeaderFollowerConnection(const LeaderFollowerConnection&) = delete;
  LeaderFollowerConnection& operator=(const LeaderFollowerConnection&) = delete;

  // Thread `thread` sends `wire` (one command in RESP form) and waits for
  // its reply; an error reply is a reply, not an error Status. A connection
  // that failed (Unavailable for a write or read that failed,
  // ResourceExhausted if hiredis could not buffer a request) fails this
  // call and every later one.
  absl::StatusOr<testing::RawReply> Call(int thread, const std::string& wire);

 private:
  // On a cache line of its own: a thread's slot is written by it and by
  // the leader, not by its neighbours.
  struct alignas(64) Slot {
    enum State : int { kIdle, kWaiting, kDone, kLead };
    const std::string* wire = nullptr;
    testing::RawReply reply;  // with kDone: the reply, or null with `status`
    absl::Status status;
    std::atomic<int> state{kIdle};
    EventCount events;
  };

  // The leader's turn (see above), for its own slot `me`.
  void Lead(Slot* me);
  // The leader writes every queued request (or, once broken_, moves them to
  // in_flight_ unwritten, to fail them).
  void WriteQueued();
  // Gives slot `s` its reply (or the connection's error) and wakes it.
  static void Finish(Slot* s);

  const std::unique_ptr<Slot[]> slots_;
  Mutex mu_;
  std::deque<Slot*> queued_ ABSL_GUARDED_BY(mu_);  // not yet written
  bool leading_ ABSL_GUARDED_BY(mu_) = false;      // somebody has the lead
  // The leader's only (handed on with the lead).
  testing::RawConnection conn_;
  std::deque<Slot*> in_flight_;  // written, in the order of their replies
  absl::Status broken_;          // the connection's failure, once it fails
};

}  // namespace bench
}  // namespace relock

#endif  // RELOCK_BENCHMARKS_LEADER_FOLLOWER_H_
