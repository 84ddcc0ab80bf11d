#!/usr/bin/env python3
"""A finished job stays finished, and `tagctl job reset` reuses its name, with real processes
(etcd, a coordinator, 2 workers; tests/chaos/harness.py):
1. the job trains to its last step; workers and coordinator exit 0; `tagctl status` says done;
2. a worker started again for that job exits 0 at once (before its lease TTL: it does not even
   register) with one clear line; so does a coordinator;
3. `tagctl job reset` keeps the job's config; the same job name then trains again (a new --out)
   to its last step, and `tagctl status` says done again; a coordinator that lingered
   (--linger) after the first run campaigns again after the reset and plans the second run.
Skipped (77) without an etcd executable.
usage: test_tagctl_job.py BINDIR"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "chaos"))
from harness import Checks, Cluster, job_args  # noqa: E402

if not shutil.which("etcd"):
    print("etcd not found: skipped")
    sys.exit(77)

bindir = sys.argv[1]
tagctl = os.path.join(bindir, "tagctl")
STEPS = 20
LEASE_TTL = 3.0  # the worker's --lease-ttl (its default): a worker that registered would hold it
common = job_args(STEPS, 10, 12, "none")
check = Checks()


def run_workers(c, out):
    """Starts workers w0, w1 writing to out; returns their exit statuses."""
    for w in ("w0", "w1"):
        c.start_worker(w, "--out", out, *common)
    return [c.wait(w, 240) for w in ("w0", "w1")]


def status(c):
    r = subprocess.run([tagctl, "status", "--etcd", c.etcd_url, "--job", c.job], capture_output=True,
                       text=True, timeout=60)
    return r.returncode, r.stdout


def timed(argv):
    t0 = time.time()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    return r, time.time() - t0


c = Cluster(bindir, job="again")
try:
    c.start_etcd()
    out1 = os.path.join(c.tmp, "out1")
    coord = ["--min-workers", "2", "--max-workers", "2", "--start-workers", "2"]
    c.start_coordinator("coord-a", *coord)
    c.start_coordinator("coord-linger", "--linger", *coord)
    rcs = run_workers(c, out1)
    coord_rc = c.wait("coord-a", 30)
    check(rcs == [0, 0] and coord_rc == 0, "the job trained to its end; workers %s, coordinator %d" % (rcs, coord_rc))
    check(c.procs["coord-linger"].poll() is None, "the --linger coordinator keeps running")
    rc, text = status(c)
    check(rc == 0 and "state       done: finished at step %d" % STEPS in text,
          "tagctl status says done (%s)" % [l for l in text.splitlines() if l.startswith("state")])

    worker = [os.path.join(bindir, "tagc-worker"), "--etcd", c.etcd_url, "--job", c.job,
              "--worker-id", "w0", "--log", "info", "--out", out1] + common
    r, took = timed(worker)
    lines = (r.stdout + r.stderr).strip().splitlines()
    check(r.returncode == 0 and took < LEASE_TTL and len(lines) == 1 and
          "job again is already done (finished at step %d)" % STEPS in lines[0] and
          "tagctl job reset --job again" in lines[0],
          "a worker started after the job is done exits 0 after %.2f s with one line: %s"
          % (took, " | ".join(lines)))
    r, took = timed([os.path.join(bindir, "tagc-coordinator"), "--etcd", c.etcd_url, "--job", c.job,
                     "--http", "", "--log", "warn"])
    check(r.returncode == 0 and took < 10, "a coordinator started after the job is done exits 0 (%.2f s)" % took)

    r = subprocess.run([tagctl, "job", "reset", "--etcd", c.etcd_url, "--job", c.job],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 0 and "job again reset" in r.stdout, "tagctl job reset (%s)" % r.stdout.strip())
    rc, text = status(c)
    check("done" not in text, "after the reset the job is no longer done (status %d)" % rc)
    out2 = os.path.join(c.tmp, "out2")
    rcs = run_workers(c, out2)
    s = json.load(open(out2 + "/summary.json"))
    check(rcs == [0, 0] and s["steps"] == STEPS and s["steps_this_run"] == STEPS,
          "the same job name trained again: %d steps this run (workers %s)" % (s["steps_this_run"], rcs))
    log = c.log("coord-linger")
    check("was reset; " in log and "generation 1: 2 workers" in log.split("was reset; ")[-1],
          "the lingering coordinator campaigned again after the reset and planned the new run")
    c.signal("coord-linger", signal.SIGTERM)
    check(c.wait("coord-linger", 30) == 0, "the lingering coordinator exits 0 on SIGTERM")
    rc, text = status(c)
    check(rc == 0 and "state       done: finished at step %d" % STEPS in text, "and is done again")
finally:
    check.print_logs(c, ("w0", "w1", "coord-linger"))
    c.close()
check.exit()
