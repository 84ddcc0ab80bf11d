#!/usr/bin/env python3
"""Compound faults and etcd outages (issue 15), real etcd, coordinator and 3 workers per trial
(tiny model, workers' lease TTL 3 s, --fault slow=0.01):
  double-kill: SIGKILL of w0 and w1 at once (their --lease-ttl 8 s, so the coordinator first
               plans a generation with one of them still looking alive: the compound case);
               publish = the coordinator's log line of the survivor's own generation,
               resume = its first completed step seen in metrics.jsonl (polled every 50 ms).
  etcd-kill / etcd-stop: etcd SIGKILLed then restarted / SIGSTOPped then SIGCONTed for 10 s;
               steps recomputed (metrics rows - distinct steps), generations made after the
               fault, and the longest time without a new metrics row from the fault to 5 s
               after etcd is back (polled every 50 ms).
  usage: bench/resilience_bench.py BUILD_DIR [TRIALS [KIND...]]   (KIND: double-kill etcd-kill etcd-stop)"""
import os
import signal
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "chaos"))
from harness import Cluster, coord_generation_times, job_args, metrics, wait_for  # noqa: E402

bindir = os.path.join(os.path.abspath(sys.argv[1]), "bin")
trials = int(sys.argv[2]) if len(sys.argv) > 2 else 3
common = job_args(100000, 10, 12, "none", "--op-timeout", "20", "--fault", "slow=0.01")
OUTAGE_S = 10.0


def rows(out):
    try:
        return metrics(out)
    except (OSError, ValueError):
        return []


def double_kill():
    c = Cluster(bindir)
    try:
        out = c.start_job(common, min_workers=1,
                          worker_extra={n: ["--lease-ttl", "8"] for n in ("w0", "w1")})
        wait_for(lambda: len(rows(out)) >= 30, 120, "30 steps")
        c.signal("w0", signal.SIGKILL)
        c.signal("w1", signal.SIGKILL)
        t0 = time.time()
        first = wait_for(lambda: next((r for r in rows(out) if r["world_size"] == 1), None), 120, "W=1")
        t1 = time.time()
        pub = coord_generation_times(c.log("coord0"))[first["generation"]]
        return t1 - pub, t1 - t0
    finally:
        c.close()


def etcd_outage(kind):
    c = Cluster(bindir)
    try:
        out = c.start_job(common)
        wait_for(lambda: len(rows(out)) >= 30, 120, "30 steps")
        gen0 = rows(out)[-1]["generation"]
        seen = []
        stop = threading.Event()

        def watch():
            n = len(rows(out))
            last = time.time()
            while not stop.is_set():
                m = len(rows(out))
                if m != n:
                    n, now = m, time.time()
                    seen.append(now - last)
                    last = now
                time.sleep(0.05)
            seen.append(time.time() - last)
        th = threading.Thread(target=watch)
        th.start()
        if kind == "etcd-kill":
            c.restart_etcd(OUTAGE_S)
        else:
            c.pause_etcd(OUTAGE_S)
        time.sleep(5.0)
        stop.set()
        th.join()
        r = rows(out)
        recomputed = len(r) - len(set(x["step"] for x in r))
        gens = len([g for g in coord_generation_times(c.log("coord0")) if g > gen0])
        return recomputed, gens, max(seen)
    finally:
        c.close()


kinds = sys.argv[3:] or ("double-kill", "etcd-kill", "etcd-stop")
if "double-kill" in kinds:
    print("double-kill: %d trials" % trials)
    pr = [double_kill() for _ in range(trials)]
    print("  published -> first step median/max %.2f / %.2f s; kill -> first step median/max %.2f / %.2f s"
          % (statistics.median(p for p, _ in pr), max(p for p, _ in pr),
             statistics.median(k for _, k in pr), max(k for _, k in pr)))
for kind in [k for k in kinds if k.startswith("etcd-")]:
    res = [etcd_outage(kind) for _ in range(trials)]
    print("%s %.0f s: %d trials; steps recomputed %s; new generations %s; longest pause median/max %.2f / %.2f s"
          % (kind, OUTAGE_S, trials, [x[0] for x in res], [x[1] for x in res],
             statistics.median(x[2] for x in res), max(x[2] for x in res)))
