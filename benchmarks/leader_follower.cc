#include "benchmarks/leader_follower.h"

#include <hiredis/hiredis.h>

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/common/deadline.h"

namespace relock {
namespace bench {

LeaderFollowerConnection::LeaderFollowerConnection(testing::RawConnection conn,
                                                   int threads)
    : slots_(new Slot[threads]), conn_(std::move(conn)) {}

absl::StatusOr<testing::RawReply> LeaderFollowerConnection::Call(
    int thread, const std::string& wire) {
  Slot* me = &slots_[thread];
  me->wire = &wire;
  me->reply = nullptr;
  me->status = absl::OkStatus();
  me->state.store(Slot::kWaiting, std::memory_order_relaxed);
  bool lead = false;
  {
    MutexLock l(&mu_);
    queued_.push_back(me);
    if (!leading_) lead = leading_ = true;
  }
  if (!lead) {
    int state = Slot::kWaiting;
    for (;;) {
      const uint32_t key = me->events.Prepare();
      state = me->state.load(std::memory_order_acquire);
      if (state != Slot::kWaiting) break;
      me->events.Wait(key, Deadline::Never());
    }
    lead = state == Slot::kLead;
  }
  if (lead) Lead(me);
  if (!me->status.ok()) return me->status;
  return std::move(me->reply);
}

void LeaderFollowerConnection::WriteQueued() {
  redisContext* c = conn_.get();
  {
    MutexLock l(&mu_);
    if (queued_.empty()) return;
    for (Slot* s : queued_) {
      if (broken_.ok() &&
          redisAppendFormattedCommand(c, s->wire->data(), s->wire->size()) !=
              REDIS_OK) {
        broken_ = absl::ResourceExhaustedError("redisAppendFormattedCommand");
      }
      in_flight_.push_back(s);
    }
    queued_.clear();
  }
  int written = 0;
  while (broken_.ok() && written == 0) {
    if (redisBufferWrite(c, &written) != REDIS_OK) {
      broken_ = absl::UnavailableError(absl::StrCat("write: ", c->errstr));
    }
  }
}

void LeaderFollowerConnection::Lead(Slot* me) {
  redisContext* c = conn_.get();
  // Everything queued goes out in one write (this thread's own request, if
  // an earlier leader did not write it); then the replies in order, up to
  // and including this thread's own. What is queued meanwhile waits for the
  // next leader (see the header).
  WriteQueued();
  for (;;) {
    Slot* s = in_flight_.front();
    in_flight_.pop_front();
    void* raw = nullptr;
    if (broken_.ok() && redisGetReply(c, &raw) != REDIS_OK) {
      broken_ = absl::UnavailableError(absl::StrCat("read: ", c->errstr));
    }
    if (broken_.ok()) {
      s->reply = testing::RawReply(static_cast<redisReply*>(raw));
    } else {
      s->status = broken_;
    }
    if (s == me) break;
    Finish(s);
  }
  // Hand the lead on to the oldest request still in flight (its reply is
  // next) or queued, if any.
  MutexLock l(&mu_);
  Slot* next = !in_flight_.empty() ? in_flight_.front()
               : !queued_.empty()  ? queued_.front()
                                   : nullptr;
  if (next == nullptr) {
    leading_ = false;
    return;
  }
  next->state.store(Slot::kLead, std::memory_order_release);
  next->events.Notify();
}

void LeaderFollowerConnection::Finish(Slot* s) {
  s->state.store(Slot::kDone, std::memory_order_release);
  s->events.Notify();
}

}  // namespace bench
}  // namespace relock
