#!/usr/bin/env bash
# Data loader throughput against the trainer's consumption (issue 17).
# Usage: bench/data_bench.sh BUILD_DIR [TRAIN_TOKENS]
# Writes llm.c shards (tests/train/make_shards.py, 4 training shards + 1 validation shard),
# measures with bench_data the open-time scan and the sampler's tokens/s (1 thread, shards in
# the page cache), then trains the default model (tagc-worker defaults: 2 layers, width 64,
# context 64, batch 16) for 40 steps on the byte corpus and on the shards (vocab 50257) and
# prints each run's tokens/s and the loader's ratio to it (goal >= 100x).
set -eu
build=$1
ntok=${2:-20000000}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/tagc-data-bench.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
python3 "$here/../tests/train/make_shards.py" "$tmp/sh" --train-tokens "$ntok" --val-tokens 100000 --shards 4
"$build/bin/bench_data" "$tmp/sh/tiny_train_*.bin" "$tmp/sh/tiny_val_000000.bin" 64 16 | tee "$tmp/bench.txt"
sample=$(awk '/^sample_tokens_per_s/ {print $2}' "$tmp/bench.txt")
train() { # train NAME [args]: prints the run's tokens/s
  local name=$1; shift
  "$build/bin/tagc-worker" --steps 40 --eval-every 0 --eval-windows 16 --ckpt-every 0 --log warn \
    --out "$tmp/$name" "$@" >/dev/null
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tokens_per_s"])' "$tmp/$name/summary.json"
}
for case in bytes shards; do
  if [ $case = bytes ]; then tps=$(train bytes); else
    tps=$(train shards --data "$tmp/sh/tiny_train_*.bin" --val-data "$tmp/sh/tiny_val_000000.bin"); fi
  python3 -c 'import sys; s, t = float(sys.argv[1]), float(sys.argv[2]); print("default model on %-6s: %8.0f tokens/s trained; loader/consumption = %.0fx" % (sys.argv[3], t, s / t))' "$sample" "$tps" $case
done
