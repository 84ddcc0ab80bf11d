#!/usr/bin/env bash
# A run owns its --ckpt-dir as it owns OUT: while one run saves into a checkpoint folder, a
# second run given the same --ckpt-dir (another OUT, --no-resume) is refused at once with
# status 2 and one line naming the holder, instead of removing the first run's partial saves
# and its checkpoints by retention; once the first run is gone the folder is free again.
# And a rerun of --stop-at S over a checkpoint of step S stops at once ("already at step S:
# --stop-at S reached") instead of training on to --steps. (Before: the second run went on in
# the shared folder; the rerun trained to --steps.)
set -u
worker=$1
tagctl=$2
. "$(dirname "$0")/lib.sh"
first=
on_exit '[ -n "$first" ] && kill -9 -- -"$first" 2>/dev/null'
shared=$tmp/shared
setsid "$tagctl" run --mode static --workers 2 --steps 1000000 --ckpt-every 1000 $TINY \
  --ckpt-dir "$shared" --out "$tmp/a" > "$tmp/a.log" 2>&1 &
first=$!
wait_for 120 grep -q '"step"' "$tmp/a/metrics.jsonl" 2>/dev/null; check $? "the first run trains"
err=$(timeout 60 "$tagctl" run --workers 1 --steps 2 $TINY --no-resume --ckpt-dir "$shared" \
      --out "$tmp/b" 2>&1 >/dev/null); rc=$?
[ "$rc" -eq 2 ]; check $? "a second run on that --ckpt-dir: status 2 (got $rc)"
[ "$(printf '%s\n' "$err" | grep -c .)" -eq 1 ] &&
  printf '%s' "$err" | grep -q "checkpoint folder $shared is in use by pid [0-9]* on host $(hostname)"
check $? "one line naming the holder: $err"
timeout 120 "$tagctl" run --workers 2 --steps 2 $TINY --no-resume --ckpt-dir "$shared" \
  --out "$tmp/c" > "$tmp/c.log" 2>&1; rc=$?
[ "$rc" -eq 2 ] && grep -q "checkpoint folder $shared is in use" "$tmp/c.log"
check $? "an elastic run on that --ckpt-dir is refused too (status $rc)"
kill -INT "$first"; wait "$first"; first=
timeout 120 "$tagctl" run --workers 1 --steps 2 $TINY --no-resume --ckpt-dir "$shared" \
  --out "$tmp/b" > "$tmp/b.log" 2>&1
check $? "once the first run stopped, the folder is free again"

# --stop-at S, twice
stop() { timeout 120 "$tagctl" run --workers 1 --steps 8 --stop-at 4 --ckpt-every 2 $TINY --out "$tmp/s" > "$tmp/$1.log" 2>&1; }
stop first; check $? "a run with --stop-at 4 stops"
[ -d "$tmp/s/ckpt/step-4" ]; check $? "at its checkpoint step-4"
stop again; rc=$?
[ "$rc" -eq 0 ]; check $? "the rerun of --stop-at 4 exits 0 (got $rc)"
grep -q "already at step 4: --stop-at 4 reached" "$tmp/again.log"
check $? "it says it is already there: $(grep -m1 -o '"msg":"[^"]*step 4[^"]*"' "$tmp/again.log")"
[ ! -d "$tmp/s/ckpt/step-6" ] && [ ! -d "$tmp/s/ckpt/step-8" ]
check $? "and trains nothing past step 4 ($(ls "$tmp/s/ckpt" | tr '\n' ' '))"
finish
