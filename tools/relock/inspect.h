// `relock status`, `relock list` and `relock unlock`: lock inspection and
// administration, printed for people (text) or programs (--json).

#ifndef RELOCK_TOOLS_RELOCK_INSPECT_H_
#define RELOCK_TOOLS_RELOCK_INSPECT_H_

#include <string>
#include <vector>

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
// `s` as a JSON string literal, quotes included.
std::string JsonString(const std::string& s);

}  // namespace cli
}  // namespace relock

#endif  // RELOCK_TOOLS_RELOCK_INSPECT_H_
