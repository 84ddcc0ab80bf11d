#!/usr/bin/env bash
# Sharded training with compression `none` at N = 2, 3, 4 ranks gives the same parameters as
# the single-process trainer after 20 steps (max |a-b| / max |b| <= 1e-5), and is
# bit-identical run to run at fixed N.
set -eu
tagctl=$1
here=$(dirname "$0")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args="--steps 20 --layers 2 --dim 64 --heads 4 --ctx 64 --batch 12 --eval-every 0 --eval-windows 12 --compress none --log warn"
run() { # run NAME WORKERS [extra]
  local name=$1 n=$2; shift 2
  "$tagctl" run --workers "$n" $args --out "$tmp/$name" --dump-params "$tmp/$name.bin" "$@" >/dev/null
}
run single 1
pass=0 fail=0
check() { if "$@"; then pass=$((pass + 1)); else echo "FAILED: $*"; fail=$((fail + 1)); fi; }
for n in 2 3 4; do
  run "w$n" "$n"
  check python3 "$here/compare_params.py" "$tmp/w$n.bin" "$tmp/single.bin" 1e-5
done
run w2again 2
check cmp -s "$tmp/w2.bin" "$tmp/w2again.bin"
run w3micro 3 --micro-batch 1
check python3 "$here/compare_params.py" "$tmp/w3micro.bin" "$tmp/single.bin" 1e-5
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
