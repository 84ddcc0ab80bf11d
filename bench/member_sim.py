#!/usr/bin/env python3
"""Membership at scale: for each M, a fresh etcd, one tagc-coordinator and bench/member_sim
with M simulated members; prints one table row per M (medians over --repeat runs).

  python3 bench/member_sim.py --members 100,1000,5000 [--repeat 1] [--build build/dev]

The coordinator runs with --min-workers M/2 --max-workers M --start-workers M (the first
generation waits for all M, at most --start-wait seconds). etcd listens on 127.0.0.1:PORT (--port, PORT+1 for its peers);
its data dir is a fresh temporary directory, removed afterwards. Each run is bounded by
--run-timeout seconds; every process started here is stopped by its pid.
See docs/scaling-membership.md for what the columns mean and the figures.
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

GEN_LINE = re.compile(r"generation (\d+): (\d+) workers .*\[read ([\d.]+) ms, planner ([\d.]+) ms\]")


def cpu_seconds(pid):
    """User + system CPU seconds of a live process, from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def stop(proc, timeout=10):
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_etcd(url, timeout=20):
    until = time.time() + timeout
    while time.time() < until:
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as r:
                if b"true" in r.read():
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError("etcd did not become healthy")


def one_run(args, m, rep):
    tmp = tempfile.mkdtemp(prefix="sim-etcd-")
    url = f"http://127.0.0.1:{args.port}"
    peer = f"http://127.0.0.1:{args.port + 1}"
    etcd = coord = None
    try:
        with open(os.path.join(tmp, "etcd.log"), "w") as log:
            etcd = subprocess.Popen(
                ["etcd", "--data-dir", os.path.join(tmp, "data"), "--listen-client-urls", url,
                 "--advertise-client-urls", url, "--listen-peer-urls", peer,
                 "--initial-advertise-peer-urls", peer, "--initial-cluster", f"default={peer}"],
                stdout=log, stderr=subprocess.STDOUT)
        wait_etcd(url)
        job = f"sim{m}"
        coord_log = open(os.path.join(tmp, "coord.log"), "w")
        coord = subprocess.Popen(
            [args.coordinator, "--etcd", url, "--job", job, "--min-workers", str(max(1, m // 2)),
             "--max-workers", str(m), "--start-workers", str(m), "--start-wait", str(args.start_wait),
             "--log-format", "text", "--http", "127.0.0.1:0"],
            stdout=coord_log, stderr=subprocess.STDOUT)
        etcd_cpu0 = cpu_seconds(etcd.pid)
        t0 = time.time()
        sim = subprocess.run(
            [args.member_sim, "--etcd", url, "--job", job, "--members", str(m), "--ttl",
             str(args.ttl), "--steady", str(args.steady), "--seed", str(args.seed + rep),
             "--coord-pid", str(coord.pid), "--threads", str(args.threads),
             "--chaos-poll", str(args.chaos_poll)]
            + (["--reports"] if args.reports else []),
            capture_output=True, text=True, timeout=args.run_timeout)
        wall = time.time() - t0
        etcd_cpu = cpu_seconds(etcd.pid) - etcd_cpu0
        coord_log.close()
        if sim.returncode != 0:
            sys.stderr.write(sim.stderr[-2000:])
            raise RuntimeError(f"member_sim exited {sim.returncode} at M={m}")
        out = json.loads(sim.stdout.strip().splitlines()[-1])
        gens = [GEN_LINE.search(l) for l in open(os.path.join(tmp, "coord.log"))]
        gens = [g for g in gens if g]
        out["read_ms"] = [float(g.group(3)) for g in gens]
        out["planner_ms"] = [float(g.group(4)) for g in gens]
        out["etcd_cpu_share"] = etcd_cpu / wall
        if args.keep_logs:
            shutil.copy(os.path.join(tmp, "coord.log"), os.path.join(args.keep_logs, f"coord-{m}-{rep}.log"))
        return out
    finally:
        stop(coord)
        stop(etcd)
        shutil.rmtree(tmp, ignore_errors=True)


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else float("nan")


def get(run, *path):
    for p in path:
        if not isinstance(run, dict) or p not in run:
            return None
        run = run[p]
    return run


COLUMNS = [
    ("M", lambda rs: rs[0]["members"], "{:d}"),
    ("reg_s", lambda rs: med([r["register_s"] for r in rs]), "{:.1f}"),
    ("req/s/m", lambda rs: med([get(r, "steady", "requests_per_s_per_member") for r in rs]), "{:.2f}"),
    ("B/s/m", lambda rs: med([get(r, "steady", "bytes_per_s_per_member") for r in rs]), "{:.0f}"),
    ("req_ms", lambda rs: med([get(r, "steady", "mean_request_ms") for r in rs]), "{:.1f}"),
    ("lost", lambda rs: med([r["lease_losses"] for r in rs]), "{:.0f}"),
    ("death_s", lambda rs: med([get(r, "death", "first_expiry_to_gen_s") for r in rs]), "{:.2f}"),
    ("kill_s", lambda rs: med([get(r, "death", "last_death_to_gen_s") for r in rs]), "{:.2f}"),
    ("batch_k", lambda rs: med([get(r, "batch", "members") for r in rs]), "{:.0f}"),
    ("batch_gens", lambda rs: med([get(r, "batch", "generations") for r in rs]), "{:.0f}"),
    ("batch_s", lambda rs: med([get(r, "batch", "last_expiry_to_gen_s") for r in rs]), "{:.2f}"),
    ("leave_s", lambda rs: med([get(r, "leave", "leave_to_gen_s") for r in rs]), "{:.2f}"),
    ("coord_cpu", lambda rs: med([get(r, "steady", "coord_cpu_share") for r in rs]), "{:.3f}"),
    ("coord_cpu_s", lambda rs: med([r["coord_cpu_s"] for r in rs]), "{:.1f}"),
    ("rss_MiB", lambda rs: med([r["coord_hwm_mib"] for r in rs]), "{:.1f}"),
    ("read_ms", lambda rs: med([med(r["read_ms"]) for r in rs]), "{:.1f}"),
    ("plan_ms", lambda rs: med([med(r["planner_ms"]) for r in rs]), "{:.2f}"),
    ("plan_max", lambda rs: med([max(r["planner_ms"] or [float("nan")]) for r in rs]), "{:.2f}"),
    ("etcd_cpu", lambda rs: med([r["etcd_cpu_share"] for r in rs]), "{:.2f}"),
]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--members", default="100,1000,5000")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--build", default=os.path.join(here, "..", "build", "dev"))
    ap.add_argument("--coordinator", help="tagc-coordinator binary (default: BUILD/bin)")
    ap.add_argument("--member-sim", help="member_sim binary (default: BUILD/bin)")
    ap.add_argument("--port", type=int, default=23480)
    ap.add_argument("--ttl", type=float, default=3)
    ap.add_argument("--steady", type=float, default=15)
    ap.add_argument("--chaos-poll", type=float, default=1,
                    help="seconds between a member's chaos/<id> reads (a worker: 1; 0: none)")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--start-wait", type=float, default=30,
                    help="coordinator --start-wait: then M/2 registered workers suffice")
    ap.add_argument("--run-timeout", type=float, default=300)
    ap.add_argument("--reports", action="store_true",
                    help="at each death the other members report it (member_sim --reports)")
    ap.add_argument("--json", help="also write every run's figures to this file")
    ap.add_argument("--keep-logs", help="copy each run's coordinator log into this directory")
    args = ap.parse_args()
    args.coordinator = args.coordinator or os.path.join(args.build, "bin", "tagc-coordinator")
    args.member_sim = args.member_sim or os.path.join(args.build, "bin", "member_sim")
    print(" ".join(name for name, _, _ in COLUMNS), flush=True)
    every = {}
    for m in [int(x) for x in args.members.split(",")]:
        runs = []
        for rep in range(args.repeat):
            try:
                runs.append(one_run(args, m, rep))
            except (RuntimeError, subprocess.TimeoutExpired, ValueError) as e:
                print(f"# M={m} run {rep}: {e}", flush=True)
        every[m] = runs
        if runs:
            print(" ".join(fmt.format(fn(runs)) if not isinstance(fn(runs), float) or fn(runs) == fn(runs)
                           else "nan" for _, fn, fmt in COLUMNS), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(every, f, indent=1)


if __name__ == "__main__":
    main()
