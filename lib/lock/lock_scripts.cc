#include "lib/lock/lock_scripts.h"

#include "lua/acquire.lua.h"
#include "lua/force_release.lua.h"
#include "lua/release.lua.h"
#include "lua/release_all.lua.h"
#include "lua/renew.lua.h"

namespace relock {
namespace internal {

std::vector<redis::ScriptSource> LockScripts() {
  // Order matches ScriptId.
  return {
      {"acquire", lua::kAcquire},
      {"release", lua::kRelease},
      {"release_all", lua::kReleaseAll},
      {"force_release", lua::kForceRelease},
      {"renew", lua::kRenew},
  };
}

}  // namespace internal
}  // namespace relock
