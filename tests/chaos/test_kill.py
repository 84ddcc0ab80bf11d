#!/usr/bin/env python3
"""SIGKILL of 1 of 3 workers mid-step, the disk path (--mirror-every 0; chaos_mirror tests the
in-memory copies): the other 2 rebuild in-process (same PIDs before and
after), reshard from the last checkpoint to W = 2 and finish; recovery (failure -> first
completed step) <= 5 s with the default lease TTL; the loss sequence after recovery equals a
fault-free run that resumed the same checkpoint with W = 2 (same math, bit for bit)."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, Cluster, job_args, metrics, wait_for  # noqa: E402

bindir = sys.argv[1]
STEPS = 60
common = job_args(STEPS, 10, 12, "none", "--ckpt-keep-last", "0", "--mirror-every", "0")
check = Checks()


c = Cluster(bindir)
try:
    out = c.start_job(common)
    pids = {n: c.pid(n) for n in ("w0", "w1")}
    wait_for(lambda: os.path.exists(out + "/metrics.jsonl") and len(metrics(out)) >= 25, 120, "25 steps")
    killed_at = len(metrics(out))
    c.signal("w2", signal.SIGKILL)
    rc = [c.wait(n, 90) for n in ("w0", "w1")]
    check(rc == [0, 0], "survivors finished with status 0 (%s)" % rc)
    check(all(c.pid(n) == pids[n] for n in pids), "survivors kept their PIDs %s" % pids)
    s = json.load(open(out + "/summary.json"))
    check(s["steps"] == STEPS and s["world_size"] == 2, "finished %d steps at W=%d" % (s["steps"], s["world_size"]))
    check(s["failures"] >= 1 and s["recoveries"] >= 1, "failures %d, recoveries %d" % (s["failures"], s["recoveries"]))
    check(s["max_recovery_s"] <= 5.0, "recovery took %.2f s (<= 5 s)" % s["max_recovery_s"])
    # recovery counts from the last step completed before the kill: the longest pause is it
    check(s["max_recovery_s"] <= s["max_pause_s"] + 0.05 and s["max_pause_s"] <= 5.0,
          "longest pause %.2f s (<= 5 s) covers the recovery" % s["max_pause_s"])
    # the generation-2 rows: the last row of each step
    rows = {}
    for r in metrics(out):
        rows[r["step"]] = r
    resumed = min(r["step"] for r in metrics(out) if r["generation"] == 2) - 1
    print("killed near step %d; generation 2 resumed from checkpoint step %d" % (killed_at, resumed))
    # fault-free reference: the same checkpoint, W = 2, static mode
    ref = os.path.join(c.tmp, "ref")
    os.makedirs(ref + "/ckpt")
    shutil.copytree("%s/ckpt/step-%d" % (out, resumed), "%s/ckpt/step-%d" % (ref, resumed))
    subprocess.run([os.path.join(bindir, "tagctl"), "run", "--workers", "2", "--out", ref, "--log", "warn"] + common,
                   check=True, stdout=subprocess.DEVNULL)
    ref_rows = {r["step"]: r for r in metrics(ref)}
    same = all(rows[k]["loss"] == ref_rows[k]["loss"] for k in range(resumed + 1, STEPS + 1))
    check(same and len(ref_rows) == STEPS - resumed,
          "losses of steps %d..%d equal the fault-free W=2 run bit for bit" % (resumed + 1, STEPS))
    check(all(rows[k]["batch_crc32c"] == ref_rows[k]["batch_crc32c"] for k in ref_rows),
          "same global batches")
finally:
    check.print_logs(c, ("coord0", "w0", "w1", "w2"))
    c.close()
check.exit()
