#!/usr/bin/env python3
"""What a rerun of `tagctl run` over a finished OUT says, checked against what the worker
then does. Over a finished OUT with the same --steps: one line 'nothing to train' telling to
give a larger --steps N and the learning rate step S+1 would get with twice the steps, status
0, nothing trained. With a larger --steps: one line naming the changed option and the lr of
the next step under the new and the previous schedule, and metrics.jsonl shows the worker
training that step at that lr (the cosine schedule of model/adamw.h, recomputed here in
Python). The worker's 'resuming from' line says where its checkpoint came from. --no-resume
says none of it.
usage: test_resume_lr.py BINDIR"""
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "chaos"))
from harness import Checks  # noqa: E402

tagctl = os.path.join(sys.argv[1], "tagctl")
check = Checks()
LR, RATIO, WARMUP = 0.003, 0.1, 2


def lr_at(step, total):
    """tagc_lr_at of model/adamw.c for the 0-based step index."""
    lo = LR * RATIO
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    if step >= total:
        return lo
    return lo + 0.5 * (LR - lo) * (1 + math.cos(math.pi * (step - WARMUP) / (total - WARMUP)))


def close(a, b):
    return abs(a - b) <= 1e-5 * abs(b)  # %g prints 6 significant digits


def train(out, steps, *extra):
    r = subprocess.run([tagctl, "run", "--steps", str(steps), "--warmup", str(WARMUP), "--lr",
                        str(LR), "--min-lr-ratio", str(RATIO), "--ckpt-every", "3", "--threads",
                        "1", "--eval-windows", "8", "--out", out] + list(extra),
                       capture_output=True, text=True, timeout=240)
    notes = [l for l in r.stdout.splitlines() if l.startswith("tagctl run: ")
             and not l.startswith("tagctl run: done: ")]  # the closing block's first line
    return r, notes


def metrics_lr(out, step):
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if l.strip()]
    rows = [row for row in rows if row.get("step") == step]
    return rows[-1]["lr"] if rows else None


tmp = tempfile.mkdtemp(prefix="tagc-resume-lr-")
try:
    out = os.path.join(tmp, "out")
    r, notes = train(out, 6)
    check(r.returncode == 0 and notes == [], "a first run of 6 steps says nothing about resuming "
          "(status %d, %s)" % (r.returncode, notes))

    r, notes = train(out, 6)
    m = re.fullmatch(r"tagctl run: (\S+) is at step 6 of --steps 6: nothing to train\. To train "
                     r"on, run again with a larger --steps N: the cosine decay of the learning "
                     r"rate is then recomputed to end at step N instead of 6 \(e\.g\. --steps 12: "
                     r"lr (\S+) at step 7; this run's final lr: (\S+)\)", notes[0]) if notes else None
    check(r.returncode == 0 and len(notes) == 1 and m is not None
          and m.group(1) == os.path.join(out, "ckpt", "step-6"),
          "a rerun over the finished OUT: 'nothing to train' and how to train on, status 0 (%s)"
          % notes)
    check("tagctl run: done: nothing trained" in r.stdout and " steps this run" not in r.stdout,
          "... and its closing block says nothing was trained (not the previous run's summary)")
    check(m is not None and close(float(m.group(2)), lr_at(6, 12)) and close(float(m.group(3)), LR * RATIO),
          "... with the lr of step 7 under --steps 12 (%.6g) and the final lr (%.6g)"
          % (lr_at(6, 12), LR * RATIO))
    check(metrics_lr(out, 7) is None, "... and nothing trained")

    r, notes = train(out, 12)
    m = re.fullmatch(r"tagctl run: resuming (\S+) with another learning-rate schedule than the "
                     r"previous run in (\S+) \(--steps 12 instead of 6\): step 7 trains with lr "
                     r"(\S+) \(the previous schedule: (\S+)\)", notes[0]) if notes else None
    check(r.returncode == 0 and len(notes) == 1 and m is not None and m.group(2) == out,
          "--steps 12 over it: one line naming --steps 12 instead of 6 (%s)" % notes)
    said = float(m.group(3)) if m else float("nan")
    check(m is not None and close(said, lr_at(6, 12)) and close(float(m.group(4)), lr_at(6, 6)),
          "... the lr of step 7 under both schedules (%.6g and %.6g)" % (lr_at(6, 12), lr_at(6, 6)))
    got = metrics_lr(out, 7)
    check(got is not None and close(said, got), "... and the worker trains step 7 at the lr it "
          "said (metrics.jsonl: %s, said %s)" % (got, said))
    worker_line = [l for l in r.stderr.splitlines() + r.stdout.splitlines() if "resuming from" in l]
    check(len(worker_line) == 1 and "the newest valid checkpoint in %s/ckpt" % out in worker_line[0],
          "the worker says which checkpoint it resumes and why (%s)" % worker_line)

    r, notes = train(out, 14, "--lr", "0.002")
    check(r.returncode == 0 and len(notes) == 1 and "(--steps 14 instead of 12, --lr 0.002 "
          "instead of 0.003)" in notes[0], "--steps and --lr changed: both named (%s)" % notes)

    r, notes = train(out, 14, "--lr", "0.002", "--no-resume")
    check(r.returncode == 0 and notes == [], "--no-resume: no line about resuming (%s)" % notes)
finally:
    shutil.rmtree(tmp, ignore_errors=True)

check.exit()
