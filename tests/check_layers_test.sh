#!/usr/bin/env bash
# scripts/check-layers.sh passes on this tree and fails on each kind of
# planted violation (an include that climbs a layer, an API header below
# lib/api/, a public header that includes lib/, a vocabulary header that
# includes an API header), naming the file and line; an include that goes
# down a layer, or down through a layer in between, stays allowed.
#
#   tests/check_layers_test.sh [ROOT]   # ROOT: the source tree (default: ..)
#
# Under `bazel test` the tree is the test's runfiles (TEST_SRCDIR).
set -euo pipefail

if [[ $# -gt 0 ]]; then
  root=$1
elif [[ -n ${TEST_SRCDIR:-} ]]; then
  root=$TEST_SRCDIR/${TEST_WORKSPACE:-relock}
else
  root="$(dirname "$0")/.."
fi
root=$(cd "$root" && pwd)
check="$root/scripts/check-layers.sh"
work=$(mktemp -d "${TEST_TMPDIR:-${TMPDIR:-/tmp}}/relock-check-layers.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# A copy of the tree's layers, CMakeLists.txt and public headers.
fresh_tree() {
  rm -rf "$work/tree"
  mkdir -p "$work/tree"
  # -L: under Bazel the tree is runfiles, symlinks to the sources.
  cp -rL "$root/lib" "$root/include" "$root/CMakeLists.txt" "$work/tree/"
}

# expect EXIT PATTERN: runs the check on the copy; its exit code must be EXIT
# and its output must contain PATTERN.
expect() {
  local want=$1 pattern=$2 got=0
  bash "$check" "$work/tree" >"$work/out" 2>&1 || got=$?
  if [[ $got -ne $want ]]; then
    fail "expected exit $want, got $got ($pattern)"
    sed 's/^/  | /' "$work/out"
  elif ! grep -qF -- "$pattern" "$work/out"; then
    fail "output lacks \"$pattern\""
    sed 's/^/  | /' "$work/out"
  else
    echo "ok: exit $want, \"$pattern\""
  fi
}

fresh_tree
expect 0 "check-layers: ok"

fresh_tree
printf '// planted\n#include "lib/lock/lock_model.h"\n' >"$work/tree/lib/io/planted.cc"
expect 1 'lib/io/planted.cc:2: includes "lib/lock/lock_model.h"'

fresh_tree
printf '#include "lib/timer/timer_thread.h"\n' >"$work/tree/lib/backend/planted.h"
expect 1 'lib/backend/planted.h:1: includes "lib/timer/timer_thread.h"'

fresh_tree
printf '#include "relock/client.h"\n' >"$work/tree/lib/lock/planted.cc"
expect 1 'lib/lock/planted.cc:1: includes "relock/client.h": only lib/api/'

fresh_tree
printf '#include "lib/common/mutex.h"\n' >"$work/tree/include/relock/planted.h"
expect 1 'include/relock/planted.h:1: includes "lib/common/mutex.h"'

fresh_tree
printf '#include "relock/lock.h"\n' >>"$work/tree/include/relock/limits.h"
expect 1 'include/relock/limits.h:'

fresh_tree
mkdir -p "$work/tree/lib/newlayer"
printf '#include "lib/common/mutex.h"\n' >"$work/tree/lib/newlayer/x.cc"
expect 1 'lib/newlayer/x.cc: lib/newlayer/ is not a layer'

# Allowed: down a layer, down through layers in between, vocabulary, and
# lib/api/ including an API header.
fresh_tree
printf '#include "lib/io/connection.h"\n#include "lib/common/mutex.h"\n#include "relock/limits.h"\n' \
  >"$work/tree/lib/lock/planted.cc"
printf '#include "relock/client.h"\n' >"$work/tree/lib/api/planted.cc"
expect 0 "check-layers: ok"

if ((failures > 0)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all checks passed"
