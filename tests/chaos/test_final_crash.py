#!/usr/bin/env python3
"""A worker dies after the last step, before the job's final parameter gather and summary
(fault crash@STEPS): the job must still end with a summary.json written by the survivors
(the new generation resumes the final checkpoint, has nothing to train, gathers and writes
the summary), and the coordinator must not declare the job done before that."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, Cluster, job_args, metrics  # noqa: E402

bindir = sys.argv[1]
STEPS = 30
common = job_args(STEPS, 10, 12, "none")
check = Checks()

c = Cluster(bindir)
try:
    c.start_etcd()
    c.start_coordinator("coord0", "--min-workers", "2", "--max-workers", "3")
    out = os.path.join(c.tmp, "out")
    for i in range(3):
        extra = ["--fault", "crash@%d" % STEPS] if i == 2 else []
        c.start_worker("w%d" % i, "--out", out, *(list(common) + extra))
    rc = [c.wait(n, 120) for n in ("w0", "w1")]
    check(rc == [0, 0], "survivors finished with status 0 (%s)" % rc)
    check(c.wait("w2", 10) not in (0, None), "w2 died by its fault")
    check("fault injected at step %d: crash" % STEPS in c.log("w2"), "w2's crash fired after the last step")
    check(os.path.exists(out + "/summary.json"), "summary.json written")
    if os.path.exists(out + "/summary.json"):
        s = json.load(open(out + "/summary.json"))
        check(s["steps"] == STEPS, "summary at step %d" % s["steps"])
        check(s["world_size"] == 2, "summary written by the W=2 generation (W=%d)" % s["world_size"])
        check(isinstance(s["final_train_loss"], float), "final train loss %r" % s["final_train_loss"])
    steps = sorted({r["step"] for r in metrics(out)})
    check(steps == list(range(1, STEPS + 1)), "every step trained once in the metrics")
finally:
    check.print_logs(c, ("coord0", "w0", "w1", "w2"))
    c.close()
check.exit()
