#include "lib/redis/script.h"

#include <openssl/evp.h>

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/redis/errors.h"
#include "lib/redis/resp.h"

namespace relock {
namespace redis {

ScriptSet::ScriptSet(std::vector<ScriptSource> scripts)
    : scripts_(std::move(scripts)) {
  // Redis names a script by the SHA1 of its text (what SCRIPT LOAD returns),
  // so the digests are known before any server has seen the scripts.
  for (const ScriptSource& script : scripts_) {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int size = 0;
    EVP_Digest(script.source.data(), script.source.size(), digest, &size,
               EVP_sha1(), nullptr);
    shas_.push_back(absl::BytesToHexString(
        absl::string_view(reinterpret_cast<const char*>(digest), size)));
  }
}

absl::StatusOr<std::string> ScriptSet::ShaFrom(size_t index,
                                               const Reply& reply) const {
  const std::string what = absl::StrCat("SCRIPT LOAD of relock's \"",
                                        scripts_[index].name, "\" script");
  if (reply.is_error()) return ErrorReplyToStatus(what, reply.str());
  if (!reply.view().is_string()) {
    return absl::InternalError(
        absl::StrCat(what, ": unexpected reply ", reply.view().Describe()));
  }
  return std::string(reply.str());
}

void ScriptSet::AppendLoadAll(std::string* wire) const {
  for (const ScriptSource& script : scripts_) {
    AppendCommand({"SCRIPT", "LOAD", script.source}, wire);
  }
}

absl::Status ScriptSet::CheckLoaded(const std::vector<Reply>& replies) const {
  if (replies.size() != scripts_.size()) {
    return absl::InternalError("SCRIPT LOAD: wrong number of replies");
  }
  for (size_t i = 0; i < scripts_.size(); ++i) {
    absl::StatusOr<std::string> sha = ShaFrom(i, replies[i]);
    if (!sha.ok()) return sha.status();
    if (*sha != shas_[i]) {
      return absl::InternalError(absl::StrCat(
          "SCRIPT LOAD of relock's \"", scripts_[i].name,
          "\" script: Redis names it ", *sha, ", not its SHA1 ", shas_[i]));
    }
  }
  return absl::OkStatus();
}

void ScriptSet::AppendCall(absl::string_view command, absl::string_view script,
                           absl::Span<const absl::string_view> keys,
                           absl::Span<const absl::string_view> args,
                           std::string* wire) const {
  const absl::AlphaNum numkeys(keys.size());
  const absl::string_view head[] = {command, script, numkeys.Piece()};
  AppendCommandOf({head, keys, args}, wire);
}

void ScriptSet::AppendEvalsha(size_t index,
                              absl::Span<const absl::string_view> keys,
                              absl::Span<const absl::string_view> args,
                              std::string* wire) const {
  AppendCall("EVALSHA", shas_[index], keys, args, wire);
}

std::string ScriptSet::EvalFromEvalsha(size_t index,
                                       absl::string_view evalsha) const {
  // "*<n>\r\n$7\r\nEVALSHA\r\n$40\r\n<sha>\r\n<numkeys, keys, args>"
  const size_t header = evalsha.find("\r\n") + 2;
  std::string sha_part;
  AppendBulk("EVALSHA", &sha_part);
  AppendBulk(shas_[index], &sha_part);
  std::string eval(evalsha.substr(0, header));
  AppendBulk("EVAL", &eval);
  AppendBulk(scripts_[index].source, &eval);
  absl::StrAppend(&eval, evalsha.substr(header + sha_part.size()));
  return eval;
}

bool ScriptSet::IsNoScript(const Reply& reply) {
  return reply.is_error() && absl::StartsWith(reply.str(), "NOSCRIPT");
}

}  // namespace redis
}  // namespace relock
