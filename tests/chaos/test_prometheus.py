#!/usr/bin/env python3
"""The /metrics of a real job (etcd, a coordinator with --http, two workers with
--metrics-addr, checkpoints every 10 steps) as Prometheus itself reads them.
  check:  both the worker's and the coordinator's text pass `promtool check metrics` (format
          and naming lint), and a text that breaks a naming rule does not; every sample carries
          tagc_job and none `job`; names have the tagc_worker_ / tagc_coordinator_ prefix (or
          are the shared process_*, tagc_build_info, tagc_etcd_*); both count their etcd
          requests, and the coordinator counts failed ones once etcd is killed; two scrapes of
          the running job: the steps, tokens, histogram and bytes counters grow, tokens by 6 x 64
          per step on each of W=2 (batch 12), goodput is a ratio on worker and coordinator;
  config: deploy/monitoring/prometheus-local.yml passes `promtool check config`; it,
          prometheus.yml (pod discovery) and podmonitor.yaml have no honor_labels and select the
          port names and component labels of deploy/k8s/base's workers and coordinators;
  scrape: a real Prometheus with prometheus-local.yml (its targets replaced by the job's
          ports, 1 s interval) scrapes both: up{job="tagc-worker"} for both workers and
          up{job="tagc-coordinator"}, series labelled job (the scrape job's) and tagc_job (the
          tagc job), the step histogram and its quantile, a positive rate of the tokens
          counter, the checkpoint age of worker and coordinator.
Skipped (77) without etcd, promtool (check, config) or prometheus (scrape).
usage: test_prometheus.py BINDIR check|config|scrape"""
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

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, Cluster, free_port, job_args, metrics, wait_for  # noqa: E402

bindir, mode = sys.argv[1], sys.argv[2]
tool = {"check": "promtool", "config": "promtool", "scrape": "prometheus"}[mode]
for exe in ("etcd", tool) if mode != "config" else (tool,):
    if not shutil.which(exe):
        print("%s not found: skipped" % exe)
        sys.exit(77)
check = Checks()
source = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
monitoring = os.path.join(source, "deploy", "monitoring")
SHARED = ("process_", "tagc_build_info", "tagc_etcd_")


def get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def port_in(log, pattern):
    m = re.search(pattern + r" on port (\d+)", log)
    return int(m.group(1)) if m else None


def promtool(text):
    return subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=60)


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\} (\S+)$')


