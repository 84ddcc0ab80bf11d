#!/usr/bin/env bash
# When every checkpoint of a run is invalid, a rerun does not silently start over from step 0:
# it refuses (non-zero status, one clear reason) unless TAGC_ALLOW_RESTART_FROM_SCRATCH=1
# says so, and then it says loudly that it restarts from step 0. (Before: it logged one
# warning per checkpoint and trained from step 0 with status 0.)
set -u
tagctl=$1
. "$(dirname "$0")/lib.sh"
args="--mode static --workers 2 --steps 6 --ckpt-every 2 $TINY --out $tmp/out"
timeout 300 "$tagctl" run $args --stop-at 4 > "$tmp/first.log" 2>&1
check $? "4 of 6 steps run, steps 2 and 4 saved"
for f in "$tmp"/out/ckpt/step-*/rank-00001.bin; do # one flipped payload byte each
  printf '\x55' | dd of="$f" bs=1 seek=200 conv=notrunc status=none
done
timeout 300 "$tagctl" run $args > "$tmp/refused.log" 2>&1
rc=$?
[ "$rc" -ne 0 ]; check $? "the rerun refuses (status $rc)"
grep -q "refusing to restart from step 0" "$tmp/refused.log"; check $? "it says why"
n=$(grep -c '"step"' "$tmp/out/metrics.jsonl")
[ "$n" -eq 4 ]; check $? "nothing was trained again ($n metrics lines)"
TAGC_ALLOW_RESTART_FROM_SCRATCH=1 timeout 300 "$tagctl" run $args > "$tmp/allowed.log" 2>&1
check $? "with TAGC_ALLOW_RESTART_FROM_SCRATCH=1 it trains"
grep -q "RESTARTING FROM STEP 0" "$tmp/allowed.log"; check $? "and says it restarts from step 0"
python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); assert s["steps"] == 6 and s["resumed_from"] == 0' \
  "$tmp/out/summary.json"; check $? "from step 0 to step 6"
finish
