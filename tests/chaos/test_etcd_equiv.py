#!/usr/bin/env python3
"""A 3-worker run through etcd (coordinator plans, Gloo bootstrap over etcd keys) completes
with the same loss sequence, bit for bit, as the static-bootstrap run of the same seed and
world size; a malformed chaos key is ignored with a warning."""
import json
import os
import subprocess
import sys
import urllib.request
import base64

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, Cluster, job_args, metrics  # noqa: E402

bindir = sys.argv[1]
common = job_args(40, 20, 12, "tagc")
check = Checks()
c = Cluster(bindir)
try:
    c.start_etcd()
    key = base64.b64encode(b"/tagc/chaos/chaos/w1").decode()
    val = base64.b64encode(b"{not a fault").decode()
    urllib.request.urlopen(urllib.request.Request(
        c.etcd_url + "/v3/kv/put", data=json.dumps({"key": key, "value": val}).encode(),
        headers={"Content-Type": "application/json"}), timeout=5).read()
    c.start_coordinator("coord0", "--min-workers", "3", "--max-workers", "3")
    out = os.path.join(c.tmp, "out")
    for i in range(3):
        c.start_worker("w%d" % i, "--out", out, *common)
    rc = [c.wait("w%d" % i, 150) for i in range(3)]
    check(rc == [0, 0, 0], "the 3 workers finished (%s)" % rc)
    check("chaos spec ignored" in c.log("w1"), "the malformed chaos key was ignored with a warning")
    ref = os.path.join(c.tmp, "ref")
    subprocess.run([os.path.join(bindir, "tagctl"), "run", "--workers", "3", "--out", ref, "--log", "warn"] + common,
                   check=True, stdout=subprocess.DEVNULL)
    a = [r["loss"] for r in metrics(out)]
    b = [r["loss"] for r in metrics(ref)]
    check(len(a) == 40 and a == b, "the loss sequence equals the static run's bit for bit (%d steps)" % len(a))
finally:
    check.print_logs(c, ("coord0", "w0", "w1", "w2"))
    c.close()
check.exit()
