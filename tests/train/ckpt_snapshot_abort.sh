#!/usr/bin/env bash
# A checkpoint whose snapshot failed is never committed. Two static ranks with tagc
# compression (the snapshot reduce-scatters the residuals); rank 1 aborts its communicator as
# its snapshot of step 2 begins (fault ckpt:abort-snapshot, what a newer generation or a lost
# lease does), so that snapshot fails on both ranks. The save must be abandoned on every rank:
# no step-2 committed or left half-written, the run fails naming the abandoned checkpoint.
# (Before: both ranks handed their partly stale buffers to the saver and rank 0 committed a
# step-2 that verified fully.)
set -u
tagctl=$1
. "$(dirname "$0")/lib.sh"
timeout 300 "$tagctl" run --mode static --workers 2 --compress tagc --steps 4 --ckpt-every 2 $TINY \
  --fault ckpt:abort-snapshot --fault-rank 1 --out "$tmp/out" > "$tmp/log" 2>&1
rc=$?
[ "$rc" -ne 0 ]; check $? "the run fails (status $rc)"
grep -q "checkpoint of step 2 abandoned" "$tmp/log"; check $? "the failure names the abandoned checkpoint"
[ ! -e "$tmp/out/ckpt/step-2" ]; check $? "step-2 was not committed"
[ ! -e "$tmp/out/ckpt/step-2.tmp" ]; check $? "step-2 was not written"
"$tagctl" ckpt verify "$tmp/out/ckpt" > "$tmp/verify" 2>&1
grep -q "step-2" "$tmp/verify"; [ $? -ne 0 ]; check $? "ckpt verify knows no step 2"
[ "$fail" -ne 0 ] && tail -20 "$tmp/log"
finish
