#!/usr/bin/env bash
# Runs every check CI runs: dependencies, the layering of the includes
# (scripts/check-layers.sh), the CMake build, clang-tidy over the
# library sources, the CMake tests, the install check, the tests under
# ASan+UBSan and under TSan (clang), a short libFuzzer run of each fuzz
# target, the Bazel build and tests, the outside Bazel consumer, and a smoke
# run of each benchmark.
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
# Every test runs in each of the CMake build, ASan+UBSan and TSan. The Bazel
# stage analyses every target (labels, visibility; `bazel build --nobuild
# //...`) and builds every library, tool and example target; of the tests it
# builds and runs //tests:bazel_stage (those of pure logic, the two whose
# Bazel build differs from CMake's, and the public API on a real server) and
# the fuzz corpora. What it analyses but does not build, the other tests, the
# benchmarks (//benchmarks) and the harness program (//tools/harness), the
# CMake build compiles (and runs: the tests in all three CMake stages, the
# benchmarks in their smoke mode).
# What keeps the whole run short on two cores:
# - The CMake builds compile the library, the test fixture, the harness's
#   library and the tests in unity batches (RELOCK_UNITY_BUILD): every test
#   file but the CLI's (cli_*test.cc: build/tests/cli_test) links into one
#   binary, relock_tests, and ctest runs each file's tests as a test of its
#   own (a gtest filter). Bazel compiles file by
#   file, a binary per test, so a .cc that does not include what it uses still
#   fails there.
# - The sanitizer builds compile at -O0 with line tables only (the sanitizers
#   check the same at any optimization level; the gcc build is the -O2 one,
#   with -g1, line tables and functions: a quarter less compile time than -g).
# - The tests mostly wait (leases, failovers, harness runs), so each test run
#   goes on in the background while the next CPU-bound stage (clang-tidy and
#   the ASan build, the next build, the fuzzers, the Bazel build) runs: the tests must pass on a
#   loaded machine anyway. ctest and Bazel run four tests at a time, and the longest are split
#   into gtest shards (RELOCK_SHARDED_TESTS in CMakeLists.txt, SHARDS in
#   tests/BUILD.bazel).
# Each stage prints its time; a background stage prints its output when it is
# joined, with the time it ran (its own, overlapping the stages beside it).
#
# Exits non-zero at the first failing stage.
set -euo pipefail

cd "$(dirname "$0")/.."
build_dir=build
start=$SECONDS
stage_name=""
stage_start=$SECONDS
# Background stages: their logs, pids, names and start times.
bg_dir=$(mktemp -d "${TMPDIR:-/tmp}/relock-test.XXXXXX")
declare -A bg_pid=() bg_title=() bg_start=()

stage() {
  finish_stage
  stage_name=$1
  stage_start=$SECONDS
  banner "$stage_name"
}

banner() {
  printf '\n==============================================================\n'
  printf '== %s\n' "$1"
  printf '==============================================================\n'
}

stage_times=()
finish_stage() {
  if [[ -n $stage_name ]]; then
    printf '== ok (%ds): %s\n' $((SECONDS - stage_start)) "$stage_name"
    stage_times+=("$(printf '%6ds  %s' $((SECONDS - stage_start)) "$stage_name")")
  fi
  stage_name=""
}

# background KEY TITLE COMMAND...: runs COMMAND as a stage of its own in the
# background (its own process group), its output into a log.
background() {
  local key=$1 title=$2
  shift 2
  printf '\n== started in the background: %s\n' "$title"
  # The command writes its exit status and its own time when it ends (a join
  # may come later). setsid makes it a process group of its own, which
  # on_exit stops whole; a run killed outright (SIGKILL) leaves it to finish
  # alone, and the redis-servers the tests start die with their tests
  # (PR_SET_PDEATHSIG).
  # shellcheck disable=SC2016  # expanded by the inner bash
  setsid bash -c 'start=$SECONDS; status=0; "${@:2}" || status=$?
    echo $((SECONDS - start)) >"$1.time"; echo "$status" >"$1.status"
    exit "$status"' bash "$bg_dir/$key" "$@" >"$bg_dir/$key.log" 2>&1 &
  bg_pid[$key]=$!
  # (Without job control, as here, setsid does not fork: $! leads the new
  # group. Should it fork, join still goes by the status file, not by $!.)
  bg_title[$key]=$title
  bg_start[$key]=$SECONDS
}

