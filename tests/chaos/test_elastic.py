#!/usr/bin/env python3
"""Elastic: min 2, max 4 workers. Start 2, add 2 (scale up to 4), SIGKILL 1 (down to 3): the
job completes, and the global batch of every step (CRC of its window starts) and the step
sequence equal the fault-free run's."""
import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, Cluster, job_args, metrics, wait_for  # noqa: E402

bindir = sys.argv[1]
STEPS = 80
# steps slow enough for joins to land mid-run on a fast machine
common = job_args(STEPS, 5, 12, "none", "--ckpt-keep-last", "0", "--fault", "slow=0.01")
check = Checks()


def last_rows(out):
    rows = {}
    for r in metrics(out):
        rows[r["step"]] = r
    return rows


c = Cluster(bindir)
try:
    c.start_etcd()
    c.start_coordinator("coord0", "--min-workers", "2", "--max-workers", "4")
    out = os.path.join(c.tmp, "out")
    for i in range(2):
        c.start_worker("w%d" % i, "--out", out, *common)
    wait_for(lambda: os.path.exists(out + "/metrics.jsonl") and len(metrics(out)) >= 10, 120, "10 steps")
    for i in (2, 3):
        c.start_worker("w%d" % i, "--out", out, *common)
    first4 = wait_for(lambda: [r for r in metrics(out) if r["world_size"] == 4], 120, "a generation of 4")
    check(first4[0]["generation"] > 1, "scaled up to 4 workers (generation %d)" % first4[0]["generation"])
    wait_for(lambda: len([r for r in metrics(out) if r["world_size"] == 4]) >= 5, 120, "5 steps at W=4")
    c.signal("w3", signal.SIGKILL)
    rc = [c.wait("w%d" % i, 150) for i in range(3)]
    check(rc == [0, 0, 0], "the 3 remaining workers finished with status 0 (%s)" % rc)
    rows = last_rows(out)
    worlds = sorted({r["world_size"] for r in metrics(out)})
    check(worlds == [2, 3, 4], "ran at world sizes %s" % worlds)
    s = json.load(open(out + "/summary.json"))
    check(s["steps"] == STEPS and s["world_size"] == 3, "finished %d steps at W=%d" % (s["steps"], s["world_size"]))
    ref = os.path.join(c.tmp, "ref")
    subprocess.run([os.path.join(bindir, "tagctl"), "run", "--workers", "1", "--out", ref, "--log", "warn"] + common,
                   check=True, stdout=subprocess.DEVNULL)
    ref_rows = last_rows(ref)
    check(sorted(rows) == list(range(1, STEPS + 1)), "every step 1..%d completed" % STEPS)
    check(all(rows[k]["batch_crc32c"] == ref_rows[k]["batch_crc32c"] for k in ref_rows),
          "the global batch of every step equals the fault-free run's")
    drift = max(abs(rows[k]["loss"] - ref_rows[k]["loss"]) for k in ref_rows)
    check(drift < 0.05, "loss stays within 0.05 of the fault-free run (max difference %.2g)" % drift)
finally:
    check.print_logs(c, ("coord0", "w0", "w1", "w2", "w3"))
    c.close()
check.exit()
