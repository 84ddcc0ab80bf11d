#!/usr/bin/env python3
"""`tagctl inject` arms a fault through etcd (chaos/<worker>): a crash injected into a running
worker is survived by the others; a bad kind is refused with status 2; `tagctl status` shows
the job."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, Cluster, job_args, metrics, wait_for  # noqa: E402

bindir = sys.argv[1]
tagctl = os.path.join(bindir, "tagctl")
STEPS = 200
common = job_args(STEPS, 10, 12, "none")
check = Checks()


c = Cluster(bindir)
try:
    out = c.start_job(common)
    wait_for(lambda: os.path.exists(out + "/metrics.jsonl") and len(metrics(out)) >= 10, 120, "10 steps")
    bad = subprocess.run([tagctl, "inject", "--etcd", c.etcd_url, "--job", c.job, "--worker", "w1",
                          "explode", "--at-step", "5"], capture_output=True, text=True)
    check(bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1,
          "an unknown fault kind is refused with status 2 and one line: %s" % bad.stderr.strip())
    at = len(metrics(out)) + 5
    r = subprocess.run([tagctl, "inject", "--etcd", c.etcd_url, "--job", c.job, "--worker", "w1",
                        "crash", "--at-step", str(at)], capture_output=True, text=True)
    check(r.returncode == 0, "inject crash@%d: %s" % (at, r.stdout.strip()))
    rc1 = c.wait("w1", 120)
    check(rc1 == -9, "w1 killed itself at the injected step (status %s)" % rc1)
    status = subprocess.run([tagctl, "status", "--etcd", c.etcd_url, "--job", c.job],
                            capture_output=True, text=True)
    check(status.returncode == 0 and "gen" in status.stdout and "plan" in status.stdout,
          "tagctl status shows the job")
    rc = [c.wait(n, 150) for n in ("w0", "w2")]
    check(rc == [0, 0], "the other workers finished (%s)" % rc)
    s = json.load(open(out + "/summary.json"))
    check(s["steps"] == STEPS and s["world_size"] == 2 and s["recoveries"] >= 1,
          "finished %d steps at W=%d after %d recoveries" % (s["steps"], s["world_size"], s["recoveries"]))
finally:
    check.print_logs(c, ("coord0", "w0", "w1", "w2"))
    c.close()
check.exit()
