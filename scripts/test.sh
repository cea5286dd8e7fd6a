#!/usr/bin/env bash
# Runs every check CI runs: dependencies, the layering of the includes
# (scripts/check-layers.sh), the CMake build, clang-tidy over the
# library sources, the CMake tests, the install check, the tests under
# ASan+UBSan and under TSan (clang), a short libFuzzer run of each fuzz
# target, the Bazel build and tests, and a smoke run of each benchmark.
#
#   scripts/test.sh                          # everything
#   RELOCK_SKIP_BAZEL=1 scripts/test.sh      # skip the Bazel stages
#   RELOCK_SKIP_SANITIZERS=1 scripts/test.sh # skip the clang-tidy, sanitizer
#                                            # and fuzzing stages (quick local
#                                            # run)
#
# Build trees: build/ (gcc, everything), build-asan/ (clang, tests and
# fuzzers), build-tsan/ (clang, tests). Fuzzing works on a copy of
# fuzz/corpus/ in a temp dir, so no new corpus files land in the repo; a
# crashing input is kept there (the path is printed).
#
# Every stage runs its whole set: the tests run in each of the CMake build,
# ASan+UBSan, TSan and Bazel. The tests mostly wait (leases, failovers,
# harness runs), so ctest and Bazel run four at a time, and the longest are
# split into gtest shards (RELOCK_SHARDED_TESTS in CMakeLists.txt,
# shard_count in tests/BUILD.bazel). Each stage prints its time.
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

