#!/usr/bin/env python3
"""The sketch is on for real transformer gradients: on a 3.3 M-parameter model (L=4, C=256) at
W=2 with the default tagc policy, after warm-up at least 90% of the elements of the tagc roles
go through the count sketch (not the dense fallback), every sketched step compresses (rho >= 1.25,
the advisor's floor) and the mean rho is at least 2, and peeling leaves at most 1e-4 of the
elements to the estimate.
Before the per-block lane rotation (kernels/hash.h) hot matrix columns kept every MLP segment
dense: coverage was 0 outside the every-16-steps probes.
usage: sketch_coverage.py TAGCTL"""
import json
import os
import subprocess
import sys
import tempfile

tagctl = sys.argv[1]
with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "run")
    subprocess.run([tagctl, "run", "--mode", "static", "--workers", "2", "--steps", "40",
                    "--layers", "4", "--dim", "256", "--heads", "4", "--compress", "tagc",
                    "--eval-every", "0", "--ckpt-every", "0", "--out", out],
                   check=True, stdout=subprocess.DEVNULL)
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    summary = json.load(open(os.path.join(out, "summary.json")))

warm = [r for r in rows if r["step"] > 10]
coverage = sum(r["sketch_coverage"] for r in warm) / len(warm)
rhos = [r["rho"] for r in warm if r["sketch_coverage"] > 0]
print("params %d, steps %d: coverage after warm-up %.3f, rho %.2f..%.2f (mean %.2f), unpeeled "
      "fraction %.2e, %.2f MB/step" % (summary["params"], len(rows), coverage, min(rhos), max(rhos),
                        sum(rhos) / len(rhos),
                        summary["unpeeled_fraction"], summary["bytes_sent_per_step"] / 1e6))
checks = [
    ("40 steps logged", len(rows) == 40),
    ("model has 3.3 M parameters", 3.2e6 < summary["params"] < 3.4e6),
    ("coverage >= 0.9 after warm-up", coverage >= 0.9),
    ("every sketched step compresses (rho >= 1.25)", len(rhos) == len(warm) and min(rhos) >= 1.25),
    ("mean rho >= 2 after warm-up", sum(rhos) / len(rhos) >= 2.0),
    ("unpeeled fraction <= 1e-4", summary["unpeeled_fraction"] <= 1e-4),
    ("summary reports coverage", 0.9 <= summary["sketch_coverage"] <= 1.0),
]
failed = [name for name, ok in checks if not ok]
for name in failed:
    print("FAILED:", name)
print("%d passed, %d failed" % (len(checks) - len(failed), len(failed)))
sys.exit(1 if failed else 0)
