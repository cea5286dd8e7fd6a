// relock: the command-line tool for operators (README "Operators"). Talks to
// Redis only through the relock library.
//
//   relock run [flags] NAME -- CMD [ARGS...]   a distributed flock(1)
//   relock status [--json] NAME...             who holds a lock (a semaphore)
//   relock list [--json] [PATTERN]             the locks that exist
//   relock unlock --force [--yes] NAME         force-release a lock

#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "relock/relock.h"
#include "tools/relock/flags.h"
#include "tools/relock/inspect.h"
#include "tools/relock/run.h"

namespace relock {
namespace cli {
namespace {

constexpr char kUsage[] =
    R"(usage: relock [--url URL] [--tls-ca FILE] [--tls-cert FILE] [--tls-key FILE]
              COMMAND [flags] [args]

Distributed locks on Redis (Redisson-compatible), for operators and scripts.

commands:
  run [flags] NAME -- CMD [ARGS...]   run CMD while holding the lock NAME
                                      (--permits N: one of N permits)
  status [--json] NAME...             show who holds each lock (semaphore)
  list [--json] [PATTERN]             list the locks that exist
  unlock --force [--yes] NAME         free a lock whoever holds it

  relock COMMAND --help               the command's flags
  relock --version                    the version

where Redis is (before or after COMMAND):
  --url URL         redis://[[user]:password@]host[:port][/db]
                    rediss://... (TLS), unix:///path/to/redis.sock[?db=N],
                    redis-cluster://h1:p1,h2:p2, redis-sentinel://s1,s2/db#name
                    default: $RELOCK_URL, else redis://127.0.0.1:6379
  --tls-ca FILE     CA certificates (PEM) for a rediss:// URL
  --tls-cert FILE   client certificate (PEM), with --tls-key
  --tls-key FILE    its private key

exit codes:
  0        success (run: CMD exited 0)
  N        run: CMD's own exit status
  128+N    run: CMD was killed by signal N (or relock, waiting, by signal N)
  1        status: a NAME is neither a lock nor a semaphore; unlock:
           declined, or not a lock; run: NAME holds something else (not
           a lock of this type, or not a permit count)
  2        usage error: unknown flag, bad duration or URL, missing NAME/CMD;
           run --permits N: the semaphore has another total than N
  69       Redis unreachable, refused us, or answered with an error
  75       lock busy (no permit free): --nonblock, or --wait ran out
  76       run: the lock (permit) was lost while CMD ran
  126      run: CMD could not be executed
  127      run: CMD not found
)";

int Main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  // Connection flags before the command go to the command.
  std::vector<std::string> connection;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h" || arg == "help") {
      std::cout << kUsage;
      return kExitOk;
    }
    if (arg == "--version") {
      std::cout << "relock " << kVersionString << std::endl;
      return kExitOk;
    }
    if (!absl::StartsWith(arg, "-")) break;
    bool known = false;
    for (const OptionSpec& o : ConnectionOptions()) {
      if (arg == "--" + o.name) {
        if (i + 1 >= args.size()) {
          return Fail(kExitUsage, absl::StrCat("flag ", arg, " needs a value"));
        }
        connection.push_back(arg);
        connection.push_back(args[++i]);
        known = true;
      } else if (absl::StartsWith(arg, "--" + o.name + "=")) {
        connection.push_back(arg);
        known = true;
      }
    }
    if (!known) {
      return Fail(kExitUsage,
                  absl::StrCat("unknown flag ", arg, " (see relock --help)"));
    }
  }
  if (i >= args.size()) {
    return Fail(
        kExitUsage,
        "missing COMMAND: run, status, list or unlock (see relock --help)");
  }
  const std::string command = args[i];
  std::vector<std::string> rest = connection;
  rest.insert(rest.end(), args.begin() + static_cast<ptrdiff_t>(i) + 1,
              args.end());
  if (command == "run") return Run(rest);
  if (command == "status") return Status(rest);
  if (command == "list") return List(rest);
  if (command == "unlock") return Unlock(rest);
  return Fail(
      kExitUsage,
      absl::StrCat("unknown command \"", command,
                   "\": run, status, list or unlock (see relock --help)"));
}

}  // namespace
}  // namespace cli
}  // namespace relock

int main(int argc, char** argv) { return relock::cli::Main(argc, argv); }
