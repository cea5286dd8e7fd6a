#!/usr/bin/env bash
# Fails on any #include that climbs a layer of the library.
#
#   scripts/check-layers.sh [ROOT]      # ROOT: the source tree (default: ..)
#
# The layers are lib/<layer>/ and the dependencies each may have are those
# CMakeLists.txt gives it (its `relock_layer(NAME DEPS ...)` lines; BUILD.bazel
# has the same targets), taken transitively: a layer may include itself and
# any layer below it, never one above.
#
#   api -> redlock -> client -> lock -> backend -> pubsub -> io -> redis -> common
#                                    -> watchdog -> timer -> common
#   io -> backoff
#
# Public headers (include/relock/) come in two kinds:
#   - vocabulary (options, limits, metrics, lock info, lock kind, backoff,
#     version): any
#     layer may include them, and they include only one another;
#   - the API classes (Client, Lock and the rest): only lib/api/ includes them.
# No public header includes anything from lib/.
#
# Prints one line per violation (file:line: what and why) and exits 1 if there
# is any, 0 otherwise. tests/check_layers_test.sh proves it fails on planted
# violations.
set -euo pipefail

root=${1:-"$(dirname "$0")/.."}
cd "$root"

vocabulary=(options.h redlock_options.h limits.h metrics.h lock_info.h
  lock_kind.h backoff.h version.h)

declare -A direct=()
while read -r layer deps; do
  direct[$layer]=$deps
done < <(sed -n 's/^relock_layer(\([a-z_]*\)\(.*\))$/\1 \2/p' CMakeLists.txt |
  sed 's/ EXTRA_SOURCES.*//; s/ DEPS / /')
if [[ ${#direct[@]} -eq 0 ]]; then
  echo "check-layers: no relock_layer(...) lines in $root/CMakeLists.txt" >&2
  exit 2
fi

# below[L]: the layers L may include (itself and its transitive deps).
declare -A below=()
closure() {
  local layer=$1 seen=" $1 " todo dep next
  todo=${direct[$layer]:-}
  while [[ -n ${todo// /} ]]; do
    next=""
    for dep in $todo; do
      [[ $seen == *" $dep "* ]] && continue
      seen+="$dep "
      next+=" ${direct[$dep]:-}"
    done
    todo=$next
  done
  below[$layer]=$seen
}
for layer in "${!direct[@]}"; do closure "$layer"; done

is_vocabulary() {
  local h
  for h in "${vocabulary[@]}"; do [[ $1 == "$h" ]] && return 0; done
  return 1
}

# "LINE:TARGET" for each #include "TARGET" of a file.
quoted_includes() {
  grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$1" |
    sed 's/^\([0-9]*\):[^"]*"\([^"]*\)".*/\1:\2/' || true
}

violations=0
report() {
  echo "$1"
  violations=$((violations + 1))
}

# lib/<layer>/ files.
while IFS= read -r file; do
  layer=${file#lib/}
  layer=${layer%%/*}
  if [[ -z ${below[$layer]:-} ]]; then
    report "$file: lib/$layer/ is not a layer in CMakeLists.txt (relock_layer)"
    continue
  fi
  while IFS=: read -r line target; do
    case $target in
      lib/*)
        to=${target#lib/}
        to=${to%%/*}
        if [[ ${below[$layer]} != *" $to "* ]]; then
          report "$file:$line: includes \"$target\": lib/$layer/ may not include lib/$to/ (a layer above it or beside it)"
        fi
        ;;
      relock/*)
        header=${target#relock/}
        if [[ $layer != api ]] && ! is_vocabulary "$header"; then
          report "$file:$line: includes \"$target\": only lib/api/ includes the API classes' headers; lib/$layer/ may include the vocabulary headers (${vocabulary[*]})"
        fi
        ;;
    esac
  done < <(quoted_includes "$file")
done < <(find lib -type f \( -name '*.h' -o -name '*.cc' \) | sort)

# include/relock/ headers.
while IFS= read -r file; do
  header=${file#include/relock/}
  while IFS=: read -r line target; do
    case $target in
      lib/*)
        report "$file:$line: includes \"$target\": a public header may not include the library's internals"
        ;;
      relock/*)
        if is_vocabulary "$header" && ! is_vocabulary "${target#relock/}"; then
          report "$file:$line: includes \"$target\": a vocabulary header includes only vocabulary headers (${vocabulary[*]})"
        fi
        ;;
    esac
  done < <(quoted_includes "$file")
done < <(find include/relock -type f -name '*.h' | sort)

if ((violations > 0)); then
  echo "check-layers: $violations include(s) climb a layer (see scripts/check-layers.sh)" >&2
  exit 1
fi
echo "check-layers: ok (${#direct[@]} layers, $(find lib include/relock -type f \( -name '*.h' -o -name '*.cc' \) | wc -l) files)"
