#!/usr/bin/env bash
# GPU checks of the CUDA kernels, for a machine with an NVIDIA GPU (see docs/gpu.md):
# configures and builds a Release tree (only the gpu-labelled tests and the timing
# program, -j16), runs `ctest -L gpu --output-on-failure` and bench_kernels_gpu, and saves
# every output under "$OUT" (default ./gpu-out). Exit status: 0 when the tests pass, 1 when
# any step fails (the later steps still run where they can). About 3-6 minutes on 16 cores.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-./gpu-out}
BUILD=${BUILD:-$ROOT/build-gpu-release}
JOBS=${JOBS:-16}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
status=0

step() { # step NAME COMMAND...: runs COMMAND, output to $OUT/NAME.log, records failure
  local name=$1
  shift
  echo "== $name: $*" | tee -a "$OUT/summary.txt"
  if "$@" >"$OUT/$name.log" 2>&1; then
    echo "   ok" | tee -a "$OUT/summary.txt"
  else
    echo "   FAILED (exit $?), see $OUT/$name.log" | tee -a "$OUT/summary.txt"
    status=1
    return 1
  fi
}

: >"$OUT/summary.txt"
{ date -u; git -C "$ROOT" rev-parse HEAD; nvidia-smi; nvcc --version; } >"$OUT/machine.txt" 2>&1

step configure cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DTAGC_SANITIZE=OFF || exit 1
# The gpu-labelled tests are named after their executables (tagc_add_test).
mapfile -t gpu_tests < <(ctest --test-dir "$BUILD" -L gpu -N | sed -n 's/^ *Test *#[0-9]*: *//p')
echo "gpu tests: ${gpu_tests[*]}" | tee -a "$OUT/summary.txt"
step build cmake --build "$BUILD" -j"$JOBS" --target "${gpu_tests[@]}" bench_kernels_gpu || exit 1
step ctest timeout 420 ctest --test-dir "$BUILD" -L gpu --output-on-failure
step bench timeout 120 "$BUILD/bin/bench_kernels_gpu" 10
cp "$OUT/bench.log" "$OUT/bench.txt" 2>/dev/null
tail -n 3 "$OUT/ctest.log" | tee -a "$OUT/summary.txt"
exit $status
