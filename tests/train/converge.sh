#!/usr/bin/env bash
# A tiny model (2 layers, width 64, context 64) lowers validation loss on fortunes from
# about ln(256) = 5.5 nats/byte to <= 2.5 within the CI budget (1000 steps, ~15 s); the run's summary has the
# documented fields.
set -eu
tagctl=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$tagctl" run --workers 1 --steps 1000 --layers 2 --dim 64 --heads 4 --ctx 64 --batch 16 \
  --lr 0.003 --eval-every 100 --out "$tmp/run" > "$tmp/progress.txt"
python3 - "$tmp/run" <<'PY'
import json, sys
d = sys.argv[1]
s = json.load(open(d + "/summary.json"))
for k in ["steps", "final_train_loss", "final_val_loss", "tokens_per_s", "wall_s", "world_size",
          "compress", "blas", "threads"]:
    assert k in s, "summary lacks " + k
rows = [json.loads(l) for l in open(d + "/metrics.jsonl")]
first = rows[0]["loss"]
print("first loss %.3f, final val %.3f, %.0f tokens/s, %.1f s, blas %s" %
      (first, s["final_val_loss"], s["tokens_per_s"], s["wall_s"], s["blas"]))
ok = [len(rows) == 1000, 5.0 < first < 6.0, s["final_val_loss"] <= 2.5, "OpenBLAS" in s["blas"]]
print("%d passed, %d failed" % (sum(ok), len(ok) - sum(ok)))
sys.exit(0 if all(ok) else 1)
PY
grep -q "step 1000/1000" "$tmp/progress.txt"