def samples(text):
    """[(name, {label: value}, value)] of the text's samples; a line that is neither a comment
    nor such a sample is returned as (line, None, None)."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if not m:
            out.append((line, None, None))
            continue
        labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2)))
        out.append((m.group(1), labels, float(m.group(3))))
    return out


def plain(text):
    """{name: value} of the samples with no label besides tagc_job."""
    return {n: v for n, labels, v in samples(text) if labels is not None and list(labels) == ["tagc_job"]}


def check_texts(texts, job):
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
        got = samples(text)
        bad = [n for n, labels, _ in got if labels is None or labels.get("tagc_job") != job or "job" in labels]
        check(got and not bad, "every %s sample carries tagc_job=%r and none job (%d samples; bad: %s)"
              % (who, job, len(got), bad[:3]))
        prefix = "tagc_%s_" % who
        names = sorted({n for n, labels, _ in got if labels is not None})
        stray = [n for n in names if not n.startswith(prefix) and not n.startswith(SHARED)]
        check(not stray and sum(n.startswith(prefix) for n in names) >= 8,
              "the %s's own metrics are prefixed %s (%d names; others: %s)" % (who, prefix, len(names), stray))
        info = [labels for n, labels, _ in got if n == "tagc_build_info"]
        check(len(info) == 1 and info[0].get("program") == "tagc-" + who and info[0].get("version"),
              "tagc_build_info names the %s's build (%s)" % (who, info))
    broken = texts["worker"].replace("tagc_worker_failures_total", "tagc_worker_failures")
    r = promtool(broken)
    check(r.returncode != 0 and "tagc_worker_failures" in r.stdout + r.stderr,
          "promtool refuses a counter without _total (%s)" % (r.stdout + r.stderr).strip()[:200])


def counters_grow(wports, cport):
    """Two scrapes of each worker a few steps apart: the counters grow, consistently."""
    per_step = 6 * 64  # batch 12 over W=2, --ctx 64: each rank's share of a step's tokens
    for n, port in wports.items():
        url = "http://127.0.0.1:%d/metrics" % port
        first = plain(get(url))
        second = wait_for(lambda: (lambda m: m if m.get("tagc_worker_steps_total", 0) >=
                                   first["tagc_worker_steps_total"] + 3 else None)(plain(get(url))),
                          120, n + " to run 3 more steps")
        grew = {k: second[k] - first[k] for k in (
            "tagc_worker_steps_total", "tagc_worker_tokens_total",
            "tagc_worker_step_duration_seconds_count", "tagc_worker_bytes_sent_total")}
        check(grew["tagc_worker_steps_total"] >= 3 and
              grew["tagc_worker_step_duration_seconds_count"] == grew["tagc_worker_steps_total"] and
              grew["tagc_worker_tokens_total"] == per_step * grew["tagc_worker_steps_total"] and
              second["tagc_worker_tokens_total"] == per_step * second["tagc_worker_steps_total"] and
              grew["tagc_worker_bytes_sent_total"] > 0,
              "%s: counters grow between two scrapes (%s)" % (n, grew))
        check(0 < second["tagc_worker_goodput_ratio"] <= 1,
              "%s: goodput %.3f" % (n, second["tagc_worker_goodput_ratio"]))
    coord = plain(get("http://127.0.0.1:%d/metrics" % cport))
    good = coord.get("tagc_coordinator_goodput_ratio", -1)
    check(0 < good <= 1 and coord.get("tagc_coordinator_step", 0) > 0,
          "coordinator: rank 0's goodput %.3f at step %d" % (good, coord.get("tagc_coordinator_step", 0)))


def config_checks():
    r = subprocess.run(["promtool", "check", "config", os.path.join(monitoring, "prometheus-local.yml")],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, "promtool check config prometheus-local.yml: %s" % (r.stdout + r.stderr).strip())
    base = os.path.join(source, "deploy", "k8s", "base")
    ports = {}  # component -> container port names, from the manifests the monitors select
    for f in ("workers.yaml", "coordinator.yaml"):
        for doc in yaml.safe_load_all(open(os.path.join(base, f))):
            if doc and doc["kind"] in ("Job", "Deployment"):
                tpl = doc["spec"]["template"]
                comp = tpl["metadata"]["labels"]["app.kubernetes.io/component"]
                ports[comp] = {p["name"] for c in tpl["spec"]["containers"] for p in c.get("ports", [])}
    want = {"worker": "metrics", "coordinator": "http"}
    check(all(want[k] in ports.get(k, ()) for k in want), "the manifests' ports: %s" % ports)
    for f in ("prometheus-local.yml", "prometheus.yml"):
        text = open(os.path.join(monitoring, f)).read()
        jobs = {j["job_name"]: j for j in yaml.safe_load(text)["scrape_configs"]}
        check(set(jobs) == {"tagc-worker", "tagc-coordinator"} and
              not any(j.get("honor_labels") for j in jobs.values()),
              "%s: jobs %s, no honor_labels" % (f, sorted(jobs)))
        if f == "prometheus.yml":
            for name, comp in (("tagc-worker", "worker"), ("tagc-coordinator", "coordinator")):
                keep = {tuple(r["source_labels"]): r["regex"] for r in jobs.get(name, {}).get("relabel_configs", [])
                        if r.get("action") == "keep"}
                check(keep.get(("__meta_kubernetes_pod_label_app_kubernetes_io_component",)) == comp and
                      keep.get(("__meta_kubernetes_pod_container_port_name",)) in ports.get(comp, ()),
                      "prometheus.yml %s keeps the %s pods' %s port (%s)" % (name, comp, want[comp], keep))
    monitors = {d["metadata"]["name"]: d for d in yaml.safe_load_all(open(os.path.join(monitoring, "podmonitor.yaml")))}
    for comp in ("worker", "coordinator"):
        m = monitors.get("tagc-" + comp, {"spec": {}})
        sel = m["spec"].get("selector", {}).get("matchLabels", {})
        eps = m["spec"].get("podMetricsEndpoints", [])
        check(m.get("kind") == "PodMonitor" and sel.get("app.kubernetes.io/component") == comp and
              eps and all(e.get("port") in ports.get(comp, ()) and not e.get("honorLabels") for e in eps),
              "podmonitor.yaml tagc-%s: selects %s, ports %s, honorLabels off" % (comp, sel, [e.get("port") for e in eps]))


def query(base, expr):
    """The result vector of an instant query."""
    body = json.loads(get(base + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})))
    return body["data"]["result"] if body.get("status") == "success" else []


def scrape_with_prometheus(c, wports, cport, job):
    tmp = os.path.join(c.tmp, "prometheus")
    os.makedirs(tmp)
    port = free_port()
    cfg = yaml.safe_load(open(os.path.join(monitoring, "prometheus-local.yml")))
    cfg["global"] = {"scrape_interval": "1s", "scrape_timeout": "1s"}
    targets = {"tagc-worker": wports, "tagc-coordinator": [cport]}
    for j in cfg["scrape_configs"]:
        j["static_configs"] = [{"targets": ["127.0.0.1:%d" % p for p in targets[j["job_name"]]]}]
    with open(os.path.join(tmp, "prometheus.yml"), "w") as f:
        yaml.safe_dump(cfg, f)
    c._start("prometheus", ["prometheus", "--config.file", os.path.join(tmp, "prometheus.yml"),
                            "--storage.tsdb.path", os.path.join(tmp, "data"),
                            "--web.listen-address", "127.0.0.1:%d" % port, "--log.level", "warn"])
    base = "http://127.0.0.1:%d" % port
    up = lambda scrape_job, n: (lambda r: r if len(r) == n else None)(
        query(base, 'up{job="%s"} == 1' % scrape_job))
    wait_for(lambda: _try(lambda: up("tagc-worker", 2) and up("tagc-coordinator", 1)), 120,
             "Prometheus to scrape both workers and the coordinator")
    instances = {j: sorted(s["metric"]["instance"] for s in query(base, 'up{job="%s"} == 1' % j))
                 for j in ("tagc-worker", "tagc-coordinator")}
    check(instances == {"tagc-worker": sorted("127.0.0.1:%d" % p for p in wports),
                        "tagc-coordinator": ["127.0.0.1:%d" % cport]},
          "up{job=...} == 1 for each scrape job's targets (%s)" % instances)
    buckets = wait_for(lambda: _try(lambda: query(base, "tagc_worker_step_duration_seconds_bucket") or None),
                       60, "the step histogram in Prometheus")
    check(len(buckets) >= 28 and all(b["metric"].get("job") == "tagc-worker" and b["metric"].get("tagc_job") == job
                                     for b in buckets),
          "Prometheus has both workers' step histogram buckets, job=tagc-worker, tagc_job=%s (%d series)"
          % (job, len(buckets)))
    p50 = wait_for(lambda: _try(lambda: query(
        base, "histogram_quantile(0.5, sum by (le) (tagc_worker_step_duration_seconds_bucket))") or None),
        60, "the median step time")
    median = float(p50[0]["value"][1])
    check(math.isfinite(median) and 0 < median < 60, "median step time from the histogram: %.3f s" % median)
    rate = wait_for(lambda: _try(lambda: (lambda r: r if r and float(r[0]["value"][1]) > 0 else None)(
        query(base, 'sum by (tagc_job) (rate(tagc_worker_tokens_total{job="tagc-worker"}[5s]))'))), 60,
        "a rate of the tokens counter")
    check(rate[0]["metric"].get("tagc_job") == job, "job throughput by rate(): %.0f tokens/s"
          % float(rate[0]["value"][1]))
    for name, scrape_job in (("tagc_coordinator_checkpoint_age_seconds", "tagc-coordinator"),
                             ("tagc_worker_checkpoint_age_seconds", "tagc-worker")):
        series = wait_for(lambda name=name: _try(lambda: query(base, name) or None), 60, name)
        ages = [float(s["value"][1]) for s in series]
        check(all(s["metric"].get("tagc_job") == job and s["metric"].get("job") == scrape_job for s in series)
              and all(0 <= a < 120 for a in ages), "Prometheus has %s, job=%s (%s)" % (name, scrape_job, ages))


def _try(f):
    try:
        return f()
    except (OSError, ValueError, KeyError):
        return None


if mode == "config":
    config_checks()
    check.exit()
c = Cluster(bindir, job="prom")
try:
    c.start_etcd()
    c.start_coordinator("coord0", "--http", "127.0.0.1:0", "--min-workers", "1",
                        "--max-workers", "2", "--start-workers", "2")
    out = os.path.join(c.tmp, "out")
    for n in ("w0", "w1"):
        c.start_worker(n, "--out", out, *job_args(1000000, 10, 12, "none", "--ctx", "64",
                                                  "--metrics-addr", "127.0.0.1:0"))
    wports = {n: wait_for(lambda n=n: port_in(c.log(n), "serving /metrics and /healthz"), 60, n + "'s port")
              for n in ("w0", "w1")}
    cport = wait_for(lambda: port_in(c.log("coord0"), "serving /healthz, /status, /metrics"), 60,
                     "the coordinator's port")
    wait_for(lambda: os.path.exists(out + "/metrics.jsonl") and len(metrics(out)) >= 12, 180, "12 steps")
    wait_for(lambda: "tagc_coordinator_checkpoint_age_seconds{" in get("http://127.0.0.1:%d/metrics" % cport),
             60, "a committed checkpoint")
    if mode == "check":
        check_texts({"worker": get("http://127.0.0.1:%d/metrics" % wports["w0"]),
                     "coordinator": get("http://127.0.0.1:%d/metrics" % cport)}, c.job)
        counters_grow(wports, cport)
        errors = lambda: float(re.search(r"^tagc_etcd_request_errors_total\{[^}]*\} (\S+)$",
                                         get("http://127.0.0.1:%d/metrics" % cport), re.M).group(1))
        check(errors() == 0, "no etcd request failed while etcd ran")
        c.signal("etcd", signal.SIGKILL)
        failed = wait_for(lambda: _try(lambda: errors() or None), 60, "a failed etcd request")
        check(failed >= 1, "with etcd killed, the coordinator counts failed etcd requests (%g)" % failed)
    else:
        scrape_with_prometheus(c, list(wports.values()), cport, c.job)
finally:
    if not check.ok():
        check.print_logs(c, [n for n in ("coord0", "w0", "w1", "prometheus") if n in c.procs])
    c.close()
check.exit()
