#!/usr/bin/env bash
# Checkpoint costs: step-time stall of asynchronous saves (mean step time with a save every K
# steps vs none), save write throughput vs dd of the same bytes with fsync to the same disk,
# and load (resume) time at another world size.
#   usage: bench/ckpt_bench.sh BUILD_DIR [DIR_ON_THE_DISK_TO_TEST]
set -euo pipefail
bin=$(readlink -f "$1")/bin
dir=$(mktemp -d "${2:-/tmp}/tagc-ckpt-bench.XXXXXX")
trap 'rm -rf "$dir"' EXIT
model="--layers 6 --dim 384 --heads 6 --ctx 128 --batch 8 --eval-every 0 --eval-windows 8 --log info"
steps=30
run() { # run NAME EXTRA... -> mean step seconds
  "$bin/tagctl" run --workers 1 --steps $steps $model --out "$dir/$1" "${@:2}" > /dev/null 2> "$dir/$1.log"
  python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(s["wall_s"] / s["steps_this_run"])' "$dir/$1/summary.json"
}
base=$(run none --ckpt-every 0)
with=$(run saves --ckpt-every 5 --ckpt-keep-last 2)
bytes=$(du -sb "$dir/saves/ckpt/step-$steps" | cut -f1)
python3 -c "import sys; b,w=map(float,sys.argv[1:]); print('mean step: %.1f ms without saves, %.1f ms with a save every 5 steps: stall %.1f %% of a step' % (1e3*b, 1e3*w, 100*(w-b)/b))" "$base" "$with"
# write throughput of a save (its background write + fsync, from the saver's own clock) vs dd
write_s=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ckpt"]["last_write_s"])' "$dir/saves/summary.json")
dd_s=$( { /usr/bin/time -f %e dd if=/dev/zero of="$dir/dd.bin" bs=1M count=$((bytes / 1048576)) conv=fsync status=none; } 2>&1 )
python3 -c "import sys; n,w,d=map(float,sys.argv[1:]); print('save of %.0f MB: %.2f s (%.0f MB/s); dd with fsync of the same bytes: %.2f s (%.0f MB/s); ratio %.2fx' % (n/1e6, w, n/1e6/w, d, n/1e6/d, d/w))" "$bytes" "$write_s" "$dd_s"
# load at another world size: resume the W=1 checkpoint with 2 workers, time to the first step
t0=$(date +%s.%N); "$bin/tagctl" run --workers 2 --steps $((steps + 2)) $model --out "$dir/saves" --ckpt-every 0 > /dev/null 2>&1; t1=$(date +%s.%N)
python3 -c "import sys; a,b=map(float,sys.argv[1:]); print('resume at W=2 from the W=1 checkpoint (full CRC verify, resharded reads) + 1 step: %.2f s' % (b-a))" "$t0" "$t1"
