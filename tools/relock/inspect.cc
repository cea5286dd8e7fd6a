#include "tools/relock/inspect.h"

#include <unistd.h>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "relock/client.h"
#include "tools/relock/flags.h"

namespace relock {
namespace cli {

const char kStatusUsage[] =
    R"(usage: relock status [--json] NAME...

Shows each lock (or semaphore) NAME: free or held; its type (lock: plain,
fenced or fair; read-write, with its mode); each holder's owner field, hold
count (and read or write), and where the holder is a relock client, its host,
process id and start time; the remaining lease; the waiters (subscribers of
the lock's channel); the fair lock's queue length.

A NAME that holds a semaphore's count (a string holding an integer) is shown
as a semaphore: a Semaphore's available permits, and for a permit-expirable
semaphore (its "{NAME}:timeout" sorted set exists: permits are out) also
each permit out, its id and its lease end (on the Redis server's clock;
"expired" for one whose lease is over but that no call has given back yet),
soonest first, at most 1000; and the waiters (clients subscribed to its
channel). A permit-expirable semaphore with no permit out looks like a plain
one: Redisson's data model cannot tell them apart.

flags:
  --json    one JSON array with an object per NAME
  --url URL, --tls-ca FILE, --tls-cert FILE, --tls-key FILE

JSON: strings are UTF-8; a byte of a name, owner or client id that is not
part of well-formed UTF-8 shows as U+FFFD, and the object then also has
name_base64 (owner_base64, client_id_base64): the exact bytes in base64.

Exit: 0 when every NAME was shown (held or free, or a semaphore); 1 when a
NAME holds something that is neither a lock nor a semaphore (a line on stderr
says so; the others are still shown); 2 for a NAME no lock can have (empty,
or longer than the library allows; nothing is shown); 69 when Redis cannot be
asked.
)";

const char kListUsage[] =
    R"(usage: relock list [--json] [PATTERN]

Lists the locks that exist (held now) whose names match the glob PATTERN
(default "*"; SCAN MATCH syntax, e.g. "order:*"), on every master of a
cluster, with the same fields as relock status. Hashes that are not locks are
left out. Meant for a person looking: it scans the whole keyspace.

flags:
  --json    one JSON array with an object per lock (strings as for relock
            status --json: see relock status --help)
  --url URL, --tls-ca FILE, --tls-cert FILE, --tls-key FILE

Exit: 0, or 69 when Redis cannot be asked.
)";

const char kUnlockUsage[] =
    R"(usage: relock unlock --force [--yes] NAME

Frees the lock NAME whoever holds it, and tells its waiters (the unlock
message), so that the next one takes it. The holder is not told: it learns
that it lost the lock when its renewal or release fails. For recovery, when a
holder is known to be gone.

A read-write lock is freed in the mode it is in; a fair lock wakes the head
of its queue.

flags:
  --force   required: without it, nothing is done (exit 2)
  --yes     do not ask; without it relock asks on the terminal, and refuses
            (exit 2) when stdin is not a terminal
  --url URL, --tls-ca FILE, --tls-cert FILE, --tls-key FILE

Exit: 0 released or already free (the output says which); 1 declined at the
prompt, or NAME is not a lock; 2 usage; 69 when Redis cannot be asked.
)";

