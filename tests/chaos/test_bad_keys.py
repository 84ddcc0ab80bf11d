#!/usr/bin/env python3
"""Malformed JSON in the job's `config`, `gen/1/plan` and `chaos/<id>` keys, and keys of
another job under /tagc/other/: the coordinator and workers log clear errors and carry on (no
crash), the run completes, and nothing is written into the other job's prefix."""
import base64
import json
import os
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, Cluster  # noqa: E402

bindir = sys.argv[1]
check = Checks()
c = Cluster(bindir)


def etcd(path, body):
    req = urllib.request.Request(c.etcd_url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=5).read())


def put(key, value):
    etcd("/v3/kv/put", {"key": base64.b64encode(key.encode()).decode(),
                        "value": base64.b64encode(value.encode()).decode()})


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
    c.start_coordinator("coord0", "--min-workers", "2", "--max-workers", "2", "--steps", "40")
    out = os.path.join(c.tmp, "out")
    for i in range(2):
        c.start_worker("w%d" % i, "--out", out, "--steps", "40", "--ckpt-every", "10", "--threads", "1",
                       "--batch", "8", "--eval-every", "0", "--eval-windows", "8")
    rc = [c.wait("w%d" % i, 120) for i in range(2)]
    check(rc == [0, 0], "both workers finished with status 0 (%s)" % rc)
    s = json.load(open(out + "/summary.json"))
    check(s["steps"] == 40, "the run completed (%d steps)" % s["steps"])
    check(c.procs["coord0"].poll() in (None, 0), "the coordinator did not crash")
    check("chaos spec ignored" in c.log("w0"), "the malformed chaos key was ignored with a warning")
    check(other_job() == before, "the other job's keys are untouched")
finally:
    check.print_logs(c, ("coord0", "w0", "w1"))
    c.close()
check.exit()
