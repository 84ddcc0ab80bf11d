#!/usr/bin/env python3
"""The /metrics of a real job (etcd, a coordinator with --http, two workers with
--metrics-addr, checkpoints every 10 steps) as Prometheus itself reads them.
  check:  both the worker's and the coordinator's text pass `promtool check metrics` (format
          and naming lint), and a text that breaks a naming rule does not; both count their
          etcd requests, and the coordinator counts failed ones once etcd is killed;
  scrape: a real Prometheus (temporary config, storage and port) scrapes both; its HTTP API
          returns the step duration histogram, its quantile, and the checkpoint age series of
          worker and coordinator, each labelled with the tagc job.
Skipped (77) without etcd, promtool (check) or prometheus (scrape).
usage: test_prometheus.py BINDIR check|scrape"""
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, Cluster, free_port, job_args, metrics, wait_for  # noqa: E402

bindir, mode = sys.argv[1], sys.argv[2]
tool = {"check": "promtool", "scrape": "prometheus"}[mode]
for exe in ("etcd", tool):
    if not shutil.which(exe):
        print("%s not found: skipped" % exe)
        sys.exit(77)
check = Checks()


def get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def port_in(log, pattern):
    m = re.search(pattern + r" on port (\d+)", log)
    return int(m.group(1)) if m else None


def promtool(text):
    return subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=60)


def check_texts(texts):
    for who, text in texts.items():
        r = promtool(text)
        check(r.returncode == 0 and not (r.stdout + r.stderr).strip(),
              "promtool check metrics passes on the %s's /metrics (%d lines): %s"
              % (who, text.count("\n"), (r.stdout + r.stderr).strip()[:2000]))
        values = dict(re.findall(r"^(tagc_etcd_requests_total|tagc_etcd_request_duration_seconds_count|"
                                 r"process_resident_memory_bytes|tagc_build_info)\{[^}]*\} (\S+)$", text, re.M))
        check(float(values.get("tagc_etcd_requests_total", 0)) > 0 and
              values.get("tagc_etcd_request_duration_seconds_count") == values.get("tagc_etcd_requests_total") and
              float(values.get("process_resident_memory_bytes", 0)) > 1e6 and values.get("tagc_build_info") == "1",
              "the %s counts its etcd requests (%s)" % (who, values))
    broken = texts["worker"].replace("tagc_worker_failures_total", "tagc_worker_failures")
    r = promtool(broken)
    check(r.returncode != 0 and "tagc_worker_failures" in r.stdout + r.stderr,
          "promtool refuses a counter without _total (%s)" % (r.stdout + r.stderr).strip()[:200])


def query(base, expr):
    """The result vector of an instant query."""
    body = json.loads(get(base + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})))
    return body["data"]["result"] if body.get("status") == "success" else []


def scrape_with_prometheus(c, targets, job):
    tmp = os.path.join(c.tmp, "prometheus")
    os.makedirs(tmp)
    port = free_port()
    with open(os.path.join(tmp, "prometheus.yml"), "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n"
                "  - job_name: tagc\n    honor_labels: true\n    static_configs:\n"
                "      - targets: [%s]\n" % ", ".join('"127.0.0.1:%d"' % p for p in targets))
    c._start("prometheus", ["prometheus", "--config.file", os.path.join(tmp, "prometheus.yml"),
                            "--storage.tsdb.path", os.path.join(tmp, "data"),
                            "--web.listen-address", "127.0.0.1:%d" % port, "--log.level", "warn"])
    base = "http://127.0.0.1:%d" % port
    ready = lambda: (lambda r: r if len(r) == 2 else None)(
        query(base, 'up{instance=~"127.0.0.1:(%s)"} == 1' % "|".join(map(str, targets))))
    wait_for(lambda: _try(ready), 120, "Prometheus to scrape both targets")
    buckets = wait_for(lambda: _try(lambda: query(base, "tagc_worker_step_duration_seconds_bucket") or None),
                       60, "the step histogram in Prometheus")
    check(len(buckets) >= 14 and all(b["metric"].get("job") == job for b in buckets),
          "Prometheus has the step duration histogram's buckets, job=%s (%d series)" % (job, len(buckets)))
    p50 = wait_for(lambda: _try(lambda: query(
        base, "histogram_quantile(0.5, sum by (le) (tagc_worker_step_duration_seconds_bucket))") or None),
        60, "the median step time")
    median = float(p50[0]["value"][1])
    check(math.isfinite(median) and 0 < median < 60, "median step time from the histogram: %.3f s" % median)
    for name in ("tagc_checkpoint_age_seconds", "tagc_worker_checkpoint_age_seconds"):
        series = wait_for(lambda name=name: _try(lambda: query(base, name) or None), 60, name)
        ages = [float(s["value"][1]) for s in series]
        check(all(s["metric"].get("job") == job for s in series) and all(0 <= a < 120 for a in ages),
              "Prometheus has %s (%s)" % (name, ages))


def _try(f):
    try:
        return f()
    except (OSError, ValueError, KeyError):
        return None


c = Cluster(bindir, job="prom")
try:
    c.start_etcd()
    c.start_coordinator("coord0", "--http", "127.0.0.1:0", "--min-workers", "1",
                        "--max-workers", "2", "--start-workers", "2")
    out = os.path.join(c.tmp, "out")
    for n in ("w0", "w1"):
        c.start_worker(n, "--out", out, *job_args(1000000, 10, 12, "none", "--metrics-addr",
                                                  "127.0.0.1:0"))
    wport = wait_for(lambda: port_in(c.log("w0"), "serving /metrics and /healthz"), 60, "w0's port")
    cport = wait_for(lambda: port_in(c.log("coord0"), "serving /healthz, /status, /metrics"), 60,
                     "the coordinator's port")
    wait_for(lambda: os.path.exists(out + "/metrics.jsonl") and len(metrics(out)) >= 12, 180, "12 steps")
    wait_for(lambda: "tagc_checkpoint_age_seconds{" in get("http://127.0.0.1:%d/metrics" % cport), 60,
             "a committed checkpoint")
    if mode == "check":
        check_texts({"worker": get("http://127.0.0.1:%d/metrics" % wport),
                     "coordinator": get("http://127.0.0.1:%d/metrics" % cport)})
        errors = lambda: float(re.search(r"^tagc_etcd_request_errors_total\{[^}]*\} (\S+)$",
                                         get("http://127.0.0.1:%d/metrics" % cport), re.M).group(1))
        check(errors() == 0, "no etcd request failed while etcd ran")
        c.signal("etcd", signal.SIGKILL)
        failed = wait_for(lambda: _try(lambda: errors() or None), 60, "a failed etcd request")
        check(failed >= 1, "with etcd killed, the coordinator counts failed etcd requests (%g)" % failed)
    else:
        scrape_with_prometheus(c, [wport, cport], c.job)
finally:
    if not check.ok():
        check.print_logs(c, [n for n in ("coord0", "w0", "w1", "prometheus") if n in c.procs])
    c.close()
check.exit()
