#!/usr/bin/env bash
# Exact resume: 40 steps straight vs 20 steps, stop, resume, 20 steps, at the same world size,
# give bit-identical parameters and loss sequences — with compression off and on (W = 2).
# Both runs checkpoint at step 20 (a save is part of the math: it canonicalises residuals).
set -eu
tagctl=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args="--steps 40 --layers 2 --dim 64 --heads 4 --ctx 64 --batch 8 --eval-every 0 --eval-windows 8 --ckpt-every 20 --log warn"
losses() { python3 -c 'import json,sys; print([json.loads(l)["loss"] for l in open(sys.argv[1])])' "$1/metrics.jsonl"; }
pass=0 fail=0
check() { if "$@"; then pass=$((pass + 1)); else echo "FAILED: $*"; fail=$((fail + 1)); fi; }
for c in none tagc; do
  for w in 1 2; do
    [ "$c" = tagc ] && [ "$w" = 1 ] && continue
    d="$tmp/$c$w"
    "$tagctl" run --workers $w --compress $c $args --out "$d-straight" --dump-params "$d-straight.bin" >/dev/null
    "$tagctl" run --workers $w --compress $c $args --out "$d-resumed" --stop-at 20 >/dev/null
    "$tagctl" run --workers $w --compress $c $args --out "$d-resumed" --dump-params "$d-resumed.bin" >/dev/null
    check cmp -s "$d-straight.bin" "$d-resumed.bin"
    check [ "$(losses "$d-straight")" = "$(losses "$d-resumed")" ]
    check [ "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["resumed_from"])' "$d-resumed/summary.json")" = 20 ]
  done
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
