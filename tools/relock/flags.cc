#include "tools/relock/flags.h"

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace relock {
namespace cli {

const std::vector<OptionSpec>& ConnectionOptions() {
  static const std::vector<OptionSpec>* const kOptions =
      new std::vector<OptionSpec>{{"url", true},
                                  {"tls-ca", true},
                                  {"tls-cert", true},
                                  {"tls-key", true}};
  return *kOptions;
}

absl::StatusOr<ParsedArgs> ParseArgs(const std::vector<std::string>& args,
                                     const std::vector<OptionSpec>& spec,
                                     bool stop_at_positional) {
  auto find = [&](absl::string_view name) -> const OptionSpec* {
    for (const std::vector<OptionSpec>* list : {&spec, &ConnectionOptions()}) {
      for (const OptionSpec& o : *list) {
        if (o.name == name) return &o;
      }
    }
    return nullptr;
  };
  ParsedArgs parsed;
  // With `stop_at_positional`: the first positional argument (at `at`) ends
  // the options; a "--" right after it separates it from the rest.
  auto take_rest_after = [&](size_t at) {
    parsed.positional.push_back(args[at]);
    size_t next = at + 1;
    if (next < args.size() && args[next] == "--") ++next;
    parsed.rest.assign(args.begin() + static_cast<ptrdiff_t>(next), args.end());
  };
  size_t i = 0;
  for (; i < args.size(); ++i) {
    absl::string_view arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (!absl::StartsWith(arg, "-") || arg == "-") {
      if (stop_at_positional) {
        take_rest_after(i);
        return parsed;
      }
      parsed.positional.push_back(args[i]);
      continue;
    }
    absl::string_view name = arg;
    if (!absl::ConsumePrefix(&name, "--")) absl::ConsumePrefix(&name, "-");
    absl::string_view value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != absl::string_view::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const OptionSpec* option = find(name);
    if (option == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", arg));
    }
    if (option->takes_value && !inline_value) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("flag --", name, " needs a value"));
      }
      value = args[++i];
    } else if (!option->takes_value && inline_value) {
      return absl::InvalidArgumentError(
          absl::StrCat("flag --", name, " takes no value"));
    }
    parsed.options[std::string(name)] = std::string(value);
  }
  // After "--": positional arguments only (a name may start with "-").
  if (stop_at_positional && i < args.size()) {
    take_rest_after(i);
    return parsed;
  }
  for (; i < args.size(); ++i) parsed.positional.push_back(args[i]);
  return parsed;
}

absl::StatusOr<absl::Duration> ParseDurationFlag(absl::string_view flag,
                                                 absl::string_view value,
                                                 bool zero_ok) {
  absl::Duration d;
  if (!absl::ParseDuration(value, &d)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": bad duration \"", value,
                     "\" (examples: 500ms, 10s, 2m, 1h)"));
  }
  if (d < absl::ZeroDuration() || (d == absl::ZeroDuration() && !zero_ok)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, ": the duration must be ", zero_ok ? "" : "more than ",
        zero_ok ? "0 or more" : "0", ", not \"", value, "\""));
  }
  return d;
}

ClientOptions ClientOptionsFrom(const ParsedArgs& args) {
  ClientOptions options;
  if (args.has("url")) {
    options.url = args.options.at("url");
  } else if (const char* env =
                 // Read in main(), before the client starts any thread.
             std::getenv("RELOCK_URL");  // NOLINT(concurrency-mt-unsafe)
             env != nullptr && *env != '\0') {
    options.url = env;
  }
  if (args.has("tls-ca")) options.tls.ca_file = args.options.at("tls-ca");
  if (args.has("tls-cert")) options.tls.cert_file = args.options.at("tls-cert");
  if (args.has("tls-key")) options.tls.key_file = args.options.at("tls-key");
  return options;
}

std::unique_ptr<Client> ConnectOrReport(ClientOptions options, int* exit_code) {
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Connect(std::move(options));
  if (client.ok()) return *std::move(client);
  *exit_code =
      Fail(ExitCodeFor(client.status()),
           absl::StrCat("cannot connect: ", client.status().message()));
  return nullptr;
}

int Fail(int code, absl::string_view message) {
  // One line, whatever the message holds.
  std::string line(message);
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  // In one write (std::cerr is unbuffered: each << would be a write of its
  // own), so that a reader, or another process writing to the same stderr,
  // never sees half a line.
  std::cerr << absl::StrCat("relock: ", line, "\n") << std::flush;
  return code;
}

std::string ErrnoText(int error) {
  char buffer[256];
  // GNU strerror_r: returns the message (maybe a static one, not `buffer`).
  return strerror_r(error, buffer, sizeof(buffer));
}

int ExitCodeFor(const absl::Status& status) {
  return status.code() == absl::StatusCode::kInvalidArgument ? kExitUsage
                                                             : kExitUnavailable;
}

}  // namespace cli
}  // namespace relock
