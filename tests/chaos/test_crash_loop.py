#!/usr/bin/env python3
"""A crash-looping worker under `tagctl run`: w2's process is SIGKILLed 6 times within 30 s:
twice as a member of the running generation (at the start, and once its restarted process
joined), then each time as soon as its next process has registered (workers/w2 names its PID).
  1. the supervisor reports each death of a registered process at once (the restart's
     history event has "death_reported"), and for each death of a member the coordinator's
     next generation without it ("lost w2 (crashed, seen by its supervisor)") is published
     within 1 s of that report (or, on a loaded machine, earlier from the survivors' reports
     of the broken collective): no wait for the dead process's lease;
  2. those losses count as crashes, never as partitions or lost leases (failures_total);
  3. after its 2nd quick death w2 is on probation (the coordinator's "on probation" reason),
     so the processes killed on registration are never readmitted, and the last one, which
     lives, is readmitted when its probation ends (5 s or 10 s after it registered: 2 or 3
     quick deaths counted, by which reached the leader first);
  4. the readmitted w2 trains with the others (world size 3 for a checkpoint interval), then
     the job is suspended (SIGTERM to every worker and coordinator) and ends cleanly (status
     0, summary "suspended" at the last step), and the steps recomputed (metrics.jsonl rows
     whose step is at most an earlier row's) stay bounded; the figure is printed.
The job's step count is out of reach: how far it gets before the probation ends depends on the
machine's speed, so the test ends it by a suspend once the readmission has been seen."""
import base64
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (WORKER_LEASE_TTL_S, Checks, coord_generations, job_args, log_time,  # noqa: E402
                     metrics, read_pids, wait_for)

bindir = sys.argv[1]
tagctl = os.path.join(bindir, "tagctl")
check = Checks()
tmp = tempfile.mkdtemp(prefix="tagc-chaos-crash-loop-")
out = os.path.join(tmp, "out")
JOB = "crashloop"
STEPS, CKPT_EVERY = 10 ** 7, 50  # never reached: the test suspends the job
KILLS, KILL_WINDOW_S = 6, 30.0
# the supervisor's restart backoff doubles up to 8 s (docs/operations.md); a restarted process
# waits up to 2 * TTL + 1 s for its old key to expire
BACKOFF_MAX_S = 8.0
REGISTER_WAIT_S = BACKOFF_MAX_S + 2 * WORKER_LEASE_TTL_S + 1 + 10  # + the process's start-up
PLAN_LATENCY_S = 1.0
# the longest probation the kills can earn: the quick deaths of the processes killed on
# registration count once, at the next generation (docs/operations.md), so n <= 3 -> 10 s;
# twice that as a bound for the readmission after the last process registered
PROBATION_MAX_S = 10.0
PROBATION_FIRST_S = 5.0  # coordinator/planner.h TAGC_PROBATION_FIRST_S: 2 quick deaths
REJOIN_WAIT_S = REGISTER_WAIT_S + 2 * PROBATION_MAX_S
LEAVE_TIMEOUT_S, SUSPEND_SAVE_S = 5.0, 30.0  # --leave-timeout's default; the suspend's save bound


