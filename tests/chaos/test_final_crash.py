#!/usr/bin/env python3
"""A worker dies at the very end of the job, and the survivors must still finish with a
summary.json (and the coordinator must not declare the job done before it is written):
  1. after the last step, before the final parameter gather (fault crash@STEPS): the new
     generation resumes the final checkpoint, has nothing to train, gathers and writes the
     summary;
  2. while writing its shard of the final checkpoint (fault ckpt:mid-write, the only save):
     no checkpoint is committed; the survivors rebuild the final step from the in-memory
     copies (when its copy went to its buddy before it died) and only gather and summarise, or
     the step before it and train the final one again; with --mirror-every 0 they redo the
     job from the start with W = 2."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, Cluster, job_args, metrics  # noqa: E402

bindir = sys.argv[1]
STEPS = 30
check = Checks()


def scenario(name, ckpt_every, fault, marker, *extra):
    c = Cluster(bindir)
    try:
        common = job_args(STEPS, ckpt_every, 12, "none", *extra)
        if fault.startswith("ckpt:"):  # checkpoint faults are armed by TAGC_FAULT
            out = c.start_job(common, worker_env={"w2": {"TAGC_FAULT": fault}})
        else:
            out = c.start_job(common, worker_extra={"w2": ["--fault", fault]})
        rc = [c.wait(n, 120) for n in ("w0", "w1")]
        check(rc == [0, 0], "%s: survivors finished with status 0 (%s)" % (name, rc))
        check(c.wait("w2", 10) not in (0, None), "%s: w2 died by its fault" % name)
        check(marker in c.log("w2"), "%s: w2's log shows '%s'" % (name, marker))
        check(os.path.exists(out + "/summary.json"), "%s: summary.json written" % name)
        if os.path.exists(out + "/summary.json"):
            s = json.load(open(out + "/summary.json"))
            check(s["steps"] == STEPS and s["world_size"] == 2,
                  "%s: summary at step %d by W=%d (want %d, 2)" % (name, s["steps"], s["world_size"], STEPS))
            check(isinstance(s["final_train_loss"], float), "%s: final train loss %r" % (name, s["final_train_loss"]))
        return sorted(r["step"] for r in metrics(out)), c.log("w0")
    finally:
        check.print_logs(c, ("coord0", "w0", "w1", "w2"))
        c.close()


steps, _ = scenario("after the last step", 10, "crash@%d" % STEPS, "fault injected at step %d: crash" % STEPS)
check(steps == list(range(1, STEPS + 1)), "after the last step: every step trained once")
# the shard write runs beside the step loop, so w2 dies either after its copy of the final
# step reached its buddy (the final step is rebuilt: nothing left to train) or before (the
# step before it is rebuilt and the final step trained again); either way each step has one
# metrics row and at most the final step is recomputed
steps, log = scenario("in the final save", STEPS, "ckpt:mid-write", "mid-write", "--mirror-every", "1")
check(steps == list(range(1, STEPS + 1)),
      "in the final save: one metrics row per step (steps %s)" % steps)
final = "rebuilt step %d from the in-memory copies" % STEPS in log
before = "rebuilt step %d from the in-memory copies" % (STEPS - 1) in log and \
    "recovered from comm at step %d" % STEPS in log and "1 steps recomputed" in log
check(final or before, "in the final save: rebuilt from memory at step %d or %d (%s)"
      % (STEPS, STEPS - 1, "the final step" if final else "1 step recomputed" if before else "neither"))
steps, _ = scenario("in the final save, no copies", STEPS, "ckpt:mid-write", "mid-write", "--mirror-every", "0")
check(steps.count(1) == 2 and sorted(set(steps)) == list(range(1, STEPS + 1)),
      "in the final save, no copies: the job was redone from the start to step %d (steps %s)" % (STEPS, steps))
check.exit()
