#!/usr/bin/env python3
"""etcd lost for good under `tagctl run --etcd URL` (an external etcd, 3 workers): the run
always ends, bounded by --etcd-patience, with summary.json and the exit status
docs/operations.md gives.
  1. Near the end: etcd SIGKILLed at step ~250 of 400. Training needs no etcd and runs to
     400; the final checkpoint is valid on disk although its etcd record fails (a warning,
     not a failed save); the workers stop waiting for the job's done record after the
     patience: `tagctl run` exits 0 within patience + 20 s of the last step, summary.json says
     "end": "finished" at step 400, and OUT/ckpt/step-400 verifies.
  2. Mid-run, then a worker dies: etcd SIGKILLed at step ~100 of 3000, then w2 SIGKILLed.
     The survivors' generation fails, no plan can come, and after the patience they give up
     with one line ("out of reach for S s while waiting for a plan: giving up at step N; the
     newest valid checkpoint: step M (PATH)"); rank 0 writes summary.json ("end": "gave up"),
     the restarted workers cannot reach etcd either, and `tagctl run` exits 1 within the
     patience plus the restarts' backoff (--max-restarts 2) plus 30 s.
Skipped (77) without etcd."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, Cluster, job_args, metrics, read_pids, wait_for  # noqa: E402

if not shutil.which("etcd"):
    print("needs etcd: skipped")
    sys.exit(77)

bindir = sys.argv[1]
tagctl = os.path.join(bindir, "tagctl")
PATIENCE = 10.0        # --etcd-patience of both runs
FINISHED_PATIENCE = 15.0  # worker/elastic.c: the wait for a done record after the last step
MAX_RESTARTS = 2
BACKOFF = 0.5 + 1.0    # tagctl run's backoff before restarts 1 and 2 (docs/operations.md)
check = Checks()


def last_step(out):
    try:
        return metrics(out)[-1]["step"]
    except (OSError, ValueError, IndexError, KeyError):
        return -1


def run_case(name, steps, kill_at, then_kill_w2):
    c = Cluster(bindir, job=name)
    p = None
    try:
        c.start_etcd()
        out = os.path.join(c.tmp, "out")
        log_path = os.path.join(c.tmp, "tagctl.log")
        log = open(log_path, "w")
        p = subprocess.Popen([tagctl, "run", "--etcd", c.etcd_url, "--job", name, "--workers", "3",
                              "--out", out, "--log", "info", "--etcd-patience", str(PATIENCE),
                              "--max-restarts", str(MAX_RESTARTS)] + job_args(steps, 50, 12),
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_for(lambda: last_step(out) >= kill_at, 120, "step %d" % kill_at)
        c.procs["etcd"].kill()
        c.procs["etcd"].wait()
        killed_at = last_step(out)
        t_kill = time.time()
        if then_kill_w2:
            os.kill(read_pids(out)["w2"], signal.SIGKILL)
        bound = (FINISHED_PATIENCE if not then_kill_w2 else PATIENCE + BACKOFF) + 30 + \
            (60 if not then_kill_w2 else 0)  # case 1: the steps after the kill are trained too
        try:
            rc = p.wait(timeout=bound)
        except subprocess.TimeoutExpired:
            rc = None
        took = time.time() - t_kill
        log.close()
        with open(log_path) as f:
            text = f.read()
        summ = {}
        if os.path.exists(os.path.join(out, "summary.json")):
            with open(os.path.join(out, "summary.json")) as f:
                summ = json.load(f)
        return c, rc, took, bound, text, summ, out, killed_at
    finally:
        if p and p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


# 1. near the end
c, rc, took, bound, text, s, out, at = run_case("lost-end", 400, 250, False)
try:
    check(rc == 0, "etcd killed at step %d: tagctl run exited %s %.1f s later (bound %.0f s)"
          % (at, rc, took, bound))
    check(s.get("end") == "finished" and s.get("steps") == 400,
          "summary.json: end %r at step %s" % (s.get("end"), s.get("steps")))
    check("but its record in etcd was not written" in text,
          "a checkpoint's failed etcd record is a warning")
    check("failed on rank 0" not in text, "no save counted as failed")
    check("its done record is not written" in text, "the workers say the done record is missing")
    v = subprocess.run([tagctl, "ckpt", "verify", os.path.join(out, "ckpt", "step-400")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    check(v.returncode == 0, "step-400 verifies: %s" % v.stdout.strip())
    if not check.ok():
        print("\n".join(text.splitlines()[-40:]))
finally:
    c.close()

# 2. mid-run, then a worker dies
c, rc, took, bound, text, s, out, at = run_case("lost-mid", 3000, 100, True)
try:
    check(rc == 1, "etcd and w2 killed at step %d: tagctl run exited %s %.1f s later (bound %.0f s)"
          % (at, rc, took, bound))
    m = re.search(r"out of reach for (\d+) s while waiting for a plan: giving up at step (\d+); "
                  r"the newest valid checkpoint: step (\d+) \(([^)]*)\)", text)
    check(m is not None, "a worker gave up with one line naming the step and the checkpoint")
    if m:
        n, ck = int(m.group(2)), int(m.group(3))
        check(n >= at and 0 < ck <= n, "gave up at step %d, checkpoint step %d" % (n, ck))
        check(s.get("end") == "gave up" and s.get("steps") == n,
              "summary.json: end %r at step %s" % (s.get("end"), s.get("steps")))
    check("did not finish" in text, "tagctl run says the job did not finish")
    if not check.ok():
        print("\n".join(text.splitlines()[-40:]))
finally:
    c.close()
check.exit()
