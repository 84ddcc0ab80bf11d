#!/usr/bin/env python3
"""Zero steps lost (issue 26): the in-memory copies (--mirror-every 1: every step; the default
auto period is 1 too while a copy costs under 5 % of a step, which a loaded machine may not
give) against real
etcd, coordinators and workers, with --ckpt-every larger than the job unless a part needs a
checkpoint to compare with, so that the disk cannot help.

  kill     tagctl run --workers 3, one worker SIGKILLed mid-run: the survivors rebuild from
           memory (steps_lost <= 1), tagctl run restarts it, it rejoins with 0 steps
           recomputed, the job ends at W = 3.
  check    3 workers, --compress tagc from step 1 (error-feedback residuals), a checkpoint every
           10 steps, w2 exits at step 30: the survivors rebuild step 30 from memory, and
           --check-rebuild finds every rank's rebuilt shards equal to the checkpoint of step 30
           bit for bit; two such runs end with the same params_crc32c.
  pairs    4 workers, two exit at step 30 at once: ranks r and r + 2 (each one's copy is with a
           survivor): rebuilt from memory, 0 steps lost; ranks r and r + 1 (r's only copy died
           with r + 1): the disk fallback, logged with the lost rank.
  domains  4 workers on two failure domains (--failure-domain a a b b): the copies go to
           rank + 2, and losing a whole domain (ranks 0 and 1) is rebuilt from memory.
  auto     the default period with a budget no copy fits: a period above 1 is agreed and its
           steps at risk logged; a worker exiting is rebuilt from memory, losing fewer steps
           than the period.
  copies   3 workers with --mirror-copies 2 (rank + 1 and rank + 2 hold every state), --compress
           tagc from step 1, two exit at step 30 at once: the last one rebuilds step 30 from
           memory alone, its shards equal the checkpoint of step 30 bit for bit, 0 steps lost.
  sigterm  3 workers, one SIGTERMed mid-run, no --leave-ckpt-wait: 0 steps lost, with copies
           every step and with a period the leave never falls on (the leaver asks every rank
           for a copy of the step it stops at)."""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, Cluster, job_args, metrics, wait_for  # noqa: E402

bindir = sys.argv[1]
check = Checks()
NEVER = "100000"  # --ckpt-every beyond the job


def summary(out):
    with open(os.path.join(out, "summary.json")) as f:
        return json.load(f)


def ranks(c, names):
    """worker name -> rank in generation 1, from its log."""
    got = {}
    for n in names:
        m = re.search(r"generation 1: rank (\d+) of", c.log(n))
        got[n] = int(m.group(1)) if m else -1
    return got


def part_kill():
    tmp = tempfile.mkdtemp(prefix="tagc-mirror-")
    out = os.path.join(tmp, "out")
    steps = 900
    log = open(os.path.join(tmp, "tagctl.log"), "w")
    p = subprocess.Popen([os.path.join(bindir, "tagctl"), "run", "--workers", "3", "--out", out,
                          "--log", "info"] + job_args(steps, int(NEVER), 12, "none", "--mirror-every", "1"),
                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: os.path.exists(out + "/metrics.jsonl") and len(metrics(out)) >= 100, 120, "100 steps")
        pids = dict(line.split() for line in open(out + "/pids") if line.strip())
        os.kill(int(pids["w2"]), signal.SIGKILL)
        rc = p.wait(timeout=300)
        text = open(os.path.join(tmp, "tagctl.log")).read()
        s = summary(out)
        check(rc == 0, "tagctl run finished with status 0 (%d)" % rc)
        check(s["steps"] == steps and s["world_size"] == 3,
              "finished %d steps at W=%d (the restarted worker rejoined)" % (s["steps"], s["world_size"]))
        check(s["steps_lost"] <= 1, "steps_lost %d (<= 1) for one SIGKILL" % s["steps_lost"])
        check(s["memory_rebuilds"] >= 2 and s["disk_fallbacks"] == 0,
              "%d rebuilds from memory (the kill, the rejoin), %d disk fallbacks"
              % (s["memory_rebuilds"], s["disk_fallbacks"]))
        rejoin = re.findall(r"recovered from membership at step \d+ in [\d.]+ s with 3 workers, (\d+) steps recomputed", text)
        check(rejoin and all(r == "0" for r in rejoin), "the rejoin recomputed %s steps" % rejoin)
        check("resuming from" not in text, "no generation resumed from disk")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        log.close()


