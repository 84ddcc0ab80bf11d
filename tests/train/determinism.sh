#!/usr/bin/env bash
# Same seed => bit-identical parameters (CRC32C of the arena) and loss sequence after 20 steps;
# another seed => different parameters.
set -eu
worker=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args="--steps 20 --layers 2 --dim 64 --heads 4 --ctx 64 --batch 8 --eval-every 0 --eval-windows 8"
for r in a b; do "$worker" $args --seed 7 --out "$tmp/$r" >/dev/null 2>&1; done
"$worker" $args --seed 8 --out "$tmp/c" >/dev/null 2>&1
crc() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["params_crc32c"])' "$1/summary.json"; }
losses() { python3 -c 'import json,sys; print([json.loads(l)["loss"] for l in open(sys.argv[1])])' "$1/metrics.jsonl"; }
fail=0
[ "$(crc "$tmp/a")" = "$(crc "$tmp/b")" ] || { echo "FAILED: same seed, different params"; fail=1; }
[ "$(losses "$tmp/a")" = "$(losses "$tmp/b")" ] || { echo "FAILED: same seed, different losses"; fail=1; }
[ "$(crc "$tmp/a")" != "$(crc "$tmp/c")" ] || { echo "FAILED: other seed, same params"; fail=1; }
[ "$(losses "$tmp/a" | tr ',' '\n' | wc -l)" -eq 20 ] || { echo "FAILED: not 20 steps"; fail=1; }
echo "$((3 - fail)) passed, $fail failed"
exit $fail
