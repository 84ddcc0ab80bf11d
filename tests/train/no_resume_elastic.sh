#!/usr/bin/env bash
# --no-resume means "do not resume from what was on disk at the start": the first generation
# starts at step 0 whatever the folder holds, and every later generation resumes from the
# checkpoint its plan names (this job's committed record), like a run without --no-resume.
# (Before: every generation ignored the plan, so a crash at step 30 with step 20 committed
# restarted from step 0: "the plan resumes from step 20; this rank found step 0", 30 steps
# recomputed.) The disk path: --mirror-every 0 (with the in-memory copies the generation after
# the crash rebuilds step 30 from memory; tests/chaos/test_mirror.py).
set -u
tagctl=$1
. "$(dirname "$0")/lib.sh"
command -v etcd > /dev/null || { echo "SKIP: no etcd"; exit 77; }
out=$tmp/out
# an earlier run of the same job leaves step-40 in the folder: --no-resume must not use it
timeout 300 "$tagctl" run --workers 2 --steps 40 --ckpt-every 10 --compress none $TINY \
  --out "$out" > "$tmp/first.log" 2>&1
check $? "an earlier run saves step-40"
timeout 300 "$tagctl" run --workers 2 --no-resume --fault crash@30 --steps 60 --ckpt-every 10 \
  --compress none --mirror-every 0 $TINY --out "$out" > "$tmp/run.log" 2>&1
rc=$?
[ "$rc" -eq 0 ]; check $? "the --no-resume run with a crash at step 30 finishes (status $rc)"
! grep -q "this rank found step 0" "$tmp/run.log"
check $? "no rank ignores the plan's resume point: $(grep -m1 'this rank found' "$tmp/run.log")"
first=$(grep -m1 -o "resuming from [^ ]*" "$tmp/run.log")
case "$first" in
  *step-20|*step-30) check 0 "";;
  *) check 1 "the generation after the crash resumes from the plan's step-20 or step-30 (got '$first')";;
esac
! grep -q "resuming from .*step-40" "$tmp/run.log"
check $? "the first generation does not resume from the earlier run's step-40"
lost=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["steps_lost"])' "$out/summary.json")
[ "$lost" -le 10 ]; check $? "at most one checkpoint interval recomputed (steps_lost $lost)"
steps=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["steps"])' "$out/summary.json")
[ "$steps" -eq 60 ]; check $? "the job finished at step 60 ($steps)"
finish
