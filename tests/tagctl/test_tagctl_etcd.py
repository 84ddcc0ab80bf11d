#!/usr/bin/env python3
"""`tagctl status`, `tagctl inject` and `tagctl job reset|delete` against a real etcd (started
on free loopback ports by tests/chaos/harness.py): an unknown job is an error (status 1, one
line), a job with keys is shown in words (waiting, running, recovering, failed, done), inject
writes and clears chaos/<worker>, job reset clears a run's keys but keeps config (refused
while workers are registered, unless --force), job delete removes them all. Skipped (77)
without an etcd executable.
usage: test_tagctl_etcd.py BINDIR"""
import base64
import json
import re
import os
import shutil
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "chaos"))
from harness import Checks, Cluster  # noqa: E402

if not shutil.which("etcd"):
    print("etcd not found: skipped")
    sys.exit(77)

bindir = sys.argv[1]
tagctl = os.path.join(bindir, "tagctl")
check = Checks()


def run(*args):
    return subprocess.run([tagctl] + list(args), capture_output=True, text=True, timeout=60)


def b64(text):
    return base64.b64encode(text.encode()).decode()


def put(url, key, value):
    """Writes a key through etcd's JSON gateway."""
    data = json.dumps({"key": b64(key), "value": b64(value)}).encode()
    urllib.request.urlopen(urllib.request.Request(url + "/v3/kv/put", data), timeout=5).read()


def keys(url, job):
    """The keys of a job, without the /tagc/<job>/ prefix."""
    prefix = "/tagc/%s/" % job
    data = json.dumps({"key": b64(prefix), "range_end": b64(prefix[:-1] + "0"), "keys_only": True}).encode()
    with urllib.request.urlopen(urllib.request.Request(url + "/v3/kv/range", data), timeout=5) as r:
        return sorted(base64.b64decode(kv["key"]).decode()[len(prefix):] for kv in json.load(r).get("kvs", []))


def state(url, job):
    """(status, the 'state' line of tagctl status without its label)."""
    r = run("status", "--etcd", url, "--job", job)
    line = [l for l in r.stdout.splitlines() if l.startswith("state ")]
    return r.returncode, line[0][len("state"):].strip() if line else r.stderr.strip()


