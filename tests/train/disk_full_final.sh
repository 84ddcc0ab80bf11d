#!/usr/bin/env bash
# The final checkpoint cannot be written (its disk is full): the run still writes its summary,
# but ends with a non-zero status and says why ("the final checkpoint (step N) was not saved:
# ... No space left on device"), and leaves no partial step-N.tmp behind. (Before: status 0,
# an empty reason, and an empty step-N.tmp folder.)
set -u
worker=$1
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root to mount a tmpfs"; exit 77; }
mnt=$tmp/ckpt
mkdir -p "$mnt"
mount -t tmpfs -o size=2m tagc-test "$mnt" || { echo "SKIP: cannot mount tmpfs"; exit 77; }
on_exit 'umount "$mnt"'
dd if=/dev/zero of="$mnt/filler" bs=64k status=none 2>/dev/null # until the disk is full
timeout 300 "$worker" --steps 4 --ckpt-every 1000 --ckpt-dir "$mnt" $TINY --out "$tmp/out" > "$tmp/log" 2>&1
rc=$?
[ "$rc" -ne 0 ]; check $? "the run fails (status $rc)"
grep -q "the final checkpoint (step 4) was not saved: .*No space left on device" "$tmp/log"
check $? "it gives the reason"
[ -z "$(ls "$mnt" | grep '\.tmp$')" ]; check $? "no partial directory is left ($(ls "$mnt" | tr '\n' ' '))"
python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["steps"] == 4' "$tmp/out/summary.json"
check $? "summary.json is written (step 4)"
[ "$fail" -ne 0 ] && tail -5 "$tmp/log"
finish
