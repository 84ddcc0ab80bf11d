#!/usr/bin/env bash
# In elastic mode a worker that cannot use the folder's checkpoint (another model) exits with
# the real reason, as a static run does, not with a later error of its clean-up (leaving the
# job revokes the etcd lease, whose reply once replaced the message with
# "JSON key 'grantedTTL' is missing").
set -u
tagctl=$1
. "$(dirname "$0")/lib.sh"
command -v etcd > /dev/null || { echo "SKIP: no etcd"; exit 77; }
timeout 300 "$tagctl" run --workers 2 --steps 2 --ckpt-every 2 $TINY --out "$tmp/out" > "$tmp/first.log" 2>&1
check $? "an elastic 2-worker run saves step 2"
timeout 300 "$tagctl" run --workers 2 --steps 4 --ckpt-every 2 $TINY --dim 64 --out "$tmp/out" \
  > "$tmp/second.log" 2>&1
rc=$?
[ "$rc" -ne 0 ]; check $? "a run of another model in that folder fails (status $rc)"
grep -q "^tagc-worker: checkpoint .*step-2 is of another model" "$tmp/second.log"
check $? "the workers say why: $(grep '^tagc-worker:' "$tmp/second.log" | head -1)"
finish
