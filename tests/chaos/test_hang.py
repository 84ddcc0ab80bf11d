#!/usr/bin/env python3
"""A hang: SIGSTOP of 1 of 3 workers. The others' collectives pass their deadline, the hung
worker is excluded and training continues with 2; after SIGCONT the worker comes back as a new
member at the next planning point (a generation of 3 again), and the job finishes."""
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, Cluster, job_args, metrics, wait_for  # noqa: E402

bindir = sys.argv[1]
STEPS = 400
common = job_args(STEPS, 20, 12, "none", "--op-timeout", "3")
check = Checks()


c = Cluster(bindir)
try:
    out = c.start_job(common)
    wait_for(lambda: os.path.exists(out + "/metrics.jsonl") and len(metrics(out)) >= 30, 120, "30 steps")
    c.signal("w2", signal.SIGSTOP)
    t_stop = time.time()
    wait_for(lambda: any(r["world_size"] == 2 for r in metrics(out)), 60, "a step at W=2")
    check(time.time() - t_stop < 20, "training continued with 2 workers %.1f s after the hang" % (time.time() - t_stop))
    c.signal("w2", signal.SIGCONT)
    seen2 = False

    def back_to_3():
        rows = metrics(out)
        i2 = next((i for i, r in enumerate(rows) if r["world_size"] == 2), None)
        return i2 is not None and any(r["world_size"] == 3 for r in rows[i2:])
    wait_for(back_to_3, 90, "a generation of 3 after the hang")
    check(True, "the resumed worker rejoined (a generation of 3 after the one of 2)")
    rc = [c.wait("w%d" % i, 120) for i in range(3)]
    check(rc == [0, 0, 0], "all 3 workers finished with status 0 (%s)" % rc)
    s = json.load(open(out + "/summary.json"))
    check(s["steps"] == STEPS, "finished %d steps" % s["steps"])
    check("excluded w2" in c.log("coord0") or "lost w2" in c.log("coord0"), "the coordinator excluded w2")
finally:
    check.print_logs(c, ("coord0", "w0", "w1", "w2"))
    c.close()
check.exit()
