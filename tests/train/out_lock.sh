#!/usr/bin/env bash
# A run owns its output folder. While `tagctl run --out X` runs, a second `tagctl run --out X`
# and a hand-started worker writing to X are refused at once with status 2 and one line that
# names the holder (pid, host); X is left as the first run wrote it. Once the owner is gone
# (stopped, or killed: the kernel drops the lock of a dead process), X is free again.
# (Before: both runs went on, tearing metrics.jsonl and replacing each other's checkpoints.)
set -u
worker=$1
tagctl=$2
. "$(dirname "$0")/lib.sh"
first=
on_exit '[ -n "$first" ] && kill -9 -- -"$first" 2>/dev/null'
out=$tmp/out
# the first run: long enough to outlive the checks below, stopped by them
setsid "$tagctl" run --mode static --workers 2 --steps 1000000 --ckpt-every 1000 $TINY --out "$out" \
  > "$tmp/first.log" 2>&1 &
first=$!
holds() { grep -Eq "\"pid\": ?$1[,}]" "$out/.lock" 2>/dev/null; } # holds PID: the lock names it
wait_for 120 holds "$first"; check $? "the first run owns the folder"
wait_for 120 grep -q '"step"' "$out/metrics.jsonl" 2>/dev/null; check $? "the first run trains"

expect_refused() { # expect_refused NAME HOLDER_PID COMMAND...
  local name=$1 holder=$2 err rc; shift 2
  err=$("$@" 2>&1 >/dev/null); rc=$?
  [ "$rc" -eq 2 ]; check $? "$name: status 2 (got $rc)"
  [ "$(printf '%s\n' "$err" | grep -c .)" -eq 1 ] && printf '%s' "$err" | grep -q "in use by pid $holder on host $(hostname)"
  check $? "$name: one line naming the holder: $err"
}
expect_refused "second tagctl run" "$first" timeout 60 "$tagctl" run --workers 1 --steps 2 $TINY --dim 64 --out "$out"
expect_refused "second tagctl run, elastic" "$first" timeout 60 "$tagctl" run --workers 2 --steps 2 $TINY --out "$out"
expect_refused "a worker by hand" "$first" timeout 60 "$worker" --steps 2 $TINY --out "$out"
grep -q '"dim": 32' "$out/job.json"; check $? "job.json is still the first run's"

kill -INT "$first"; wait "$first"; first=
run_ok() { timeout 120 "$tagctl" run --workers 1 --steps 2 $TINY --no-resume --out "$out" > "$tmp/next.log" 2>&1; }
run_ok; check $? "after the first run stopped, a new run in the folder works"

# a holder killed outright: its lock goes with it
setsid "$worker" --steps 1000000 $TINY --out "$out" --no-resume > "$tmp/third.log" 2>&1 &
third=$!
wait_for 120 holds "$third"; check $? "a worker started by hand owns the folder"
expect_refused "tagctl run while a worker holds the folder" "$third" timeout 60 "$tagctl" run --workers 1 --steps 2 $TINY --out "$out"
kill -9 "$third"; wait "$third" 2>/dev/null
run_ok; check $? "after the holder was killed, a new run works"
finish