def etcd_get(url, key):
    """(value, create revision) of /tagc/JOB/<key>, or (None, 0)."""
    k = base64.b64encode(("/tagc/%s/%s" % (JOB, key)).encode()).decode()
    req = urllib.request.Request(url + "/v3/kv/range", data=json.dumps({"key": k}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=2) as r:
        kvs = json.load(r).get("kvs", [])
    return (base64.b64decode(kvs[0]["value"]), int(kvs[0]["create_revision"])) if kvs else (None, 0)


def w2_process(url, killed):
    """(pid, registration, member) of w2's process once it registered (a PID not killed
    yet), else None; member: the current plan has that registration."""
    pid = read_pids(out).get("w2")
    if pid is None or pid in killed:  # not reaped yet: its key is still there
        return None
    value, reg = etcd_get(url, "workers/w2")
    if not value or json.loads(value).get("pid") != pid:
        return None
    gen, _ = etcd_get(url, "gen")
    plan, _ = etcd_get(url, "gen/%s/plan" % gen.decode()) if gen else (None, 0)
    member = bool(plan) and json.loads(plan).get("registrations", {}).get("w2") == reg
    return pid, reg, member


def coord_log():
    with open(os.path.join(out, "coordinator-0.log")) as f:
        return f.read()


def history():
    with open(os.path.join(out, "history.jsonl")) as f:
        return [json.loads(l) for l in f if l.strip()]


log = open(out + ".log", "w")
p = subprocess.Popen([tagctl, "run", "--out", out, "--log", "warn", "--workers", "3", "--job", JOB]
                     + job_args(STEPS, CKPT_EVERY, 12), stdout=log, stderr=subprocess.STDOUT,
                     start_new_session=True)
try:
    def etcd_url():
        with open(out + ".log") as f:
            m = re.search(r"tagctl status --etcd (\S+) --job", f.read())
        return m and m.group(1)
    url = wait_for(etcd_url, 60, "tagctl run to say where its etcd is")
    wait_for(lambda: os.path.exists(out + "/metrics.jsonl") and len(metrics(out)) >= 2 * CKPT_EVERY,
             180, "%d steps" % (2 * CKPT_EVERY))
    kills = []  # (time, pid)
    first = None
    for k in range(KILLS):
        killed = [kp for _, kp in kills]
        if k < 2:  # a member: the 2nd process once it joined (settle window 1 s)
            pid = wait_for(lambda: (w2_process(url, killed) or (0, 0, False))[2] and read_pids(out)["w2"],
                           REGISTER_WAIT_S + 1, "w2's process %d to join" % (k + 1))
        else:
            pid = wait_for(lambda: (w2_process(url, killed) or (0,))[0], REGISTER_WAIT_S,
                           "w2's process %d to register" % (k + 1))
        os.kill(pid, signal.SIGKILL)
        now = time.time()
        first = first or now
        kills.append((now, pid))
    span = kills[-1][0] - first
    check(span <= KILL_WINDOW_S, "%d kills of w2 within %.1f s (<= %.0f s)" % (KILLS, span, KILL_WINDOW_S))

    # the last process: when it registered (seen by polling, at most ~0.1 s after)
    last_reg = wait_for(lambda: w2_process(url, [kp for _, kp in kills]) and time.time(),
                        REGISTER_WAIT_S, "w2's last process to register")

    def rejoined_rows():
        """metrics.jsonl rows at world size 3 after the readmission that followed the last
        kill (None before that readmission)."""
        joins = [(t, g) for t, g, why in coord_generations(coord_log()) if "w2 joined" in why
                 and t > kills[-1][0]]
        if not joins:
            return None
        return [r for r in metrics(out) if r.get("generation", 0) >= joins[0][1] and r.get("world_size") == 3]
    wait_for(rejoined_rows, REJOIN_WAIT_S, "w2's last process to be readmitted after its probation")
    wait_for(lambda: len(rejoined_rows() or []) >= CKPT_EVERY, 120,
             "%d steps at world size 3 after the readmission" % CKPT_EVERY)
    with3 = len(rejoined_rows())
    check(with3 >= CKPT_EVERY, "w2 trained with the others after its readmission (%d steps at world size 3)"
          % with3)
    targets = [pid for k, pid in read_pids(out).items() if re.match(r"^(w\d+|coordinator-\d+)$", k)]
    for pid in targets:
        os.kill(pid, signal.SIGTERM)
    rc = p.wait(LEAVE_TIMEOUT_S + SUSPEND_SAVE_S + 30)
    s = json.load(open(out + "/summary.json"))
    last = metrics(out)[-1]["step"]
    check(rc == 0 and s.get("end") == "suspended" and s["steps"] == last,
          "the job ended cleanly on the suspend: status %d, end %r at step %d (last row %d)"
          % (rc, s.get("end"), s["steps"], last))

    # 1. death reports and the generations without w2
    reported = [e["death_reported"] for e in history()
                if e.get("event") == "restart" and e.get("who") == "w2" and "death_reported" in e]
    check(len(reported) == KILLS, "the supervisor reported %d of %d deaths (each process had registered)"
          % (len(reported), KILLS))
    # the generation that dropped w2 after each of its deaths as a member: from its
    # supervisor's death record ("lost w2 (crashed, ...)"), or, when the survivors' reports
    # of the broken collective reached the leader first (a loaded machine), from those
    # ("excluded w2: ..."); either way within PLAN_LATENCY_S of the death report
    drops = [(t, g, why) for t, g, why in coord_generations(coord_log())
             if "lost w2 (crashed, seen by its supervisor)" in why or "excluded w2" in why]
    lost = []
    for k in range(2):
        after = [(t, g, why) for t, g, why in drops if t > kills[k][0]]
        if after:
            lost.append(after[0])
    check(len(lost) == 2 and len(drops) == 2, "%d generations dropped w2 (2: its deaths as a member): %s"
          % (len(drops), "; ".join("gen %d: %s" % (g, why) for _, g, why in drops)))
    latencies = []
    for k, (t, g, why) in enumerate(lost):
        rep = [r for r in reported if r >= kills[k][0]]
        latencies.append(t - min(rep) if rep else float("inf"))
    worst = max(latencies) if latencies else float("inf")
    check(worst <= PLAN_LATENCY_S, "each generation without w2 came %s s after the death report (<= %.0f s; "
          "negative: the survivors' reports came first)" % (", ".join("%.3f" % l for l in latencies),
                                                             PLAN_LATENCY_S))

    # 2. counted as crashes
    plans = [e for e in history() if e.get("event") == "generation"]
    totals = plans[-1]["failures_total"]
    check(totals.get("crash", 0) >= len(lost) and totals.get("partition", 0) == 0 and totals.get("lease", 0) == 0,
          "failures_total %s: crash >= %d, no partition, no lost lease" % (json.dumps(totals), len(lost)))

    # 3. probation
    joins = [t for t, _, why in coord_generations(coord_log()) if "w2 joined" in why]
    check(len(joins) == 3, "w2 joined %d generations (3: the first, after its 1st death, after its "
          "probation), not one per restart" % len(joins))
    held = [(t, why) for t, _, why in coord_generations(coord_log()) if "w2 on probation" in why]
    held += [(log_time(json.loads(l)), json.loads(l)["msg"]) for l in coord_log().splitlines()
             if "no new generation: w2 on probation" in l]
    rejoined = [t for t in joins if t > last_reg]
    since = sorted(h for h in held if h[0] > last_reg)
    wait = rejoined[0] - last_reg if rejoined else -1.0
    check(bool(since) and bool(rejoined) and since[0][0] < rejoined[0] and wait >= PROBATION_FIRST_S - 1.0,
          "the last process was held out (%s), then readmitted %.1f s after it registered "
          "(>= the shortest probation, %.0f s, less 1 s: this test sees the registration by polling)"
          % (since[0][1] if since else "no probation line", wait, PROBATION_FIRST_S))

    # 4. recomputed steps
    rows = metrics(out)
    recomputed, high = 0, 0
    for r in rows:
        if r["step"] <= high:
            recomputed += 1
        high = max(high, r["step"])
    bound = (len(lost) + 1) * CKPT_EVERY
    print("steps recomputed over %d kills: %d (%d rows for %d steps)" % (KILLS, recomputed, len(rows), high))
    check(recomputed <= bound, "%d steps recomputed (<= %d: a checkpoint interval per loss of w2, plus one)"
          % (recomputed, bound))
finally:
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    log.close()
    if not check.ok():
        for name in ("out.log", "out/coordinator-0.log"):
            path = os.path.join(tmp, name)
            if os.path.exists(path):
                print("=====", name)
                print("\n".join(open(path).read().splitlines()[-25:]))
    if not os.environ.get("TAGC_KEEP_TMP"):
        shutil.rmtree(tmp, ignore_errors=True)
check.exit()
