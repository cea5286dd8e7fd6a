#!/usr/bin/env bash
# Installs the Debian 12 packages relock needs to build and test, with both
# CMake and Bazel. Idempotent: installs only what is missing, and runs
# `apt-get update` only when something is missing.
#
# clang + libclang-rt-14-dev are for the sanitizer and libFuzzer builds,
# clang-tidy for the lint stage;
# llvm provides llvm-symbolizer, which turns their reports into file:line;
# lld links scripts/test.sh's builds (RELOCK_USE_LLD) several times faster
# than ld.bfd;
# iproute2 and nftables make the safety harness's network namespaces and
# partitions (tools/harness/README.md; they need root at run time).
#
# redis-server's package starts a system service on port 6379; nothing here
# needs it (tests start their own servers on free ports), so it is left alone.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  clang clang-tidy libclang-rt-14-dev llvm lld
  libabsl-dev libhiredis-dev libasio-dev libssl-dev openssl
  libgtest-dev libgmock-dev libbenchmark-dev
  redis-server iproute2 nftables
  bazel-bootstrap bazel-rules-java
)

installed() {
  dpkg -s "$1" 2>/dev/null | grep -q '^Status: install ok installed$'
}

missing=()
for package in "${packages[@]}"; do
  installed "$package" || missing+=("$package")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages are installed"
  exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then sudo=(sudo); fi
export DEBIAN_FRONTEND=noninteractive

echo "install-deps: installing ${missing[*]}"
"${sudo[@]}" apt-get update
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y --no-install-recommends "${missing[@]}"
