#!/usr/bin/env python3
"""Detection and recovery times over repeated injected failures (real etcd, coordinator and
3 workers per trial, tiny model, lease TTL 3 s, --op-timeout 3 s):
  kill: SIGKILL of a worker mid-run;   hang: SIGSTOP of a worker (SIGKILLed after the trial).
detection = first failure report of a survivor - the signal; recovery = the signal -> the
first completed step of the next generation (summary.json max_recovery_s + detection);
steps lost = the steps completed before the signal that the next generation computes again
(its first step minus one, against the last step completed before the signal).
MIRROR is --mirror-every (default 1: the in-memory copies every step; 0: recovery from the
checkpoint, saved every 10 steps).
  usage: bench/recovery_bench.py BUILD_DIR [TRIALS] [MIRROR]"""
import datetime
import json
import os
import re
import signal
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "chaos"))
from harness import Cluster, job_args, metrics, wait_for  # noqa: E402

bindir = os.path.join(os.path.abspath(sys.argv[1]), "bin")
trials = int(sys.argv[2]) if len(sys.argv) > 2 else 10
mirror = sys.argv[3] if len(sys.argv) > 3 else "1"
common = job_args(100000, 10, 12, "none", "--op-timeout", "3", "--fault", "slow=0.005",
                  "--mirror-every", mirror)


def first_report(log):
    for line in log.splitlines():
        if "ended at step" in line:
            ts = json.loads(line)["ts"]
            return datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
                tzinfo=datetime.timezone.utc).timestamp()
    return None


def trial(kind):
    c = Cluster(bindir)
    try:
        out = c.start_job(common)
        wait_for(lambda: os.path.exists(out + "/metrics.jsonl") and len(metrics(out)) >= 15, 120, "15 steps")
        t0 = time.time()
        before = max(r["step"] for r in metrics(out))
        c.signal("w2", signal.SIGKILL if kind == "kill" else signal.SIGSTOP)
        wait_for(lambda: any(r["generation"] >= 2 for r in metrics(out)), 60, "a step of generation 2")
        t1 = time.time()
        rows = metrics(out)
        done = max(r["step"] for r in rows if r["generation"] == 1)  # incl. steps after the read
        first = min(r["step"] for r in rows if r["generation"] >= 2)
        detect = min(x for x in (first_report(c.log("w0")), first_report(c.log("w1"))) if x) - t0
        return detect, t1 - t0, max(0, max(done, before) - (first - 1))
    finally:
        c.close()


print("--mirror-every %s" % mirror)
print("kind  trials  detection median/max (s)  recovery median/max (s)  steps lost median/max")
for kind in ("kill", "hang"):
    d, r, lost = zip(*[trial(kind) for _ in range(trials)])
    print("%-5s %6d  %6.2f / %6.2f              %6.2f / %6.2f             %4d / %d" %
          (kind, trials, statistics.median(d), max(d), statistics.median(r), max(r),
           statistics.median(lost), max(lost)))