stage_times=()
finish_stage() {
  if [[ -n $stage_name ]]; then
    printf '== ok (%ds): %s\n' $((SECONDS - stage_start)) "$stage_name"
    stage_times+=("$(printf '%6ds  %s' $((SECONDS - stage_start)) "$stage_name")")
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

stage "Layers: no #include climbs a layer (scripts/check-layers.sh)"
bash scripts/check-layers.sh

stage "CMake: configure and build ($build_dir/)"
generator=()
if [[ ! -f $build_dir/CMakeCache.txt ]]; then generator=(-G Ninja); fi
cmake -S . -B "$build_dir" "${generator[@]}" \
  -DRELOCK_BUILD_TESTS=ON -DRELOCK_BUILD_BENCHMARKS=ON -DRELOCK_BUILD_EXAMPLES=ON \
  -DRELOCK_SANITIZE= -DRELOCK_WERROR=ON -DCMAKE_EXPORT_COMPILE_COMMANDS=ON
cmake --build "$build_dir" -j2

if [[ ${RELOCK_SKIP_SANITIZERS:-0} == 1 ]]; then
  stage "clang-tidy: skipped (RELOCK_SKIP_SANITIZERS=1)"
else
  stage "clang-tidy: lib/**/*.cc (.clang-tidy, $build_dir/compile_commands.json)"
  # Every finding is an error. Two files at a time, each into its own log; the
  # logs of the files with findings are printed whole, one after the other.
  tidy_logs=$(mktemp -d "${TMPDIR:-/tmp}/relock-tidy.XXXXXX")
  tidy_status=0
  find lib -name '*.cc' -print0 | sort -z |
    xargs -0 -P2 -n1 sh -c '
      log="$0/$(printf %s "$2" | tr / _).log"
      clang-tidy -p "$1" --quiet --warnings-as-errors="*" "$2" >"$log" 2>&1 ||
        { mv "$log" "$log.failed"; exit 1; }' "$tidy_logs" "$build_dir" ||
    tidy_status=$?
  shopt -s nullglob
  tidy_failed=("$tidy_logs"/*.failed)
  shopt -u nullglob
  if [[ ${#tidy_failed[@]} -gt 0 ]]; then cat "${tidy_failed[@]}"; fi
  rm -rf "$tidy_logs"
  if [[ $tidy_status -ne 0 ]]; then
    echo "clang-tidy: findings in ${#tidy_failed[@]} file(s) (above)" >&2
    exit 1
  fi
fi

stage "CMake: tests (ctest)"
ctest --test-dir "$build_dir" --output-on-failure -j4

stage "CMake: install check (scripts/check-install.sh)"
bash scripts/check-install.sh "$build_dir"

# A clang build tree with RELOCK_SANITIZE=$2 and without benchmarks/examples.
sanitizer_build() {
  local dir=$1 sanitize=$2
  shift 2
  local generator=()
  if [[ ! -f $dir/CMakeCache.txt ]]; then generator=(-G Ninja); fi
  cmake -S . -B "$dir" "${generator[@]}" \
    -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DRELOCK_SANITIZE="$sanitize" -DRELOCK_WERROR=ON \
    -DRELOCK_BUILD_BENCHMARKS=OFF -DRELOCK_BUILD_EXAMPLES=OFF "$@"
  cmake --build "$dir" -j2
}

if [[ ${RELOCK_SKIP_SANITIZERS:-0} == 1 ]]; then
  stage "Sanitizers and fuzzing: skipped (RELOCK_SKIP_SANITIZERS=1)"
else
  stage "Sanitizers: ASan+UBSan (clang, build-asan/, with the fuzzers)"
  # One ASan tree for the tests and the fuzzers: the library is built once,
  # with the fuzzers' coverage instrumentation.
  sanitizer_build build-asan address -DRELOCK_BUILD_TESTS=ON -DRELOCK_BUILD_FUZZERS=ON
  ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j4

  stage "Sanitizers: TSan (clang, build-tsan/)"
  # relock's mutexes are std-based (lib/common/mutex.h): Debian's libabsl is
  # not instrumented, so TSan could not see absl::Mutex.
  sanitizer_build build-tsan thread -DRELOCK_BUILD_TESTS=ON
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    ctest --test-dir build-tsan --output-on-failure -j4

  stage "Fuzzing (libFuzzer, 30 s each, two at a time, build-asan/)"
  fuzz_work=$(mktemp -d "${TMPDIR:-/tmp}/relock-fuzz.XXXXXX")
  shopt -s nullglob
  fuzzers=(build-asan/fuzz/*_fuzzer)
  shopt -u nullglob
  if [[ ${#fuzzers[@]} -eq 0 ]]; then
    echo "no fuzzers built" >&2
    exit 1
  fi
  # Runs one fuzzer on a copy of its seed corpus; its output goes to its log.
  fuzz_one() {
    local fuzzer=$1 work=$2
    mkdir -p "$work/corpus" "$work/artifacts"
    cp fuzz/corpus/"$(basename "$fuzzer")"/* "$work/corpus/"
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
      "$fuzzer" -max_total_time=30 -print_final_stats=1 \
      -artifact_prefix="$work/artifacts/" "$work/corpus" >"$work/log" 2>&1
  }
  fuzz_pids=()
  for fuzzer in "${fuzzers[@]}"; do
    fuzz_one "$fuzzer" "$fuzz_work/$(basename "$fuzzer")" &
    fuzz_pids+=($!)
  done
  fuzz_failed=0
  for i in "${!fuzzers[@]}"; do
    name=$(basename "${fuzzers[$i]}")
    work=$fuzz_work/$name
    if wait "${fuzz_pids[$i]}"; then
      echo "--- $name"
      grep -E '^#[0-9]+[[:space:]]+DONE|^stat::number_of_executed_units|^stat::average_exec_per_sec|^stat::peak_rss_mb' \
        "$work/log" || true
    else
      tail -n 60 "$work/log"
      echo "$name FAILED: crashing input in $work/artifacts/, log $work/log" >&2
      fuzz_failed=1
    fi
  done
  if [[ $fuzz_failed -ne 0 ]]; then exit 1; fi
  rm -rf "$fuzz_work"
fi

if [[ ${RELOCK_SKIP_BAZEL:-0} == 1 ]]; then
  stage "Bazel: skipped (RELOCK_SKIP_BAZEL=1)"
else
  stage "Bazel: build and test (bazel test //...)"
  # Each layer's package is visible to exactly the layers above it (a few
  # seconds of `bazel query`).
  bash scripts/check-layers.sh --bazel
  # `bazel test //...` builds every target (library, tests, benchmarks,
  # examples) and runs the tests; the build line below only names the
  # benchmarks and examples explicitly.
  bazel test --config=werror //...
  bazel build --config=werror //:benchmarks //:examples
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
  # A benchmark that cannot run its case says so with SkipWithError ("ERROR
  # OCCURRED") and still exits 0: that is a failure here too.
  output=$("$benchmark" --benchmark_min_time=0.01 2>&1)
  printf '%s\n' "$output"
  if grep -q "ERROR OCCURRED" <<<"$output"; then
    echo "$benchmark: a benchmark reported an error (above)" >&2
    exit 1
  fi
done

finish_stage
stage_name=""
printf '\n== All stages passed in %ds\n' $((SECONDS - start))
printf '%s\n' "${stage_times[@]}"
