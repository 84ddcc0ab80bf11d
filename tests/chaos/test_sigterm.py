#!/usr/bin/env python3
"""Graceful termination as in a container: SIGTERM to processes running as PID 1 of their own
PID namespace (`unshare --pid --fork --mount-proc`), where the kernel drops signals a process
has no handler for.
1. 3 workers, w2 as PID 1 with --leave-exit-code 143 (as on Kubernetes): SIGTERM to w2 -> it
   exits 143 within 5 s, and the survivors train at
   W = 2 within 3 s of the signal, without a data-path failure: the coordinator plans "w2
   left" and counts no failure (failures_total unchanged), no worker reports one (no
   failures/ key), and each survivor's failure counter (/metrics, summary.json; worker/run.c
   counts every generation that ends early, a superseded one too) rose by exactly the one
   generation change. Prints the time from SIGTERM to w2's exit and to the survivors' next
   step.
2. The leader coordinator, as PID 1: SIGTERM -> it exits 0 and resigns (its election key is
   gone at once), so the standby leads well before the leader's lease TTL would run out.
3. --leave-ckpt-wait: SIGTERM to w1 -> it trains on until the next checkpoint is committed,
   then leaves (status 0: the default --leave-exit-code); w0 (--leave-exit-code 143 too)
   resumes alone from that checkpoint, finishes the job and exits 0.
Skipped (77) without root, `unshare` or etcd."""
import base64
import json
import os
import re
import shutil
import signal
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, Cluster, job_args, metrics, wait_for  # noqa: E402

if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("etcd"):
    print("needs root, unshare and etcd: skipped")
    sys.exit(77)

bindir = sys.argv[1]
STEPS = 800
SETTLE = 1.0          # the coordinator's --settle (its default)
COORD_TTL = 5.0       # the coordinator's --lease-ttl (its default)
EXIT_LIMIT = 5.0      # the issue's bounds: SIGTERM -> exit, SIGTERM -> survivors' next step
STEP_LIMIT = 3.0
PID1 = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
common = job_args(STEPS, 10, 12, "none", "--ckpt-keep-last", "2", "--metrics-addr", "127.0.0.1:0")
check = Checks()


def etcd_range(url, key, prefix=False):
    """{key: value} of a key or a prefix, through etcd's JSON gateway."""
    req = {"key": base64.b64encode(key.encode()).decode()}
    if prefix:
        end = key[:-1] + chr(ord(key[-1]) + 1)
        req["range_end"] = base64.b64encode(end.encode()).decode()
    data = json.dumps(req).encode()
    with urllib.request.urlopen(urllib.request.Request(url + "/v3/kv/range", data), timeout=5) as r:
        kvs = json.load(r).get("kvs", [])
    return {base64.b64decode(kv["key"]).decode(): base64.b64decode(kv.get("value", "")).decode()
            for kv in kvs}


def plan(c):
    """The current plan of the job (a dict), or None."""
    kv = etcd_range(c.etcd_url, "/tagc/%s/gen" % c.job)
    g = kv.get("/tagc/%s/gen" % c.job)
    if not g:
        return None
    return json.loads(etcd_range(c.etcd_url, "/tagc/%s/gen/%s/plan" % (c.job, g))["/tagc/%s/gen/%s/plan" % (c.job, g)])


def ns_child(c, name):
    """Host PID of the process unshare started (PID 1 in its namespace)."""
    pid = c.pid(name)
    with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
        return int(f.read().split()[0])


def metrics_port(c, name):
    m = re.search(r"serving /metrics and /healthz on port (\d+)", c.log(name))
    return int(m.group(1)) if m else None


