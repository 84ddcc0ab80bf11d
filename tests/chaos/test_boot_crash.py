#!/usr/bin/env python3
"""A crash during communicator re-initialisation: 4 workers; w3 is SIGKILLed at step ~20, and
w0 — rank 0 of the next generation, whose bootstrap the others wait for — dies while building
that generation's communicator (fault bootcrash@2). The others' bootstrap times out, they
report it, and the generation after that (w1, w2) succeeds and finishes the job."""
import json
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import START_WAIT_S, Checks, Cluster, job_args, metrics, wait_for  # noqa: E402

bindir = sys.argv[1]
STEPS = 80
common = job_args(STEPS, 10, 12, "none", "--op-timeout", "3")
check = Checks()
c = Cluster(bindir)
try:
    c.start_etcd()
    # all 4 in the first generation, however slowly they start (w3 must be in it to be killed
    # from it, and generation 2 must be the one after that kill)
    c.start_coordinator("coord0", "--min-workers", "2", "--max-workers", "4", "--start-workers", "4",
                        "--start-wait", str(START_WAIT_S))
    out = os.path.join(c.tmp, "out")
    c.start_worker("w0", "--out", out, "--fault", "bootcrash@2", *common)
    for i in (1, 2, 3):
        c.start_worker("w%d" % i, "--out", out, *common)
    wait_for(lambda: os.path.exists(out + "/metrics.jsonl") and len(metrics(out)) >= 20, 120, "20 steps")
    c.signal("w3", signal.SIGKILL)
    rc0 = c.wait("w0", 60)
    check(rc0 == -9 and "crash while bootstrapping generation 2" in c.log("w0"),
          "w0 died while bootstrapping generation 2 (status %s)" % rc0)
    rc = [c.wait(n, 150) for n in ("w1", "w2")]
    check(rc == [0, 0], "w1 and w2 finished (%s)" % rc)
    s = json.load(open(out + "/summary.json"))
    check(s["steps"] == STEPS and s["world_size"] == 2 and s["generation"] >= 3,
          "finished %d steps at W=%d in generation %d" % (s["steps"], s["world_size"], s["generation"]))
finally:
    check.print_logs(c, ("coord0", "w0", "w1", "w2"))
    c.close()
check.exit()