namespace {

std::string LeaseText(absl::Duration lease) {
  if (lease == absl::InfiniteDuration()) return "no TTL";
  return absl::FormatDuration(absl::Trunc(lease, absl::Milliseconds(1)));
}

std::string TimeText(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

std::string Kind(const LockInfo& info) {
  if (info.shape == LockShape::kReadWriteLock) {
    return absl::StrCat("read-write, ", info.mode, " mode");
  }
  return info.queue_length > 0 ? "fair lock" : "lock";
}

std::string HolderText(const LockHolder& h, const LockInfo& info) {
  std::string line =
      absl::StrCat("  holder ", h.owner, "  count ", h.hold_count);
  if (info.shape == LockShape::kReadWriteLock) {
    absl::StrAppend(&line, h.write ? "  (write)" : "  (read)");
  }
  if (h.client.has_value()) {
    absl::StrAppend(&line, "  host ", h.client->host, "  pid ", h.client->pid);
    if (h.client->started != absl::InfinitePast()) {
      absl::StrAppend(&line, "  started ", TimeText(h.client->started));
    }
  } else {
    absl::StrAppend(&line, "  (no client record)");
  }
  return line;
}

// "owner (host h, pid p)" for each holder, for messages.
std::string Holders(const LockInfo& info) {
  std::vector<std::string> parts;
  for (const LockHolder& h : info.holders) {
    std::string part = h.owner;
    if (h.client.has_value()) {
      absl::StrAppend(&part, " (host ", h.client->host, ", pid ", h.client->pid,
                      ")");
    }
    parts.push_back(std::move(part));
  }
  return absl::StrJoin(parts, ", ");
}

// A client that only reads (and force-releases): no info record of its own.
std::unique_ptr<Client> InspectionClient(const ParsedArgs& args,
                                         int* exit_code) {
  ClientOptions options = ClientOptionsFrom(args);
  options.publish_client_info = false;
  return ConnectOrReport(std::move(options), exit_code);
}

// Parses a subcommand's flags (and --help). Returns nullopt when the
// command is done: `*exit_code` is then kExitUsage after a one-line message,
// or kExitOk after printing `usage` for --help.
absl::optional<ParsedArgs> ParseCommand(const std::vector<std::string>& raw,
                                        std::vector<OptionSpec> spec,
                                        absl::string_view command,
                                        const char* usage, int* exit_code) {
  spec.push_back({"help", false});
  absl::StatusOr<ParsedArgs> args = ParseArgs(raw, spec, false);
  if (!args.ok()) {
    *exit_code =
        Fail(kExitUsage, absl::StrCat(command, ": ", args.status().message(),
                                      " (see relock ", command, " --help)"));
    return absl::nullopt;
  }
  if (args->has("help")) {
    std::cout << usage;
    *exit_code = kExitOk;
    return absl::nullopt;
  }
  return *std::move(args);
}

// What status or list shows of one NAME, in both forms.
struct Shown {
  std::string text;
  std::string json;
};

Shown ShowLock(const LockInfo& info) {
  return {LockText(info), LockJson(info)};
}

void Print(const std::vector<Shown>& shown, bool json) {
  if (json) {
    std::vector<std::string> objects;
    objects.reserve(shown.size());
    for (const Shown& s : shown) objects.push_back(s.json);
    std::cout << "[" << absl::StrJoin(objects, ",\n ") << "]\n";
  } else {
    for (const Shown& s : shown) std::cout << s.text;
  }
  std::cout.flush();
}

}  // namespace

namespace {

// The length of the well-formed UTF-8 sequence at the start of `s` (RFC 3629:
// no overlong forms, no surrogates, nothing above U+10FFFF), or 0.
size_t Utf8SequenceLength(absl::string_view s) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const auto continuation = [&](size_t i, unsigned char lo = 0x80,
                                unsigned char hi = 0xBF) {
    return i < s.size() && byte(i) >= lo && byte(i) <= hi;
  };
  const unsigned char c = byte(0);
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return continuation(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    const unsigned char lo = c == 0xE0 ? 0xA0 : 0x80;  // overlong
    const unsigned char hi = c == 0xED ? 0x9F : 0xBF;  // surrogates
    return continuation(1, lo, hi) && continuation(2) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    const unsigned char lo = c == 0xF0 ? 0x90 : 0x80;  // overlong
    const unsigned char hi = c == 0xF4 ? 0x8F : 0xBF;  // above U+10FFFF
    return continuation(1, lo, hi) && continuation(2) && continuation(3) ? 4
                                                                         : 0;
  }
  return 0;
}

}  // namespace

