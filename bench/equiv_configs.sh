#!/usr/bin/env bash
# Behaviour fingerprint of a build: 17 static-mode configurations (W=1..3; none, bf16, tagc;
# auto at pinned link rates where its choices do not hang on the measured codec time: 3e5
# (sketch and int8), 3e8 and 1e10 (fp32), and a resume at 1e10; micro-batches; int8 gathers;
# check-feedback; resume; reshard W=2->1 and 3->2; reshard-after-forward off), each printed as
#   NAME params_crc32c=... bytes_sent=... shards=SHA256 of the checkpoints' shard files and
#   manifests (less their creation time, auto's measured codec seconds, and the CRC that
#   covers them)
# A resume of auto at a slow rate is not among them: it restores the measured codec seconds,
# which can tip a close choice.
# Two builds that behave the same print the same lines (diff them). A refactoring is checked by
#   bench/equiv_configs.sh OLD_BUILD > old.txt; bench/equiv_configs.sh build/release > new.txt
#   diff old.txt new.txt
#   usage: bench/equiv_configs.sh BUILD_DIR [STEPS]
set -euo pipefail
build=${1:?usage: bench/equiv_configs.sh BUILD_DIR [STEPS]}
steps=${2:-40}
tagctl=$(readlink -f "$build/bin/tagctl")
tmp=$(mktemp -d /tmp/tagc-equiv.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
half=$((steps / 2))
common=(--mode static --steps "$steps" --threads 1 --ckpt-every "$half" --eval-every 0
        --eval-windows 4 --log warn --compress-warmup 5 --layers 2 --dim 64 --batch 12)

run() { # run OUT ARGS...: one tagctl run; its output is kept in OUT.log
  local out=$1; shift
  "$tagctl" run "${common[@]}" --out "$out" "$@" >"$out.log" 2>&1 ||
    { echo "run failed: $*" >&2; tail -n 5 "$out.log" >&2; exit 1; }
}

print() { # print NAME OUT
  python3 - "$1" "$2" <<'EOF'
import hashlib, json, os, sys
name, out = sys.argv[1], sys.argv[2]
s = json.load(open(os.path.join(out, "summary.json")))
rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if '"bytes_sent"' in l]
h = hashlib.sha256()
ck = os.path.join(out, "ckpt")
for d, _, files in sorted(os.walk(ck)):
    for f in sorted(files):
        p = os.path.join(d, f)
        h.update(os.path.relpath(p, ck).encode())
        if f == "manifest.json":  # all but the wall-clock time and the CRC that covers it
            m = json.load(open(p))
            m.pop("created", None); m.pop("manifest_crc32c", None)
            for seg in m.get("compression", {}).get("segments", []):
                seg.pop("codec_s", None)  # auto's measured codec seconds
            h.update(json.dumps(m, sort_keys=True).encode())
        elif f.endswith(".bin"):
            h.update(open(p, "rb").read())
print("%-22s params_crc32c=%s bytes_sent=%s shards=%s" % (
    name, s.get("params_crc32c"), rows[-1]["bytes_sent"] if rows else None, h.hexdigest()[:16]))
EOF
}

one() { # one NAME ARGS...
  local name=$1; shift
  run "$tmp/$name" "$@"
  print "$name" "$tmp/$name"
}

two() { # two NAME "FIRST ARGS" "SECOND ARGS": --stop-at half with the first, then the second
  local name=$1
  # shellcheck disable=SC2086
  run "$tmp/$name" --stop-at "$half" $2
  # shellcheck disable=SC2086
  run "$tmp/$name" $3
  print "$name" "$tmp/$name"
}

one w1-none            --workers 1 --compress none
one w2-none            --workers 2 --compress none
one w3-none            --workers 3 --compress none
one w2-bf16            --workers 2 --compress bf16
one w2-tagc            --workers 2 --compress tagc
one w3-tagc            --workers 3 --compress tagc
one w2-auto-slow       --workers 2 --compress auto --link-rate 3e5
one w2-auto-fast       --workers 2 --compress auto --link-rate 1e10
one w3-auto-mid        --workers 3 --compress auto --link-rate 3e8
one w2-tagc-micro      --workers 2 --compress tagc --micro-batch 2
one w2-tagc-int8       --workers 2 --compress tagc --gather int8
one w2-tagc-feedback   --workers 2 --compress tagc --check-feedback
one w2-none-keep       --workers 2 --compress none --reshard-after-forward false
two w2-tagc-resume     "--workers 2 --compress tagc" "--workers 2 --compress tagc"
two w2-w1-reshard      "--workers 2 --compress tagc" "--workers 1 --compress tagc"
two w3-w2-reshard      "--workers 3 --compress tagc --gather int8" "--workers 2 --compress tagc --gather int8"
two w2-auto-resume     "--workers 2 --compress auto --link-rate 1e10" "--workers 2 --compress auto --link-rate 1e10"
