#!/usr/bin/env python3
"""Loss of compressed training on the default job (2 workers, the tiny model, 1000 steps):
`tagc` and `auto` end at most 2% above `none`'s validation loss, and bf16 and int8 parameter
gathers at most 1% above fp32 gathers (label slow: about 15 minutes on 2 cores). `auto` runs
twice: on loopback (fast: mostly fp32 wires) and with the link rate pinned at 12.5 MB/s
(`auto/slow`: the choices of a 100 Mbit/s link, i.e. sketched MLP, int8 attention and int8
gathers, on the same loopback).
usage: compress_loss.py TAGCTL"""
import json
import os
import subprocess
import sys
import tempfile

tagctl = sys.argv[1]
RUNS = {"none/fp32": ["--compress", "none", "--gather", "fp32"],
        "none/bf16": ["--compress", "none", "--gather", "bf16"],
        "none/int8": ["--compress", "none", "--gather", "int8"],
        "tagc": ["--compress", "tagc"],
        "auto": ["--compress", "auto"],
        "auto/slow": ["--compress", "auto", "--link-rate", "12.5e6"]}
val = {}
with tempfile.TemporaryDirectory() as tmp:
    for name, args in RUNS.items():
        out = os.path.join(tmp, name.replace("/", "-"))
        subprocess.run([tagctl, "run", "--mode", "static", "--workers", "2", "--steps", "1000",
                        "--ckpt-every", "0", "--eval-every", "0", "--eval-windows", "128",
                        "--log", "warn", "--out", out] + args, check=True, stdout=subprocess.DEVNULL)
        s = json.load(open(os.path.join(out, "summary.json")))
        val[name] = s["final_val_loss"]
        print("%-9s val %.4f  %.2f MB/step  paths %s" % (name, val[name], s["bytes_sent_per_step"] / 1e6,
                                                          json.dumps(s.get("paths"))))


def rel(a, b):
    """How much worse a's validation loss is than b's (a lower loss is never a failure)."""
    return (val[a] - val[b]) / val[b]


checks = [("tagc within 2% of none", rel("tagc", "none/fp32") <= 0.02),
          ("auto within 2% of none", rel("auto", "none/fp32") <= 0.02),
          ("auto at 12.5 MB/s within 2% of none", rel("auto/slow", "none/fp32") <= 0.02),
          ("bf16 gathers within 1% of fp32 gathers", rel("none/bf16", "none/fp32") <= 0.01),
          ("int8 gathers within 1% of fp32 gathers", rel("none/int8", "none/fp32") <= 0.01)]
failed = [n for n, ok in checks if not ok]
for n in failed:
    print("FAILED:", n)
print("%d passed, %d failed" % (len(checks) - len(failed), len(failed)))
sys.exit(1 if failed else 0)