def run_check(tag):
    c = Cluster(bindir, job="mirror-%s" % tag)
    try:
        common = job_args(60, 10, 12, "tagc", "--compress-warmup", "0", "--check-rebuild",
                          "--ckpt-keep-last", "0", "--mirror-every", "1")
        out = c.start_job(common, worker_extra={"w2": ["--fault", "exit@30"]})
        rc = [c.wait(n, 240) for n in ("w0", "w1")]
        check(rc == [0, 0], "%s: survivors finished (%s)" % (tag, rc))
        s = summary(out)
        check(s["steps"] == 60 and s["world_size"] == 2 and s["steps_lost"] == 0,
              "%s: 60 steps, W=%d, steps_lost %d" % (tag, s["world_size"], s["steps_lost"]))
        logs = c.log("w0") + c.log("w1")
        same = re.findall(r"rebuild check: rank (\d+)'s shards of step 30 equal the checkpoint's bit for bit \((\d+) floats\)", logs)
        check(sorted(r for r, _ in same) == ["0", "1"] and all(int(n) > 0 for _, n in same),
              "%s: both survivors' rebuilt shards of step 30 equal the checkpoint's (%s)" % (tag, same))
        check("differ from the checkpoint" not in logs, "%s: no difference reported" % tag)
        return s["params_crc32c"], c
    except Exception:
        check.print_logs(c, ("coord0", "w0", "w1", "w2"))
        c.close()
        raise


def part_check():
    crc1, c1 = run_check("a")
    c1.close()
    crc2, c2 = run_check("b")
    c2.close()
    check(crc1 == crc2, "two runs with the same fault end with the same params_crc32c (%s, %s)" % (crc1, crc2))


def part_pairs(adjacent):
    c = Cluster(bindir, job="mirror-pair%d" % adjacent)
    try:
        names = ["w0", "w1", "w2", "w3"]
        # ranks follow the worker ids' order in the first plan (asserted below)
        kill = ["w1", "w2"] if adjacent else ["w1", "w3"]
        common = job_args(60, 10, 12, "none", "--ckpt-keep-last", "0", "--mirror-every", "1")
        out = c.start_job(common, workers=4, min_workers=2, max_workers=4,
                          worker_extra={n: ["--fault", "exit@30"] for n in kill})
        live = [n for n in names if n not in kill]
        rc = [c.wait(n, 240) for n in live]
        check(rc == [0, 0], "pair %s: survivors finished (%s)" % (kill, rc))
        r = ranks(c, names)
        check(r == {"w0": 0, "w1": 1, "w2": 2, "w3": 3}, "ranks follow the worker ids: %s" % r)
        s = summary(out)
        logs = "".join(c.log(n) for n in live)
        rk = sorted(r[n] for n in kill)
        if rk[1] - rk[0] == 1 or (rk[0] == 0 and rk[1] == 3):  # one's copy died with the other
            lost = rk[0] if rk[1] - rk[0] == 1 else rk[1]
            m = re.search(r"no in-memory copy of the shards of rank (\d+) of 4 \(generation 1, step (\d+)\) survived", logs)
            check(m and int(m.group(1)) == lost and int(m.group(2)) == 30,
                  "pair %s (ranks %s): the disk fallback names rank %d, step 30 (%s)"
                  % (kill, rk, lost, m.group(0) if m else None))
            check(s["disk_fallbacks"] >= 1 and "resuming from" in logs, "pair %s: resumed from disk" % kill)
        else:
            check(s["steps_lost"] == 0 and s["memory_rebuilds"] >= 1 and s["disk_fallbacks"] == 0,
                  "pair %s (ranks %s): rebuilt from memory, steps_lost %d" % (kill, rk, s["steps_lost"]))
            check(re.search(r"rebuilt step 30 from the in-memory copies of 4 workers", logs) is not None,
                  "pair %s: rebuilt step 30" % kill)
        check(s["steps"] == 60 and s["world_size"] == 2, "pair %s: 60 steps at W=%d" % (kill, s["world_size"]))
    finally:
        check.print_logs(c, ("coord0",) + tuple(["w0", "w1", "w2", "w3"])) if not check.ok() else None
        c.close()


