#!/usr/bin/env python3
"""Deterministic recovery: the same fault schedule, run twice, ends with bit-identical
parameters (params_crc32c of summary.json).

Each run: `tagctl run` with 3 workers on a real etcd (--etcd, its own job), --min-workers 3
(so no generation trains with fewer workers: which steps run at which width does not depend
on timing), --compress tagc (an explicit policy: auto is not bit-reproducible). Faults at fixed
steps, never timers: worker w1 crashes at step CRASH1 (--fault crash@S), worker w2 at step
CRASH2 (`tagctl inject --at-step`); `tagctl run` restarts each (its backoff is the restart
schedule) and the job goes on from the crash step itself, rebuilt from the in-memory copies."""
import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, Cluster, job_args, metrics  # noqa: E402

bindir = sys.argv[1]
tagctl = os.path.join(bindir, "tagctl")
STEPS, CKPT, CRASH1, CRASH2 = 60, 10, 25, 45
check = Checks()
c = Cluster(bindir)


def run(name):
    """One run of the schedule; returns (exit status, summary, tagctl's output, resume steps)."""
    out = os.path.join(c.tmp, name)
    job = "det-" + name
    inject = subprocess.run([tagctl, "inject", "--etcd", c.etcd_url, "--job", job, "--worker", "w2",
                             "--at-step", str(CRASH2), "--force", "crash"], capture_output=True, text=True, timeout=60)
    check(inject.returncode == 0, "%s: crash@%d armed on w2 (%s)" % (name, CRASH2, inject.stdout.strip()))
    p = subprocess.Popen([tagctl, "run", "--etcd", c.etcd_url, "--job", job, "--out", out, "--log", "warn",
                          "--workers", "3", "--min-workers", "3", "--fault", "crash@%d" % CRASH1,
                          "--fault-rank", "1", "--max-restarts", "2"] + job_args(STEPS, CKPT, 12, "tagc", "--mirror-every", "1"),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    try:
        log, _ = p.communicate(timeout=float(os.environ.get("DET_TIMEOUT", 300)))
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        log, _ = p.communicate()
    s = json.load(open(out + "/summary.json")) if os.path.exists(out + "/summary.json") else {}
    rows = metrics(out) if os.path.exists(out + "/metrics.jsonl") else []
    first = {}  # generation -> its first step; it resumed from the step before
    for r in rows:
        first[r["generation"]] = min(first.get(r["generation"], r["step"]), r["step"])
    resumed = [first[g] - 1 for g in sorted(first)]
    return p.returncode, s, log, resumed


try:
    c.start_etcd()
    results = [run("a"), run("b")]
    for name, (rc, s, log, resumed) in zip("ab", results):
        check(rc == 0 and s.get("steps") == STEPS and s.get("world_size") == 3,
              "run %s: status %d, %s steps at W=%s" % (name, rc, s.get("steps"), s.get("world_size")))
        check("worker w1" in log and "worker w2" in log and log.count("restarted worker") == 2,
              "run %s: tagctl restarted w1 and w2 once each" % name)
        # the survivors rebuild the crash step itself from the in-memory copies (no rollback
        # to the checkpoint before it), and so does the generation the restarted worker joins
        check(resumed[:1] == [0] and CRASH1 in resumed and CRASH2 in resumed,
              "run %s: generations resumed from steps %s (the crash steps, from memory)" % (name, resumed))
        if rc != 0:
            print(log[-3000:])
    (_, sa, _, ra), (_, sb, _, rb) = results
    # a generation superseded right after it started may retrain from the same checkpoint at
    # the same width (same math): the steps resumed from must match, not their count
    check(sorted(set(ra)) == sorted(set(rb)), "both runs resumed from the same checkpoints (%s, %s)" % (ra, rb))
    check(sa.get("params_crc32c") is not None and sa.get("params_crc32c") == sb.get("params_crc32c"),
          "bit-identical parameters: params_crc32c %s and %s" % (sa.get("params_crc32c"), sb.get("params_crc32c")))
    check(sa.get("final_val_loss") == sb.get("final_val_loss"),
          "same final val loss (%s, %s)" % (sa.get("final_val_loss"), sb.get("final_val_loss")))
finally:
    c.close()
check.exit()
