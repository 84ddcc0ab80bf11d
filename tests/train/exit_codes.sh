#!/usr/bin/env bash
# The exit code says the cause (common/exit_codes.h), and `tagctl run` acts on it: an I/O
# failure while training (OUT/ckpt cannot be written: the final save fails) exits 4 and is reported
# as one, not as "a usage or configuration error"; --device cuda on a machine without a
# visible GPU is a configuration error: exit 2, not restarted. (Before: the I/O failure
# exited 2, read as a configuration error; the missing GPU exited 1 and was restarted.)
set -u
worker=$1
tagctl=$2
. "$(dirname "$0")/lib.sh"
command -v etcd > /dev/null || { echo "SKIP: no etcd"; exit 77; }

# 1. OUT/ckpt cannot be written (immutable as root, else read-only): the final save fails
unwritable() { # unwritable DIR
  mkdir -p "$1"
  if chattr +i "$1" 2>/dev/null; then on_exit "chattr -i '$1'"; else chmod 555 "$1"; fi
  ! touch "$1/probe" 2>/dev/null
}
unwritable "$tmp/w/ckpt" || { echo "SKIP: cannot make a folder unwritable here"; exit 77; }
timeout 120 "$worker" --steps 4 --ckpt-every 2 $TINY --out "$tmp/w" > "$tmp/w.log" 2>&1
rc=$?
[ "$rc" -eq 4 ]; check $? "a worker whose checkpoints cannot be written exits 4 (got $rc)"
unwritable "$tmp/e/ckpt"
timeout 300 "$tagctl" run --workers 2 --steps 4 --ckpt-every 2 $TINY --out "$tmp/e" \
  > "$tmp/e.log" 2>&1
rc=$?
[ "$rc" -eq 4 ]; check $? "tagctl run of such workers exits 4 (got $rc)"
! grep -q "configuration error" "$tmp/e.log"
check $? "it does not call that a configuration error: $(grep -m1 'configuration error' "$tmp/e.log")"
grep -q "an I/O failure while running: not restarted" "$tmp/e.log"
check $? "it says an I/O failure ended the worker: $(grep -m1 '^tagctl run: worker' "$tmp/e.log")"

# 2. --device cuda without a visible GPU
timeout 120 "$worker" --device cuda --steps 2 $TINY --out "$tmp/c" > "$tmp/c.log" 2>&1
rc=$?
if grep -q "no CUDA device visible\|no CUDA support" "$tmp/c.log"; then
  [ "$rc" -eq 2 ]; check $? "a worker with --device cuda and no GPU exits 2 (got $rc)"
  [ "$(grep -c . "$tmp/c.log")" -eq 1 ]; check $? "with one line: $(head -2 "$tmp/c.log")"
  timeout 300 "$tagctl" run --workers 2 --device cuda --steps 2 --max-restarts 3 $TINY \
    --out "$tmp/ce" > "$tmp/ce.log" 2>&1
  rc=$?
  [ "$rc" -eq 2 ]; check $? "tagctl run --workers 2 --device cuda without a GPU exits 2 (got $rc)"
  ! grep -q "restarting in" "$tmp/ce.log"
  check $? "no worker is restarted: $(grep -m1 'restarting in' "$tmp/ce.log")"
else
  echo "a GPU is visible (status $rc): the --device cuda part does not apply"
fi
finish