def part_domains():
    """w0, w1 on failure domain a, w2, w3 on b: the copies go to rank + 2, so losing domain a
    (ranks 0 and 1 at once, neighbours) is rebuilt from memory."""
    c = Cluster(bindir, job="mirror-dom")
    try:
        common = job_args(60, 10, 12, "none", "--ckpt-keep-last", "0", "--mirror-every", "1")
        extra = {n: ["--failure-domain", "a" if n in ("w0", "w1") else "b"] for n in ("w0", "w1", "w2", "w3")}
        for n in ("w0", "w1"):
            extra[n] += ["--fault", "exit@30"]
        out = c.start_job(common, workers=4, min_workers=2, max_workers=4, worker_extra=extra)
        rc = [c.wait(n, 240) for n in ("w2", "w3")]
        check(rc == [0, 0], "domains: survivors finished (%s)" % rc)
        r = ranks(c, ["w0", "w1", "w2", "w3"])
        check(r == {"w0": 0, "w1": 1, "w2": 2, "w3": 3}, "domains: ranks follow the worker ids: %s" % r)
        logs = c.log("w0") + c.log("w2") + c.log("w3")
        check("in-memory copies go to rank + 2: 4 of 4 ranks' copies are outside their failure domain" in logs,
              "domains: copies placed at rank + 2")
        s = summary(out)
        check(s["steps"] == 60 and s["steps_lost"] == 0 and s["memory_rebuilds"] >= 1 and s["disk_fallbacks"] == 0,
              "domains: losing domain a (ranks 0, 1) rebuilt from memory, steps_lost %d" % s["steps_lost"])
    finally:
        check.print_logs(c, ("coord0", "w0", "w1", "w2", "w3")) if not check.ok() else None
        c.close()


def part_auto():
    """The default period (--mirror-every -1) with a budget no copy fits (--mirror-budget
    0.001): the ranks agree on a period above 1, log the steps at risk, and a worker that
    exits is still rebuilt from memory, losing fewer steps than the period."""
    c = Cluster(bindir, job="mirror-auto")
    try:
        common = job_args(300, int(NEVER), 12, "none", "--mirror-budget", "0.001")
        out = c.start_job(common, worker_extra={"w2": ["--fault", "exit@120"]})
        rc = [c.wait(n, 240) for n in ("w0", "w1")]
        check(rc == [0, 0], "auto: survivors finished (%s)" % rc)
        log = c.log("w0")
        pat = r"in-memory copies every (\d+) steps from step (\d+) .*: up to (\d+) steps at risk"
        m = re.findall(pat, log)
        check(m and int(m[0][0]) > 1 and int(m[0][2]) == int(m[0][0]) - 1,
              "auto: a period above 1 chosen and its steps at risk logged (%s)" % m)
        s = summary(out)
        # the period in force when w2 exited: the last one the first generation agreed on
        # (the rebuilt generation starts over at period 1 and agrees on its own)
        before = re.findall(pat, log.split("rebuilt step", 1)[0])
        period = int(before[-1][0]) if before else 0
        check(s["memory_rebuilds"] >= 1 and s["disk_fallbacks"] == 0 and s["steps_lost"] < max(period, 1),
              "auto: rebuilt from memory, steps_lost %d below the period %d" % (s["steps_lost"], period))
        check(s["steps"] == 300, "auto: 300 steps")
    finally:
        check.print_logs(c, ("coord0", "w0", "w1", "w2")) if not check.ok() else None
        c.close()


