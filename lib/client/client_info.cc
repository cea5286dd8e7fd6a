#include "lib/client/client_info.h"

#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lib/lock/inspect.h"
#include "relock/version.h"

namespace relock {
namespace internal {
namespace {

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

}  // namespace

ClientInfoPublisher::ClientInfoPublisher(backend::Backend* backend,
                                         timer::TimerThread* timers,
                                         const std::string& client_id,
                                         absl::Time started)
    : backend_(backend),
      timers_(timers),
      key_(lock::ClientInfoKey(client_id)),
      write_{{"HSET", key_, "host", HostName(), "pid", absl::StrCat(getpid()),
              "started", absl::StrCat(absl::ToUnixMillis(started)), "version",
              kVersionString},
             {"PEXPIRE", key_, absl::StrCat(absl::ToInt64Milliseconds(kTtl))}} {
}

ClientInfoPublisher::~ClientInfoPublisher() {
  MutexLock lock(&mu_);
  stopped_ = true;
  if (next_ != 0) timers_->Cancel(next_);
}

void ClientInfoPublisher::Start() { Publish(); }

void ClientInfoPublisher::Publish() {
  {
    MutexLock lock(&mu_);
    if (stopped_) return;
    next_ = timers_->ScheduleAfter(kPeriod, [this] { Publish(); });
  }
  last_write_->store(kPending);
  backend_->SendForKey(key_, write_,
                       [last = last_write_](const absl::Status& status) {
                         last->store(status.ok() ? kWritten : kFailed);
                       });
}

void ClientInfoPublisher::Stop(Deadline deadline) {
  {
    MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    if (next_ != 0) timers_->Cancel(next_);
  }
  // A record that may exist (written, or a write in flight on the
  // connection the DEL follows); none when Redis refused or was gone.
  const int last = last_write_->load();
  if (last != kPending && last != kWritten) return;
  const absl::string_view argv[] = {"DEL", key_};
  // Best effort: a record left behind ends with its TTL.
  (void)backend_->CommandForKey(key_, argv, deadline);
}

}  // namespace internal
}  // namespace relock
