// The relock command's flags: the options every subcommand takes (where Redis
// is), the parsing of a subcommand's options, durations, and the exit codes.

#ifndef RELOCK_TOOLS_RELOCK_FLAGS_H_
#define RELOCK_TOOLS_RELOCK_FLAGS_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "relock/client.h"
#include "relock/options.h"

namespace relock {
namespace cli {

// Exit codes (README "Operators", `relock --help`). `relock run` otherwise
// exits with the command's own status, or 128 + N when a signal N killed it.
enum ExitCode : int {
  kExitOk = 0,
  // status: a NAME is neither a lock nor a semaphore; unlock: declined at
  // the prompt, or the key is not a lock.
  kExitFailure = 1,
  // Unknown flag, bad duration or URL, missing NAME or CMD; run --permits N
  // on a semaphore whose total is not N: one line on stderr.
  kExitUsage = 2,
  // Redis unreachable, refused us, or answered with an error (EX_UNAVAILABLE).
  kExitUnavailable = 69,
  // The lock is busy (run --permits: no permit is free): --nonblock found it
  // held, or --wait ran out (EX_TEMPFAIL).
  kExitBusy = 75,
  // The lock (run --permits: the permit) was lost while CMD ran.
  kExitLost = 76,
  // CMD could not be executed / was not found (as env(1), timeout(1)).
  kExitCannotExecute = 126,
  kExitNotFound = 127,
};

// One option a subcommand accepts: "--name VALUE", "--name=VALUE", or a
// switch "--name".
struct OptionSpec {
  std::string name;  // without the dashes
  bool takes_value = false;
};

// The options every subcommand takes: where Redis is.
const std::vector<OptionSpec>& ConnectionOptions();

struct ParsedArgs {
  // Options given (the last value of each); switches map to "".
  std::map<std::string, std::string> options;
  // Arguments that are not options, in order.
  std::vector<std::string> positional;
  // With `stop_at_positional`: everything after the first positional
  // argument (and a "--" right after it).
  std::vector<std::string> rest;

  bool has(const std::string& name) const { return options.count(name) > 0; }
};

// Parses `args` (after the subcommand) against `spec` plus
// ConnectionOptions(). "--" ends the options. With `stop_at_positional`, the
// first positional argument ends them too, and one "--" right after it is
// dropped: `relock run NAME -- CMD...`, and `relock run -- -NAME -- CMD...`
// for a NAME that starts with "-".
// InvalidArgument naming the flag for an unknown one or a missing value.
absl::StatusOr<ParsedArgs> ParseArgs(const std::vector<std::string>& args,
                                     const std::vector<OptionSpec>& spec,
                                     bool stop_at_positional);

// Parses a duration flag ("500ms", "10s", "2m", "1h", "inf"):
// InvalidArgument for anything else, and for a negative one (or zero
// unless `zero_ok`).
absl::StatusOr<absl::Duration> ParseDurationFlag(absl::string_view flag,
                                                 absl::string_view value,
                                                 bool zero_ok);

// The client options from --url (else $RELOCK_URL, else
// redis://127.0.0.1:6379) and the --tls-* files.
ClientOptions ClientOptionsFrom(const ParsedArgs& args);

// Connects; on failure prints one line and sets `*exit_code`: kExitUsage for
// options the library refuses (a bad URL), kExitUnavailable otherwise.
std::unique_ptr<Client> ConnectOrReport(ClientOptions options, int* exit_code);

// Prints "relock: <message>" on stderr (one line) and returns `code`.
int Fail(int code, absl::string_view message);
// strerror(`error`), thread-safe.
std::string ErrnoText(int error);
// The exit code for a library error: kExitUsage for InvalidArgument,
// kExitUnavailable for the rest.
int ExitCodeFor(const absl::Status& status);

}  // namespace cli
}  // namespace relock

#endif  // RELOCK_TOOLS_RELOCK_FLAGS_H_
