#!/bin/sh
# Tokens/s of one training step (forward + backward + clipping + AdamW) of the C model against
# the same model in torch (Debian python3-torch, /usr/bin/python3), same batch shape, same
# thread count, for a tiny config and a ~10M-parameter config. C and torch runs alternate
# ROUNDS times and the median of the per-run medians is reported, since the machine is shared.
# On a loaded machine set OMP_WAIT_POLICY=passive (both sides use libgomp): spinning OpenMP
# threads that lose their core to another process slow both sides by 10x or more.
#
# Usage: bench/model_vs_torch.sh [BUILD_DIR [THREADS [ROUNDS]]]
#   BUILD_DIR  a configured build with the bench_model_step target (default: build)
#   THREADS    OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = torch.set_num_threads (default: 2)
#   ROUNDS     alternating C/torch runs per config (default: 3)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
threads=${2:-2}
rounds=${3:-3}

cmake --build "$build" --target bench_model_step >/dev/null
bin=$(find "$build" -name bench_model_step -type f -perm -u+x | head -n 1)
[ -n "$bin" ] || { echo "bench_model_step not found under $build" >&2; exit 1; }
py=/usr/bin/python3
"$py" -c "import torch" 2>/dev/null || { echo "torch is not importable by $py" >&2; exit 1; }

export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
echo "threads: $threads (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, torch.set_num_threads);" \
  "OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset}; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "libblas.so.3 alternative used by torch:"
update-alternatives --display libblas.so.3-x86_64-linux-gnu 2>/dev/null | sed -n '1,3p' | sed 's/^/  /'
"$py" "$here/torch_step.py" 1 64 4 16 1 1 0 "$threads" | sed -n 1p | sed "s/^/  /"
blas=$(ldd "$bin" | grep -o "/[^ ]*blas[^ ]*" | sed -n 1p)
echo "C model BLAS: $blas -> $(readlink -f "$blas")"

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }

for cfg in "2 64 4 64 16 30 5" "6 384 6 128 8 10 3"; do
  c_runs="" t_runs=""
  for _ in $(seq "$rounds"); do
    c_runs="$c_runs $("$bin" $cfg | field tokens_per_s)"
    t_runs="$t_runs $("$py" "$here/torch_step.py" $cfg "$threads" | tail -n 1 | field tokens_per_s)"
  done
  c=$(echo "$c_runs" | tr ' ' '\n' | grep . | median)
  t=$(echo "$t_runs" | tr ' ' '\n' | grep . | median)
  set -- $cfg
  printf 'L=%s C=%s NH=%s T=%s B=%s: C %s tokens/s, torch %s tokens/s, ratio %s (runs C:%s torch:%s)\n' \
    "$1" "$2" "$3" "$4" "$5" "$c" "$t" "$(awk -v a="$c" -v b="$t" 'BEGIN { printf "%.2f", a / b }')" \
    "$c_runs" "$t_runs"
done