c = Cluster(bindir, job="tagctl")
try:
    c.start_etcd()
    url = c.etcd_url

    r = run("status", "--etcd", url, "--job", "nosuch")
    err = r.stderr.strip().splitlines()
    check(r.returncode == 1 and len(err) == 1 and "no such job 'nosuch'" in err[0] and r.stdout == "",
          "status of an unknown job: status 1, one line (%d: %s)" % (r.returncode, r.stderr.strip()))

    r = run("status", "--etcd", url, "--job", "nosuch", "--json")
    err = r.stderr.strip().splitlines()
    check(r.returncode == 1 and len(err) == 1 and "no such job 'nosuch'" in err[0] and r.stdout == "",
          "status --json of an unknown job: status 1, one line")

    r = run("inject", "--etcd", url, "--job", "j1", "--worker", "w0", "explode", "--at-step", "5")
    check(r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and r.stdout == "",
          "inject of an unknown kind: status 2, one line")
    r = run("inject", "--etcd", url, "--job", "j1", "--worker", "w0", "crash", "--at-step", "7")
    err = r.stderr.strip().splitlines()
    check(r.returncode == 1 and len(err) == 1 and "no worker 'w0' is registered in job 'j1'" in err[0]
          and r.stdout == "", "inject into a worker that is not registered: status 1, one line (%s)" % err)
    r = run("status", "--etcd", url, "--job", "j1")
    check(r.returncode == 1 and "no such job" in r.stderr, "refused injections wrote nothing")

    put(url, "/tagc/j1/workers/w0", json.dumps({"host": "h", "pid": 10}))
    put(url, "/tagc/j1/workers/w1", json.dumps({"host": "h", "pid": 11}))
    r = run("inject", "--etcd", url, "--job", "j1", "--worker", "w0", "crash")
    check(r.returncode == 0 and r.stdout.strip() == "/tagc/j1/chaos/w0 = crash@0",
          "inject crash without --at-step and no progress yet: the next step (%s)" % r.stdout.strip())
    put(url, "/tagc/j1/progress", json.dumps({"step": 42, "loss": 3.0}))
    r = run("inject", "--etcd", url, "--job", "j1", "--worker", "w0", "hang")
    check(r.returncode == 0 and r.stdout.strip() == "/tagc/j1/chaos/w0 = hang@42",
          "inject hang without --at-step: the job's recorded step, 42 (%s)" % r.stdout.strip())
    r = run("inject", "--etcd", url, "--job", "j1", "--worker", "w0", "crash", "--at-step", "7")
    check(r.returncode == 0 and r.stdout.strip() == "/tagc/j1/chaos/w0 = crash@7",
          "inject crash --at-step 7 writes chaos/w0 (%s)" % r.stdout.strip())
    r = run("inject", "--etcd", url, "--job", "j1", "--worker", "w1", "slow", "--seconds", "0.25")
    check(r.returncode == 0 and r.stdout.strip() == "/tagc/j1/chaos/w1 = slow=0.25", "inject slow --seconds 0.25")

    r = run("status", "--etcd", url, "--job", "j1")
    lines = r.stdout.splitlines()
    check(r.returncode == 0 and r.stderr == "" and lines[:6] == [
        "job         j1", "state       waiting: no generation yet, 2 worker(s) registered",
        "progress    step 42, ETA ?, 0 tokens/s, loss 3.0000, world 0",
        "checkpoint  -", "reports     none", "generation  -"],
        "status of a job with keys but no generation yet: status 0, waiting (%s)" % lines[:6])

    for w in ("w0", "w1"):
        r = run("inject", "--etcd", url, "--job", "j1", "--worker", w, "--clear")
        check(r.returncode == 0, "inject --clear %s" % w)
        data = json.dumps({"key": b64("/tagc/j1/workers/" + w)}).encode()
        urllib.request.urlopen(urllib.request.Request(url + "/v3/kv/deleterange", data), timeout=5).read()
    r = run("inject", "--etcd", url, "--job", "j1", "--worker", "w9", "--clear")
    check(r.returncode == 0, "inject --clear works for any worker id")
    data = json.dumps({"key": b64("/tagc/j1/progress")}).encode()
    urllib.request.urlopen(urllib.request.Request(url + "/v3/kv/deleterange", data), timeout=5).read()
    r = run("status", "--etcd", url, "--job", "j1")
    check(r.returncode == 1 and "no such job 'j1'" in r.stderr, "after --clear the job has no keys left")

    # ---- a job's states in words, and job reset / delete ----
    j = "/tagc/j2/"
    put(url, j + "config", json.dumps({"steps": 100}))
    put(url, j + "gen", "3")
    put(url, j + "gen/3/plan", json.dumps({"gen": 3, "world": 2, "members": ["w0", "w1"],
                                           "reason": "w2 left", "failures_total": {"lease": 1}}))
    now = time.time()
    put(url, j + "progress", json.dumps({"step": 50, "loss": 2.5, "tokens_per_s": 1000, "world_size": 2,
                                         "eta_s": 125.0, "recoveries": 1, "time": now}))
    put(url, j + "ckpt/committed", json.dumps({"gen": 3, "step": 40, "path": "/ckpt/step-40", "world": 2,
                                               "time": now - 90}))
    put(url, j + "failures/3/w1", json.dumps({"kind": "comm", "step": 50, "peer": 0}))
    rc, st = state(url, "j2")
    check(rc == 0 and st.startswith("failed: not done and no worker is registered (stopped at step 50 of 100)"),
          "no worker registered, not done: 'failed' (%s)" % st)
    put(url, j + "workers/w0", json.dumps({"host": "h", "pid": 1}))
    rc, st = state(url, "j2")
    check(rc == 0 and st.startswith("recovering: generation 3 lost 1 of 2 member(s), 1 failure report(s)"),
          "a member missing: 'recovering' (%s)" % st)
    put(url, j + "workers/w1", json.dumps({"host": "h", "pid": 2}))
    data = json.dumps({"key": b64(j + "failures/3/w1")}).encode()
    urllib.request.urlopen(urllib.request.Request(url + "/v3/kv/deleterange", data), timeout=5).read()
    rc, st = state(url, "j2")
    check(rc == 0 and st == "running: generation 3 with 2 worker(s)",
          "every member registered, no report: 'running' (%s)" % st)
    put(url, j + "coord/1", "http://127.0.0.1:9400")
    r = run("status", "--etcd", url, "--job", "j2")
    lines = r.stdout.splitlines()
    # the ETA counts down and the checkpoint ages from `now`: bounds follow the time since
    # then (a loaded machine may take many seconds to get here)
    since = time.time() - now

    def clock(line, what):
        m = re.search(what + r" (?:(\d+)m)?(\d+)s", line)
        return int(m.group(1) or 0) * 60 + int(m.group(2)) if m else -1
    line = [l for l in lines if l.startswith("progress ")]
    eta = clock(line[0], "ETA") if line else -1
    check(125 - since - 2 <= eta <= 125, "status for people: ETA %d s, 125 s less %.1f s since the update" % (eta, since))
    line = [l for l in lines if l.startswith("checkpoint ")]
    age = clock(line[0], "step 40,") if line else -1
    check(89 <= age <= 90 + since + 2, "status for people: checkpoint age %d s, 90 s plus %.1f s" % (age, since))
    want = {"progress": "step 50/100 (50%), ETA ", "checkpoint": "step 40, ",
            "reports": "lease 1; recoveries 1", "generation": "3: w0, w1 (w2 left)",
            "leader": "http://127.0.0.1:9400"}
    for label, start in want.items():
        line = [l[12:] for l in lines if l.startswith(label + " ")]
        check(r.returncode == 0 and len(line) == 1 and line[0].startswith(start),
              "status for people: %s line starts %r (%s)" % (label, start, line))
    check("progress    step 50/100 (50%), ETA " in r.stdout and ", 1000 tokens/s, loss 2.5000, world 2, updated" in r.stdout,
          "progress: step of total, percent, ETA, tokens/s, loss, world")
    check("worker      w0: rank 0, training, host h, pid 1" in r.stdout and
          "worker      w1: rank 1, training, host h, pid 2" in r.stdout, "each worker's rank and state")
    r = run("status", "--etcd", url, "--job", "j2", "--json")
    check(r.returncode == 0 and len(r.stdout.strip().splitlines()) == 1, "status --json: one line")
    s = json.loads(r.stdout)
    check((s["job"], s["state"], s["generation"], s["step"], s["steps"], s["percent"], s["world_size"],
           s["leader"], s["failures"], s["recoveries"]) ==
          ("j2", "running", 3, 50, 100, 50.0, 2, "http://127.0.0.1:9400", {"lease": 1}, 1),
          "status --json: job, state, generation, step of steps, percent, world, leader, failures, recoveries (%s)" % s)
    since = time.time() - now
    check(125 - since - 1 <= s["eta_s"] <= 125 and s["tokens_per_s"] == 1000 and s["loss"] == 2.5,
          "status --json: ETA, tokens/s, loss (%s)" % s)
    check(s["checkpoint"]["step"] == 40 and 89 <= s["checkpoint"]["age_s"] <= 90 + since + 1 and
          s["checkpoint"]["path"] == "/ckpt/step-40", "status --json: checkpoint step and age (%s)" % s["checkpoint"])
    check([(w["id"], w["rank"], w["state"]) for w in s["workers"]] == [("w0", 0, "training"), ("w1", 1, "training")],
          "status --json: each worker's rank and state (%s)" % s["workers"])
    data = json.dumps({"key": b64(j + "coord/1")}).encode()
    urllib.request.urlopen(urllib.request.Request(url + "/v3/kv/deleterange", data), timeout=5).read()
    r = run("job", "reset", "--etcd", url, "--job", "j2")
    err = r.stderr.strip().splitlines()
    check(r.returncode == 1 and len(err) == 1 and "is running: 2 worker(s) registered" in err[0],
          "job reset of a job with registered workers: refused, status 1, one line (%s)" % r.stderr.strip())
    put(url, j + "done", json.dumps({"status": "finished", "gen": 3, "step": 100, "by": "w0"}))
    r = run("status", "--etcd", url, "--job", "j2")
    check(r.returncode == 0 and "state       done: finished at step 100 (generation 3, recorded by w0)" in r.stdout
          and "reports     lease 1" in r.stdout and "worker      w0: rank 0, done, host h, pid 1" in r.stdout
          and "(generation 3, world 2): /ckpt/step-40" in r.stdout,
          "done job: 'done', failures by kind, workers with their ranks, the checkpoint")
    r = run("job", "reset", "--etcd", url, "--job", "j2", "--force")
    check(r.returncode == 0 and r.stdout.startswith("job j2 reset:"), "job reset --force (%s)" % r.stdout.strip())
    left = keys(url, "j2")
    check(left == ["config", "workers/w0", "workers/w1"],
          "reset kept config (and the live registrations), cleared the rest (%s)" % left)
    rc, st = state(url, "j2")
    check(rc == 0 and st.startswith("waiting: no generation yet"), "after reset: 'waiting' (%s)" % st)
    r = run("job", "delete", "--etcd", url, "--job", "j2", "--force")
    check(r.returncode == 0 and keys(url, "j2") == [], "job delete --force removed every key (%s)" % r.stdout.strip())
    r = run("job", "delete", "--etcd", url, "--job", "j2")
    check(r.returncode == 1 and "no such job 'j2'" in r.stderr and len(r.stderr.strip().splitlines()) == 1,
          "job delete of an unknown job: status 1, one line")
    r = run("job", "rename", "--etcd", url, "--job", "j2")
    check(r.returncode == 2 and "say reset or delete" in r.stderr, "job with another verb: status 2")
finally:
    c.close()

r = subprocess.run([tagctl, "status", "--etcd", url, "--job", "j1"], capture_output=True, text=True, timeout=60)
check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1,
      "status with etcd gone: status 1, one line (%s)" % r.stderr.strip())
check.exit()
