#!/usr/bin/env bash
# Installs a configured-and-built CMake tree into a temporary prefix, then
# runs the installed relock command, and builds and runs two consumers of the
# installed library:
#   1. tests/install_consumer via find_package(relock CONFIG REQUIRED);
#   2. the same main.cc compiled with `pkg-config --cflags --libs relock`.
#
# Usage: scripts/check-install.sh BUILD_DIR
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
repo=$(cd "$(dirname "$0")/.." && pwd)
build_dir=$(cd "$1" && pwd)
consumer="$repo/tests/install_consumer"

work=$(mktemp -d "${TMPDIR:-/tmp}/relock-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"

echo "--- cmake --install $build_dir --prefix $prefix"
cmake --install "$build_dir" --prefix "$prefix" >"$work/install.log" || {
  cat "$work/install.log"
  exit 1
}

echo "--- the relock command (bin/relock)"
"$prefix/bin/relock" --version
echo "ok: relock installed and ran"

echo "--- consumer 1: find_package(relock CONFIG)"
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
cmake -S "$consumer" -B "$work/cmake-consumer" "${generator[@]}" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/cmake-consumer" -j2
"$work/cmake-consumer/app"
echo "ok: find_package consumer built and ran"

echo "--- consumer 2: pkg-config --cflags --libs relock"
pc_file=$(find "$prefix" -name relock.pc -print -quit)
if [[ -z "$pc_file" ]]; then
  echo "relock.pc was not installed" >&2
  exit 1
fi
pc_flags=$(PKG_CONFIG_PATH="$(dirname "$pc_file")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}" \
  pkg-config --cflags --libs relock)
echo "pkg-config: $pc_flags"
# shellcheck disable=SC2086  # word splitting of the flags is intended
"${CXX:-c++}" -std=c++17 "$consumer/main.cc" -o "$work/pkg-config-app" $pc_flags
"$work/pkg-config-app"
echo "ok: pkg-config consumer built and ran"
