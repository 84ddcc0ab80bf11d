#!/usr/bin/env python3
"""summary.json counts the job, not the process that wrote it: `tagctl run`, 3 workers, the
disk path (--mirror-every 0), rank 0 (w0) SIGKILLed between two checkpoints; tagctl run
restarts it and it rejoins (a generation change, which the surviving processes count as a
recovery of their own, and which recomputes steps again on the disk path), and whichever
process is rank 0 at the end writes the summary. Its top-level "failures" and "recoveries"
must be the OUT's (history.jsonl: one failure, a crash), "steps_lost" the rows that
metrics.jsonl repeats (> 0: the steps since the last checkpoint), and "process" this
process's own figures. Skipped (77) without etcd."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, job_args, metrics, read_pids, wait_for  # noqa: E402

if not shutil.which("etcd"):
    print("needs etcd: skipped")
    sys.exit(77)

bindir = sys.argv[1]
STEPS, CKPT = 300, 50
check = Checks()
tmp = tempfile.mkdtemp(prefix="tagc-chaos-counts-")
out = os.path.join(tmp, "out")
p = None


def last_step():
    try:
        return metrics(out)[-1]["step"]
    except (OSError, ValueError, IndexError, KeyError):
        return -1


try:
    log = open(os.path.join(tmp, "run.log"), "w")
    p = subprocess.Popen([os.path.join(bindir, "tagctl"), "run", "--workers", "3", "--out", out,
                          "--mirror-every", "0"] + job_args(STEPS, CKPT, 12),
                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    wait_for(lambda: last_step() >= CKPT + 25, 120, "step %d" % (CKPT + 25))
    os.kill(read_pids(out)["w0"], signal.SIGKILL)
    rc = p.wait(timeout=240)
    check(rc == 0, "the job finished (exit %s)" % rc)
    with open(os.path.join(out, "summary.json")) as f:
        s = json.load(f)
    seen, again = -1, 0
    for r in metrics(out):
        again += r["step"] <= seen
        seen = max(seen, r["step"])
    check(again > 0, "metrics.jsonl repeats %d steps (recomputed after the kill)" % again)
    check(s["steps_lost"] == again, "summary.json steps_lost %d == %d" % (s["steps_lost"], again))
    h = s["history"]
    check(s["failures"] == h["failures"] == 1 and s["recoveries"] == h["recoveries"] == 1,
          "failures %d, recoveries %d: the OUT's one failure (history: %d)"
          % (s["failures"], s["recoveries"], h["failures"]))
    check(h["failures_by_kind"].get("crash") == 1, "counted as a crash (%s)" % h["failures_by_kind"])
    pf = s["process"]
    check(set(pf) == {"failures", "recoveries", "steps_lost"},
          "the writing process's own figures are apart: %s" % pf)
    if not check.ok():
        with open(os.path.join(tmp, "run.log")) as f:
            print("\n".join(f.read().splitlines()[-30:]))
finally:
    if p and p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    shutil.rmtree(tmp, ignore_errors=True)
check.exit()
