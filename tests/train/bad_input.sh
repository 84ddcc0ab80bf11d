#!/usr/bin/env bash
# Bad input to tagc-worker and tagctl run: each case must exit with status 2 and print exactly
# one line on stderr that names the problem (a sanitizer report would add lines and fail).
set -u
worker=$1
tagctl=$2
tmp=$(mktemp -d)
trap 'chmod -R u+rwx "$tmp"; rm -rf "$tmp"' EXIT
mkdir "$tmp/empty_dir"
: > "$tmp/empty.txt"
printf 'short text' > "$tmp/short.txt"
mkdir "$tmp/locked" && echo "some text that is long enough" > "$tmp/locked/f.txt" && chmod 000 "$tmp/locked/f.txt"
printf '{"steps": 10,' > "$tmp/bad.json"
printf '{"stepz": 10}' > "$tmp/typo.json"
printf '{"steps": "ten"}' > "$tmp/type.json"
out="--out $tmp/out"
. "$(dirname "$0")/expect.sh"

# Reading a root-only file works for root: run the unreadable case only when it applies.
can_read_locked=0; cat "$tmp/locked/f.txt" >/dev/null 2>&1 && can_read_locked=1

for prog in "$worker" "$tagctl run"; do
  # shellcheck disable=SC2086
  expect "no such file" $prog $out --corpus "$tmp/missing"
  expect "is empty" $prog $out --corpus "$tmp/empty.txt"
  expect "is empty" $prog $out --corpus "$tmp/empty_dir"
  expect "too short" $prog $out --corpus "$tmp/short.txt"
  [ $can_read_locked -eq 0 ] && expect "permission denied" $prog $out --corpus "$tmp/locked"
  expect "out of range" $prog $out --steps 0
  expect "not an integer" $prog $out --steps 12x
  expect "not a finite number" $prog $out --lr nan
  expect "not none|bf16|tagc" $prog $out --compress zip
  expect "unknown option" $prog $out --stepz 3
  expect "missing value" $prog $out --steps
  expect "divide d_model" $prog $out --dim 66 --heads 4
  expect "micro-batch" $prog $out --batch 4 --micro-batch 8
  expect "bad.json:1" $prog $out --config "$tmp/bad.json"
  expect "unknown key 'stepz'" $prog $out --config "$tmp/typo.json"
  expect "wrong JSON type" $prog $out --config "$tmp/type.json"
  expect "no such file" $prog $out --config "$tmp/none.json"
  expect "--metrics-addr: HTTP address 'nonsense'" $prog $out --metrics-addr nonsense
  expect "expected cpu, cuda or cuda:N" $prog $out --device gpu
  expect "expected cuda:N" $prog $out --device cuda:x
  expect "fp32|bf16" $prog $out --compute half
  expect "fp32 only" $prog $out --compute bf16
done
expect "unknown command" "$tagctl" frobnicate
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
