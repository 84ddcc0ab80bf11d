#!/usr/bin/env bash
# The GPU check, run on a lent GPU machine from the bundle that bench/gpu/make_bundle.sh
# builds here (docs/gpu.md, "Running the GPU checks"):
#   BUNDLE=gpu-bundle OUT=$OUT gpu-bundle/check.sh
# The bundle brings the programs and their non-CUDA libraries; cudart, cuBLAS and NCCL come
# from the machine (the CUDA toolkit, else PyTorch's nvidia-* wheels). One time budget holds
# for everything (BUDGET_S, default 480 s, so that a rerun fits in a 15-minute lease); each
# program has its own timeout within what is left, and a step that no longer fits is skipped
# and said so. Steps, most important first: the machine and its ceilings (device copy GB/s,
# bf16 GEMM TFLOP/s through PyTorch), the gpu tests one binary at a time (kernels, model,
# engine against the CPU oracle; NCCL init/abort/re-init), the worker at GPT-2-small shape
# with the real 50257-token vocabulary (fp32, then bf16 with the same seed; losses compared),
# the kernel and model timings, compute-sanitizer memcheck and racecheck on the kernel test.
# Output in $OUT (default ./gpu-out): summary.txt (the steps, then the figures table last)
# and logs.tar.gz (every log): two files, within the device's 8. Status 0 when every step
# that ran passed, 1 otherwise, 77 when there is no GPU (after checking the bundle).
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ -z "${BUNDLE:-}" ]; then
  if [ -d "$HERE/bin" ]; then BUNDLE=$HERE; else BUNDLE=$(cd "$HERE/../.." && pwd)/gpu-bundle; fi
fi
OUT=${OUT:-./gpu-out}
BUDGET_S=${BUDGET_S:-480}
STEPS=${STEPS:-12}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOGS=$OUT/logs
mkdir -p "$LOGS"
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
FIGURES=$LOGS/figures.txt
: >"$FIGURES"
status=0
t0=$SECONDS

say() { echo "$*" | tee -a "$SUMMARY"; }
figure() { echo "$*" >>"$FIGURES"; }

finish() { # finish STATUS: the figures last (in summary.txt and on stdout), one archive of the logs
  { echo; echo "== figures"; cat "$FIGURES"; } | tee -a "$SUMMARY"
  tar -C "$OUT" -czf "$OUT/logs.tar.gz" logs 2>/dev/null && rm -rf "$LOGS"
  exit "$1"
}

# step NAME LIMIT_S COMMAND...: runs COMMAND with timeout min(LIMIT_S, budget left - 10 s)
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((BUDGET_S - (SECONDS - t0) - 10))
  if [ "$left" -lt 15 ]; then
    say "== $name: skipped (${left} s of the budget left)"
    return 2
  fi
  [ "$limit" -le "$left" ] || limit=$left
  local start=$SECONDS rc
  timeout --kill-after=5 "$limit" "$@" >"$LOGS/$name.log" 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then
    say "== $name: ok ($((SECONDS - start)) s)"
  else
    [ $rc -eq 124 ] && rc="timeout after $limit s"
    say "== $name: FAILED ($rc, $((SECONDS - start)) s): $(tail -n 3 "$LOGS/$name.log" | tr '\n' ' ' | cut -c1-300)"
    status=1
  fi
  return 0
}

[ -d "$BUNDLE/bin" ] || { say "check: no bundle at $BUNDLE (build it with bench/gpu/make_bundle.sh)"; finish 1; }
say "check: bundle $BUNDLE ($(cat "$BUNDLE/commit.txt" 2>/dev/null || echo 'no commit.txt')), budget $BUDGET_S s"

# CUDA's libraries: the toolkit's, else the ones PyTorch's wheels carry
libdirs=$BUNDLE/lib
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && libdirs=$libdirs:$d
done
if command -v python3 >/dev/null; then
  wheels=$(python3 - <<'EOF' 2>/dev/null
import glob, os
try:
    import nvidia
    roots = list(nvidia.__path__)
except Exception:
    roots = []
print(":".join(sorted(set(os.path.dirname(p) for r in roots for p in glob.glob(r + "/*/lib/*.so*")))))
EOF
)
  [ -n "$wheels" ] && libdirs=$libdirs:$wheels
