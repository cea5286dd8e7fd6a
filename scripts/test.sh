#!/usr/bin/env bash
# Runs every check CI runs: dependencies, the CMake build and tests, the
# install check, the Bazel build and tests, and a smoke run of each benchmark.
#
#   scripts/test.sh                     # everything
#   RELOCK_SKIP_BAZEL=1 scripts/test.sh # skip the Bazel stage (quick local run)
#
# Exits non-zero at the first failing stage.
set -euo pipefail

cd "$(dirname "$0")/.."
build_dir=build
start=$SECONDS
stage_name=""
stage_start=$SECONDS

stage() {
  finish_stage
  stage_name=$1
  stage_start=$SECONDS
  printf '\n==============================================================\n'
  printf '== %s\n' "$stage_name"
  printf '==============================================================\n'
}

finish_stage() {
  if [[ -n $stage_name ]]; then
    printf '== ok (%ds): %s\n' $((SECONDS - stage_start)) "$stage_name"
  fi
}

on_exit() {
  local status=$?
  if [[ $status -ne 0 ]]; then
    printf '\n== FAILED in stage "%s" (exit %d) after %ds total\n' \
      "${stage_name:-setup}" "$status" $((SECONDS - start)) >&2
  fi
}
trap on_exit EXIT

stage "Dependencies (scripts/install-deps.sh)"
bash scripts/install-deps.sh

stage "CMake: configure and build ($build_dir/)"
generator=()
if [[ ! -f $build_dir/CMakeCache.txt ]]; then generator=(-G Ninja); fi
cmake -S . -B "$build_dir" "${generator[@]}" \
  -DRELOCK_BUILD_TESTS=ON -DRELOCK_BUILD_BENCHMARKS=ON -DRELOCK_BUILD_EXAMPLES=ON \
  -DRELOCK_SANITIZE=
cmake --build "$build_dir" -j2

stage "CMake: tests (ctest)"
ctest --test-dir "$build_dir" --output-on-failure -j2

stage "CMake: install check (scripts/check-install.sh)"
bash scripts/check-install.sh "$build_dir"

if [[ ${RELOCK_SKIP_BAZEL:-0} == 1 ]]; then
  stage "Bazel: skipped (RELOCK_SKIP_BAZEL=1)"
else
  stage "Bazel: build and test (bazel test //...)"
  # `bazel test //...` builds every target (library, tests, benchmarks,
  # examples) and runs the tests; the build line below only names the
  # benchmarks and examples explicitly.
  bazel test //...
  bazel build //:benchmarks //:examples
  bazel shutdown
  stage "Bazel: an outside workspace depends on @relock (tests/bazel_consumer)"
  (cd tests/bazel_consumer && bazel run //:app && bazel shutdown)
fi

stage "Benchmarks: smoke run (CMake build)"
export RELOCK_BENCH_SMOKE=1
shopt -s nullglob
benchmarks=("$build_dir"/benchmarks/*_benchmark)
if [[ ${#benchmarks[@]} -eq 0 ]]; then
  echo "no benchmarks"
fi
for benchmark in "${benchmarks[@]}"; do
  echo "--- $benchmark"
  "$benchmark" --benchmark_min_time=0.01
done

finish_stage
stage_name=""
printf '\n== All stages passed in %ds\n' $((SECONDS - start))
