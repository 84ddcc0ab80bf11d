#!/usr/bin/env python3
"""The sketch is on for real transformer gradients: on the tiny default model (L=2, C=64,
137 k parameters) and on a 3.3 M-parameter model (L=4, C=256), both at W=2 with the default
tagc policy, after warm-up (steps > 10) at least 90% of the elements of the tagc roles go
through the count sketch (not the dense fallback), `rho` in metrics.jsonl is above 2 on every
one of those steps, and peeling leaves no element to the estimate.
Before the per-block lane rotation (kernels/hash.h) hot matrix columns kept every MLP segment
dense; before the lane count per shard (kernels/layout.h: tagc_layout_lanes) every tagc
segment of the tiny model was too small for a 1024-lane sketch: coverage 0 outside the
every-16-steps probes in both cases.
usage: sketch_coverage.py TAGCTL"""
import json
import os
import subprocess
import sys
import tempfile

tagctl = sys.argv[1]
MODELS = [("tiny default", [], 40, (1.3e5, 1.4e5)),
          ("3.3 M", ["--layers", "4", "--dim", "256", "--heads", "4"], 40, (3.2e6, 3.4e6))]
checks = []
with tempfile.TemporaryDirectory() as tmp:
    for name, model, steps, params in MODELS:
        out = os.path.join(tmp, name.replace(" ", "-"))
        subprocess.run([tagctl, "run", "--mode", "static", "--workers", "2", "--steps", str(steps),
                        "--compress", "tagc", "--eval-every", "0", "--ckpt-every", "0",
                        "--out", out] + model, check=True, stdout=subprocess.DEVNULL)
        rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
        summary = json.load(open(os.path.join(out, "summary.json")))
        warm = [r for r in rows if r["step"] > 10]
        coverage = sum(r["sketch_coverage"] for r in warm) / len(warm)
        rhos = [r["rho"] for r in warm]
        unpeeled = sum(r["unpeeled"] for r in warm)
        print("%s: params %d, steps %d: coverage after warm-up %.3f, rho %.2f..%.2f (mean %.2f), "
              "%d unpeeled, %.2f MB/step" % (name, summary["params"], len(rows), coverage, min(rhos),
                                             max(rhos), sum(rhos) / len(rhos), unpeeled,
                                             summary["bytes_sent_per_step"] / 1e6))
        checks += [
            ("%s: %d steps logged" % (name, steps), len(rows) == steps),
            ("%s: parameter count" % name, params[0] < summary["params"] < params[1]),
            ("%s: coverage >= 0.9 after warm-up" % name, coverage >= 0.9),
            ("%s: rho > 2 on every step after warm-up" % name, min(rhos) > 2.0),
            ("%s: 0 elements unpeeled after warm-up" % name, unpeeled == 0),
            ("%s: summary reports coverage" % name, 0.9 <= summary["sketch_coverage"] <= 1.0),
        ]
failed = [name for name, ok in checks if not ok]
for name in failed:
    print("FAILED:", name)
print("%d passed, %d failed" % (len(checks) - len(failed), len(failed)))
sys.exit(1 if failed else 0)
