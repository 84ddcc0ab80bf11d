#!/usr/bin/env python3
"""A worker's /metrics and /healthz (--metrics-addr):
1. bad addresses (not HOST:PORT, port out of range, a name that does not resolve, a port in
   use): exit status 2 and one line on stderr naming --metrics-addr;
2. a static single-worker run scraped twice while it trains: every sample has HELP and TYPE
   and parses as a number, the step advances, loss and tokens/s are sane, no failures; the
   steps and tokens counters grow between the scrapes by the steps run (x batch x ctx), and
   goodput is a ratio in (0, 1];
3. an elastic run of 3 workers, one SIGKILLed: the survivors' /metrics shows the failure and
   the recovery (failures, recoveries, steps lost, recovery seconds, generation, W = 2), bytes
   counters grow, and rank 0's figures equal what it writes to summary.json at the end."""
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, Cluster, job_args, metrics, wait_for  # noqa: E402

bindir = sys.argv[1]
worker = os.path.join(bindir, "tagc-worker")
check = Checks()


def get(port, path):
    """(status, body) of GET http://127.0.0.1:port/path."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def scrape(port, job=""):
    """/metrics as {name: value} for the samples of tagc_worker_ families without labels other
    than tagc_job (whose value must be `job`), plus the histogram's buckets as {"le=B": count}; raises
    ValueError on a malformed line or a sample without its family's HELP and TYPE lines."""
    status, body = get(port, "/metrics")
    if status != 200:
        raise ValueError("/metrics answered %d" % status)
    helped, typed, values = set(), {}, {}
    for line in body.splitlines():
        if line.startswith("# HELP "):
            helped.add(line.split()[2])
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            typed[name] = kind
        else:
            m = re.fullmatch(r'([a-z_]+)\{tagc_job="([^"]*)"(?:,(.*))?\} (\S+)', line)
            if not m or m.group(2) != job:
                raise ValueError("malformed sample or job label: %r" % line)
            name, labels, value = m.group(1), m.group(3), float(m.group(4))
            family = re.sub(r"_(bucket|sum|count)$", "", name) if name not in typed else name
            if family not in helped or typed.get(family) not in ("gauge", "counter", "histogram"):
                raise ValueError("%s has no HELP or TYPE" % name)
            if name.startswith("tagc_worker_") and not labels:
                values[name[len("tagc_worker_"):]] = value
            elif name == "tagc_worker_step_duration_seconds_bucket":
                values[labels] = value
    return values
def port_of(log):
    m = re.search(r"serving /metrics and /healthz on port (\d+)", log)
    return int(m.group(1)) if m else None


def bad_addresses(tmp):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        cases = ["nonsense", "127.0.0.1:99999", "127.0.0.1:", "no-such-host.invalid:9100",
                 "127.0.0.1:%d" % busy.getsockname()[1]]
        for addr in cases:
            p = subprocess.run([worker, "--steps", "1", "--out", os.path.join(tmp, "bad"),
                                "--metrics-addr", addr], capture_output=True, text=True,
                               timeout=60)
            lines = p.stderr.strip().splitlines()
            check(p.returncode == 2 and len(lines) == 1 and "--metrics-addr" in lines[0],
                  "--metrics-addr %s: exit %d, stderr %r" % (addr, p.returncode, lines[:3]))


