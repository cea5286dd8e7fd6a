// Lua scripts run with EVALSHA, sent again as EVAL of the source on NOSCRIPT.
//
// A ScriptSet is built from (name, source) pairs and knows each script's SHA1
// (computed here: Redis names a script by the SHA1 of its text). It builds
// the RESP of the calls; the backend (lib/backend/node_backend.cc) sends
// them, and after a NOSCRIPT reply (SCRIPT FLUSH, a restart) sends the
// call's EVAL form, which also caches the script again. Keys always travel as
// KEYS[], never inside the script text.

#ifndef RELOCK_LIB_REDIS_SCRIPT_H_
#define RELOCK_LIB_REDIS_SCRIPT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "lib/redis/reply.h"

namespace relock {
namespace redis {

struct ScriptSource {
  absl::string_view name;    // for error messages, e.g. "acquire"
  absl::string_view source;  // Lua text
};

class ScriptSet {
 public:
  explicit ScriptSet(std::vector<ScriptSource> scripts);

  // RESP of: EVALSHA of script `index`; SCRIPT LOAD of every script, whose
  // replies CheckLoaded() checks (an error reply, such as an ACL refusal,
  // becomes its Status).
  void AppendEvalsha(size_t index, absl::Span<const absl::string_view> keys,
                     absl::Span<const absl::string_view> args,
                     std::string* wire) const;
  // The EVAL form of a call built by AppendEvalsha(index, ...) (its RESP
  // `evalsha`): the same command with the source in place of the digest,
  // for a server that answered NOSCRIPT (it caches the script again).
  std::string EvalFromEvalsha(size_t index, absl::string_view evalsha) const;
  void AppendLoadAll(std::string* wire) const;
  absl::Status CheckLoaded(const std::vector<Reply>& replies) const;
  size_t size() const { return scripts_.size(); }

  static bool IsNoScript(const Reply& reply);
  absl::string_view name(size_t index) const { return scripts_[index].name; }

 private:
  // The SHA1 from a SCRIPT LOAD reply of script `index`.
  absl::StatusOr<std::string> ShaFrom(size_t index, const Reply& reply) const;
  void AppendCall(absl::string_view command, absl::string_view script,
                  absl::Span<const absl::string_view> keys,
                  absl::Span<const absl::string_view> args,
                  std::string* wire) const;
  std::vector<ScriptSource> scripts_;
  std::vector<std::string> shas_;  // SHA1 of each source
};

}  // namespace redis
}  // namespace relock

#endif  // RELOCK_LIB_REDIS_SCRIPT_H_