def part_copies():
    c = Cluster(bindir, job="mirror-copies")
    try:
        common = job_args(60, 10, 12, "tagc", "--compress-warmup", "0", "--check-rebuild",
                          "--ckpt-keep-last", "0", "--mirror-every", "1", "--mirror-copies", "2")
        out = c.start_job(common, min_workers=1, worker_extra={n: ["--fault", "exit@30"] for n in ("w1", "w2")})
        rc = c.wait("w0", 240)
        check(rc == 0, "copies: the survivor finished (%s)" % rc)
        s = summary(out)
        log = c.log("w0")
        check(s["steps"] == 60 and s["world_size"] == 1 and s["steps_lost"] == 0 and s["disk_fallbacks"] == 0,
              "copies: 60 steps, W=%d, steps_lost %d, disk fallbacks %d"
              % (s["world_size"], s["steps_lost"], s["disk_fallbacks"]))
        check(re.search(r"rebuilt step 30 from the in-memory copies of 3 workers \(generation 1\) in [\d.]+ s, with 1 workers", log)
              is not None, "copies: the last worker rebuilt step 30 from the copies of all 3")
        same = re.findall(r"rebuild check: rank 0's shards of step 30 equal the checkpoint's bit for bit \((\d+) floats\)", log)
        check(same and int(same[0]) > 0, "copies: the rebuilt shards equal the checkpoint's (%s floats)" % same)
        check("differ from the checkpoint" not in log, "copies: no difference reported")
    finally:
        check.print_logs(c, ("coord0", "w0", "w1", "w2")) if not check.ok() else None
        c.close()


def part_sigterm(every, steps):
    """One worker SIGTERMed: 0 steps lost. With a period the leave does not fall on (every
    > 1), the leaver asks every rank for a copy of the step it stops at."""
    c = Cluster(bindir, job="mirror-term%d" % every)
    try:
        common = job_args(steps, int(NEVER), 12, "none", "--mirror-every", str(every))
        out = c.start_job(common)
        wait_for(lambda: os.path.exists(out + "/metrics.jsonl") and len(metrics(out)) >= 100, 120, "100 steps")
        c.signal("w2", signal.SIGTERM)
        rc = [c.wait(n, 300) for n in ("w0", "w1", "w2")]
        tag = "SIGTERM, copies every %d steps" % every
        check(rc == [0, 0, 0], "%s: all exited with status 0 (%s)" % (tag, rc))
        s = summary(out)
        check(s["steps"] == steps and s["world_size"] == 2, "%s: %d steps at W=%d" % (tag, steps, s["world_size"]))
        check(s["steps_lost"] == 0 and s["failures"] == 0,
              "%s: steps_lost %d, failures %d" % (tag, s["steps_lost"], s["failures"]))
        check(s["memory_rebuilds"] >= 1, "%s: rebuilt from memory (%d)" % (tag, s["memory_rebuilds"]))
        if every > 1:
            m = re.search(r"rebuilt step (\d+) from the in-memory copies of 3 workers", c.log("w0"))
            check(m and int(m.group(1)) % every != 0,
                  "%s: rebuilt step %s, off the period (the leaver's copy)" % (tag, m.group(1) if m else None))
    finally:
        check.print_logs(c, ("coord0", "w0", "w1", "w2")) if not check.ok() else None
        c.close()


parts = sys.argv[2:] or ["kill", "check", "pairs", "domains", "auto", "copies", "sigterm"]
for part in parts:
    if part == "kill":
        part_kill()
    elif part == "check":
        part_check()
    elif part == "pairs":
        part_pairs(False)
        part_pairs(True)
    elif part == "domains":
        part_domains()
    elif part == "auto":
        part_auto()
    elif part == "copies":
        part_copies()
    elif part == "sigterm":
        part_sigterm(1, 1500)
        part_sigterm(100000, 900)
check.exit()
