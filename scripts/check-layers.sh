#!/usr/bin/env bash
# Fails on any #include that climbs a layer of the library.
#
#   scripts/check-layers.sh [--bazel] [ROOT]   # ROOT: the source tree
#                                              # (default: ..)
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
# With --bazel it also asks Bazel (`bazel query`, in ROOT; a few seconds)
# whether the Bazel build enforces the same order: each layer is a package,
# lib/<layer>/, whose cc_library //lib/<layer> must be visible to exactly the
# layers that may depend on it (so a dependency that climbs a layer fails the
# build), and //include/relock:api (the API classes' headers) to no layer but
# lib/api/; //include/relock:vocabulary must hold the vocabulary headers below.
#
# Prints one line per violation (file:line: what and why) and exits 1 if there
# is any, 0 otherwise. tests/check_layers_test.sh proves it fails on planted
# violations.
set -euo pipefail

bazel_too=0
if [[ ${1:-} == --bazel ]]; then
  bazel_too=1
  shift
fi
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
((bazel_too)) || exit 0

# --- Bazel: the same order, enforced by visibility ----------------------------
# query EXPR: the names of the targets (//PKG:NAME -> PKG:NAME) it yields, one
# a line, sorted; a query that fails ends the check.
query() {
  local out
  if ! out=$(bazel query --noshow_progress --output=label "$1" 2>&1); then
    echo "check-layers: bazel query '$1' failed:" >&2
    echo "$out" >&2
    exit 2
  fi
  grep '^//' <<<"$out" | sed 's|^//||' | sort || true
}

# The layers Bazel has, "lib/<layer>:<layer>" each, are the ones CMake has.
bazel_layers=$(query 'kind(cc_library, //lib/...)')
for layer in "${!direct[@]}"; do
  grep -qx "lib/$layer:$layer" <<<"$bazel_layers" ||
    report "lib/$layer/BUILD.bazel: no cc_library //lib/$layer (a layer in CMakeLists.txt)"
done
while IFS= read -r target; do
  layer=${target#lib/}
  layer=${layer%%/*}
  layer=${layer%%:*}
  if [[ $target != "lib/$layer:$layer" || -z ${direct[$layer]+x} ]]; then
    report "//$target: a cc_library in lib/ that is not a layer of CMakeLists.txt"
  fi
done <<<"$bazel_layers"

# visible(//lib/L, ...): the layers //lib/L may depend on. They must be the
# layers below it, and //include/relock:api must not be among them below
# lib/api/.
for layer in $(printf '%s\n' "${!direct[@]}" | sort); do
  visible=$(query "visible(//lib/$layer, kind(cc_library, //lib/... + //include/relock:all))")
  for other in "${!direct[@]}"; do
    allowed=0
    [[ ${below[$layer]} == *" $other "* ]] && allowed=1
    seen=0
    grep -qx "lib/$other:$other" <<<"$visible" && seen=1
    if ((seen && !allowed)); then
      report "lib/$other/BUILD.bazel: //lib/$other is visible to //lib/$layer, a layer below it or beside it"
    elif ((!seen && allowed)); then
      report "lib/$other/BUILD.bazel: //lib/$other is not visible to //lib/$layer, which CMakeLists.txt lets depend on it"
    fi
  done
  if [[ $layer != api ]] && grep -qx "include/relock:api" <<<"$visible"; then
    report "include/relock/BUILD.bazel: //include/relock:api is visible to //lib/$layer; only lib/api/ may include the API classes' headers"
  fi
  if ! grep -qx "include/relock:vocabulary" <<<"$visible"; then
    report "include/relock/BUILD.bazel: //include/relock:vocabulary is not visible to //lib/$layer"
  fi
done

# //include/relock:vocabulary holds the vocabulary headers, and no others.
got=$(query 'labels(hdrs, //include/relock:vocabulary)' | sed 's|^include/relock:||')
want=$(printf '%s\n' "${vocabulary[@]}" | sort)
if [[ $got != "$want" ]]; then
  report "include/relock/BUILD.bazel: :vocabulary holds $(echo $got), not the vocabulary headers ($(echo $want))"
fi

if ((violations > 0)); then
  echo "check-layers: $violations way(s) in which Bazel's visibility differs from the layers (see lib/BUILD.bazel)" >&2
  exit 1
fi
echo "check-layers: Bazel ok (each //lib/<layer> visible to exactly the layers above it)"
