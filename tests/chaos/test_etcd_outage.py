#!/usr/bin/env python3
"""etcd stopped (SIGKILL) for longer than the workers' lease TTL, then restarted on the same
data dir and ports while 3 workers train: the job pauses or re-plans and resumes, every step
is completed with the fault-free run's global batches, generations only move forward (no
split brain), and every worker exits 0."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import WORKER_LEASE_TTL_S, Checks, Cluster, job_args, metrics, wait_for  # noqa: E402

bindir = sys.argv[1]
STEPS = 150
common = job_args(STEPS, 10, 12, "none", "--fault", "slow=0.01")
check = Checks()
c = Cluster(bindir)
try:
    out = c.start_job(common)
    wait_for(lambda: os.path.exists(out + "/metrics.jsonl") and len(metrics(out)) >= 20, 120, "20 steps")
    c.restart_etcd(WORKER_LEASE_TTL_S + 2.0)  # down longer than the leases live
    rc = [c.wait("w%d" % i, 200) for i in range(3)]
    check(rc == [0, 0, 0], "all workers finished with status 0 (%s)" % rc)
    rows = metrics(out)
    gens = [r["generation"] for r in rows]
    check(gens == sorted(gens), "generations only move forward (%s)" % sorted(set(gens)))
    last = {r["step"]: r for r in rows}
    check(sorted(last) == list(range(1, STEPS + 1)), "every step 1..%d completed" % STEPS)
    ref = os.path.join(c.tmp, "ref")
    subprocess.run([os.path.join(bindir, "tagctl"), "run", "--workers", "1", "--out", ref, "--log", "warn"] + common,
                   check=True, stdout=subprocess.DEVNULL)
    ref_rows = {r["step"]: r for r in metrics(ref)}
    check(all(last[k]["batch_crc32c"] == ref_rows[k]["batch_crc32c"] for k in ref_rows),
          "the global batches equal the fault-free run's")
finally:
    check.print_logs(c, ("coord0", "w0", "w1", "w2"))
    c.close()
check.exit()
