#!/usr/bin/env bash
# Step time and bytes per step of compression policies at W = 2 and 4 over emulated links
# (unlimited veth, tbf 1 Gbit/s, tbf 100 Mbit/s), printed as ratios against `none` of the same
# link and W. Needs root. Each worker runs in its own network namespace, joined to the others
# by a bridge in a hub namespace; both directions of every worker's link are shaped. Addresses
# (10.231.0.0/24) exist only inside these namespaces, which are removed at the end.
#   usage: bench/netns_bench.sh BUILD_DIR [STEPS] [WORLDS] [LINKS] [POLICIES]
# TAGC_BENCH_KEEP=DIR keeps every run's summary.json and metrics.jsonl under DIR/W-POLICY-LINK.
set -euo pipefail
build=${1:?usage: bench/netns_bench.sh BUILD_DIR [STEPS] [WORLDS] [LINKS] [POLICIES]}
steps=${2:-20}
worlds=${3:-"2 4"}
links=${4:-"unlimited 1gbit 100mbit"}
policies=${5:-"none/fp32 none/bf16 bf16 tagc tagc/int8 auto"}
worker=$(readlink -f "$build/bin/tagc-worker")
model=${TAGC_BENCH_MODEL:-"--layers 4 --dim 256 --heads 4 --ctx 128 --batch 8"}
tmp=$(mktemp -d /tmp/tagc-netns.XXXXXX)
pfx=tagcb$$
max_w=4
for w in $worlds; do [ "$w" -gt "$max_w" ] && max_w=$w; done

cleanup() {
  for i in $(seq 0 $((max_w - 1))); do ip netns del "$pfx-$i" 2>/dev/null || true; done
  ip netns del "$pfx-hub" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

ip netns add "$pfx-hub"
ip -n "$pfx-hub" link add br0 type bridge
ip -n "$pfx-hub" link set br0 up
for i in $(seq 0 $((max_w - 1))); do
  ns=$pfx-$i
  ip netns add "$ns"
  ip link add "vw$i-$$" type veth peer name "vh$i-$$"
  ip link set "vw$i-$$" netns "$ns"
  ip link set "vh$i-$$" netns "$pfx-hub"
  ip -n "$ns" link set "vw$i-$$" name eth0
  ip -n "$pfx-hub" link set "vh$i-$$" name "p$i"
  ip -n "$ns" addr add "10.231.0.$((i + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  ip -n "$pfx-hub" link set "p$i" master br0
  ip -n "$pfx-hub" link set "p$i" up
done

shape() { # shape RATE|unlimited: egress of both ends of every worker link
  for i in $(seq 0 $((max_w - 1))); do
    tc -n "$pfx-$i" qdisc del dev eth0 root 2>/dev/null || true
    tc -n "$pfx-hub" qdisc del dev "p$i" root 2>/dev/null || true
    [ "$1" = unlimited ] && continue
    local burst=256kb
    [ "$1" = 100mbit ] && burst=32kb
    tc -n "$pfx-$i" qdisc add dev eth0 root tbf rate "$1" burst $burst latency 50ms
    tc -n "$pfx-hub" qdisc add dev "p$i" root tbf rate "$1" burst $burst latency 50ms
  done
}

# A policy is COMPRESS[/GATHER]: the --compress spec, then optionally the --gather precision
# (default auto: bf16 when anything is compressed); e.g. none/fp32 = fp32 ZeRO-3, none/bf16,
# bf16, tagc, auto.
spec_of() { echo "--compress ${1%%/*} --gather $( [ "${1#*/}" != "$1" ] && echo "${1#*/}" || echo auto)"; }

run() { # run W POLICY LINK -> prints one result line
  local w=$1 policy=$2 link=$3 out=$tmp/$w-${2//\//-}-$link
  local threads=$(( $(nproc) / w )); [ "$threads" -lt 1 ] && threads=1
  mkdir -p "$out"
  local pids=()
  for r in $(seq 0 $((w - 1))); do
    # shellcheck disable=SC2086
    # shellcheck disable=SC2046
    ip netns exec "$pfx-$r" "$worker" $model --steps "$steps" $(spec_of "$policy") \
      --rank "$r" --world "$w" --rendezvous "$out/rdzv" --host "10.231.0.$((r + 1))" \
      --threads "$threads" --ckpt-every 0 --eval-every 0 --eval-windows 16 --log warn \
      --op-timeout 120 --out "$out" > "$out/rank$r.log" 2>&1 &
    pids+=($!)
  done
  local rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  if [ $rc -ne 0 ]; then echo "run $w $policy $link failed:"; tail -3 "$out"/rank*.log; return 1; fi
  if [ -n "${TAGC_BENCH_KEEP:-}" ]; then # keep each run's summary and metrics (comparisons)
    mkdir -p "$TAGC_BENCH_KEEP/$w-${policy//\//-}-$link"
    cp "$out/summary.json" "$out/metrics.jsonl" "$TAGC_BENCH_KEEP/$w-${policy//\//-}-$link/"
  fi
  python3 - "$out/summary.json" "$w" "$policy" "$link" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print("%s %s %s %.4f %d %.4f %.4f %.4f %.4f %.3f" % (sys.argv[2], sys.argv[3], sys.argv[4],
      s["step_s_median"], s["bytes_sent_per_step"], s["comm_s_per_step"],
      s["exposed_comm_s_per_step"], s["final_val_loss"], s["unpeeled_fraction"],
      s.get("paths", {}).get("sketch", 0.0)))
PY
}

echo "model: $model, $steps steps; $(nproc) cores"
printf '%-3s %-9s %-10s %9s %7s %9s %8s %8s %9s %9s %9s %7s\n' W link policy step_ms ratio MB_sent bytes_x comm_ms exposed_% val_loss unpeeled sketch%
for link in $links; do
  shape "$link"
  for w in $worlds; do
    base_t= base_b=
    for policy in $policies; do
      line=$(run "$w" "$policy" "$link") || { echo "$line"; continue; }
      read -r _ _ _ t b c x v u k <<<"$line"
      [ -z "$base_t" ] && base_t=$t base_b=$b
      python3 -c "
import sys
w,link,pol,t,b,c,x,v,u,k,bt,bb=sys.argv[1:]
t,b,c,x,bt,bb=map(float,(t,b,c,x,bt,bb))
print('%-3s %-9s %-10s %9.1f %7.2f %9.2f %8.2f %8.1f %9.0f %9.4f %9.4f %7.0f' % (w,link,pol,1e3*t,bt/t,b/1e6,bb/b,1e3*c,100*x/c if c else 0,float(v),float(u),100*float(k)))
" "$w" "$link" "$policy" "$t" "$b" "$c" "$x" "$v" "$u" "$k" "$base_t" "$base_b"
    done
  done
done
echo "ratio = step time of the first policy (none/fp32: fp32 ZeRO-3) / this policy's; bytes_x likewise for bytes sent; sketch% = gradient elements sent as sketches"