def static_run(tmp):
    out = os.path.join(tmp, "static")
    log = open(os.path.join(tmp, "static.log"), "w")
    p = subprocess.Popen([worker, "--out", out, "--metrics-addr", "127.0.0.1:0"] +
                         job_args(1000000, 0, 8, "none", "--ctx", "64"), stdout=log,
                         stderr=subprocess.STDOUT)
    try:
        port = wait_for(lambda: port_of(open(log.name).read()), 30, "the metrics port")
        first = wait_for(lambda: (lambda m: m if m["step"] >= 3 else None)(scrape(port, "default")), 60,
                         "3 steps")
        time.sleep(1.0)  # uptime must grow; a loaded machine may need longer for a step:
        second = wait_for(lambda: (lambda m: m if m["step"] > first["step"] else None)(scrape(port, "default")),
                          60, "a later step")
        check(second["step"] > first["step"] >= 3,
              "step advances between scrapes (%d -> %d)" % (first["step"], second["step"]))
        # counters for rate(): every step once (no failure here), its 8 x 64 tokens (W=1)
        grown = second["steps_total"] - first["steps_total"]
        check(grown == second["step"] - first["step"] > 0 and second["steps_total"] == second["step"],
              "steps_total grows with the steps run (%d -> %d)" % (first["steps_total"], second["steps_total"]))
        check(second["tokens_total"] - first["tokens_total"] == grown * 8 * 64 and
              second["tokens_total"] == second["step"] * 8 * 64,
              "tokens_total grows by 512 a step (%d -> %d)" % (first["tokens_total"], second["tokens_total"]))
        check(0 < second["goodput_ratio"] <= 1, "goodput %.3f" % second["goodput_ratio"])
        check(math.isfinite(second["loss"]) and 0 < second["loss"] < 10,
              "loss %.4f" % second["loss"])
        check(second["tokens_per_second"] > 0 and second["step_seconds"] > 0,
              "tokens/s %.0f, step %.4f s" % (second["tokens_per_second"], second["step_seconds"]))
        check(second["world_size"] == 1 and second["rank"] == 0 and second["generation"] == 0,
              "W=1, rank 0, generation 0")
        check(all(second[k] == 0 for k in ("failures_total", "recoveries_total",
                                           "steps_lost_total", "max_recovery_seconds",
                                           "recovering", "bytes_sent_total")),
              "no failures, no recoveries, no bytes on a single worker")
        check(second["uptime_seconds"] > first["uptime_seconds"], "uptime grows")
        check(second["step_duration_seconds_count"] == second["step"] and
              second['le="+Inf"'] == second["step"] and
              0 < second["step_duration_seconds_sum"] and
              all(second['le="0.01"'] <= second['le="%s"' % b] <= second['le="+Inf"'] for b in ("0.1", "1", "60")),
              "the step histogram counts every step, cumulative buckets")
        check(math.isfinite(second["learning_rate"]) and second["learning_rate"] > 0 and
              math.isfinite(second["grad_norm"]) and second["grad_norm"] > 0 and
              math.isnan(second["val_loss"]) and second["sketch_coverage_ratio"] == 0,
              "lr %g, grad norm %g, no evaluation yet (val loss NaN), no sketches with --compress none"
              % (second["learning_rate"], second["grad_norm"]))
        status, body = get(port, "/healthz")
        check(status == 200 and body.startswith("ok: generation 0, rank 0 of 1"),
              "/healthz: %d %r" % (status, body.strip()))
        status, _ = get(port, "/nope")
        check(status == 404, "unknown path: %d" % status)
    finally:
        p.kill()
        p.wait()


