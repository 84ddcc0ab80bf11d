#!/usr/bin/env bash
# Disk full during asynchronous saves: the checkpoint root is a small tmpfs that a filler file
# makes full. The saves fail (logged), training goes on, nothing partial is reported valid;
# once the filler is removed the next saves succeed and the run ends with a valid checkpoint.
set -u
worker=$1
tagctl=$2
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root to mount a tmpfs"; exit 77; }
tmp=$(mktemp -d)
mnt=$tmp/ckpt
mkdir -p "$mnt"
mount -t tmpfs -o size=6m tagc-test "$mnt" || { echo "SKIP: cannot mount tmpfs"; rm -rf "$tmp"; exit 77; }
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; umount "$mnt"; rm -rf "$tmp"; }
trap cleanup EXIT
dd if=/dev/zero of="$mnt/filler" bs=1M count=5 status=none
"$worker" --steps 600 --ckpt-every 50 --ckpt-keep-last 1 --ckpt-dir "$mnt" --eval-every 0 \
  --eval-windows 8 --out "$tmp/out" --log info > "$tmp/log" 2>&1 &
pid=$!
pass=0 fail=0
check() { if [ "$1" = 0 ]; then pass=$((pass + 1)); else echo "FAILED: $2"; fail=$((fail + 1)); fi; }
for _ in $(seq 600); do grep -q "checkpoint of step .* failed" "$tmp/log" && break; sleep 0.1; done
grep -q "checkpoint of step .* failed" "$tmp/log"; check $? "a save failed while the disk was full"
valid_while_full=$("$tagctl" ckpt ls "$mnt" 2>/dev/null | grep -c "valid")
rm -f "$mnt/filler"
wait "$pid"; rc=$?; pid=
check $rc "training went on and finished (status $rc)"
[ "$valid_while_full" -eq 0 ]; check $? "no checkpoint was listed valid while the disk was full ($valid_while_full)"
"$tagctl" ckpt verify "$mnt" > "$tmp/verify" 2>&1; check $? "the checkpoints left verify"
grep -q "step-600: ok" "$tmp/verify"; check $? "the final checkpoint (step 600) is there and valid"
[ -z "$(ls "$mnt" | grep '\.tmp$')" ]; check $? "no partial directory is left"
python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["steps"] == 600' "$tmp/out/summary.json"; check $? "summary at step 600"
[ $fail -ne 0 ] && tail -5 "$tmp/log"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
