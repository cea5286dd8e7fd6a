#include "lib/lock/owner.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/common/concat.h"
#include "lib/common/random.h"

namespace relock {
namespace lock {

namespace {

// The calling thread's listeners; its destructor runs at thread exit.
class ThreadExitHooks {
 public:
  ~ThreadExitHooks() {
    // The main thread's exit ends the process: Close() (or the leases)
    // handle its holds.
    if (syscall(SYS_gettid) == getpid()) return;
    const uint64_t number = CurrentThreadNumber();
    for (const std::weak_ptr<ThreadExitListener>& weak : listeners_) {
      if (std::shared_ptr<ThreadExitListener> listener = weak.lock()) {
        listener->OnThreadExit(number);
      }
    }
  }
  void Add(const std::weak_ptr<ThreadExitListener>& listener) {
    for (auto it = listeners_.begin(); it != listeners_.end();) {
      if (it->expired()) {
        it = listeners_.erase(it);
      } else if (!it->owner_before(listener) && !listener.owner_before(*it)) {
        return;  // already registered
      } else {
        ++it;
      }
    }
    listeners_.push_back(listener);
  }

 private:
  std::vector<std::weak_ptr<ThreadExitListener>> listeners_;
};

}  // namespace

uint64_t NewOwnerNumber() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

uint64_t CurrentThreadNumber() {
  thread_local const uint64_t number = NewOwnerNumber();
  return number;
}

void NotifyOnThreadExit(const std::weak_ptr<ThreadExitListener>& listener) {
  thread_local ThreadExitHooks hooks;
  hooks.Add(listener);
}

std::string NewClientId() {
  // From the kernel on every call, never from a generator whose state a
  // fork() copies: a parent and its children must never share an id.
  uint64_t hi = OsRandom64();
  uint64_t lo = OsRandom64();
  hi = (hi & ~uint64_t{0xF000}) | uint64_t{0x4000};            // version 4
  lo = (lo & ~(uint64_t{0xC} << 60)) | (uint64_t{0x8} << 60);  // variant 10
  return absl::StrFormat("%08x-%04x-%04x-%04x-%012x", hi >> 32,
                         (hi >> 16) & 0xFFFF, hi & 0xFFFF, lo >> 48,
                         lo & 0xFFFFFFFFFFFFULL);
}

bool IsClientId(absl::string_view id) {
  constexpr absl::string_view kForm = "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";
  if (id.size() != kForm.size()) return false;
  for (size_t i = 0; i < id.size(); ++i) {
    if (kForm[i] == '-' ? id[i] != '-' : !absl::ascii_isxdigit(id[i])) {
      return false;
    }
  }
  return true;
}

OwnerField::OwnerField(absl::string_view client_id, uint64_t number) {
  const bool write = (number & kWriteHoldBit) != 0;
  AppendConcat({client_id, ":", absl::AlphaNum(number & ~kWriteHoldBit).Piece(),
                write ? ":write" : ""},
               &field_);
}

std::array<absl::string_view, 4> PrefixNamePieces(absl::string_view prefix,
                                                  absl::string_view name) {
  if (absl::StrContains(name, '{')) return {prefix, ":", name, ""};
  return {prefix, ":{", name, "}"};
}

std::string PrefixName(absl::string_view prefix, absl::string_view name) {
  const std::array<absl::string_view, 4> p = PrefixNamePieces(prefix, name);
  return Concat({p[0], p[1], p[2], p[3]});
}

std::string UnlockChannel(absl::string_view lock_name) {
  return PrefixName(kUnlockChannelPrefix, lock_name);
}

std::string TokenKey(absl::string_view lock_name) {
  return PrefixName(kTokenKeyPrefix, lock_name);
}

std::string QuoteName(absl::string_view lock_name) {
  constexpr size_t kShown = 100;
  if (lock_name.size() <= kShown) {
    return absl::StrCat("\"", absl::CHexEscape(lock_name), "\"");
  }
  return absl::StrCat("\"", absl::CHexEscape(lock_name.substr(0, kShown)),
                      "...\" (", lock_name.size(), " bytes)");
}

}  // namespace lock
}  // namespace relock
