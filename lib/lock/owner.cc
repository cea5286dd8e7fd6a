#include "lib/lock/owner.h"

#include <atomic>
#include <cstdint>

#include "absl/random/random.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace relock {
namespace lock {

uint64_t CurrentThreadNumber() {
  static std::atomic<uint64_t> next{1};
  thread_local const uint64_t number =
      next.fetch_add(1, std::memory_order_relaxed);
  return number;
}

std::string NewClientId() {
  absl::BitGen gen;
  uint64_t hi = absl::Uniform<uint64_t>(gen);
  uint64_t lo = absl::Uniform<uint64_t>(gen);
  hi = (hi & ~uint64_t{0xF000}) | uint64_t{0x4000};            // version 4
  lo = (lo & ~(uint64_t{0xC} << 60)) | (uint64_t{0x8} << 60);  // variant 10
  return absl::StrFormat("%08x-%04x-%04x-%04x-%012x", hi >> 32,
                         (hi >> 16) & 0xFFFF, hi & 0xFFFF, lo >> 48,
                         lo & 0xFFFFFFFFFFFFULL);
}

std::string OwnerField(absl::string_view client_id, uint64_t thread_number) {
  return absl::StrCat(client_id, ":", thread_number);
}

std::string UnlockChannel(absl::string_view lock_name) {
  return absl::StrCat("redisson_lock__channel:{", lock_name, "}");
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
