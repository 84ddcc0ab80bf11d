#!/usr/bin/env bash
# The project's one entry point for people and CI.
#   scripts/dev.sh run [tagctl run options]  install deps, build, run the default training job
#   scripts/dev.sh test                       install deps, build, run the default test suite
#   scripts/dev.sh deps | build               only those steps
# Idempotent: installed packages and existing builds are reused.
set -euo pipefail
cd "$(dirname "$0")/.."

DEPS=(build-essential cmake pkg-config libopenblas-dev libjansson-dev libcurl4-openssl-dev libtomlplusplus-dev
      libgloo-dev libmicrohttpd-dev libicu-dev etcd-server etcd-client fortunes python3-torch python3-numpy
      clang libclang-rt-14-dev iproute2 iptables procps nodejs prometheus gnuplot-nox
      python3-regex python3-yaml
      # kubectl and npm (tests/deploy): Debian 12 packages them as kubernetes-client and npm;
      # a kubectl or a nodejs that bundles npm, installed otherwise, is used as it is.
      $(command -v kubectl >/dev/null || echo kubernetes-client) $(command -v npm >/dev/null || echo npm))
JOBS=$(nproc)

deps() {
  local missing=()
  for p in "${DEPS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  echo "installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

build() {
  cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build/release -j"$JOBS"
}

build_asan() {
  # CUDA code is compiled (and checked) by the release tree; the sanitizer tree is host-only.
  cmake -S . -B build/asan -DCMAKE_BUILD_TYPE=Debug -DTAGC_SANITIZE=ON -DTAGC_NATIVE=OFF -DTAGC_CUDA=OFF >/dev/null
  cmake --build build/asan -j"$JOBS"
}

run_tests() {
  # Unit tests under ASan + UBSan, everything else (integration, chaos, gpu-skips) on the
  # release build; `slow` tests only when asked (scripts/dev.sh test-slow).
  ctest --test-dir build/asan -L unit --no-tests=error --output-on-failure -j"$JOBS"
  ctest --test-dir build/release -LE 'unit|slow' --no-tests=error --output-on-failure
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  deps) deps ;;
  build) deps; build ;;
  run) deps; build; exec build/release/bin/tagctl run --workers 2 --out "${TAGC_OUT:-out/default}" "$@" ;;
  test) deps; build; build_asan; run_tests ;;
  test-slow) deps; build; ctest --test-dir build/release -L slow --no-tests=error --output-on-failure ;;
  *) echo "usage: scripts/dev.sh run|test|test-slow|deps|build" >&2; exit 2 ;;
esac
