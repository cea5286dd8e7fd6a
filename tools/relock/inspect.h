// `relock status`, `relock list` and `relock unlock`: lock (and, for status,
// semaphore) inspection and administration, printed for people (text) or
// programs (--json).

#ifndef RELOCK_TOOLS_RELOCK_INSPECT_H_
#define RELOCK_TOOLS_RELOCK_INSPECT_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "relock/lock_info.h"

namespace relock {
namespace cli {

extern const char kStatusUsage[];
extern const char kListUsage[];
extern const char kUnlockUsage[];

// `args`: what follows the subcommand. Each returns the exit code.
int Status(const std::vector<std::string>& args);
int List(const std::vector<std::string>& args);
int Unlock(const std::vector<std::string>& args);

// `info` as text lines (a header line, then one line per holder).
std::string LockText(const LockInfo& info);
// `info` as a JSON object.
std::string LockJson(const LockInfo& info);
// A semaphore (`info`, not kAbsent) as text lines (a header line, then one
// line per permit out).
std::string SemaphoreText(const SemaphoreInfo& info);
// A semaphore as a JSON object: "state":"semaphore", "type" "semaphore" or
// "permit-expirable", "available", "permits_out", "waiters", "permits".
std::string SemaphoreJson(const SemaphoreInfo& info);
// Whether `s` is well-formed UTF-8.
bool IsUtf8(absl::string_view s);
// `s` as a JSON string literal, quotes included: valid JSON (RFC 8259) for
// any bytes. UTF-8 passes through, control characters, '"' and '\' are
// escaped, and each byte that is not part of well-formed UTF-8 becomes
// U+FFFD ("\ufffd").
std::string JsonString(absl::string_view s);
// `"key":"<JsonString(bytes)>"`, followed by `,"key_base64":"..."` (the
// exact bytes, RFC 4648 base64) when `bytes` is not well-formed UTF-8.
std::string JsonBytesField(absl::string_view key, absl::string_view bytes);

}  // namespace cli
}  // namespace relock

#endif  // RELOCK_TOOLS_RELOCK_INSPECT_H_
