#!/usr/bin/env python3
"""A worker's chaos/<id> key holds at most TAGC_CHAOS_SPEC_MAX (1024) bytes and arms once per
value, compared whole. A valid spec longer than 256 bytes (`nan@1` and 300 commas) arms once:
one "chaos armed", one NaN-skipped step. A longer value than the bound is ignored with one
warning naming the key and the limit, however often it is polled. (Before: the spec was
compared with a copy truncated to 256 bytes, so a longer one re-armed at every poll: 10
"chaos armed" and 8 NaN-skipped steps for one put.)"""
import base64
import json
import os
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, Cluster, job_args, metrics, wait_for  # noqa: E402

bindir = sys.argv[1]
STEPS = 100000  # the job is stopped at the end; it must outlast the checks
CHAOS_POLL_S = 1.0  # a worker reads its chaos key about once a second (worker/run.c)
POLLS = 5           # polls each value gets to re-arm (it must not)
SPEC_MAX = 1024     # TAGC_CHAOS_SPEC_MAX (cluster/keys.h)
check = Checks()
c = Cluster(bindir)


def put(key, value):
    body = {"key": base64.b64encode(key.encode()).decode(),
            "value": base64.b64encode(value.encode()).decode()}
    req = urllib.request.Request(c.etcd_url + "/v3/kv/put", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=5).read()


def skips(out):
    return sum(r.get("nonfinite_skips", 0) for r in metrics(out))


def steps(out):
    rows = metrics(out)
    return rows[-1]["step"] if rows else -1


def polled(out, times):
    """Waits until `times` chaos polls have passed and steps were trained meanwhile."""
    start, first = time.time(), steps(out)
    wait_for(lambda: time.time() - start > times * CHAOS_POLL_S and steps(out) > first + times,
             120 + times * CHAOS_POLL_S, "%d chaos polls" % times)


try:
    out = c.start_job(job_args(STEPS, 1000, 4, "none"), workers=2, min_workers=2, max_workers=2)
    wait_for(lambda: os.path.exists(out + "/metrics.jsonl") and len(metrics(out)) >= 5, 120, "5 steps")
    key = "/tagc/%s/chaos/w0" % c.job
    spec = "nan@1" + "," * 300
    put(key, spec)
    wait_for(lambda: skips(out) >= 1, 120, "the NaN step")
    polled(out, POLLS)
    armed = c.log("w0").count("chaos armed")
    check(armed == 1, "a %d-byte spec is armed once over %d polls (%d times)" % (len(spec), POLLS, armed))
    n = skips(out)
    check(n == 1, "one NaN-skipped step (%d)" % n)

    too_long = "nan@1" + "," * (SPEC_MAX + 1 - len("nan@1"))
    put(key, too_long)
    polled(out, POLLS)
    log = c.log("w0")
    warned = [l for l in log.splitlines() if "chaos/w0" in l and str(SPEC_MAX) in l]
    check(len(warned) == 1, "a %d-byte value: one warning naming the key and the limit (%d: %s)"
          % (len(too_long), len(warned), warned[:2]))
    check(log.count("chaos armed") == 1 and skips(out) == 1,
          "it is not armed (%d chaos armed, %d skips)" % (log.count("chaos armed"), skips(out)))
finally:
    check.print_logs(c, ["w0", "w1"])
    c.close()
check.exit()
