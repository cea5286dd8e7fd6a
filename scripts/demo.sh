#!/usr/bin/env bash
# Builds and runs the demo (examples/demo.cc). With no Redis URL argument the
# demo starts its own redis-server; any arguments are passed to the demo.
#
#   scripts/demo.sh [ARGS...]
set -euo pipefail

cd "$(dirname "$0")/.."
build_dir=build

bash scripts/install-deps.sh >&2
generator=()
if [[ ! -f $build_dir/CMakeCache.txt ]]; then generator=(-G Ninja); fi
cmake -S . -B "$build_dir" "${generator[@]}" >&2
cmake --build "$build_dir" --target demo -j2 >&2
exec "$build_dir/examples/demo" "$@"
