#!/usr/bin/env python3
"""Training with TAGC-2 compression (rho = auto): at W = 2 and 4 on the tiny model, and at
W = 2 on a wider one, the validation loss after the run is within 3% of `none`; no element is
left to the estimate after the first 50 steps; and the error-feedback mass is conserved on
every sketched step (sum over ranks of new residuals + kept == raw gradients + old residuals,
checked by the engine's test hook: relative error <= 1e-6)."""
import json
import os
import subprocess
import sys
import tempfile

tagctl = sys.argv[1]
passed = failed = 0


def check(ok, what):
    global passed, failed
    passed += ok
    failed += not ok
    print(("ok     " if ok else "FAILED ") + what)


def run(tmp, name, workers, policy, model):
    out = os.path.join(tmp, name)
    subprocess.run([tagctl, "run", "--workers", str(workers), "--steps", "300", "--compress", policy,
                    "--check-feedback", "--ckpt-every", "0", "--eval-every", "0", "--eval-windows", "64",
                    "--log", "warn", "--out", out] + model, check=True, stdout=subprocess.DEVNULL)
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    return json.load(open(os.path.join(out, "summary.json"))), rows


with tempfile.TemporaryDirectory() as tmp:
    for workers, model in ((2, ["--dim", "64", "--layers", "2"]), (4, ["--dim", "64", "--layers", "2"]),
                           (2, ["--dim", "256", "--layers", "1"])):
        tag = "W=%d %s" % (workers, " ".join(model))
        base, _ = run(tmp, "none", workers, "none", model)
        s, rows = run(tmp, "tagc", workers, "tagc", model)
        rel = abs(s["final_val_loss"] - base["final_val_loss"]) / base["final_val_loss"]
        check(rel <= 0.03, "%s: val loss %.4f vs none %.4f (%.2f%%)" % (tag, s["final_val_loss"],
                                                                        base["final_val_loss"], 100 * rel))
        steady = sum(r["unpeeled"] for r in rows[50:])
        check(steady == 0, "%s: %d elements left to the estimate after step 50" % (tag, steady))
        sketched = [r for r in rows if r["rho"] > 0]
        fb = max(r["feedback_error"] for r in sketched) if sketched else 1
        check(sketched and fb <= 1e-6, "%s: %d sketched steps, feedback error <= %.2g" % (tag, len(sketched), fb))
        check(s["bytes_sent_per_step"] < base["bytes_sent_per_step"],
              "%s: %.0f bytes per step vs none %.0f" % (tag, s["bytes_sent_per_step"], base["bytes_sent_per_step"]))
print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed or not passed else 0)
