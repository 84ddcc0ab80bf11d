#!/usr/bin/env bash
# --ckpt-every-s (wall-clock checkpoint interval, issue 26): with --ckpt-every 0 a 2-worker
# elastic run still saves every second or so, at steps every rank agreed on (a checkpoint is
# committed only once every rank wrote its shard), besides the final save; with neither
# interval only the final save happens.
set -euo pipefail
tagctl=$1
tmp=$(mktemp -d /tmp/tagc-wallclock.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if eval "$2"; then echo "ok     $1"; else echo "FAILED $1"; fail=1; fi; }
common=(--workers 2 --steps 40 --threads 1 --eval-every 0 --compress none --fault slow=0.02
        --ckpt-keep-last 0 --log warn)
"$tagctl" run "${common[@]}" --ckpt-every 0 --ckpt-every-s 1 --out "$tmp/a" > "$tmp/a.log" 2>&1
saves=$(python3 -c "import json; print(json.load(open('$tmp/a/summary.json'))['ckpt']['saves'])")
wall=$(python3 -c "import json; print(json.load(open('$tmp/a/summary.json'))['wall_s'])")
n=$(ls -d "$tmp"/a/ckpt/step-* | grep -vc '\.tmp$')
echo "wall-clock interval 1 s: $saves saves, $n committed checkpoints in a ${wall} s run"
check "periodic saves besides the final one ($n committed)" '[ "$n" -ge 2 ]'
check "the final step (40) is among them" '[ -d "$tmp/a/ckpt/step-40" ]'
check "every committed checkpoint verifies" '"$tagctl" ckpt verify "$tmp/a/ckpt" > "$tmp/verify.log" 2>&1'
"$tagctl" run "${common[@]}" --ckpt-every 0 --out "$tmp/b" > "$tmp/b.log" 2>&1 || { cat "$tmp/b.log"; exit 1; }
nb=$(find "$tmp/b" -maxdepth 2 -name "step-*" | wc -l)
check "no interval: no checkpoint at all ($nb)" '[ "$nb" -eq 0 ]'
exit $fail
