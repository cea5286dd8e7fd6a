#include "lib/client/event_queue.h"

#include <iostream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/common/contain.h"
#include "lib/common/unshared.h"
#include "lib/lock/owner.h"

namespace relock {
namespace internal {

std::function<void(const LockEvent&)> EventDeliverer(
    std::function<void(const LockEvent&)> callback, LogFn log,
    std::string prefix) {
  if (callback) {
    return [callback = std::move(callback),
            log = std::move(log)](const LockEvent& event) {
      CallContained(log, "the on_lock_event callback", callback, event);
    };
  }
  return [log = std::move(log),
          prefix = std::move(prefix)](const LockEvent& event) {
    log(event.type == LockEventType::kLockLost ? absl::LogSeverity::kError
                                               : absl::LogSeverity::kWarning,
        absl::StrCat(LockEventTypeName(event.type), " ", prefix,
                     lock::QuoteName(event.lock_name), ": ",
                     event.status.ToString()));
  };
}

LogFn Logger(LogFn logger) {
  if (logger) {
    // A logger that throws: the line and the exception go to stderr.
    return [logger = std::move(logger)](absl::LogSeverity severity,
                                        absl::string_view message) {
      try {
        logger(severity, message);
      } catch (...) {
        WriteToStderr(
            absl::StrCat(ThrownLine("the logger"), "; its line: ", message));
      }
    };
  }
  return [](absl::LogSeverity severity, absl::string_view message) {
    if (severity < absl::LogSeverity::kWarning) return;
    // One write per line, so that concurrent lines do not interleave.
    WriteToStderr(message);
  };
}

EventQueue::EventQueue(std::function<void(const LockEvent&)> deliver, LogFn log)
    : state_(std::make_shared<State>(std::move(deliver), std::move(log))) {
  MutexLock lock(&join_mu_);
  thread_ = std::thread([state = state_] { Run(state); });
}

EventQueue::~EventQueue() { Stop(); }

void EventQueue::Post(LockEvent event,
                      std::shared_ptr<watchdog::LossFns> on_lost) {
  Push(Item{std::move(event), true, std::move(on_lost)});
}

void EventQueue::PostToHolder(LockEvent event,
                              std::shared_ptr<watchdog::LossFns> on_lost) {
  Push(Item{std::move(event), false, std::move(on_lost)});
}

void EventQueue::Push(Item item) {
  // The event crosses to the queue's thread; the poster keeps its copy.
  item.event.status = Unshared(item.event.status);
  MutexLock lock(&state_->mu);
  if (state_->stop) return;
  state_->queue.push_back(std::move(item));
}

void EventQueue::Stop() {
  {
    MutexLock lock(&state_->mu);
    state_->stop = true;
  }
  MutexLock lock(&join_mu_);
  if (!thread_.joinable()) return;
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();  // a callback is stopping its own queue
  } else {
    thread_.join();
  }
}

void EventQueue::Run(const std::shared_ptr<State>& state) {
  while (true) {
    Item item;
    {
      MutexLock lock(&state->mu);
      auto ready = [&state]() ABSL_SHARED_LOCKS_REQUIRED(state->mu) {
        return !state->queue.empty() || state->stop;
      };
      state->mu.Await(absl::Condition(&ready));
      if (state->queue.empty()) return;  // stopped and drained
      item = std::move(state->queue.front());
      state->queue.pop_front();
    }
    if (item.deliver) state->deliver(item.event);
    if (item.on_lost != nullptr) {
      for (const watchdog::LossFn& fn : *item.on_lost) {
        CallContained(state->log, "an on_lost callback", fn, item.event.status);
      }
    }
  }
}

}  // namespace internal
}  // namespace relock
