#!/usr/bin/env python3
"""Elastic resume checks the checkpoint against the job's etcd record: two workers train to
--stop-at 20 (step-20 committed and recorded in ckpt/committed with its manifest CRC32C),
then another run's step-20 of the same model is put in its place (what a second run writing
into the same folder did). Started again, the workers must refuse that checkpoint, naming the
mismatch, and train nothing — not resume from another run's weights. argv[1]: the bin folder."""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "chaos"))
from harness import Checks, Cluster, job_args, metrics  # noqa: E402

bindir = sys.argv[1]
if not shutil.which("etcd"):
    print("SKIP: no etcd")
    sys.exit(77)
check = Checks()
c = Cluster(bindir, job="record")
try:
    common = job_args(40, 10, 12, "none")
    out = c.start_job(common + ["--stop-at", "20"], workers=2, min_workers=2, max_workers=2)
    rc = [c.wait(n, 240) for n in ("w0", "w1")]
    check(rc == [0, 0], "two workers train to step 20 (status %s)" % rc)
    step20 = os.path.join(out, "ckpt", "step-20")
    check(os.path.isdir(step20), "step-20 is committed")

    other = os.path.join(c.tmp, "other")
    p = subprocess.run([os.path.join(bindir, "tagc-worker")] + common +
                       ["--stop-at", "20", "--lr", "0.001", "--out", other, "--log", "warn"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=240)
    check(p.returncode == 0, "another run (--lr 0.001) saves its own step-20 (status %d)" % p.returncode)
    shutil.rmtree(step20)
    shutil.copytree(os.path.join(other, "ckpt", "step-20"), step20)

    for i in range(2):
        c.start_worker("again%d" % i, "--out", out, *common)
    rc = [c.wait("again%d" % i, 240) for i in range(2)]
    check(all(r not in (0, None) for r in rc), "started again, the workers refuse (status %s)" % rc)
    logs = c.log("again0") + c.log("again1")
    check("is not the one committed" in logs and "written over by another run" in logs,
          "they name the mismatch with the job's record")
    steps = [r["step"] for r in metrics(out)]
    check(max(steps) == 20, "nothing was trained past step 20 (last %d)" % max(steps))
finally:
    check.print_logs(c, ("coord0", "w0", "again0", "again1"))
    c.close()
check.exit()
