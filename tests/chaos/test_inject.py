#!/usr/bin/env python3
"""`tagctl inject` arms a fault through etcd (chaos/<worker>): a crash injected without
--at-step into a running worker fires at its next step (within a few seconds) and is survived by
the others; `ckpt:mid-write` kills a running worker in its next checkpoint save; a bad kind
or checkpoint stage is refused with status 2, a worker that is not registered with status 1;
`tagctl status` shows the live job for people and as JSON."""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, Cluster, job_args, metrics, wait_for  # noqa: E402

bindir = sys.argv[1]
tagctl = os.path.join(bindir, "tagctl")
STEPS = 600  # long enough that the job is still running at the last injection on a loaded machine (200 finished first under stress-ng)
common = job_args(STEPS, 10, 12, "none")
check = Checks()


c = Cluster(bindir)
try:
    out = c.start_job(common, workers=4, max_workers=4)
    wait_for(lambda: os.path.exists(out + "/metrics.jsonl") and len(metrics(out)) >= 10, 120, "10 steps")
    bad = subprocess.run([tagctl, "inject", "--etcd", c.etcd_url, "--job", c.job, "--worker", "w1",
                          "explode", "--at-step", "5"], capture_output=True, text=True)
    check(bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1,
          "an unknown fault kind is refused with status 2 and one line: %s" % bad.stderr.strip())
    bad = subprocess.run([tagctl, "inject", "--etcd", c.etcd_url, "--job", c.job, "--worker", "w1",
                          "ckpt:nowhere"], capture_output=True, text=True)
    check(bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1,
          "an unknown checkpoint stage is refused with status 2 and one line: %s" % bad.stderr.strip())
    r = subprocess.run([tagctl, "inject", "--etcd", c.etcd_url, "--job", c.job, "--worker", "w7",
                        "crash"], capture_output=True, text=True)
    check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "no worker 'w7'" in r.stderr,
          "inject into a worker that is not registered: status 1, one line (%s)" % r.stderr.strip())
    # rank 0 publishes progress at most once a second, so the status may lag the metrics file
    # by a second's steps: poll until it shows step 10 (or give up after the same 120 s)
    def status_json():
        r = subprocess.run([tagctl, "status", "--etcd", c.etcd_url, "--job", c.job, "--json"],
                           capture_output=True, text=True)
        return json.loads(r.stdout) if r.returncode == 0 else {}
    s = {}

    def status_reached():
        global s
        s = status_json()
        return s.get("step", 0) >= 10
    try:
        wait_for(status_reached, 120, "tagctl status to show step 10")
    except RuntimeError:
        pass  # the check below fails and prints what status said
    check(s.get("state") == "running" and s.get("steps") == STEPS and s.get("world_size") == 4 and
          s.get("step", 0) >= 10 and s.get("leader") and
          [w["state"] for w in s.get("workers", [])] == ["training"] * 4,
          "tagctl status --json of the running job: running, W=4, four workers training (%s)" % s)
    # a checkpoint-write crash armed on a running worker: it dies in its next save (every 10 steps)
    r = subprocess.run([tagctl, "inject", "--etcd", c.etcd_url, "--job", c.job, "--worker", "w3",
                        "ckpt:mid-write"], capture_output=True, text=True)
    check(r.returncode == 0 and r.stdout.strip() == "/tagc/%s/chaos/w3 = ckpt:mid-write" % c.job,
          "inject ckpt:mid-write: %s %s" % (r.stdout.strip(), r.stderr.strip()))
    rc3 = c.wait("w3", 120)
    check(rc3 == -9 and "fault point ckpt:mid-write reached" in c.log("w3"),
          "w3 was killed at the mid-write fault point of its next save (status %s)" % rc3)
    top = max(m["step"] for m in metrics(out))  # recovered: past the steps done before it died
    wait_for(lambda: metrics(out)[-1]["step"] > top, 120, "the job to pass step %d again" % top)
    before = metrics(out)[-1]["step"]  # not the row count: rows repeat the steps recomputed
    r = subprocess.run([tagctl, "inject", "--etcd", c.etcd_url, "--job", c.job, "--worker", "w1",
                        "crash"], capture_output=True, text=True)
    check(r.returncode == 0 and r.stdout.startswith("/tagc/%s/chaos/w1 = crash@" % c.job),
          "inject crash without --at-step: %s" % r.stdout.strip())
    rc1 = c.wait("w1", 120)
    check(rc1 == -9, "w1 killed itself (status %s)" % rc1)
    fired = [int(m.group(1)) for m in re.finditer(r"fault injected at step (\d+): crash", c.log("w1"))]
    done_then = metrics(out)[-1]["step"]
    check(len(fired) == 1 and before <= fired[0] <= done_then,
          "the crash fired at the worker's next step (%s; step %d when injected, %d after)"
          % (fired, before, done_then))
    status = subprocess.run([tagctl, "status", "--etcd", c.etcd_url, "--job", c.job],
                            capture_output=True, text=True)
    check(status.returncode == 0 and all(l in status.stdout for l in
                                         ("\nstate ", "\nprogress    step ", "/%d (" % STEPS, "ETA",
                                          "\ncheckpoint  step ", "\nreports ", "\nleader ",
                                          "\nworker      w0: rank ")),
          "tagctl status for people shows state, progress of the total, ETA, checkpoint, failure reports, "
          "leader and workers:\n%s" % status.stdout)
    rc = [c.wait(n, 150) for n in ("w0", "w2")]
    check(rc == [0, 0], "the other workers finished (%s)" % rc)
    s = json.load(open(out + "/summary.json"))
    check(s["steps"] == STEPS and s["world_size"] == 2 and s["recoveries"] >= 1,
          "finished %d steps at W=%d after %d recoveries" % (s["steps"], s["world_size"], s["recoveries"]))
finally:
    check.print_logs(c, ("coord0", "w0", "w1", "w2", "w3"))
    c.close()
check.exit()
