#!/usr/bin/env bash
# Median over RUNS runs of tagc_bench_kernels --ops decode (each run: best of REPS, memcpy of
# the same bytes timed alongside), per thread count: decode GB/s, memcpy GB/s, ratio.
# Usage: bench/kernels/decode_median.sh BIN_DIR [SIZE_M=4] [RUNS=7] [REPS=10] [THREADS=1,2]
set -euo pipefail
if [ $# -lt 1 ] || [ ! -x "$1/tagc_bench_kernels" ]; then
  echo "usage: $0 BIN_DIR [SIZE_M=4] [RUNS=7] [REPS=10] [THREADS=1,2]" >&2
  exit 2
fi
bin=$1 size=${2:-4} runs=${3:-7} reps=${4:-10} threads=${5:-1,2}
for ((i = 0; i < runs; i++)); do
  "$bin/tagc_bench_kernels" --sizes "$size" --threads "$threads" --reps "$reps" --ops decode |
    grep '| decode |'
done | python3 -c '
import statistics, sys
by = {}
for line in sys.stdin:
    f = [x.strip() for x in line.split("|")]
    by.setdefault(int(f[2]), []).append((float(f[4]), float(f[5]), float(f[6])))
for t, v in sorted(by.items()):
    med = [statistics.median(x[i] for x in v) for i in range(3)]
    print("threads %d: decode %.2f GB/s, memcpy %.2f GB/s, ratio %.3f (median of %d; ratios %s)"
          % (t, med[0], med[1], med[2], len(v), " ".join("%.2f" % x[2] for x in v)))
'
