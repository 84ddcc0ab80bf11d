#!/usr/bin/env bash
# Training on token shards (issue 17): generated llm.c shards, GPT-2 vocabulary 50257 (padded to
# 50304 rows), a small model.
#  - W=2 gives the single-process parameters (max |a-b| / max |b| <= 1e-5, as sharded_equiv.sh)
#    and the parameter dump has the padded size (50304-row wte and head_w);
#  - nanoGPT .bin files of the same tokens (--data-format nanogpt --vocab 50257) give
#    bit-identical parameters to the llm.c shards;
#  - a run stopped at step 4 at W=2 and resumed at W=3 continues the same batch sequence
#    (batch_crc32c of every step equal to the straight run's) and ends at the same parameters;
#  - resuming that checkpoint with another vocabulary (--vocab 50304) is refused, naming both.
set -eu
tagctl=$1
here=$(dirname "$0")
tmp=$(mktemp -d /tmp/wt-tokens-train.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
python3 "$here/make_shards.py" "$tmp/llmc" --train-tokens 60000 --val-tokens 4000 --shards 3
python3 "$here/make_shards.py" "$tmp/nano" --format nanogpt --train-tokens 60000 --val-tokens 4000 --shards 3
L=1 C=64 T=32 V=50304
args="--steps 8 --layers $L --dim $C --heads 4 --ctx $T --batch 8 --eval-every 4 --eval-windows 8 --compress none --log warn --ckpt-every 0"
llmc=(--data "$tmp/llmc/tiny_train_*.bin" --val-data "$tmp/llmc/tiny_val_000000.bin")
nano=(--data "$tmp/nano/tiny_train_*.bin" --val-data "$tmp/nano/tiny_val_000000.bin" --data-format nanogpt --vocab 50257)
pass=0 fail=0
check() { if "$@"; then pass=$((pass + 1)); else echo "FAILED: $*"; fail=$((fail + 1)); fi; }
crcs() { python3 -c 'import json,sys; print([json.loads(l)["batch_crc32c"] for l in open(sys.argv[1]) if "batch_crc32c" in l])' "$1/metrics.jsonl"; }
field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }

"$tagctl" run --workers 1 $args "${llmc[@]}" --out "$tmp/single" --dump-params "$tmp/single.bin" >/dev/null
"$tagctl" run --workers 2 $args "${llmc[@]}" --out "$tmp/w2" --dump-params "$tmp/w2.bin" >/dev/null
check python3 "$here/compare_params.py" "$tmp/w2.bin" "$tmp/single.bin" 1e-5
n_params=$((2 * V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C))
check [ "$(stat -c %s "$tmp/single.bin")" -eq $((4 * n_params)) ]
check python3 -c 'import json,math,sys; l=json.load(open(sys.argv[1]))["final_val_loss"]; sys.exit(not (math.isfinite(l) and 0 < l < 12))' "$tmp/single/summary.json"
"$tagctl" run --workers 1 $args "${nano[@]}" --out "$tmp/nano1" --dump-params "$tmp/nano1.bin" >/dev/null
check cmp -s "$tmp/single.bin" "$tmp/nano1.bin"

# Resume at another world size: stop at step 4 at W=2, continue at W=3.
"$tagctl" run --workers 2 $args "${llmc[@]}" --ckpt-every 4 --out "$tmp/res" --stop-at 4 >/dev/null
"$tagctl" run --workers 3 $args "${llmc[@]}" --ckpt-every 4 --out "$tmp/res" --dump-params "$tmp/res.bin" >/dev/null
check [ "$(field "$tmp/res/summary.json" resumed_from)" = 4 ]
check [ "$(crcs "$tmp/single")" = "$(crcs "$tmp/res")" ]
check python3 "$here/compare_params.py" "$tmp/res.bin" "$tmp/single.bin" 1e-5

# Another vocabulary must not resume that checkpoint.
set +e
err=$("$tagctl" run --workers 1 $args "${llmc[@]}" --vocab 50304 --steps 12 --ckpt-every 4 --out "$tmp/res" 2>&1 >/dev/null)
code=$?
set -e
check [ "$code" -ne 0 ]
if printf '%s' "$err" | grep -q "vocabulary 50257 (padded 50304).*gives 50304"; then pass=$((pass + 1)); else
  echo "FAILED: resume with another vocab: exit $code: $err"; fail=$((fail + 1)); fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
