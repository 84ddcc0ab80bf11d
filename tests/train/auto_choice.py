#!/usr/bin/env python3
"""`--compress auto` and `--gather auto` follow the link (issue 13): with the link rate pinned
(--link-rate, the figure the choices would otherwise measure), a slow link (100 Mbit/s)
moves the MLP segments of a 3.3 M-parameter model to the sketch and the parameter gathers to
int8, and a fast link (5 GB/s) moves the compressed roles to dense fp32 and keeps bf16
gathers. Both runs log each change with its reason. (Before the fix, the engine never
counted its adaptive segments, so `auto` stayed on bf16 whatever the link.)
usage: auto_choice.py TAGCTL"""
import json
import os
import subprocess
import sys
import tempfile

tagctl = sys.argv[1]
failed = []


def check(name, ok, detail=""):
    print("%-60s %s %s" % (name, "ok" if ok else "FAILED", detail))
    if not ok:
        failed.append(name)


def run(tmp, name, rate, model, steps):
    out = os.path.join(tmp, name)
    p = subprocess.run([tagctl, "run", "--mode", "static", "--workers", "2", "--steps", str(steps),
                        "--compress", "auto", "--gather", "auto", "--link-rate", str(rate),
                        "--eval-every", "0", "--ckpt-every", "0", "--log", "info", "--out", out]
                       + model, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        print(p.stdout[-2000:])
        sys.exit("run %s failed (rc %d)" % (name, p.returncode))
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    changes = [l for l in p.stdout.splitlines() if '"auto: step' in l]
    return rows, changes, json.load(open(os.path.join(out, "summary.json")))


with tempfile.TemporaryDirectory() as tmp:
    # Slow link: decisions at steps 1 and 17 (after each density probe).
    big = ["--layers", "4", "--dim", "256", "--heads", "4"]
    rows, changes, summary = run(tmp, "slow", 12.5e6, big, 20)
    late = [r for r in rows if r["step"] >= 18]
    check("slow link: gathers int8 from step 2", all(r["gather"] == "int8" for r in rows[1:]),
          str(sorted({r["gather"] for r in rows[1:]})))
    # Which MLP segments switch when depends on their measured codec time (hysteresis 10%).
    check("slow link: >= 30% of gradient elements as sketch after step 17",
          all(r["paths"]["sketch"] >= 0.3 for r in late), str([r["paths"]["sketch"] for r in late]))
    check("slow link: unpeeled fraction <= 1e-4", summary["unpeeled_fraction"] <= 1e-4,
          "%g (%d elements)" % (summary["unpeeled_fraction"], sum(r["unpeeled"] for r in rows)))
    check("slow link: changes logged with their reason",
          any("parameter gathers: bf16 -> int8" in c for c in changes)
          and any("-> sketch (link 12.5 MB/s" in c for c in changes), "%d lines" % len(changes))
    check("slow link: summary gather is auto", summary.get("gather") == "auto", summary.get("gather"))
    # Fast link: dense fp32 wins over bf16 conversions and the codec; gathers stay bf16.
    small = ["--layers", "2", "--dim", "128", "--heads", "4"]
    rows, changes, _ = run(tmp, "fast", 5e9, small, 6)
    check("fast link: gathers stay bf16", all(r["gather"] == "bf16" for r in rows),
          str(sorted({r["gather"] for r in rows})))
    check("fast link: >= 50% of gradient elements as fp32 from step 2",
          all(r["paths"]["fp32"] >= 0.5 for r in rows[1:]), str([r["paths"]["fp32"] for r in rows]))
    check("fast link: no sketch after the probe", all(r["paths"]["sketch"] == 0 for r in rows[1:]))
print("%d failed" % len(failed))
sys.exit(1 if failed else 0)
