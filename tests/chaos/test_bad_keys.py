#!/usr/bin/env python3
"""Malformed JSON in the job's `config`, `gen/1/plan` and `chaos/<id>` keys, and keys of
another job under /tagc/other/: the coordinator and workers log clear errors and carry on (no
crash), the run completes, and nothing is written into the other job's prefix.
While the job trains: a malformed failure report `failures/<g>/stranger` of a worker that is
not a member makes no new generation, and a `workers/<bad id>` key is logged once, not at
every read; both are counted as ignored_keys in the coordinator's /status. An --etcd URL that
is a web server (HTML pages) gives a one-line error with the HTTP status."""
import base64
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, Cluster, free_port, metrics, wait_for  # noqa: E402

bindir = sys.argv[1]
# Long enough that the job still runs (and the coordinator answers /status) through the
# checks below: 600 steps of this model took 10 s on a quiet machine, and the checks need up
# to three settle + suspect windows after 20 steps.
STEPS = 3000
check = Checks()
c = Cluster(bindir)


def etcd(path, body):
    req = urllib.request.Request(c.etcd_url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=5).read())


def put(key, value):
    etcd("/v3/kv/put", {"key": base64.b64encode(key.encode()).decode(),
                        "value": base64.b64encode(value.encode()).decode()})


def get(key):
    r = etcd("/v3/kv/range", {"key": base64.b64encode(key.encode()).decode()})
    return base64.b64decode(r["kvs"][0]["value"]).decode() if r.get("kvs") else None


def status(port):
    return json.loads(urllib.request.urlopen("http://127.0.0.1:%d/status" % port, timeout=5).read())


def answers(url):
    try:
        return urllib.request.urlopen(url, timeout=1).status == 200
    except OSError:
        return False


def other_job():
    r = etcd("/v3/kv/range", {"key": base64.b64encode(b"/tagc/other/").decode(),
                               "range_end": base64.b64encode(b"/tagc/other0").decode()})
    return sorted((base64.b64decode(kv["key"]), base64.b64decode(kv["value"]), kv["mod_revision"])
                  for kv in r.get("kvs", []))


try:
    c.start_etcd()
    put("/tagc/chaos/config", "{\"steps\": 40,")
    put("/tagc/chaos/gen", "1")
    put("/tagc/chaos/gen/1/plan", "[not a plan")
    put("/tagc/chaos/chaos/w0", "crash@")
    put("/tagc/other/gen", "7")
    put("/tagc/other/gen/7/plan", "{\"gen\": 7}")
    before = other_job()
    # settle 1 s and suspect window 2 s: a report counted would make a generation within 3 s
    c.start_coordinator("coord0", "--min-workers", "2", "--max-workers", "2", "--steps", str(STEPS),
                        "--http", "127.0.0.1:0", "--settle", "1", "--suspect-window", "2")
    out = os.path.join(c.tmp, "out")
    for i in range(2):
        c.start_worker("w%d" % i, "--out", out, "--steps", str(STEPS), "--ckpt-every", "50", "--threads", "1",
                       "--batch", "8", "--eval-every", "0", "--eval-windows", "8")
    port = int(wait_for(lambda: re.search(r"on port (\d+)", c.log("coord0")), 60, "the coordinator's port").group(1))
    wait_for(lambda: os.path.exists(out + "/metrics.jsonl") and len(metrics(out)) >= 20, 180, "20 steps")
    gen = get("/tagc/chaos/gen")
    put("/tagc/chaos/failures/%s/stranger" % gen, "{\"kind\": \"crash\", \"step\": ")
    put("/tagc/chaos/workers/bad id!", "{\"host\": \"x\"}")
    wait_for(lambda: status(port).get("ignored_keys", 0) >= 2, 30, "ignored_keys >= 2 in /status")
    time.sleep(3 * (1 + 2))  # three settle + suspect windows: a counted report makes a generation
    check(get("/tagc/chaos/gen") == gen and status(port)["ignored_keys"] == 2,
          "a non-member's malformed failure report made no new generation (gen %s -> %s), "
          "ignored_keys %d" % (gen, get("/tagc/chaos/gen"), status(port)["ignored_keys"]))
    bad = c.log("coord0").count("ignoring /tagc/chaos/workers/bad id!")
    check(bad == 1, "the bad worker key was logged once in %d s of reads once a second (%d times)" % (3 * 3, bad))
    put("/tagc/chaos/workers/bad id!", "{\"host\": \"y\"}")
    again = wait_for(lambda: c.log("coord0").count("ignoring /tagc/chaos/workers/bad id!") >= 2 and
                     c.log("coord0").count("ignoring /tagc/chaos/workers/bad id!"), 30,
                     "the changed bad key logged again")
    check(again == 2, "the changed bad worker key was logged again, once (once per key and mod "
          "revision; %d times)" % again)
    rc = [c.wait("w%d" % i, 300) for i in range(2)]
    check(rc == [0, 0], "both workers finished with status 0 (%s)" % rc)
    s = json.load(open(out + "/summary.json"))
    check(s["steps"] == STEPS, "the run completed (%d steps)" % s["steps"])
    check(c.procs["coord0"].poll() in (None, 0), "the coordinator did not crash")
    check("chaos spec ignored" in c.log("w0"), "the malformed chaos key was ignored with a warning")
    check(other_job() == before, "the other job's keys are untouched")

    # an --etcd URL that is a web server: one line with the HTTP status
    www = os.path.join(c.tmp, "www")
    os.makedirs(www)
    wport = free_port()
    c.procs["www"] = subprocess.Popen([sys.executable, "-m", "http.server", str(wport), "--bind", "127.0.0.1",
                                       "--directory", www], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = "http://127.0.0.1:%d" % wport
    wait_for(lambda: answers(url), 30, "the web server")
    r = subprocess.run([os.path.join(bindir, "tagctl"), "status", "--etcd", url, "--job", "chaos"],
                       capture_output=True, text=True, timeout=60)
    lines = r.stderr.strip().splitlines()
    check(r.returncode != 0 and len(lines) == 1 and "HTTP 501" in lines[0] and "<" not in lines[0]
          and len(lines[0]) < 250, "tagctl status against a web server: one line %r" % lines[:2])
finally:
    check.print_logs(c, ("coord0", "w0", "w1"))
    c.close()
check.exit()
