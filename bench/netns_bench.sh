#!/usr/bin/env bash
# Step time and bytes per step of compression policies at W = 2 and 4 over emulated links
# (unlimited veth, tbf 1 Gbit/s, tbf 100 Mbit/s), printed as ratios against fp32 ZeRO-3 (the
# first policy, none/fp32) and against `none` with the same gathers (precision and resharding)
# of the same link and W. Needs root. Each worker runs in its own network namespace, joined to the others
# by a bridge in a hub namespace; both directions of every worker's link are shaped. Addresses
# (10.231.0.0/24) exist only inside these namespaces, which are removed at the end.
#   usage: bench/netns_bench.sh BUILD_DIR [STEPS] [WORLDS] [LINKS] [POLICIES]
# The runs sketch from step 1 (--compress-warmup 0): the bench times the steady compressed
# step, not a training run's dense warm-up; its short-run val loss is not a quality figure.
# TAGC_BENCH_KEEP=DIR keeps every run's summary.json, metrics.jsonl and rank 0's log (warnings
# and the engine's `auto` decisions) under DIR/W-POLICY-LINK
# (DIR/W-POLICY-LINK.2, .3, ... for a policy listed again: alternated repeats, whose medians
# the bench prints after the table).
set -euo pipefail
build=${1:?usage: bench/netns_bench.sh BUILD_DIR [STEPS] [WORLDS] [LINKS] [POLICIES]}
steps=${2:-20}
worlds=${3:-"2 4"}
links=${4:-"unlimited 1gbit 100mbit"}
policies=${5:-"none/fp32 none/bf16 none/int8/false bf16 tagc tagc/int8 tagc/int8/false auto"}
worker=$(readlink -f "$build/bin/tagc-worker")
# TAGC_BENCH_MODEL: worker model options, or `bench` (the default: L=4 C=256 T=128, 3.3 M
# parameters) or `small` (L=4 C=128 T=64, 0.83 M parameters: no exchange reaches 256 KiB)
model=${TAGC_BENCH_MODEL:-bench}
case $model in
  bench) model="--layers 4 --dim 256 --heads 4 --ctx 128 --batch 8" ;;
  small) model="--layers 4 --dim 128 --heads 4 --ctx 64 --batch 8" ;;
esac
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

# A policy is COMPRESS[/GATHER[/RESHARD]]: the --compress spec, then optionally the --gather
# precision (default auto: bf16 when anything is compressed) and --reshard-after-forward
# (default auto: true, except that --compress auto may keep the gathered units); e.g.
# none/fp32 = fp32 ZeRO-3, none/int8/false, bf16, tagc, auto. A fourth field is --mirror-every
# (default 0: these static runs have no recovery): auto/auto/auto/1 times the in-memory copies
# every step, auto/auto/auto/-2 under the automatic period (compared by mean step time).
spec_of() {
  local compress gather reshard mirror
  IFS=/ read -r compress gather reshard mirror <<<"$1"
  echo "--compress $compress --gather ${gather:-auto} --reshard-after-forward ${reshard:-auto}" \
       "--mirror-every ${mirror:-0}"
}

