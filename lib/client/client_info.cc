#include "lib/client/client_info.h"

#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lib/lock/inspect.h"
#include "lib/lock/lock_scripts.h"
#include "relock/relock.h"

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
                                         absl::Time started,
                                         absl::Duration command_timeout)
    : backend_(backend),
      timers_(timers),
      key_(lock::ClientInfoKey(client_id)),
      command_timeout_(command_timeout),
      args_{absl::StrCat(absl::ToInt64Milliseconds(kTtl)),
            "host",
            HostName(),
            "pid",
            absl::StrCat(getpid()),
            "started",
            absl::StrCat(absl::ToUnixMillis(started)),
            "version",
            kVersionString} {}

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
  const absl::string_view keys[] = {key_};
  std::vector<absl::string_view> args(args_.begin(), args_.end());
  backend_->RunAsync(
      internal::kClientInfoScript, keys, args,
      Deadline::After(command_timeout_), backend::Resend::kIfDropped, nullptr,
      [written = written_](const std::vector<backend::Answer>& answers) {
        for (const backend::Answer& a : answers) {
          if (a.reply.ok() && !a.reply->is_error()) written->store(true);
        }
      });
}

void ClientInfoPublisher::Stop(Deadline deadline) {
  {
    MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    if (next_ != 0) timers_->Cancel(next_);
  }
  if (!written_->load()) return;
  const absl::string_view argv[] = {"DEL", key_};
  // Best effort: a record left behind ends with its TTL.
  (void)backend_->CommandForKey(key_, argv, deadline);
}

}  // namespace internal
}  // namespace relock