bool IsUtf8(absl::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = Utf8SequenceLength(s.substr(i));
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    const size_t n = Utf8SequenceLength(s.substr(i));
    if (n == 0) {
      out += "\\ufffd";  // a byte that is not UTF-8
      ++i;
      continue;
    }
    if (n > 1) {
      out.append(s.data() + i, n);
      i += n;
      continue;
    }
    const unsigned char c = static_cast<unsigned char>(s[i++]);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string JsonBytesField(absl::string_view key, absl::string_view bytes) {
  std::string out = absl::StrCat("\"", key, "\":", JsonString(bytes));
  if (!IsUtf8(bytes)) {
    absl::StrAppend(&out, ",\"", key, "_base64\":\"", absl::Base64Escape(bytes),
                    "\"");
  }
  return out;
}

std::string LockText(const LockInfo& info) {
  if (info.shape == LockShape::kFree) {
    return absl::StrCat(info.name, ": free, waiters ", info.waiters,
                        info.queue_length > 0
                            ? absl::StrCat(", queue ", info.queue_length)
                            : "",
                        "\n");
  }
  std::string text =
      absl::StrCat(info.name, ": held (", Kind(info), "), lease ",
                   LeaseText(info.remaining_lease), ", waiters ", info.waiters);
  if (info.queue_length > 0)
    absl::StrAppend(&text, ", queue ", info.queue_length);
  text += "\n";
  for (const LockHolder& h : info.holders) {
    absl::StrAppend(&text, HolderText(h, info), "\n");
  }
  return text;
}

std::string LockJson(const LockInfo& info) {
  const bool free = info.shape == LockShape::kFree;
  std::vector<std::string> holders;
  for (const LockHolder& h : info.holders) {
    std::string o = absl::StrCat("{", JsonBytesField("owner", h.owner), ",",
                                 JsonBytesField("client_id", h.client_id),
                                 ",\"hold_count\":", h.hold_count,
                                 ",\"write\":", h.write ? "true" : "false");
    if (h.client.has_value()) {
      const bool started = h.client->started != absl::InfinitePast();
      absl::StrAppend(
          &o, ",\"host\":", JsonString(h.client->host),
          ",\"pid\":", h.client->pid, ",\"client_started\":",
          started ? JsonString(TimeText(h.client->started)) : "null",
          ",\"client_started_ms\":",
          started ? absl::StrCat(absl::ToUnixMillis(h.client->started))
                  : "null",
          ",\"version\":", JsonString(h.client->version));
    } else {
      absl::StrAppend(&o,
                      ",\"host\":null,\"pid\":null,\"client_started\":null,"
                      "\"client_started_ms\":null,\"version\":null");
    }
    holders.push_back(o + "}");
  }
  return absl::StrCat(
      "{", JsonBytesField("name", info.name),
      ",\"state\":", free ? "\"free\"" : "\"held\"",
      ",\"type\":", free ? "null" : JsonString(LockShapeName(info.shape)),
      ",\"mode\":", info.mode.empty() ? "null" : JsonString(info.mode),
      ",\"remaining_lease_ms\":",
      info.remaining_lease == absl::InfiniteDuration()
          ? "null"
          : absl::StrCat(absl::ToInt64Milliseconds(info.remaining_lease)),
      ",\"waiters\":", info.waiters, ",\"queue_length\":", info.queue_length,
      ",\"holders\":[", absl::StrJoin(holders, ","), "]}");
}

std::string SemaphoreText(const SemaphoreInfo& info) {
  const bool expirable = info.shape == SemaphoreShape::kPermitExpirable;
  std::string text = absl::StrCat(
      info.name, ": ", expirable ? "permit-expirable semaphore" : "semaphore",
      ", available ", info.available);
  if (expirable) absl::StrAppend(&text, ", out ", info.permits_out);
  absl::StrAppend(&text, ", waiters ", info.waiters, "\n");
  for (const PermitInfo& p : info.permits) {
    absl::StrAppend(&text, "  permit ", p.id, "  ");
    if (p.lease_end == absl::InfiniteFuture()) {
      absl::StrAppend(&text, "no lease\n");
    } else if (p.remaining_lease <= absl::ZeroDuration()) {
      absl::StrAppend(&text, "expired ", LeaseText(-p.remaining_lease),
                      " ago (not given back yet)\n");
    } else {
      absl::StrAppend(&text, "lease ", LeaseText(p.remaining_lease), "  ends ",
                      TimeText(p.lease_end), "\n");
    }
  }
  const int64_t unlisted =
      info.permits_out - static_cast<int64_t>(info.permits.size());
  if (unlisted > 0) {
    absl::StrAppend(&text, "  (", unlisted, " more permits out)\n");
  }
  return text;
}

std::string SemaphoreJson(const SemaphoreInfo& info) {
  std::vector<std::string> permits;
  permits.reserve(info.permits.size());
  for (const PermitInfo& p : info.permits) {
    const bool leased = p.lease_end != absl::InfiniteFuture();
    permits.push_back(absl::StrCat(
        "{\"id\":", JsonString(p.id),
        ",\"lease_end\":", leased ? JsonString(TimeText(p.lease_end)) : "null",
        ",\"lease_end_ms\":",
        leased ? absl::StrCat(absl::ToUnixMillis(p.lease_end)) : "null",
        ",\"remaining_lease_ms\":",
        leased ? absl::StrCat(absl::ToInt64Milliseconds(p.remaining_lease))
               : "null",
        "}"));
  }
  return absl::StrCat(
      "{", JsonBytesField("name", info.name), ",\"state\":\"semaphore\"",
      ",\"type\":", JsonString(SemaphoreShapeName(info.shape)),
      ",\"available\":", info.available, ",\"permits_out\":", info.permits_out,
      ",\"waiters\":", info.waiters, ",\"permits\":[",
      absl::StrJoin(permits, ","), "]}");
}

int Status(const std::vector<std::string>& raw) {
  int exit_code = kExitOk;
  absl::optional<ParsedArgs> args =
      ParseCommand(raw, {{"json", false}}, "status", kStatusUsage, &exit_code);
  if (!args.has_value()) return exit_code;
  if (args->positional.empty()) {
    return Fail(kExitUsage,
                "status: missing NAME (relock status [--json] NAME...)");
  }
  std::unique_ptr<Client> client = InspectionClient(*args, &exit_code);
  if (client == nullptr) return exit_code;
  std::vector<Shown> shown;
  for (const std::string& name : args->positional) {
    absl::StatusOr<LockInfo> info = client->InspectLock(name);
    if (info.ok()) {
      shown.push_back(ShowLock(*info));
    } else if (info.status().code() == absl::StatusCode::kInvalidArgument) {
      // A NAME no lock can have (empty, too long): bad input, nothing shown.
      return Fail(kExitUsage, info.status().message());
    } else if (info.status().code() == absl::StatusCode::kFailedPrecondition) {
      // Not a lock: a semaphore, or neither (the lock's message says what
      // the key holds).
      absl::StatusOr<SemaphoreInfo> sem = client->InspectSemaphore(name);
      if (sem.ok() && sem->shape != SemaphoreShape::kAbsent) {
        shown.push_back({SemaphoreText(*sem), SemaphoreJson(*sem)});
      } else if (sem.ok() ||
                 sem.status().code() == absl::StatusCode::kFailedPrecondition) {
        exit_code = Fail(kExitFailure, info.status().message());
      } else {
        return Fail(ExitCodeFor(sem.status()), sem.status().message());
      }
    } else {
      return Fail(kExitUnavailable, info.status().message());
    }
  }
  Print(shown, args->has("json"));
  return exit_code;
}

int List(const std::vector<std::string>& raw) {
  int exit_code = kExitOk;
  absl::optional<ParsedArgs> args =
      ParseCommand(raw, {{"json", false}}, "list", kListUsage, &exit_code);
  if (!args.has_value()) return exit_code;
  if (args->positional.size() > 1) {
    return Fail(kExitUsage,
                "list: one PATTERN at most (relock list [--json] [PATTERN])");
  }
  const std::string pattern =
      args->positional.empty() ? "*" : args->positional[0];
  std::unique_ptr<Client> client = InspectionClient(*args, &exit_code);
  if (client == nullptr) return exit_code;
  absl::StatusOr<std::vector<LockInfo>> locks = client->ListLocks(pattern);
  if (!locks.ok())
    return Fail(ExitCodeFor(locks.status()), locks.status().message());
  std::vector<Shown> shown;
  shown.reserve(locks->size());
  for (const LockInfo& info : *locks) shown.push_back(ShowLock(info));
  Print(shown, args->has("json"));
  return kExitOk;
}

int Unlock(const std::vector<std::string>& raw) {
  int exit_code = kExitOk;
  absl::optional<ParsedArgs> args =
      ParseCommand(raw, {{"force", false}, {"yes", false}}, "unlock",
                   kUnlockUsage, &exit_code);
  if (!args.has_value()) return exit_code;
  if (args->positional.size() != 1) {
    return Fail(
        kExitUsage,
        "unlock: give exactly one NAME (relock unlock --force [--yes] NAME)");
  }
  if (!args->has("force")) {
    return Fail(kExitUsage,
                "unlock: refusing without --force (it frees the lock whoever "
                "holds it)");
  }
  const std::string& name = args->positional[0];
  const bool ask = !args->has("yes");
  if (ask && isatty(STDIN_FILENO) == 0) {
    return Fail(kExitUsage,
                "unlock: stdin is not a terminal, so relock cannot ask: add "
                "--yes to force-release without asking");
  }
  std::unique_ptr<Client> client = InspectionClient(*args, &exit_code);
  if (client == nullptr) return exit_code;
  absl::StatusOr<LockInfo> info = client->InspectLock(name);
  if (!info.ok()) {
    return Fail(info.status().code() == absl::StatusCode::kFailedPrecondition
                    ? kExitFailure
                    : ExitCodeFor(info.status()),
                info.status().message());
  }
  if (info->shape == LockShape::kFree) {
    std::cout << "lock " << name << " was not held" << std::endl;
    return kExitOk;
  }
  const std::string holders = Holders(*info);
  if (ask) {
    std::cerr << "Force-release lock " << name << " held by " << holders
              << "? [y/N] " << std::flush;
    std::string answer;
    std::getline(std::cin, answer);
    answer = absl::AsciiStrToLower(absl::StripAsciiWhitespace(answer));
    if (answer != "y" && answer != "yes") {
      std::cout << "lock " << name << " not released" << std::endl;
      return kExitFailure;
    }
  }
  absl::StatusOr<bool> freed;
  if (info->shape == LockShape::kReadWriteLock) {
    ReadWriteLock rw = client->GetReadWriteLock(name);
    freed = info->mode == "write" ? rw.WriteLock().ForceRelease()
                                  : rw.ReadLock().ForceRelease();
  } else if (info->queue_length > 0) {
    freed = client->GetFairLock(name).ForceRelease();
  } else {
    freed = client->GetLock(name).ForceRelease();
  }
  if (!freed.ok()) {
    return Fail(freed.status().code() == absl::StatusCode::kFailedPrecondition
                    ? kExitFailure
                    : ExitCodeFor(freed.status()),
                freed.status().message());
  }
  if (*freed) {
    std::cout << "released lock " << name << " (was held by " << holders << ")"
              << std::endl;
  } else {
    std::cout << "lock " << name << " was not held (released meanwhile)"
              << std::endl;
  }
  return kExitOk;
}

}  // namespace cli
}  // namespace relock
