#!/usr/bin/env bash
# GPU checks of the CUDA model (worker/model_cuda.h), for a machine with an NVIDIA GPU:
# configures a Release tree, builds test_model_gpu and bench_model_gpu (-j16), runs the test
# (full training step against the CPU oracle, fp32 and bf16, plus each kernel alone and the
# out-of-memory case) and the GPT-2-small step benchmark, and saves every output under
# "$OUT" (default ./gpu-out): summary.txt, machine.txt, configure.log, build.log,
# test.log, bench.log, memcheck.log (the test under compute-sanitizer, at most 2 minutes).
# Exit status 0 when every step passed, 1 otherwise (later steps still run where they
# can). About 3-6 minutes on 16 cores.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-./gpu-out}
BUILD=${BUILD:-$ROOT/build-gpu-model}
JOBS=${JOBS:-16}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
status=0

step() { # step NAME COMMAND...: runs COMMAND, output to $OUT/NAME.log, records failure
  local name=$1
  shift
  echo "== $name: $*" | tee -a "$OUT/summary.txt"
  local start=$SECONDS
  if "$@" >"$OUT/$name.log" 2>&1; then
    echo "   ok ($((SECONDS - start)) s)" | tee -a "$OUT/summary.txt"
  else
    echo "   FAILED (exit $?, $((SECONDS - start)) s), see $OUT/$name.log" |
      tee -a "$OUT/summary.txt"
    status=1
    return 1
  fi
}

: >"$OUT/summary.txt"
{ date -u; git -C "$ROOT" rev-parse HEAD; nvidia-smi; nvcc --version; } >"$OUT/machine.txt" 2>&1

step configure cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DTAGC_SANITIZE=OFF \
  || exit 1
step build cmake --build "$BUILD" -j"$JOBS" --target test_model_gpu bench_model_gpu || exit 1
step test timeout 240 ctest --test-dir "$BUILD" -R '^test_model_gpu$' --output-on-failure -V
step bench timeout 240 "$BUILD/bin/bench_model_gpu" 10 16
# Last and bounded: the test under compute-sanitizer's memcheck (out-of-bounds and
# misaligned accesses, launch errors), where the toolkit has it.
SANITIZER=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ -x "$SANITIZER" ]; then
  # API errors are not reported: the test provokes cudaMalloc failures on purpose.
  step memcheck timeout 120 "$SANITIZER" --tool memcheck --report-api-errors no --error-exitcode 1 \
    "$BUILD/bin/test_model_gpu"
fi
grep -E "passed|FAILED" "$OUT/test.log" | tail -n 20 >>"$OUT/summary.txt"
grep -E "^(device|fp32|bf16)" "$OUT/bench.log" >>"$OUT/summary.txt"
cat "$OUT/summary.txt"
exit $status
