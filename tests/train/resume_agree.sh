#!/usr/bin/env bash
# The ranks of a generation resume from one checkpoint, or do not train at all. Two static
# workers whose checkpoint folders differ (rank 0 sees step-4, rank 1 only step-2, as with
# storage that is not shared or not yet in sync) must both refuse before the first step,
# naming both choices. (Before: each opened its own newest checkpoint and they trained
# together from different steps.) Then, with the same folder, they agree and resume.
set -u
worker=$1
tagctl=$2
. "$(dirname "$0")/lib.sh"
pids=
on_exit 'kill $pids 2>/dev/null'
timeout 300 "$tagctl" run --mode static --workers 2 --steps 4 --ckpt-every 2 $TINY --out "$tmp/a" \
  > "$tmp/prep.log" 2>&1
check $? "a 4-step run saves step-2 and step-4"
mkdir -p "$tmp/b/ckpt"
cp -r "$tmp/a/ckpt/step-2" "$tmp/b/ckpt/"

# start_pair OUT CKPT_DIR_0 CKPT_DIR_1: two ranks, rendezvous in OUT; waits for both
start_pair() {
  local out=$1 rc0 rc1
  mkdir -p "$out/rdzv"
  "$worker" --rank 0 --world 2 --rendezvous "$out/rdzv" --ckpt-dir "$2" --steps 6 --ckpt-every 0 \
    --op-timeout 20 $TINY --out "$out" > "$out/rank0.log" 2>&1 & local p0=$!
  "$worker" --rank 1 --world 2 --rendezvous "$out/rdzv" --ckpt-dir "$3" --steps 6 --ckpt-every 0 \
    --op-timeout 20 $TINY --out "$out" > "$out/rank1.log" 2>&1 & local p1=$!
  pids="$p0 $p1"
  wait $p0; rc0=$?
  wait $p1; rc1=$?
  pids=
  echo "$rc0 $rc1"
}
rcs=$(start_pair "$tmp/mixed" "$tmp/a/ckpt" "$tmp/b/ckpt")
[ "$rcs" != "0 0" ] && [ "${rcs% *}" != 0 ] && [ "${rcs#* }" != 0 ]; check $? "both ranks refuse (status $rcs)"
for r in 0 1; do
  grep -q "different checkpoints (rank 0: step 4 (manifest [0-9a-f]*), rank 1: step 2 (manifest" \
    "$tmp/mixed/rank$r.log"; check $? "rank $r names both resume points"
done
n=$(cat "$tmp/mixed/metrics.jsonl" 2>/dev/null | wc -l)
[ "$n" -eq 0 ]; check $? "no step was trained ($n metrics lines)"

rcs=$(start_pair "$tmp/same" "$tmp/a/ckpt" "$tmp/a/ckpt")
[ "$rcs" = "0 0" ]; check $? "with one checkpoint folder both ranks resume and finish (status $rcs)"
grep -q "resuming from .*step-4 (step 4" "$tmp/same/rank0.log"; check $? "they resumed step 4"
[ "$fail" -ne 0 ] && tail -n 5 "$tmp/mixed/rank0.log" "$tmp/mixed/rank1.log"
finish
