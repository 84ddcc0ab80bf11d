#!/usr/bin/env python3
"""deploy/k8s/overlays/gpu/node-launch.sh, the GPU pod's entry point (one pod per node, one
worker per GPU), run here on CPU workers (TAGC_LOCAL_DEVICE=cpu) against a real etcd and
coordinator:
1. two local workers: one is SIGKILLed mid-run -> the launcher restarts it in place, it
   rejoins, the job finishes and the launcher exits 0;
2. SIGTERM to the launcher (an eviction) -> each worker gets it once and leaves the job; the
   launcher exits 143 (so the Job replaces the pod instead of counting the index complete);
3. a configuration error (--steps -1) -> exit 2 at once, no restart (the Job's
   podFailurePolicy fails the Job on it);
4. every key of deploy/k8s/base/job.json is a worker option (an unknown one makes every pod
   exit 2).
Skipped (77) without bash 5.1 (wait -n -p) or etcd."""
import json
import os
import signal
import shutil
import subprocess
import sys
import time
import urllib.request

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "chaos"))
from harness import Checks, Cluster, free_port, job_args, metrics, wait_for  # noqa: E402

if not shutil.which("etcd"):
    print("needs etcd: skipped")
    sys.exit(77)
if subprocess.run(["bash", "-c", "sleep 0 & wait -n -p x"]).returncode != 0:
    print("needs bash 5.1 or newer (wait -n -p): skipped")
    sys.exit(77)

bindir = sys.argv[1]
launcher = os.path.join(here, "..", "..", "deploy", "k8s", "overlays", "gpu", "node-launch.sh")
LEAVE_TIMEOUT = 5.0   # the workers' --leave-timeout (their default)
STEPS = 400
check = Checks()


def launch(c, name, index, *args, metrics_port=None):
    env = {"WORKER_INDEX": str(index), "TAGC_LOCAL_WORKERS": "2", "TAGC_LOCAL_DEVICE": "cpu",
           "TAGC_WORKER_BIN": os.path.join(bindir, "tagc-worker"),
           "TAGC_LOCAL_METRICS": "127.0.0.1:%d" % metrics_port if metrics_port else "none"}
    # the workers' arguments as in workers.yaml: --leave-exit-code 143
    c._start(name, ["bash", launcher, "--etcd", c.etcd_url, "--job", c.job, "--log", "info",
                    "--leave-exit-code", "143"] + list(args), env)


def children(pid):
    with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
        return [int(p) for p in f.read().split()]


def rows(out):
    try:
        return metrics(out)
    except (OSError, ValueError):
        return []


def kill_group(c, name):
    p = c.procs.get(name)
    if p and p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()


# 4. the shipped job.json names only worker options
job_json = os.path.join(here, "..", "..", "deploy", "k8s", "base", "job.json")
help_text = subprocess.run([os.path.join(bindir, "tagc-worker"), "--help"], capture_output=True,
                           text=True).stdout
unknown = [k for k in json.load(open(job_json)) if "--" + k.replace("_", "-") + " " not in help_text]
check(help_text and not unknown, "deploy/k8s/base/job.json: every key is a worker option (unknown: %s)"
      % unknown)

c = Cluster(bindir, job="launch1")
try:
    c.start_etcd()
    c.start_coordinator("coord0", "--min-workers", "1", "--max-workers", "2", "--start-workers", "2")
    # 1. a crash inside the pod: restarted in place
    out = os.path.join(c.tmp, "out1")
    port = free_port()
    launch(c, "pod0", 0, "--out", out, *job_args(STEPS, 50), metrics_port=port)
    wait_for(lambda: len(rows(out)) >= 20, 180, "20 steps")
    health = []
    for p in (port, port + 1):
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/healthz" % p, timeout=5) as r:
                health.append(r.status)
        except OSError as e:
            health.append(str(e))
    check(health == [200, 200], "local workers 0 and 1 serve /healthz on ports %d and %d (%s)"
          % (port, port + 1, health))
    workers = children(c.pid("pod0"))
    check(len(workers) == 2, "the launcher started 2 workers (%s)" % workers)
    os.kill(workers[-1], signal.SIGKILL)
    rc = c.wait("pod0", 300)
    log = c.log("pod0")
    check(rc == 0, "the launcher exited 0 when the job was done (status %s)" % rc)
    check("tagc-worker-0-1 exited with status 137: restart 1 of 3" in log,
          "the killed worker tagc-worker-0-1 was restarted in place")
    s = rows(out)
    check(s and s[-1]["step"] == STEPS, "the job reached step %d (last row: %s)"
          % (STEPS, s[-1]["step"] if s else "-"))
    check("joined job launch1 as tagc-worker-0-0" in log and "joined job launch1 as tagc-worker-0-1" in log,
          "worker ids from the pod index and the local index")

    # 2. SIGTERM to the pod: every worker leaves, status 143
    c.job = "launch2"
    c.start_coordinator("coord1", "--min-workers", "1", "--max-workers", "2", "--start-workers", "2")
    out = os.path.join(c.tmp, "out2")
    launch(c, "pod1", 3, "--out", out, *job_args(100000, 50))
    wait_for(lambda: len(rows(out)) >= 10, 180, "10 steps")
    t0 = time.time()
    c.signal("pod1", signal.SIGTERM)
    limit = 4 * LEAVE_TIMEOUT + 30  # the leave waits at most --leave-timeout, then a step
    try:
        rc = c.wait("pod1", limit)
    except subprocess.TimeoutExpired:
        rc = None
    took = time.time() - t0
    log = c.log("pod1")
    print("SIGTERM -> the launcher exited after %.1f s" % took)
    check(rc == 143, "the launcher exited 143 after SIGTERM (status %s, %.1f s)" % (rc, took))
    check(log.count("SIGTERM: leaving the job") == 2, "both workers left on SIGTERM (%d lines)"
          % log.count("SIGTERM: leaving the job"))
    check("every worker leaves the job" in log and "restart" not in log.split("every worker leaves")[-1],
          "the launcher forwarded the signal and restarted nothing while the workers left")

    # 3. a configuration error: exit 2, no restart
    launch(c, "pod2", 0, "--steps", "-1")
    try:
        rc = c.wait("pod2", 60)
    except subprocess.TimeoutExpired:
        rc = None
    log = c.log("pod2")
    check(rc == 2, "a configuration error: the launcher exited 2 (status %s)" % rc)
    check("restart" not in log, "no restart after a configuration error")
    if not check.ok():
        check.print_logs(c, ["pod0", "pod1", "pod2", "coord0", "coord1"])
finally:
    for name in ("pod0", "pod1", "pod2"):
        kill_group(c, name)
    c.close()
check.exit()
