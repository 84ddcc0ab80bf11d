#!/usr/bin/env bash
# Issue 14, defect 5: one policy for a non-finite gradient. A NaN put into rank 1's local
# gradient at step index 3 (fault nan@3) of a W = 2 run, for each compression path: none
# (fp32 reduce-scatter), bf16, tagc with sketches (rho fixed at 4 on the MLP, so the sketch
# path and its error-feedback residual are exercised) and auto. Checks:
#  - the run completes (exit 0) and summary.json says nonfinite_skips 1, no rollback;
#  - metrics.jsonl has one row per step and exactly step 4's row has nonfinite_skips 1;
#  - a second run stopped right after the bad step (--stop-at 4, checkpoint every step): the
#    checkpoint after it (step-4) holds the state of the one before it (step-3) on every
#    rank's shard: parameters and AdamW moments bit for bit, residuals value for value (and,
#    for tagc, non-zero residuals), while a normal step (step-2 -> step-3) changes them —
#    so every rank skipped the same step and nothing moved. (No compression warm-up: the
#    sketch and its residual from step 1.)
set -u
here=$(cd "$(dirname "$0")" && pwd)
tagctl=$1
. "$here/lib.sh"
args="$TINY --workers 2 --steps 6 --log warn --fault nan@3 --fault-rank 1 --compress-warmup 0"
field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$@"; }
for c in none bf16 tagc,mlp=tagc:0.1:4 auto; do
  name=${c%%,*}
  "$tagctl" run --compress "$c" $args --ckpt-every 2 --out "$tmp/$name" > "$tmp/$name.log" 2>&1
  check $? "$name: the run completes"
  check "$([ "$(field "$tmp/$name/summary.json" nonfinite_skips)" = 1 ]; echo $?)" \
    "$name: summary nonfinite_skips 1 (got $(field "$tmp/$name/summary.json" nonfinite_skips))"
  check "$([ "$(field "$tmp/$name/summary.json" nonfinite_rollbacks)" = 0 ]; echo $?)" "$name: no rollback"
  rows=$(python3 -c 'import json,sys; print(" ".join("%d:%d" % (r["step"], r["nonfinite_skips"]) for r in map(json.loads, open(sys.argv[1]))))' "$tmp/$name/metrics.jsonl")
  check "$([ "$rows" = "1:0 2:0 3:0 4:1 5:0 6:0" ]; echo $?)" "$name: metrics rows (step:skipped) $rows"
  grep -q 'step 4: non-finite values.*step skipped on every rank' "$tmp/$name.log"
  check $? "$name: the skip is logged"

  "$tagctl" run --compress "$c" $args --stop-at 4 --ckpt-every 1 --ckpt-keep-last 0 \
    --out "$tmp/$name-stop" > "$tmp/$name-stop.log" 2>&1
  check $? "$name: the run stopped after the bad step completes"
  python3 "$here/ckpt_state.py" same "$tmp/$name-stop/ckpt/step-3" "$tmp/$name-stop/ckpt/step-4" > "$tmp/$name.same"
  check $? "$name: state after the skipped step == state before it: $(cat "$tmp/$name.same")"
  python3 "$here/ckpt_state.py" differ "$tmp/$name-stop/ckpt/step-2" "$tmp/$name-stop/ckpt/step-3" > "$tmp/$name.differ"
  check $? "$name: a normal step changes the state: $(cat "$tmp/$name.differ")"
  if [ "$name" = tagc ]; then
    grep -q 'non-zero residual elements: [1-9]' "$tmp/$name.same"
    check $? "tagc: the compared residuals are not all zero"
  fi
done
[ "$fail" -eq 0 ] || tail -n 20 "$tmp"/*.log
finish
