// `relock run`: runs a command while holding a lock (a distributed flock(1)).

#ifndef RELOCK_TOOLS_RELOCK_RUN_H_
#define RELOCK_TOOLS_RELOCK_RUN_H_

#include <string>
#include <vector>

namespace relock {
namespace cli {

extern const char kRunUsage[];

// `args`: what follows "run". Returns the exit code (tools/relock/flags.h).
int Run(const std::vector<std::string>& args);

}  // namespace cli
}  // namespace relock

#endif  // RELOCK_TOOLS_RELOCK_RUN_H_
