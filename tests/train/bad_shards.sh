#!/usr/bin/env bash
# Bad token shards and data options (issue 17): each case must exit with status 2 and print
# exactly one line on stderr that names the problem, for tagc-worker and for tagctl run.
set -u
worker=$1
tagctl=$2
here=$(dirname "$0")
tmp=$(mktemp -d /tmp/wt-tokens-bad.XXXXXX)
trap 'chmod -R u+rwx "$tmp"; rm -rf "$tmp"' EXIT
python3 "$here/make_shards.py" "$tmp/good" --train-tokens 4000 --val-tokens 1000 --shards 1 || exit 1
good_val="$tmp/good/tiny_val_000000.bin"
good_train="$tmp/good/tiny_train_000000.bin"
# shard NAME MAGIC VERSION COUNT NTOKENS [TOKEN]: an llm.c file whose header says COUNT tokens,
# followed by NTOKENS tokens (all 7, or TOKEN at position 100).
shard() {
  python3 - "$tmp/$1" "$2" "$3" "$4" "$5" "${6:-7}" <<'EOF'
import struct, sys
path, magic, version, count, n, tok = sys.argv[1], *map(int, sys.argv[2:])
toks = [7] * n
if n > 100:
    toks[100] = tok
header = [0] * 256
header[0], header[1], header[2] = magic, version, count
with open(path, "wb") as f:
    f.write(struct.pack("<256i", *header) + struct.pack("<%dH" % n, *toks))
EOF
}
shard magic.bin 20240521 1 2000 2000
shard version2.bin 20240520 2 2000 2000
shard truncated.bin 20240520 1 2000 1500
shard longer.bin 20240520 1 2000 2500
shard count0.bin 20240520 1 0 0
shard bigtoken.bin 20240520 1 2000 2000 50257
shard short.bin 20240520 1 20 20
: > "$tmp/empty.bin"
head -c 600 "$good_train" > "$tmp/header_cut.bin"
head -c 4001 "$good_train" > "$tmp/odd.bin"
mkdir "$tmp/dir.bin"
cp "$good_train" "$tmp/locked.bin" && chmod 000 "$tmp/locked.bin"
can_read_locked=0; cat "$tmp/locked.bin" >/dev/null 2>&1 && can_read_locked=1
out="--out $tmp/out --steps 2 --layers 1 --dim 16 --heads 2 --ctx 32"
. "$(dirname "$0")/expect.sh"

for prog in "$worker" "$tagctl run"; do
  v=(--val-data "$good_val")
  # shellcheck disable=SC2086
  expect "magic 20240521 is not llm.c's 20240520" $prog $out --data "$tmp/magic.bin" "${v[@]}"
  expect "version 2 is not supported" $prog $out --data "$tmp/version2.bin" "${v[@]}"
  expect "truncated.bin is truncated: its header says 2000 tokens" $prog $out --data "$tmp/truncated.bin" "${v[@]}"
  expect "longer than its header says" $prog $out --data "$tmp/longer.bin" "${v[@]}"
  expect "count0.bin is empty: its header says 0 tokens" $prog $out --data "$tmp/count0.bin" "${v[@]}"
  expect "empty.bin is empty (0 bytes)" $prog $out --data "$tmp/empty.bin" "${v[@]}"
  expect "header_cut.bin is truncated: 600 bytes" $prog $out --data "$tmp/header_cut.bin" "${v[@]}"
  expect "token 50257 at position 100 is not below the vocabulary 50257" $prog $out --data "$tmp/bigtoken.bin" "${v[@]}"
  expect "token 50257 at position 100 is not below the vocabulary 50000" $prog $out --data "$tmp/bigtoken.bin" "${v[@]}" --vocab 50000
  expect "dir.bin is not a regular file" $prog $out --data "$tmp/dir.bin" "${v[@]}"
  [ $can_read_locked -eq 0 ] && expect "permission denied" $prog $out --data "$tmp/locked.bin" "${v[@]}"
  expect "--data $tmp/nothing_\\*.bin matches no file" $prog $out --data "$tmp/nothing_*.bin" "${v[@]}"
  expect "no such file" $prog $out --data "$tmp/missing.bin" "${v[@]}"
  expect "magic 20240521" $prog $out --data "$good_train" --val-data "$tmp/magic.bin"
  expect "--val-data $tmp/none_\\*.bin matches no file" $prog $out --data "$good_train" --val-data "$tmp/none_*.bin"
  expect "at least 33 (the context window of 32 tokens and one more)" $prog $out --data "$tmp/short.bin" "${v[@]}"
  expect "--data needs --val-data" $prog $out --data "$good_train"
  expect "--val-data needs --data" $prog $out --val-data "$good_val"
  expect "nanogpt needs --vocab" $prog $out --data "$good_train" "${v[@]}" --data-format nanogpt
  expect "odd size" $prog $out --data "$tmp/odd.bin" "${v[@]}" --data-format nanogpt --vocab 50257
  expect "llmc|nanogpt" $prog $out --data "$good_train" "${v[@]}" --data-format arrow
  expect "--vocab 1000 applies to --data" $prog $out --vocab 1000
  expect "out of range" $prog $out --data "$good_train" "${v[@]}" --vocab 70000
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
