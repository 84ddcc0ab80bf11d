#!/usr/bin/env python3
"""etcd away for OUTAGE_S (10 s, over three times the workers' lease TTL) while 3 workers
train, in two ways: SIGKILL then a restart on the same data dir and ports (the leases come
back with the data and are extended), and SIGSTOP then SIGCONT (etcd expires every lease as it
resumes, so every worker registers again); and, with a 3-member etcd, a leader failover (the
leader SIGKILLed for good: the other two elect a new one). Each way it costs nothing: the workers train on
through the outage (steps complete while etcd is away), there is no new generation (every
metrics row is of the first one), no step is recomputed (each step is trained once, summary
steps_lost 0, no failure), the global batches equal a fault-free run's, and every worker
exits 0. docs/operations.md, "etcd outages"."""
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import WORKER_LEASE_TTL_S, Checks, Cluster, coord_generation_times, job_args, metrics, wait_for  # noqa: E402

bindir = sys.argv[1]
STEPS = 200
OUTAGE_S = 10.0
assert OUTAGE_S > 3 * WORKER_LEASE_TTL_S
common = job_args(STEPS, 10, 12, "none", "--fault", "slow=0.01")
check = Checks()


def run_case(mode, ref_rows):
    c = Cluster(bindir)
    try:
        out = c.start_job(common, etcd_members=3 if mode == "failover" else 1)
        wait_for(lambda: os.path.exists(out + "/metrics.jsonl") and len(metrics(out)) >= 20, 120, "20 steps")
        gen0 = metrics(out)[-1]["generation"]
        before = len(metrics(out))
        if mode == "kill":
            c.restart_etcd(OUTAGE_S)
        elif mode == "stop":
            c.pause_etcd(OUTAGE_S)
        else:
            leader = c.etcd_leader()
            check(leader is not None, "failover: etcd%s leads" % leader)
            c.signal("etcd%d" % leader, signal.SIGKILL)
            time.sleep(OUTAGE_S)
            check(c.etcd_leader() not in (None, leader), "failover: another member leads (etcd%s)" % c.etcd_leader())
        during = len(metrics(out)) - before
        check(during > 0, "%s: %d steps completed in the %.0f s after the fault" % (mode, during, OUTAGE_S))
        rc = [c.wait("w%d" % i, 300) for i in range(3)]
        check(rc == [0, 0, 0], "%s: all workers finished with status 0 (%s)" % (mode, rc))
        rows = metrics(out)
        steps = [r["step"] for r in rows]
        check(steps == list(range(1, STEPS + 1)), "%s: every step 1..%d trained exactly once (%d rows)"
              % (mode, STEPS, len(rows)))
        gens = sorted(set(r["generation"] for r in rows))
        check(gens == [gen0], "%s: every step in generation %d (%s)" % (mode, gen0, gens))
        later = [g for g in coord_generation_times(c.log("coord0")) if g > gen0]
        check(not later, "%s: the coordinator made no new generation (%s)" % (mode, later))
        s = json.load(open(out + "/summary.json"))
        check(s["steps_lost"] == 0 and s["failures"] == 0,
              "%s: steps_lost %d, failures %d" % (mode, s["steps_lost"], s["failures"]))
        print("%s: longest pause without a completed step %.2f s" % (mode, s["max_pause_s"]))
        last = {r["step"]: r for r in rows}
        check(all(last[k]["batch_crc32c"] == ref_rows[k]["batch_crc32c"] for k in ref_rows),
              "%s: the global batches equal the fault-free run's" % mode)
        lost = "lost (not found)" in c.log("w0")
        print("%s: w0 %s its lease" % (mode, "lost" if lost else "kept"))
    finally:
        check.print_logs(c, ("coord0", "w0", "w1", "w2"))
        c.close()


ref_dir = Cluster(bindir)
try:
    ref = os.path.join(ref_dir.tmp, "ref")
    subprocess.run([os.path.join(bindir, "tagctl"), "run", "--workers", "1", "--out", ref, "--log", "warn"] + common,
                   check=True, stdout=subprocess.DEVNULL)
    ref_rows = {r["step"]: r for r in metrics(ref)}
finally:
    ref_dir.close()
for mode in sys.argv[2:] or ("kill", "stop", "failover"):  # a subset when named
    run_case(mode, ref_rows)
check.exit()
