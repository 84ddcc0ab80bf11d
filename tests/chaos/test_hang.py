#!/usr/bin/env python3
"""Hangs, and what the recovery figures say about them.

1. SIGSTOP of 1 of 3 workers for STOP_S (10 s). The others' collectives pass their deadline,
   the hung worker is excluded and training continues with 2; after SIGCONT the worker comes
   back as a new member at the next planning point (a generation of 3 again), and the job
   finishes. summary.json reports the stop honestly: max_pause_s (the worst over the final
   generation's ranks, the stopped worker among them) is >= STOP_S, and max_recovery_s, which
   counts from the last step completed before the fault, is at least the survivors' op
   timeout (the stopped worker's own reaches STOP_S unless the stop fell after its step's
   last collective: then that step completes after SIGCONT).
2. --fault hang@STEP in one worker: the others wait out --op-timeout (T) before they report it,
   so max_pause_s and max_recovery_s are >= T. And not much more: the two survivors report the
   moment their collective gives up, the coordinator excludes the worker they both name at
   once (it reported nothing: no suspect window, no settle window once both reports are in),
   and the new generation bootstraps without it. So the job's longest pause (between the
   metrics rows' times) is <= T + HANG_OVERHEAD_S: a report (an etcd put), the leader's read,
   plan and txn, the watch to the workers, a 2-rank Gloo bootstrap on loopback, the resume of
   the tiny model's checkpoint and one step, each well under a second even on a loaded 2-core
   machine (before: T + 2-3 s of suspect and settle windows alone). summary.json's max_pause_s
   is the worst over the final generation's ranks, the hung worker among them: its own pause
   adds its rejoin, which waits for the leader's settle window (1 s: a joiner is batched), so
   it is <= T + HANG_OVERHEAD_S + 1. The hung worker rejoins and finishes too."""
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, Cluster, job_args, metrics, wait_for  # noqa: E402

bindir = sys.argv[1]
STEPS = 1500  # outlasts the 10 s stop and the rejoin on a quiet machine (400 steps finished at W=2 during the stop)
OP_TIMEOUT_S = 3.0
STOP_S = 10.0
HANG_OVERHEAD_S = 2.0
SETTLE_S = 1.0  # the coordinator's default --settle
common = job_args(STEPS, 20, 12, "none", "--op-timeout", str(OP_TIMEOUT_S))
check = Checks()


def figures(out, what, at_least, recovery_at_least=None):
    s = json.load(open(out + "/summary.json"))
    recovery_at_least = at_least if recovery_at_least is None else recovery_at_least
    check(s["steps"] == STEPS, "%s: finished %d steps" % (what, s["steps"]))
    check(s["max_pause_s"] >= at_least, "%s: max_pause_s %.2f >= %.1f" % (what, s["max_pause_s"], at_least))
    check(s["max_recovery_s"] >= recovery_at_least,
          "%s: max_recovery_s %.2f >= %.1f" % (what, s["max_recovery_s"], recovery_at_least))


c = Cluster(bindir)
try:
    out = c.start_job(common)
    wait_for(lambda: os.path.exists(out + "/metrics.jsonl") and len(metrics(out)) >= 30, 120, "30 steps")
    c.signal("w2", signal.SIGSTOP)
    t_stop = time.time()
    wait_for(lambda: any(r["world_size"] == 2 for r in metrics(out)), 60, "a step at W=2")
    check(time.time() - t_stop < 20, "training continued with 2 workers %.1f s after the hang" % (time.time() - t_stop))
    time.sleep(max(0.0, t_stop + STOP_S - time.time()))
    c.signal("w2", signal.SIGCONT)

    def back_to_3():
        rows = metrics(out)
        i2 = next((i for i, r in enumerate(rows) if r["world_size"] == 2), None)
        return i2 is not None and any(r["world_size"] == 3 for r in rows[i2:])
    back = wait_for(back_to_3, 90, "a generation of 3 after the hang")
    check(back, "the resumed worker rejoined (a generation of 3 after the one of 2)")
    rc = [c.wait("w%d" % i, 120) for i in range(3)]
    check(rc == [0, 0, 0], "all 3 workers finished with status 0 (%s)" % rc)
    check("excluded w2" in c.log("coord0") or "lost w2" in c.log("coord0"), "the coordinator excluded w2")
    # the stop shows in the pause (>= STOP_S); the recovery is >= the survivors' op timeout, and
    # >= STOP_S only when the stop landed inside a collective: stopped between its step's last
    # collective and the step's end, w2 completes that step after SIGCONT, so its recovery
    # counts from then
    figures(out, "SIGSTOP %.0f s" % STOP_S, STOP_S, OP_TIMEOUT_S)
except RuntimeError as e:  # a wait that timed out: fail with the processes' logs
    check(False, "SIGSTOP %.0f s: %s" % (STOP_S, e))
finally:
    check.print_logs(c, ("coord0", "w0", "w1", "w2"))
    c.close()

HANG_AT = 40
c = Cluster(bindir)
try:
    out = c.start_job(common, worker_extra={"w2": ["--fault", "hang@%d" % HANG_AT]})
    rc = [c.wait("w%d" % i, 200) for i in range(3)]
    check(rc == [0, 0, 0], "all 3 workers finished with status 0 (%s)" % rc)
    rows = metrics(out)
    check(any(r["world_size"] == 2 for r in rows), "training went on without the hung worker")
    i2 = next((i for i, r in enumerate(rows) if r["world_size"] == 2), len(rows))
    check(any(r["world_size"] == 3 for r in rows[i2:]), "the hung worker rejoined (a generation of 3 after the one of 2)")
    figures(out, "hang@%d" % HANG_AT, OP_TIMEOUT_S)
    pause = max(b["time"] - a["time"] for a, b in zip(rows, rows[1:]))
    check(pause <= OP_TIMEOUT_S + HANG_OVERHEAD_S,
          "longest pause between metrics rows %.2f s <= op timeout %.0f s + %.0f s" % (pause, OP_TIMEOUT_S, HANG_OVERHEAD_S))
    s = json.load(open(out + "/summary.json"))
    check(s["max_pause_s"] <= OP_TIMEOUT_S + HANG_OVERHEAD_S + SETTLE_S,
          "summary max_pause_s %.2f s (the hung worker's own, with its rejoin) <= op timeout + %.0f s"
          % (s["max_pause_s"], HANG_OVERHEAD_S + SETTLE_S))
    check("all 2 other members reported it" in c.log("coord0"), "the coordinator excluded w2 without a suspect window")
finally:
    check.print_logs(c, ("coord0", "w0", "w1", "w2"))
    c.close()
check.exit()