fi
export LD_LIBRARY_PATH=$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
missing=0
for p in "$BUNDLE"/bin/*; do
  if ldd "$p" 2>&1 | grep -q 'not found'; then
    say "check: $(basename "$p") cannot load: $(ldd "$p" 2>&1 | grep 'not found' | awk '{print $1}' | tr '\n' ' ')"
    missing=1
  fi
done
[ $missing -eq 0 ] && say "check: every program's libraries resolve (LD_LIBRARY_PATH=$LD_LIBRARY_PATH)"

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  say "check: no GPU here (nvidia-smi -L fails): skipped"
  [ $missing -eq 0 ] || finish 1
  finish 77
fi
[ $missing -eq 0 ] || status=1
{ date -u; nvidia-smi; nvcc --version 2>/dev/null; python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)' 2>/dev/null; } >"$LOGS/machine.txt" 2>&1
figure "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)"

# 1. the ceilings to compare against, through the machine's PyTorch
step ceilings 90 python3 - <<'EOF'
import time, torch
d = torch.device("cuda")
x = torch.empty(1 << 30, dtype=torch.uint8, device=d); y = torch.empty_like(x)
for _ in range(3): y.copy_(x)
torch.cuda.synchronize(); t = time.perf_counter()
for _ in range(20): y.copy_(x)
torch.cuda.synchronize(); s = (time.perf_counter() - t) / 20
print("ceiling: device copy %.0f GB/s (read + write)" % (2 * x.numel() / s / 1e9))
a = torch.randn(8192, 8192, dtype=torch.bfloat16, device=d); b = torch.randn_like(a)
for _ in range(3): a @ b
torch.cuda.synchronize(); t = time.perf_counter()
for _ in range(10): a @ b
torch.cuda.synchronize(); s = (time.perf_counter() - t) / 10
print("ceiling: bf16 GEMM 8192^3 %.0f TFLOP/s" % (2 * 8192 ** 3 / s / 1e12))
EOF
grep -h '^ceiling' "$LOGS/ceilings.log" >>"$FIGURES" 2>/dev/null

# 2. the tests, one binary at a time
B=$BUNDLE/bin
step test_kernels_gpu 90 "$B/test_kernels_gpu"
step test_model_gpu 150 "$B/test_model_gpu"
step test_attention_flash 60 "$B/test_attention_flash"
step test_engine_gpu 150 "$B/test_engine_gpu"
step test_comm_nccl 90 "$B/test_comm_nccl"
grep -h -i -E 'nccl.*(init|abort|rebuild|shrink).*s\b' "$LOGS/test_comm_nccl.log" 2>/dev/null | head -n 6 | sed 's/^/nccl: /' >>"$FIGURES"

# 3. the worker at GPT-2-small shape on the real vocabulary: a synthetic llm.c shard
shard=$OUT/tokens.bin
python3 - "$shard" <<'EOF'
import struct, sys, random
n = 1 << 21
r = random.Random(1)
# a skewed token distribution, as in text: a third of the tokens from 64 frequent ones
tok = [r.randrange(64) if r.random() < 1 / 3 else r.randrange(50257) for _ in range(n)]
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack("<%dH" % n, *tok))
EOF
for compute in fp32 bf16; do
  rm -rf "$OUT/run-$compute"
  step "worker_$compute" 120 "$B/tagc-worker" --device cuda --compute "$compute" --data "$shard" \
    --val-data "$shard" --out "$OUT/run-$compute" --layers 12 --dim 768 --heads 12 --ctx 1024 \
    --batch 16 --micro-batch 8 --steps "$STEPS" --warmup 2 --eval-every 0 --ckpt-every 0 \
    --compress none --seed 1337
  if [ -f "$OUT/run-$compute/summary.json" ]; then
    cp "$OUT/run-$compute/summary.json" "$LOGS/worker_$compute.summary.json"
    python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); d=s.get("device", {})
mfu = d.get("mfu")
print("worker %s V=50257: %.0f tokens/s, %.1f model TFLOP/s, MFU %s, step median %.3f s, device bytes %s, final loss %.4f" % (
  d.get("compute", "?"), s["tokens_per_s"], d.get("model_tflops_per_s", 0.0),
  "n/a" if mfu is None else "%.1f %%" % (100 * mfu), s["step_s_median"], d.get("engine_bytes_peak"),
  s["final_train_loss"]))' "$OUT/run-$compute/summary.json" >>"$FIGURES"
  fi
done
if [ -f "$OUT/run-fp32/summary.json" ] && [ -f "$OUT/run-bf16/summary.json" ]; then
  python3 -c 'import json,sys; a=json.load(open(sys.argv[1]))["final_train_loss"]; b=json.load(open(sys.argv[2]))["final_train_loss"]
print("worker: loss fp32 %.4f, bf16 %.4f, relative difference %.2e%s" % (a, b, abs(a-b)/abs(a), "" if abs(a-b) <= 0.02*abs(a) else " (over 2 %: FAILED)"))' \
    "$OUT/run-fp32/summary.json" "$OUT/run-bf16/summary.json" >>"$FIGURES"
  grep -q "FAILED" "$FIGURES" && status=1
fi
rm -f "$shard"

# 4. timings, then the sanitizers on the kernel test
step bench_model_gpu 130 "$B/bench_model_gpu" 10 16
grep -h -E '^(device|fp32|bf16)' "$LOGS/bench_model_gpu.log" 2>/dev/null | sed 's/^/model: /' >>"$FIGURES"
step bench_kernels_gpu 60 "$B/bench_kernels_gpu" 10
grep -h -E 'GB/s' "$LOGS/bench_kernels_gpu.log" 2>/dev/null | head -n 20 | sed 's/^/kernels: /' >>"$FIGURES"
if command -v compute-sanitizer >/dev/null; then
  step memcheck 120 compute-sanitizer --tool memcheck --error-exitcode 1 "$B/test_kernels_gpu" quick
  step racecheck 150 compute-sanitizer --tool racecheck --error-exitcode 1 "$B/test_kernels_gpu" quick
else
  say "== sanitizers: skipped (no compute-sanitizer)"
fi
say "check: $((SECONDS - t0)) s of $BUDGET_S"
finish $status
