// A client's info record: the hash "relock:client:<client-id>" (see
// lib/lock/inspect.h's ClientInfoKey) with the fields
//
//   host     gethostname()
//   pid      the process id
//   started  when the client connected, unix time in milliseconds
//   version  relock::kVersionString
//
// and a TTL of kTtl, written when the client connects and again every
// kPeriod (HSET + PEXPIRE, pipelined: one round trip; plain commands, so
// that the client's own traffic adds no script calls to what an operator or
// a test counts) on the client's timer thread, and deleted by Stop()
// (Client::Close()). Lock inspection
// (relock::Client::InspectLock, `relock status`) joins a holder's owner field
// "<client-id>:<thread>" to it to say which host and process hold a lock,
// without changing the locks' Redisson data model.
//
// Best effort by design: a write that fails (Redis down, an ACL user that
// may not write the key) is dropped and the next period tries again; it
// never fails Connect() or a lock call, and it never blocks the timer
// thread (the writes are asynchronous). A record outlives a crashed client
// by at most kTtl.

#ifndef RELOCK_LIB_CLIENT_CLIENT_INFO_H_
#define RELOCK_LIB_CLIENT_CLIENT_INFO_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "lib/backend/backend.h"
#include "lib/common/deadline.h"
#include "lib/common/mutex.h"
#include "lib/timer/timer_thread.h"

namespace relock {
namespace internal {

class ClientInfoPublisher {
 public:
  static constexpr absl::Duration kTtl = absl::Seconds(30);
  static constexpr absl::Duration kPeriod = absl::Seconds(10);

  // `backend` and `timers` must outlive Stop(). `started` is when the client
  // connected.
  ClientInfoPublisher(backend::Backend* backend, timer::TimerThread* timers,
                      const std::string& client_id, absl::Time started);
  ClientInfoPublisher(const ClientInfoPublisher&) = delete;
  ClientInfoPublisher& operator=(const ClientInfoPublisher&) = delete;
  ~ClientInfoPublisher();

  // Writes the record now and every kPeriod until Stop().
  void Start();
  // No more writes; deletes the record (one DEL, waiting at most until
  // `deadline`) if a write of it succeeded. Idempotent.
  void Stop(Deadline deadline);

 private:
  // Sends one write (asynchronously) and schedules the next.
  void Publish();

  backend::Backend* const backend_;
  timer::TimerThread* const timers_;
  const std::string key_;
  // The two commands of each write.
  const std::vector<std::vector<std::string>> write_;
  // How the last write went, so that Stop() deletes only a record that may
  // exist (and a client whose Redis is gone does not wait for a DEL at
  // Close()). Shared with the writes in flight, which may complete after
  // this object is gone.
  enum LastWrite : int { kNone, kPending, kWritten, kFailed };
  const std::shared_ptr<std::atomic<int>> last_write_ =
      std::make_shared<std::atomic<int>>(kNone);
  Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  timer::TimerId next_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace internal
}  // namespace relock

#endif  // RELOCK_LIB_CLIENT_CLIENT_INFO_H_