run() { # run W POLICY LINK -> prints one result line
  local w=$1 policy=$2 link=$3 out
  # a fresh directory per run: a policy may be listed twice (alternated repeats), and a
  # rendezvous file left by an earlier run would send the ranks to its stale addresses
  out=$(mktemp -d "$tmp/$w-${2//\//-}-$link.XXXXXX")
  local threads=$(( $(nproc) / w )); [ "$threads" -lt 1 ] && threads=1
  local pids=()
  for r in $(seq 0 $((w - 1))); do
    # shellcheck disable=SC2086
    # shellcheck disable=SC2046
    ip netns exec "$pfx-$r" "$worker" $model --steps "$steps" $(spec_of "$policy") \
      --rank "$r" --world "$w" --rendezvous "$out/rdzv" --host "10.231.0.$((r + 1))" \
      --threads "$threads" --ckpt-every 0 --eval-every 0 --eval-windows 16 --log warn,engine=info \
      --op-timeout 120 --compress-warmup 0 --out "$out" > "$out/rank$r.log" 2>&1 &
    pids+=($!)
  done
  local rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  if [ $rc -ne 0 ]; then echo "run $w $policy $link failed:"; tail -n 3 "$out"/rank*.log; return 1; fi
  if [ -n "${TAGC_BENCH_KEEP:-}" ]; then # keep each run's summary and metrics (comparisons)
    local keep=$TAGC_BENCH_KEEP/$w-${policy//\//-}-$link n=1
    while [ -e "$keep" ]; do n=$((n + 1)); keep=$TAGC_BENCH_KEEP/$w-${policy//\//-}-$link.$n; done
    mkdir -p "$keep"
    cp "$out/summary.json" "$out/metrics.jsonl" "$out/rank0.log" "$keep/"
  fi
  # one JSON line: the summary's figures, the median bytes of a step (steady state: the first
  # step's lossless density probe excluded) and the gathers in effect at the last step
  python3 - "$out" "$w" "$policy" "$link" <<'PY'
import json, sys
out, w, policy, link = sys.argv[1:]
s = json.load(open(out + "/summary.json"))
rows = [json.loads(l) for l in open(out + "/metrics.jsonl")]
last = rows[-1]
print(json.dumps({"w": w, "policy": policy, "link": link, "step_s": s["step_s_median"],
                  "bytes": sorted(r["bytes_sent"] for r in rows)[len(rows) // 2],
                  "bytes_mean": s["bytes_sent_per_step"], "comm_s": s["comm_s_per_step"],
                  "exposed_s": s["exposed_comm_s_per_step"], "val_loss": s["final_val_loss"],
                  "unpeeled": s["unpeeled_fraction"],
                  "sketch": s.get("paths", {}).get("sketch", 0.0),
                  "int8": s.get("paths", {}).get("int8", 0.0),
                  "gather": last.get("gather", "fp32"), "reshard": last.get("reshard", True),
                  "mirror_s": s.get("mirror_s_per_step", 0.0),
                  "mirror_bytes": s.get("mirror_bytes_per_step", 0.0),
                  "rss": s.get("peak_rss_bytes", 0),
                  # the mean step (copies included; the first, with its density probe, left
                  # out) and the copies made
                  "step_mean": sum(r["step_s"] for r in rows[1:]) / max(len(rows) - 1, 1),
                  "copies": sum(1 for r in rows if r.get("mirror_s", 0) > 0),
                  "copy_bytes": max([r.get("mirror_bytes", 0) for r in rows] + [0]),
                  # the period in effect at the end: the gap between the last two copies
                  "period": (lambda c: c[-1] - c[-2] if len(c) > 1 else 0)(
                      [r["step"] for r in rows if r.get("mirror_s", 0) > 0]),
                  "fixed": not policy.startswith("auto")}))
PY
}

echo "model: $model, $steps steps; $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
results=$tmp/results.jsonl
: > "$results"
for link in $links; do
  shape "$link"
  for w in $worlds; do
    for policy in $policies; do
      line=$(run "$w" "$policy" "$link") || { echo "$line"; continue; }
      echo "$line" >> "$results"
    done
  done
done
python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
groups = {}
for r in rows:
    groups.setdefault((r["w"], r["link"]), []).append(r)
print("%-3s %-9s %-16s %9s %7s %7s %8s %8s %8s %9s %7s %5s %-5s %-7s" % (
    "W", "link", "policy", "step_ms", "x_zero3", "x_same", "MB/step", "bytes_x", "exposed%",
    "val_loss", "sketch%", "int8%", "gathr", "reshard"))
for (w, link), g in groups.items():
    base = g[0]  # the first policy: fp32 ZeRO-3 (none/fp32)
    fixed_rows = [r for r in g if r["fixed"]]
    best = min(fixed_rows, key=lambda r: r["step_s"]) if fixed_rows else None
    for r in g:
        same = [n for n in g if n["policy"].startswith("none") and n["gather"] == r["gather"]
                and n["reshard"] == r["reshard"]]
        x_same = "%7.2f" % (same[0]["step_s"] / r["step_s"]) if same else "%7s" % "-"
        print("%-3s %-9s %-16s %9.1f %7.2f %s %8.2f %8.2f %8.0f %9.4f %7.0f %5.0f %-5s %-7s" % (
            w, link, r["policy"], 1e3 * r["step_s"], base["step_s"] / r["step_s"], x_same,
            r["bytes"] / 1e6, base["bytes"] / r["bytes"],
            100 * r["exposed_s"] / r["comm_s"] if r["comm_s"] else 0, r["val_loss"],
            100 * r["sketch"], 100 * r["int8"], r["gather"], str(r["reshard"]).lower()))
    for r in g:
        if not r["fixed"] and best:
            print("    %s at W=%s %s: %.2fx the best fixed policy (%s)" % (
                r["policy"], w, link, best["step_s"] / r["step_s"], best["policy"]))
    runs = {}
    for r in g:
        runs.setdefault(r["policy"], []).append(r["step_s"])
    if any(len(v) > 1 for v in runs.values()):  # repeats: medians per policy
        med = {p: sorted(v)[(len(v) - 1) // 2] for p, v in runs.items()}  # lower median
        fixed = [p for p in med if not p.startswith("auto")]
        for p in med:
            line = "    median of %d at W=%s %s: %-16s %7.1f ms" % (len(runs[p]), w, link, p, 1e3 * med[p])
            if not p.startswith("auto") or not fixed:
                print(line)
                continue
            bp = min(fixed, key=lambda q: med[q])
            print(line + ", %.2fx the best fixed median (%s)" % (med[bp] / med[p], bp))
    # in-memory copies: a policy P/N (N > 0) against the same P with copies off (P/0 or P),
    # medians; the period --mirror-every -1 would choose from these costs (5 % budget)
    import math
    for p in runs:
        parts = p.split("/")
        if len(parts) < 4 or parts[3] in ("", "0"):
            continue
        base = "/".join(parts[:3] + ["0"])
        base = base if base in runs else "/".join(parts[:3])
        if base not in runs:
            continue
        mp = [r for r in g if r["policy"] == p]
        m_step = sorted(v for v in runs[p])[(len(runs[p]) - 1) // 2]
        b_step = sorted(v for v in runs[base])[(len(runs[base]) - 1) // 2]
        m_s = sorted(r["mirror_s"] for r in mp)[(len(mp) - 1) // 2]
        k = max(1, math.ceil(m_s / (0.05 * b_step) - 1e-9)) if b_step > 0 else 1
        rss = max(r["rss"] for r in mp) / 2**20
        rss0 = max(r["rss"] for r in g if r["policy"] == base) / 2**20
        if parts[3] == "-2":  # the auto period: the mean step (a median misses the copy steps)
            m_mean = sorted(r["step_mean"] for r in mp)[(len(mp) - 1) // 2]
            b_mean = sorted(r["step_mean"] for r in g if r["policy"] == base)[(len(runs[base]) - 1) // 2]
            print("    auto copies at W=%s %s: %s mean step %.1f ms vs %s %.1f ms: %.3fx; %d copies "
                  "of %.1f MB per rank, period %d at the end (%d steps at risk); peak RSS %.0f vs %.0f MiB"
                  % (w, link, p, 1e3 * m_mean, base, 1e3 * b_mean, m_mean / b_mean,
                     mp[0]["copies"], mp[0]["copy_bytes"] / 1e6, mp[0]["period"],
                     max(mp[0]["period"] - 1, 0), rss, rss0))
            continue
        print("    copies at W=%s %s: %s %.1f ms vs %s %.1f ms: %.3fx; copy %.1f ms, %.1f MB per "
              "copy and rank; peak RSS %.0f vs %.0f MiB; auto period (5 %%): %d (%d steps at risk)"
              % (w, link, p, 1e3 * m_step, base, 1e3 * b_step, m_step / b_step, 1e3 * m_s,
                 mp[0]["mirror_bytes"] / 1e6, rss, rss0, k, k - 1))
print("x_zero3 = step time of fp32 ZeRO-3 (none/fp32, the first policy) / this one's; x_same = "
      "of `none` with the same gathers (precision, reshard; '-' when not run); MB/step = median "
      "bytes sent per step and rank (bytes_x against fp32 ZeRO-3); gathr/reshard = in effect at "
      "the last step; sketch%, int8% = gradient elements sent as sketches, as int8 (means over "
      "steps)")
PY
