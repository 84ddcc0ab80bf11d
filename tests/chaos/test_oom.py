#!/usr/bin/env python3
"""Out of memory: an allocation failure injected on one of 2 workers (fault oom@15) is
reported as `oom`; the next plan halves that worker's micro-batch (same global batch, same
math) and the job finishes; the loss stays that of the fault-free run."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, Cluster, job_args, metrics  # noqa: E402

bindir = sys.argv[1]
STEPS = 40
common = job_args(STEPS, 10, 8, "none", "--micro-batch", "4")
check = Checks()


c = Cluster(bindir)
try:
    c.start_etcd()
    c.start_coordinator("coord0", "--min-workers", "2", "--max-workers", "2", "--micro-batch", "4")
    out = os.path.join(c.tmp, "out")
    c.start_worker("w0", "--out", out, *common)
    c.start_worker("w1", "--out", out, "--fault", "oom@15", *common)
    rc = [c.wait(n, 150) for n in ("w0", "w1")]
    check(rc == [0, 0], "both workers finished with status 0 (%s)" % rc)
    w1 = c.log("w1")
    check('reports oom' in w1, "w1 reported oom")
    plans = [l for l in c.log("coord0").splitlines() if "generation 2" in l]
    check(any("oom" in l for l in plans), "generation 2 was made for the oom report")
    check("generation 2: rank 1 of 2, micro-batch 2" in w1 and "micro-batch 4 -> 2" in c.log("coord0"),
          "w1's micro-batch went from 4 to 2")
    s = json.load(open(out + "/summary.json"))
    check(s["steps"] == STEPS and s["world_size"] == 2, "finished %d steps at W=%d" % (s["steps"], s["world_size"]))
    ref = os.path.join(c.tmp, "ref")
    subprocess.run([os.path.join(bindir, "tagctl"), "run", "--workers", "2", "--out", ref, "--log", "warn"] + common,
                   check=True, stdout=subprocess.DEVNULL)
    rows = {r["step"]: r for r in metrics(out)}
    ref_rows = {r["step"]: r for r in metrics(ref)}
    drift = max(abs(rows[k]["loss"] - ref_rows[k]["loss"]) / abs(ref_rows[k]["loss"]) for k in ref_rows)
    check(drift <= 1e-5, "losses equal the fault-free run's to %.2g relative (<= 1e-5)" % drift)
finally:
    check.print_logs(c, ("coord0", "w0", "w1"))
    c.close()
check.exit()
