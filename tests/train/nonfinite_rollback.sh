#!/usr/bin/env bash
# Issue 14, defect 5: K consecutive non-finite steps (--max-nonfinite-skips, default 3) roll
# back to the newest valid checkpoint; steps that stay non-finite after it fail the run.
# W = 2, tagc with sketches, 10 steps, a checkpoint every 2 steps (none is taken on a skipped
# step, so the newest valid one is from before the bad steps). Checks:
#  1. transient NaNs at step indices 4, 5, 6 on rank 1 (nan@4,nan@5,nan@6): the run
#     completes, logs one rollback to step-4, summary.json says nonfinite_skips 3 and
#     nonfinite_rollbacks 1, and the final parameters are bit-identical to a run without the
#     fault (the replay from step 4 is the same math);
#  2. a bad batch range (nan@4-6: non-finite each time those steps run): one rollback, then
#     the same steps are non-finite again and the run fails (non-zero exit) saying why,
#     instead of rolling back forever;
#  3. the same without checkpoints (--ckpt-every 0): fails at once, "no checkpoint";
#  4. bad nan specs exit 2 with one line;
#  5. /metrics of a worker (W = 1) that skipped a step: tagc_worker_nonfinite_skips_total 1
#     (scraped while the worker hangs on a later fault, then the worker is killed).
set -u
here=$(cd "$(dirname "$0")" && pwd)
tagctl=$1 worker=$2
. "$here/lib.sh"
args="$TINY --workers 2 --steps 10 --log warn --compress tagc,mlp=tagc:0.1:4 --ckpt-every 2"
field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$@"; }

"$tagctl" run $args --out "$tmp/clean" --dump-params "$tmp/clean.bin" > "$tmp/clean.log" 2>&1
check $? "the run without fault completes"

"$tagctl" run $args --fault nan@4,nan@5,nan@6 --fault-rank 1 --out "$tmp/transient" \
  --dump-params "$tmp/transient.bin" > "$tmp/transient.log" 2>&1
check $? "transient: the run completes"
check "$([ "$(grep -c 'rolled back to .*step-4 (step 4) after 3 consecutive non-finite steps (5-7)' "$tmp/transient.log")" = 1 ]; echo $?)" \
  "transient: one rollback to step 4 is logged"
check "$([ "$(field "$tmp/transient/summary.json" nonfinite_skips)" = 3 ]; echo $?)" "transient: nonfinite_skips 3"
check "$([ "$(field "$tmp/transient/summary.json" nonfinite_rollbacks)" = 1 ]; echo $?)" "transient: nonfinite_rollbacks 1"
cmp -s "$tmp/clean.bin" "$tmp/transient.bin"
check $? "transient: final parameters == the run without fault"

"$tagctl" run $args --fault nan@4-6 --fault-rank 1 --out "$tmp/bad" > "$tmp/bad.log" 2>&1
check "$([ $? -ne 0 ]; echo $?)" "bad batches: the run fails"
check "$([ "$(grep -c 'rolled back to .*step-4' "$tmp/bad.log")" = 1 ]; echo $?)" "bad batches: exactly one rollback"
grep -q 'consecutive non-finite steps again after rolling back at step 7.*giving up' "$tmp/bad.log"
check $? "bad batches: the failure says why"
check "$([ ! -e "$tmp/bad/summary.json" ]; echo $?)" "bad batches: no summary of a finished run"

"$tagctl" run $args --ckpt-every 0 --fault nan@4-6 --fault-rank 1 --out "$tmp/nockpt" > "$tmp/nockpt.log" 2>&1
check "$([ $? -ne 0 ]; echo $?)" "no checkpoints: the run fails"
grep -q '3 consecutive non-finite steps and no checkpoint to roll back to' "$tmp/nockpt.log"
check $? "no checkpoints: the failure says why"

# bad nan specs: exit 2 and one line naming the item
for spec in nan@ nan@5-3 nan@-1 nan@4- nan@x nan@1,nan@2,nan@3,nan@4,nan@5,nan@6,nan@7,nan@8,nan@9; do
  "$worker" $TINY --steps 1 --fault "$spec" --out "$tmp/badspec" > "$tmp/badspec.out" 2>&1
  rc=$?
  check "$([ $rc = 2 ] && [ "$(wc -l < "$tmp/badspec.out")" = 1 ] && grep -q "fault 'nan@" "$tmp/badspec.out"; echo $?)" \
    "--fault $spec: exit 2 with one line (got $rc: $(cat "$tmp/badspec.out"))"
done

# /metrics: a free port, a W = 1 worker that skips step index 2 and hangs at step 5 (the
# hang lasts 3 operation timeouts: the scrape has that long).
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$worker" $TINY --steps 10 --log warn --ckpt-every 0 --op-timeout 30 --fault nan@2,hang@5 \
  --metrics-addr "127.0.0.1:$port" --out "$tmp/prom" > "$tmp/prom.log" 2>&1 &
pid=$!
on_exit "kill $pid 2>/dev/null; wait $pid 2>/dev/null"
scrape() {
  python3 - "$port" <<'PY'
import sys, urllib.request
body = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=5).read().decode()
# every sample carries the tagc_job label: tagc_worker_step{tagc_job="default"} 5
vals = {l.split(" ")[0].split("{")[0]: l.split(" ")[1] for l in body.splitlines()
        if l and not l.startswith("#")}
ok = vals.get("tagc_worker_step") == "5" and vals.get("tagc_worker_nonfinite_skips_total") == "1"
ok = ok and "# TYPE tagc_worker_nonfinite_skips_total counter" in body
sys.exit(0 if ok else 1)
PY
}
wait_for 80 scrape
check $? "/metrics: nonfinite_skips_total 1 at step 5"
kill "$pid" 2>/dev/null
[ "$fail" -eq 0 ] || tail -n 15 "$tmp"/*.log
finish
