#!/usr/bin/env python3
"""A whole-job suspend, as `kubectl patch job ... suspend: true` does it: SIGTERM to every
worker and every coordinator at once (tagctl run's OUT/pids), 3 workers.
  1. The job stops at one step boundary on every rank, saves that step and says so:
     `tagctl run` exits 0 within --leave-timeout + the save's bound, its closing block says
     "suspended at step N", summary.json has "end": "suspended" and "steps": N, each worker
     logs "suspended at step N" and no generation ends "(superseded)", and OUT/ckpt/step-N is
     a valid checkpoint (tagctl ckpt verify).
  2. Running it again in the same OUT loses no step: it resumes from step N
     (summary.json "resumed_from") and finishes, exit 0.
Skipped (77) without etcd."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, job_args, metrics, read_pids, wait_for  # noqa: E402

if not shutil.which("etcd"):
    print("needs etcd: skipped")
    sys.exit(77)

bindir = sys.argv[1]
tagctl = os.path.join(bindir, "tagctl")
STEPS = 1500
LEAVE_TIMEOUT = 5.0     # the workers' --leave-timeout (its default)
SUSPEND_SAVE = 30.0     # worker/elastic.c SUSPEND_SAVE_S: the suspend's own bound
check = Checks()
tmp = tempfile.mkdtemp(prefix="tagc-chaos-suspend-")
out = os.path.join(tmp, "out")
args = [tagctl, "run", "--workers", "3", "--out", out, "--log", "info",
        "--leave-timeout", str(LEAVE_TIMEOUT)] + job_args(STEPS, 400, 12)
procs = []


def launch(log_name):
    log = open(os.path.join(tmp, log_name), "w")
    p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    procs.append(p)
    return p


def text(log_name):
    with open(os.path.join(tmp, log_name)) as f:
        return f.read()


def last_step():
    try:
        return metrics(out)[-1]["step"]
    except (OSError, ValueError, IndexError, KeyError):
        return -1


def summary():
    with open(os.path.join(out, "summary.json")) as f:
        return json.load(f)


try:
    p = launch("run1.log")
    wait_for(lambda: last_step() >= 150, 120, "step 150")
    pids = read_pids(out)
    targets = {k: v for k, v in pids.items() if re.match(r"^(w\d+|coordinator-\d+)$", k)}
    check(sum(1 for k in targets if k.startswith("w")) == 3 and
          any(k.startswith("coordinator") for k in targets),
          "OUT/pids lists 3 workers and a coordinator (%s)" % sorted(targets))
    t0 = time.time()
    for pid in targets.values():
        os.kill(pid, signal.SIGTERM)
    bound = LEAVE_TIMEOUT + SUSPEND_SAVE + 10
    try:
        rc = p.wait(timeout=bound)
    except subprocess.TimeoutExpired:
        rc = None
    took = time.time() - t0
    log1 = text("run1.log")
    check(rc == 0, "tagctl run exited %s %.1f s after the SIGTERMs (bound %.0f s)" % (rc, took, bound))
    s = summary() if os.path.exists(os.path.join(out, "summary.json")) else {}
    n = s.get("steps", -1)
    check(s.get("end") == "suspended", "summary.json end: %r" % s.get("end"))
    check(0 < n < STEPS, "suspended at step %d of %d" % (n, STEPS))
    check(("suspended at step %d" % n) in log1, "tagctl run's closing block says suspended at step %d" % n)
    said = len(re.findall(r"suspended at step %d: every member left" % n, log1))
    check(said == 3, "%d of 3 workers logged suspended at step %d" % (said, n))
    check("(superseded)" not in log1, "no generation ended as superseded")
    check("the job did not finish" not in log1, "tagctl run did not call it unfinished")
    ck = os.path.join(out, "ckpt", "step-%d" % n)
    v = subprocess.run([tagctl, "ckpt", "verify", ck], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True, timeout=60)
    check(v.returncode == 0, "%s verifies (%s)" % (ck, v.stdout.strip().splitlines()[-1:] or ""))

    p2 = launch("run2.log")
    rc2 = p2.wait(timeout=300)
    s2 = summary()
    check(rc2 == 0 and s2.get("end") == "finished" and s2.get("steps") == STEPS,
          "the rerun finished (exit %s, end %r, steps %s)" % (rc2, s2.get("end"), s2.get("steps")))
    check(s2.get("resumed_from") == n,
          "the rerun resumed from step %s: %s steps lost" % (s2.get("resumed_from"),
                                                             n - s2.get("resumed_from", 0)))
    if not check.ok():
        for name in ("run1.log", "run2.log"):
            if os.path.exists(os.path.join(tmp, name)):
                print("=====", name)
                print("\n".join(text(name).splitlines()[-40:]))
finally:
    for q in procs:
        if q.poll() is None:
            os.killpg(q.pid, signal.SIGKILL)
            q.wait()
    shutil.rmtree(tmp, ignore_errors=True)
check.exit()
