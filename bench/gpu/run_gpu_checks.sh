#!/usr/bin/env bash
# The one GPU check, for a machine with an NVIDIA GPU (see docs/gpu.md), about 10 minutes on
# 16 cores:
#   1. configures and builds a Release tree (-j16): the gpu-labelled tests, the kernel and
#      model timing programs and tagc-worker;
#   2. runs `ctest -L gpu` (CUDA kernels, CUDA model and one training step, the engine on the
#      device against the CPU engine, NCCL backend) against the CPU oracle;
#   3. times the kernels (bench_kernels_gpu) and the model step (bench_model_gpu);
#   4. trains a GPT-2-small-shaped model (12 layers, width 768, 12 heads, context 1024, byte
#      vocabulary) with `tagc-worker --device cuda` for a few steps, fp32 then bf16 products,
#      and keeps their summary.json (tokens/s, model TFLOP/s, MFU, device memory).
# Every output lands under "$OUT" (default ./gpu-out); summary.txt lists the steps and the
# figures. Exit status 0 when every step passed, 1 otherwise (later steps still run).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-./gpu-out}
BUILD=${BUILD:-$ROOT/build-gpu-release}
JOBS=${JOBS:-16}
STEPS=${STEPS:-20}
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
    echo "   FAILED (exit $?, $((SECONDS - start)) s), see $OUT/$name.log" | tee -a "$OUT/summary.txt"
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
step build cmake --build "$BUILD" -j"$JOBS" --target "${gpu_tests[@]}" bench_kernels_gpu \
  bench_model_gpu tagc-worker || exit 1
step ctest timeout 300 ctest --test-dir "$BUILD" -L gpu --output-on-failure -V
step bench_kernels timeout 90 "$BUILD/bin/bench_kernels_gpu" 10
step bench_model timeout 120 "$BUILD/bin/bench_model_gpu" 10 16

# End to end: the worker on the GPU, on a corpus of this repository's text (about 1 MB).
corpus=$OUT/corpus.txt
find "$ROOT" -path "$BUILD" -prune -o -type f \( -name '*.c' -o -name '*.md' -o -name '*.h' \) \
  -print0 | sort -z | xargs -0 cat >"$corpus"
for compute in fp32 bf16; do
  rm -rf "$OUT/run-$compute"
  step "worker_$compute" timeout 150 "$BUILD/bin/tagc-worker" --device cuda --compute "$compute" \
    --corpus "$corpus" --out "$OUT/run-$compute" --layers 12 --dim 768 --heads 12 --ctx 1024 \
    --batch 16 --micro-batch 8 --steps "$STEPS" --warmup 5 --eval-every 0 --eval-windows 16 \
    --ckpt-every 0 --compress none
  if [ -f "$OUT/run-$compute/summary.json" ]; then
    cp "$OUT/run-$compute/summary.json" "$OUT/worker_$compute.summary.json"
    python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); d=s["device"]
print("worker %s: %s, %.0f tokens/s, %.1f model TFLOP/s, MFU %s, step median %.3f s, device bytes %d" % (
  d["compute"], d["name"], s["tokens_per_s"], d["model_tflops_per_s"],
  "n/a" if d["mfu"] is None else "%.1f %%" % (100 * d["mfu"]), s["step_s_median"], d["engine_bytes_peak"]))' \
      "$OUT/run-$compute/summary.json" | tee -a "$OUT/summary.txt"
  fi
done

grep -E "passed|failed|Passed|Failed" "$OUT/ctest.log" | tail -n 12 >>"$OUT/summary.txt"
grep -E "^(device|fp32|bf16)" "$OUT/bench_model.log" >>"$OUT/summary.txt" 2>/dev/null
cat "$OUT/summary.txt"
exit $status