def failures_counter(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("tagc_worker_failures_total{"):
                return int(float(line.split()[1]))
    return None


def ended_after(c, name, mark):
    """The kinds of the "generation G ended at step S (KIND)" lines logged after `mark` bytes."""
    return re.findall(r"generation \d+ ended at step \d+ \((\w+)\)", c.log(name)[mark:])


def rows(out):
    """metrics.jsonl as written so far (a line being written is left for the next look)."""
    try:
        return metrics(out)
    except (OSError, ValueError):
        return []


def rows_at(out, world):
    return [r for r in rows(out) if r["world_size"] == world]


c = Cluster(bindir)
try:
    c.start_etcd()
    worker = os.path.join(bindir, "tagc-worker")
    coordinator = os.path.join(bindir, "tagc-coordinator")
    c._start("coord0", PID1 + [coordinator, "--etcd", c.etcd_url, "--job", c.job, "--http", "",
                               "--log", "info", "--min-workers", "1", "--max-workers", "3",
                               "--start-workers", "3"])
    wait_for(lambda: "leads job" in c.log("coord0"), 30, "coord0 to lead")
    c.start_coordinator("coord1", "--min-workers", "1", "--max-workers", "3", "--start-workers", "3")
    out = os.path.join(c.tmp, "out")
    c.start_worker("w0", "--out", out, "--leave-exit-code", "143", *common)
    c.start_worker("w1", "--out", out, "--leave-ckpt-wait", "60", *common)
    c._start("w2", PID1 + [worker, "--etcd", c.etcd_url, "--job", c.job, "--worker-id", "w2",
                           "--log", "info", "--out", out, "--leave-exit-code", "143"] + common)
    wait_for(lambda: len(rows_at(out, 3)) >= 15, 180, "15 steps at W=3")
    ports = {n: metrics_port(c, n) for n in ("w0", "w1")}
    before = {n: failures_counter(p) for n, p in ports.items()}
    totals_before = plan(c)["failures_total"]
    marks = {n: len(c.log(n)) for n in ("w0", "w1")}
    rows_before = len(rows(out))

    # 1. SIGTERM to the worker that is PID 1 of its namespace
    t0 = time.time()
    os.kill(ns_child(c, "w2"), signal.SIGTERM)
    t_exit = t_step = None
    while time.time() - t0 < 60 and (t_exit is None or t_step is None):
        if t_exit is None and c.procs["w2"].poll() is not None:
            t_exit = time.time() - t0
        if t_step is None and any(r["world_size"] == 2 for r in rows(out)[rows_before:]):
            t_step = time.time() - t0
        time.sleep(0.02)
    rc = c.procs["w2"].poll()
    print("SIGTERM -> w2 exited after %s s; -> survivors' next step (W=2) after %s s" %
          ("%.2f" % t_exit if t_exit is not None else "-", "%.2f" % t_step if t_step is not None else "-"))
    check(rc == 143 and t_exit is not None and t_exit <= EXIT_LIMIT,
          "w2 (PID 1) exited with status %s within %.0f s of SIGTERM" % (rc, EXIT_LIMIT))
    check("SIGTERM: leaving the job" in c.log("w2"), "w2 logged that it leaves on SIGTERM")
    check(t_step is not None and t_step <= STEP_LIMIT,
          "the survivors trained at W=2 within %.0f s of the signal" % STEP_LIMIT)
    p = plan(c)
    check(p["members"] == ["w0", "w1"] and "w2 left" in p["reason"],
          "the coordinator planned [w0, w1] because w2 left (%s)" % p["reason"])
    check(p["failures_total"] == totals_before,
          "the coordinator counted no failure (failures_total %s)" % p["failures_total"])
    reports = etcd_range(c.etcd_url, "/tagc/%s/failures/" % c.job, prefix=True)
    check(not reports, "no failure report in etcd (%s)" % sorted(reports))
    wait_for(lambda: all(failures_counter(p) is not None for p in ports.values()), 10, "/metrics")
    for n, port in ports.items():
        kinds = ended_after(c, n, marks[n])
        rose = failures_counter(port) - before[n]
        check(kinds == ["superseded"] and rose == 0,
              "%s: its generation was superseded, no failure counted (failures_total +%d; it ended as: %s)"
              % (n, rose, ", ".join(kinds) or "nothing"))

    # 2. SIGTERM to the leader coordinator, PID 1 of its namespace
    wait_for(lambda: len(rows_at(out, 2)) >= 5, 120, "5 steps at W=2")
    t0 = time.time()
    os.kill(ns_child(c, "coord0"), signal.SIGTERM)
    coord_rc = c.wait("coord0", 10)
    t_coord = time.time() - t0
    wait_for(lambda: "leads job" in c.log("coord1"), COORD_TTL, "coord1 to lead")
    t_lead = time.time() - t0
    print("SIGTERM -> leader exited after %.2f s; standby leads after %.2f s (lease TTL %.0f s)"
          % (t_coord, t_lead, COORD_TTL))
    check(coord_rc == 0, "the leader (PID 1) exited with status 0 on SIGTERM")
    check(t_lead < COORD_TTL - SETTLE,
          "the standby led %.2f s after the signal, before the leader's lease could expire" % t_lead)

    # 3. SIGTERM to w1, which waits for the next checkpoint first (--leave-ckpt-wait)
    committed = json.loads(etcd_range(c.etcd_url, "/tagc/%s/ckpt/committed" % c.job)
                           ["/tagc/%s/ckpt/committed" % c.job])["step"]
    c.signal("w1", signal.SIGTERM)
    rc1 = c.wait("w1", 60)
    p = plan(c)
    saved = re.search(r"checkpoint of step (\d+) committed; leaving", c.log("w1"))
    check(rc1 == 0 and saved and int(saved.group(1)) > committed,
          "w1 left (status %s) after the checkpoint of step %s (committed at the signal: %d)"
          % (rc1, saved.group(1) if saved else "-", committed))
    check(p["members"] == ["w0"] and p["reason"] == "w1 left" and saved and
          p["resume"]["step"] >= int(saved.group(1)),
          "w0 goes on alone from that checkpoint (plan: %s, resume step %d)"
          % (p["members"], p["resume"]["step"]))

    rc0 = c.wait("w0", 300)
    check(rc0 == 0, "w0 finished the job")
    s = json.load(open(out + "/summary.json"))
    check(s["steps"] == STEPS and s["world_size"] == 1,
          "finished %d steps at W=%d" % (s["steps"], s["world_size"]))
    kinds = ended_after(c, "w0", 0)
    check(s["failures"] == 0 and kinds == ["superseded", "superseded"],
          "summary.json: failures %d for the two generation changes (w2 and w1 left; ended as: %s)"
          % (s["failures"], ", ".join(kinds)))
    check(not etcd_range(c.etcd_url, "/tagc/%s/failures/" % c.job, prefix=True) and
          plan(c)["failures_total"] == totals_before,
          "no failure reported or counted by the coordinator over the whole run")
    check(c.wait("coord1", 30) == 0, "the standby coordinator exited 0 when the job was done")
finally:
    check.print_logs(c, ("coord0", "coord1", "w0", "w1", "w2"))
    c.close()
check.exit()