# join KEY: waits for a background stage, prints its output and time; a
# failed one fails the run.
join() {
  local key=$1 status=0
  finish_stage
  wait "${bg_pid[$key]}" || status=$?
  if [[ $status -eq 0 && $(cat "$bg_dir/$key.status" 2>/dev/null) != 0 ]]; then
    status=1  # no status written: it did not run to its end
  fi
  local took title=${bg_title[$key]}
  took=$(cat "$bg_dir/$key.time")
  unset 'bg_pid[$key]'
  banner "$title (ran in the background)"
  cat "$bg_dir/$key.log"
  if [[ $status -ne 0 ]]; then
    stage_name=$title
    return "$status"
  fi
  printf '== ok (%ds, in the background; joined after %ds): %s\n' "$took" \
    $((SECONDS - bg_start[$key])) "$title"
  stage_times+=("$(printf '%6ds  %s (background)' "$took" "$title")")
}

on_exit() {
  local status=$? key pgid tries
  for key in "${!bg_pid[@]}"; do
    pgid=${bg_pid[$key]}
    if [[ -f $bg_dir/$key.status ]]; then
      printf '\n== finished (exit %s), not joined: %s; its output:\n' \
        "$(cat "$bg_dir/$key.status")" "${bg_title[$key]}" >&2
    else
      # The whole group, ctest and its tests or the Bazel client: TERM, and
      # KILL whatever is left after 10 s.
      kill -TERM -- "-$pgid" 2>/dev/null || true
      for ((tries = 0; tries < 100; tries++)); do
        kill -0 -- "-$pgid" 2>/dev/null || break
        sleep 0.1
      done
      kill -KILL -- "-$pgid" 2>/dev/null || true
      printf '\n== stopped: %s; its output so far:\n' "${bg_title[$key]}" >&2
    fi
    wait "$pgid" 2>/dev/null || true
    cat "$bg_dir/$key.log" >&2
  done
  rm -rf "$bg_dir"
  # A Bazel stage that failed or was stopped leaves its servers up.
  if [[ $status -ne 0 && ${bazel_started:-0} == 1 ]]; then
    timeout 60 bazel shutdown >/dev/null 2>&1 || true
    (cd tests/bazel_consumer && timeout 60 bazel shutdown) >/dev/null 2>&1 || true
  fi
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

# cmake_build DIR CMAKE_ARGS...: configures (Ninja, unity batches, -Werror,
# lld) and builds DIR.
cmake_build() {
  local dir=$1
  shift
  local generator=()
  if [[ ! -f $dir/CMakeCache.txt ]]; then generator=(-G Ninja); fi
  cmake -S . -B "$dir" "${generator[@]}" -DRELOCK_UNITY_BUILD=ON \
    -DRELOCK_WERROR=ON -DRELOCK_USE_LLD=ON "$@"
  cmake --build "$dir" -j2
}

stage "CMake: configure and build ($build_dir/)"
cmake_build "$build_dir" \
  -DRELOCK_BUILD_TESTS=ON -DRELOCK_BUILD_BENCHMARKS=ON -DRELOCK_BUILD_EXAMPLES=ON \
  -DRELOCK_SANITIZE= -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG"

background ctest "CMake: tests (ctest, $build_dir/)" \
  ctest --test-dir "$build_dir" --output-on-failure -j4

if [[ ${RELOCK_SKIP_SANITIZERS:-0} == 1 ]]; then
  stage "clang-tidy: skipped (RELOCK_SKIP_SANITIZERS=1)"
else
  stage "clang-tidy: lib/ ($build_dir/compile_commands.json, .clang-tidy)"
  # Every finding is an error. The library's sources are compiled as unity
  # files (each includes up to eight .cc files of one layer), and clang-tidy
  # checks those: .clang-tidy's HeaderFilterRegex reports findings in the .cc
  # files they include. (bugprone-suspicious-include would flag the unity
  # files' own #include of a .cc; the grep below checks that lib/ includes
  # no .cc.) Two at a time, each
  # into its own log; the logs with findings are printed whole.
  if grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"][^>"]*\.cc[>"]' lib; then
    echo "lib/ includes a .cc file (above)" >&2
    exit 1
  fi
  tidy_logs=$bg_dir/tidy
  mkdir "$tidy_logs"
  tidy_status=0
  # shellcheck disable=SC2016  # $0, $1 and $2 belong to the inner sh
  sed -n 's/^ *"file": "\(.*\)",*$/\1/p' "$build_dir/compile_commands.json" |
    grep -E '/relock_[a-z]+\.dir/Unity/unity_[0-9]+_cxx\.cxx$|/lib/.*\.cc$' |
    grep -vE '/relock_(cli|tests|harness|testing_fixture)\.dir/' | sort -u | tr '\n' '\0' |
    xargs -0 -P2 -n1 sh -c '
      log="$0/$(printf %s "$2" | tr / _).log"
      clang-tidy -p "$1" --quiet --warnings-as-errors="*" \
        --checks=-bugprone-suspicious-include "$2" >"$log" 2>&1 ||
        { mv "$log" "$log.failed"; exit 1; }' "$tidy_logs" "$build_dir" ||
    tidy_status=$?
  tidy_checked=$(find "$tidy_logs" -name '*.log*' | wc -l)
  shopt -s nullglob
  tidy_failed=("$tidy_logs"/*.failed)
  shopt -u nullglob
  if [[ ${#tidy_failed[@]} -gt 0 ]]; then cat "${tidy_failed[@]}"; fi
  rm -rf "$tidy_logs"
  if [[ $tidy_status -ne 0 ]]; then
    echo "clang-tidy: findings in ${#tidy_failed[@]} of $tidy_checked file(s) (above)" >&2
    exit 1
  fi
  echo "clang-tidy: $tidy_checked files, no findings"
fi

stage "CMake: install check (scripts/check-install.sh)"
bash scripts/check-install.sh "$build_dir"

# A clang build tree with RELOCK_SANITIZE=$2, without benchmarks/examples, at
# -O0 with line tables (stack traces name file and line).
sanitizer_build() {
  local dir=$1 sanitize=$2
  shift 2
  cmake_build "$dir" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_CXX_FLAGS_DEBUG="-O0 -gline-tables-only" \
    -DRELOCK_SANITIZE="$sanitize" \
    -DRELOCK_BUILD_BENCHMARKS=OFF -DRELOCK_BUILD_EXAMPLES=OFF "$@"
}

if [[ ${RELOCK_SKIP_SANITIZERS:-0} == 1 ]]; then
  join ctest
  stage "Sanitizers and fuzzing: skipped (RELOCK_SKIP_SANITIZERS=1)"
else
  stage "Sanitizers: ASan+UBSan build (clang, build-asan/, with the fuzzers)"
  # One ASan tree for the tests and the fuzzers. The gcc tests may still be
  # running (they outlast clang-tidy): they are joined after this build.
  sanitizer_build build-asan address -DRELOCK_BUILD_TESTS=ON -DRELOCK_BUILD_FUZZERS=ON
  join ctest
  background asan "Sanitizers: ASan+UBSan tests (ctest, build-asan/)" \
    env ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j4

  stage "Sanitizers: TSan build (clang, build-tsan/)"
  # relock's mutexes are std-based (lib/common/mutex.h): Debian's libabsl is
  # not instrumented, so TSan could not see absl::Mutex.
  sanitizer_build build-tsan thread -DRELOCK_BUILD_TESTS=ON
  join asan
  background tsan "Sanitizers: TSan tests (ctest, build-tsan/)" \
    env TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    ctest --test-dir build-tsan --output-on-failure -j4

  stage "Fuzzing (libFuzzer, 30 s each, all at once, build-asan/)"
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
  stage "Bazel: build (every library, tool and example target; //tests:bazel_stage)"
  bazel_started=1
  # Each layer's package is visible to exactly the layers above it (a few
  # seconds of `bazel query`).
  bash scripts/check-layers.sh --bazel
  # Every target analyses, the tests this stage does not build included.
  bazel build --config=werror --nobuild //...
  bazel build --config=werror -- //... -//tests:all -//:benchmarks -//benchmarks:all \
    -//tools/harness:all //tests:bazel_stage
  # The tests are built: this stage only runs them, beside the consumer's
  # build (a Bazel server of its own).
  # shellcheck disable=SC2016  # $? and $status belong to the inner sh
  background bazel "Bazel: tests (//tests:bazel_stage, //fuzz:all)" \
    sh -c 'status=0; bazel test --config=werror //tests:bazel_stage //fuzz:all || status=$?; bazel shutdown; exit $status'
  stage "Bazel: an outside workspace depends on @relock (tests/bazel_consumer)"
  (cd tests/bazel_consumer && bazel run //:app && bazel shutdown)
  join bazel
fi
if [[ -n ${bg_pid[tsan]:-} ]]; then join tsan; fi

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
printf '\n== All stages passed in %ds\n' $((SECONDS - start))
printf '%s\n' "${stage_times[@]}"