def elastic_run():
    steps = 400
    common = job_args(steps, 10, 12, "none", "--metrics-addr", "127.0.0.1:0")
    c = Cluster(bindir, job="metrics")
    try:
        out = c.start_job(common)
        ports = {n: wait_for(lambda n=n: port_of(c.log(n)), 30, n + "'s port")
                 for n in ("w0", "w1")}
        job = c.job
        wait_for(lambda: os.path.exists(out + "/metrics.jsonl") and len(metrics(out)) >= 20, 120,
                 "20 steps")
        before = {n: scrape(p, job) for n, p in ports.items()}
        check(all(m["world_size"] == 3 and m["failures_total"] == 0 for m in before.values()),
              "before the kill: W=3, no failures")
        check(all(m["bytes_sent_total"] > 0 and m["bytes_received_total"] > 0
                  for m in before.values()), "bytes counters count")
        check(all(m["checkpoint_last_step"] >= 10 and m["checkpoint_last_step"] % 10 == 0 and
                  m["checkpoint_saves_total"] >= 1 and m["checkpoint_failures_total"] == 0 and
                  0 <= m["checkpoint_age_seconds"] < 60 and m["checkpoint_duration_seconds"] > 0
                  for m in before.values()),
              "checkpoint step, saves, no failures, age and duration (%s)" %
              [(m["checkpoint_last_step"], m["checkpoint_age_seconds"]) for m in before.values()])
        c.signal("w2", signal.SIGKILL)
        after = {n: wait_for(lambda p=p: (lambda m: m if m["recoveries_total"] >= 1 else None)(
            scrape(p, job)), 60, n + " to recover") for n, p in ports.items()}
        for n, m in after.items():
            check(m["failures_total"] >= 1 and m["recoveries_total"] >= 1 and m["recovering"] == 0,
                  "%s: failures %d, recoveries %d" % (n, m["failures_total"], m["recoveries_total"]))
            check(0 < m["last_recovery_seconds"] <= m["max_recovery_seconds"] <= 10,
                  "%s: last recovery %.2f s, max %.2f s" % (n, m["last_recovery_seconds"],
                                                          m["max_recovery_seconds"]))
            check(m["world_size"] == 2 and m["generation"] > before[n]["generation"],
                  "%s: W=2 in generation %d (was %d)" % (n, m["generation"], before[n]["generation"]))
            check(0 <= m["steps_lost_total"] <= 10 * m["failures_total"],
                  "%s: %d steps lost" % (n, m["steps_lost_total"]))
            check(m["bytes_sent_total"] > before[n]["bytes_sent_total"], "%s: bytes went on" % n)
        # rank 0 writes summary.json: its last scrape before it exits must agree with it
        rank0 = [n for n, m in after.items() if m["rank"] == 0]
        check(len(rank0) == 1, "one survivor is rank 0 (%s)" % rank0)
        last = after[rank0[0]] if rank0 else None
        while rank0 and c.procs[rank0[0]].poll() is None:
            try:
                last = scrape(ports[rank0[0]], job)
            except (OSError, ValueError):
                pass  # the server stopped as the worker exits
            time.sleep(0.1)
        # the SIGKILLed peer is a crash (its process is gone), not comm; its lease is counted too
        st = json.loads(subprocess.run([os.path.join(bindir, "tagctl"), "status", "--etcd", c.etcd_url,
                                        "--job", job, "--json"], capture_output=True, text=True).stdout)
        check(st["failures"].get("crash", 0) >= 1 and st["failures"].get("comm", 0) == 0,
              "failure kinds after a SIGKILL: crash counted, no comm (%s)" % st["failures"])
        rc = [c.wait(n, 180) for n in ("w0", "w1")]
        check(rc == [0, 0], "survivors finished (%s)" % rc)
        s = json.load(open(out + "/summary.json"))
        pf = s["process"]  # the top level counts the whole OUT (history.jsonl, metrics.jsonl)
        check(last and (pf["failures"], pf["recoveries"], pf["steps_lost"]) ==
              (last["failures_total"], last["recoveries_total"], last["steps_lost_total"]),
              "rank 0's /metrics equals summary.json's process figures (failures %d, recoveries "
              "%d, steps lost %d)" % (pf["failures"], pf["recoveries"], pf["steps_lost"]))
        rows = metrics(out)
        seen, again = -1, 0
        for r in rows:
            again += r["step"] <= seen
            seen = max(seen, r["step"])
        check(s["steps_lost"] == again and s["failures"] == s["history"]["failures"] >= 1,
              "summary.json counts the whole OUT: %d steps recomputed (metrics.jsonl: %d), %d "
              "failures (history: %d)" % (s["steps_lost"], again, s["failures"],
                                          s["history"]["failures"]))
        # goodput: rank 0 ran from step 0, so steps x median step time / wall time (selection
        # and sort give the same median); its last scrape had a figure of the same definition
        want = min(1.0, s["steps"] * s["step_s_median"] / s["wall_s"])  # a ratio, at most 1
        check(0 < s["goodput"] <= 1 and abs(s["goodput"] - want) <= 1e-3 * want and
              last and 0 < last["goodput_ratio"] <= 1,
              "summary goodput %.4f = %d steps x %.4f s / %.2f s; last scrape %.4f"
              % (s["goodput"], s["steps"], s["step_s_median"], s["wall_s"],
                 last["goodput_ratio"] if last else float("nan")))
        # summary.json's max_recovery_s is the worst over the survivors (each one's /metrics)
        worst = max(m["max_recovery_seconds"] for m in after.values())
        check(last and abs(s["max_recovery_s"] - max(worst, last["max_recovery_seconds"])) < 1e-6,
              "summary max_recovery_s %.3f s = the survivors' worst /metrics figure (%.3f s)"
              % (s["max_recovery_s"], max(worst, last["max_recovery_seconds"]) if last else worst))
    finally:
        check.print_logs(c, ("coord0", "w0", "w1", "w2"))
        c.close()


with tempfile.TemporaryDirectory(prefix="tagc-metrics-") as tmp:
    bad_addresses(tmp)
    static_run(tmp)
elastic_run()
check.exit()
