// Lua scripts run with EVALSHA, reloaded on NOSCRIPT.
//
// A ScriptSet is built from (name, source) pairs; Load() runs SCRIPT LOAD for
// each once (at client start) and keeps the SHA1 digests the server returns.
// Eval() sends EVALSHA; when the server answers NOSCRIPT (after SCRIPT FLUSH
// or a restart) it loads the script again on that connection and retries
// once. Keys always travel as KEYS[], never inside the script text.

#ifndef RELOCK_LIB_REDIS_SCRIPT_H_
#define RELOCK_LIB_REDIS_SCRIPT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "lib/redis/connection.h"

namespace relock {
namespace redis {

struct ScriptSource {
  absl::string_view name;    // for error messages, e.g. "acquire"
  absl::string_view source;  // Lua text
};

class ScriptSet {
 public:
  explicit ScriptSet(std::vector<ScriptSource> scripts);

  // SCRIPT LOAD of every script on `conn`. Must succeed once before Eval().
  absl::Status Load(Connection& conn);

  // EVALSHA of script `index` with `keys` and `args`. The reply may be an
  // error reply (the caller maps it); I/O failures are Unavailable.
  absl::StatusOr<Reply> Eval(Connection& conn, size_t index,
                             absl::Span<const absl::string_view> keys,
                             absl::Span<const absl::string_view> args,
                             Deadline deadline = Deadline::Never()) const;

  // Appends an EVALSHA to `conn`'s pipeline (no NOSCRIPT handling: the caller
  // checks replies with IsNoScript() and falls back to Eval()).
  absl::Status Append(Connection& conn, size_t index,
                      absl::Span<const absl::string_view> keys,
                      absl::Span<const absl::string_view> args) const;

  // The same as RESP, for the I/O core: EVALSHA of script `index`; EVAL of
  // its source (after NOSCRIPT: it also caches the script again); SCRIPT LOAD
  // of every script, whose replies CheckLoaded() checks (an error reply, such
  // as an ACL refusal, becomes its Status).
  void AppendEvalsha(size_t index, absl::Span<const absl::string_view> keys,
                     absl::Span<const absl::string_view> args,
                     std::string* wire) const;
  void AppendEval(size_t index, absl::Span<const absl::string_view> keys,
                  absl::Span<const absl::string_view> args,
                  std::string* wire) const;
  void AppendLoadAll(std::string* wire) const;
  absl::Status CheckLoaded(const std::vector<Reply>& replies) const;
  size_t size() const { return scripts_.size(); }

  static bool IsNoScript(const Reply& reply);
  absl::string_view name(size_t index) const { return scripts_[index].name; }

 private:
  absl::StatusOr<std::string> LoadOne(Connection& conn, size_t index,
                                      Deadline deadline) const;
  // The SHA1 from a SCRIPT LOAD reply of script `index`.
  absl::StatusOr<std::string> ShaFrom(size_t index, const Reply& reply) const;
  void AppendCall(absl::string_view command, absl::string_view script,
                  absl::Span<const absl::string_view> keys,
                  absl::Span<const absl::string_view> args,
                  std::string* wire) const;
  void BuildArgv(size_t index, absl::Span<const absl::string_view> keys,
                 absl::Span<const absl::string_view> args,
                 std::vector<absl::string_view>* argv,
                 std::string* numkeys) const;

  std::vector<ScriptSource> scripts_;
  std::vector<std::string> shas_;  // SHA1 of each source
};

}  // namespace redis
}  // namespace relock

#endif  // RELOCK_LIB_REDIS_SCRIPT_H_
