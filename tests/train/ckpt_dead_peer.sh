#!/usr/bin/env bash
# A static rank dies while writing its shard (fault ckpt:mid-write): rank 0 gives up waiting
# for that shard within about one --op-timeout (the wait is bounded by the operation timeout
# plus 3x its own write time), ends with a failure naming the missing shard, and commits
# nothing. (Before: rank 0 waited 10 operation timeouts for the dead rank's shard.)
set -u
worker=$1
. "$(dirname "$0")/lib.sh"
pids=
on_exit 'kill $pids 2>/dev/null'
T=4 # --op-timeout
mkdir "$tmp/rdzv"
args="--world 2 --rendezvous $tmp/rdzv --steps 4 --ckpt-every 2 --op-timeout $T $TINY --out $tmp/out"
"$worker" --rank 0 $args > "$tmp/rank0.log" 2>&1 & p0=$!
TAGC_FAULT=ckpt:mid-write "$worker" --rank 1 $args > "$tmp/rank1.log" 2>&1 & p1=$!
pids="$p0 $p1"
wait $p1; rc1=$?
died=$(date +%s.%N)
wait $p0; rc0=$?
waited=$(python3 -c "import sys,time; print(round(time.time() - float(sys.argv[1]), 1))" "$died")
pids=
[ "$rc1" -eq 137 ]; check $? "rank 1 died in its write (status $rc1)"
[ "$rc0" -ne 0 ]; check $? "rank 0 fails (status $rc0)"
python3 -c "import sys; sys.exit(not float(sys.argv[1]) < 3 * $T)" "$waited"
check $? "rank 0 ended ${waited} s after rank 1 died (bound: 3 x --op-timeout $T s; before: 10 x)"
[ ! -e "$tmp/out/ckpt/step-2" ]; check $? "nothing was committed"
[ "$fail" -ne 0 ] && tail -5 "$tmp/rank0.log"
finish
