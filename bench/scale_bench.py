#!/usr/bin/env python3
"""Local elastic runs at growing world sizes: `tagctl run --workers W --threads 1` (its own
etcd, one coordinator, W CPU workers, the tiny default model, global batch max(16, W)).

Per W it measures
  start_s     launch of tagctl run -> the first step in OUT/metrics.jsonl ('time')
  kill1_s     SIGKILL of one worker -> the first step committed after it (a metrics row whose
              'time' is after the kill, of a generation after the one killed)
  killk_s     the same for W/8 workers killed at once (W >= 8; after the first kill's
              recovery and the restarted worker's return to a world of W)
  done        tagctl run exited 0 and summary.json says finished
  etcd        the local etcd's requests by kind over the run (grpc_server_started_total of
              its /metrics, scraped every second; the last scrape before the run ended)
  coord       the coordinator's CPU seconds and peak RSS (/proc/<pid>/stat, status)
  tcp         established TCP connections per worker (its /proc/<pid>/fd sockets found in
              /proc/net/tcp; the median over the workers, before the first kill), and its
              listening sockets
Everything is bounded by --limit seconds per run; tagctl run is stopped by its PID (its
children die with it) and the output folders are removed.

  usage: bench/scale_bench.py BUILD_DIR [--worlds 2,4,8,16,32] [--quick] [--steps N]
                              [--ckpt-every N] [--limit S] [--at-once K] [--unsupervised]
                              [--keep DIR] [--json FILE]
--unsupervised: etcd, a coordinator and W tagc-worker processes without tagctl run (as on
Kubernetes: no death reports, no restarts; the second kill then hits a world of W - 1).
--quick: W <= 8 only."""
import argparse
import glob
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


def read_metrics(out):
    rows = []
    try:
        with open(os.path.join(out, "metrics.jsonl")) as f:
            for line in f:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass  # a line being written
    except OSError:
        pass
    return rows


def read_pids(out):
    pids = {}
    try:
        with open(os.path.join(out, "pids")) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2:
                    pids[parts[0]] = int(parts[1])
    except OSError:
        pass
    return pids


def etcd_url(out):
    try:
        with open(os.path.join(out, "worker.json")) as f:
            return json.load(f).get("etcd", "").split(",")[0] or None
    except (OSError, ValueError):
        return None


def scrape_etcd(url):
    """{'Range': n, 'Txn': n, ...} from grpc_server_started_total, or None."""
    try:
        text = urllib.request.urlopen(url + "/metrics", timeout=1).read().decode()
    except OSError:
        return None
    counts = {}
    for line in text.splitlines():
        if line.startswith("grpc_server_started_total{"):
            m = re.search(r'grpc_method="([^"]+)"', line)
            if m:
                counts[m.group(1)] = counts.get(m.group(1), 0) + int(float(line.rsplit(" ", 1)[1]))
    return counts


def proc_cpu_rss(pid):
    """(CPU seconds, RSS MiB) of pid, or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        with open("/proc/%d/status" % pid) as f:
            rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:")) / 1024.0
        return cpu, rss
    except (OSError, StopIteration, ValueError, IndexError):
        return None


def tcp_states():
    """{socket inode: TCP state} of this network namespace (/proc/net/tcp, tcp6)."""
    states = {}
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                for line in f.readlines()[1:]:
                    parts = line.split()
                    states[parts[9]] = parts[3]
        except OSError:
            pass
    return states


def tcp_sockets(pid, states):
    """(established TCP connections, listening TCP sockets) among pid's descriptors."""
    est = listen = 0
    try:
        fds = os.listdir("/proc/%d/fd" % pid)
    except OSError:
        return None
    for fd in fds:
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if target.startswith("socket:["):
            st = states.get(target[8:-1])
            est += st == "01"
            listen += st == "0A"
    return est, listen


class Run:
    """One tagctl run and what is sampled of it while it runs."""

    def __init__(self, bindir, workers, args, tmp):
        self.out = os.path.join(tmp, "w%d" % workers)
        self.log = open(os.path.join(tmp, "w%d.log" % workers), "w")
        self.t_launch = time.time()
        self.p = subprocess.Popen([os.path.join(bindir, "tagctl"), "run", "--workers", str(workers),
                                   "--out", self.out] + args, stdout=self.log,
                                  stderr=subprocess.STDOUT, start_new_session=True)
        self.etcd = {}
        self.coord = (0.0, 0.0)
        self.url = None
        self.next_sample = 0

    def pids(self):
        return read_pids(self.out)

    def ended(self):
        return self.p.poll() is not None

    def succeeded(self):
        return self.p.poll() == 0

    def sample(self):
        pids = self.pids()
        self.url = self.url or etcd_url(self.out)
        if time.time() < self.next_sample:
            return pids
        self.next_sample = time.time() + 1.0
        if self.url:
            counts = scrape_etcd(self.url)
            if counts:
                self.etcd = counts
        for name, pid in pids.items():
            if name.startswith("coordinator"):
                cr = proc_cpu_rss(pid)
                if cr:
                    self.coord = (max(self.coord[0], cr[0]), max(self.coord[1], cr[1]))
        return pids

    def wait(self, cond, limit, what):
        """Polls cond() (sampling as it goes) until it returns a true value or the run's
        limit passes or tagctl exits; returns the value or None."""
        while time.time() < limit:
            v = cond()
            if v:
                return v
            if self.ended():
                return cond() or None
            self.sample()
            time.sleep(0.1)
        print("  (timed out waiting for %s)" % what, file=sys.stderr)
        return None

    def stop(self):
        if self.p.poll() is None:
            os.kill(self.p.pid, signal.SIGTERM)
            try:
                self.p.wait(20)
            except subprocess.TimeoutExpired:
                os.kill(self.p.pid, signal.SIGKILL)
                self.p.wait()
        self.log.close()


class UnsupervisedRun(Run):
    """The same job without tagctl run: etcd, one coordinator and W tagc-worker processes of
    tests/chaos/harness.py, as on Kubernetes: no supervisor reports a death or restarts a
    worker, the survivors' reports and the leases tell the coordinator."""

    def __init__(self, bindir, workers, args, tmp):
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                        "tests", "chaos"))
        from harness import Cluster
        self.c = Cluster(bindir)
        self.t_launch = time.time()
        self.out = self.c.start_job(args, workers=workers, min_workers=1, max_workers=workers)
        self.url = self.c.etcd_url
        self.etcd = {}
        self.coord = (0.0, 0.0)
        self.next_sample = 0
        self.killed = set()

    def pids(self):
        return dict((("coordinator-0" if n == "coord0" else n), p.pid)
                    for n, p in self.c.procs.items() if p.poll() is None)

    def ended(self):
        return all(p.poll() is not None for n, p in self.c.procs.items() if re.match(r"w\d+$", n))

    def succeeded(self):
        return all(p.poll() == 0 for n, p in self.c.procs.items()
                   if re.match(r"w\d+$", n) and n not in self.killed)

    def stop(self):
        self.c.close()


def recovered_after(out, t_kill, gen_killed):
    rows = [r for r in read_metrics(out) if r["time"] > t_kill and r["generation"] > gen_killed]
    return min(rows, key=lambda r: r["time"]) if rows else None


def kill_and_recover(run, names, limit):
    """SIGKILLs the named workers at once; seconds to the first step after it, or None."""
    pids = run.pids()
    rows = read_metrics(run.out)
    gen = max(r["generation"] for r in rows)
    t_kill = time.time()
    for n in names:
        if n in pids:
            os.kill(pids[n], signal.SIGKILL)
    run.killed = getattr(run, "killed", set()) | set(names)
    r = run.wait(lambda: recovered_after(run.out, t_kill, gen), limit, "recovery")
    return (r["time"] - t_kill, r) if r else (None, None)


def full_world(run, workers, after_step):
    rows = read_metrics(run.out)
    return rows and rows[-1]["world_size"] == workers and rows[-1]["step"] >= after_step


def one(bindir, workers, a, tmp):
    res = {"W": workers}
    args = ["--threads", "1", "--batch", str(max(16, workers)), "--steps", str(a.steps),
            "--ckpt-every", str(a.ckpt_every), "--eval-every", "0", "--eval-windows", "16",
            "--log", "warn"]
    run = (UnsupervisedRun if a.unsupervised else Run)(bindir, workers, args, tmp)
    limit = run.t_launch + a.limit
    try:
        first = run.wait(lambda: read_metrics(run.out)[:1], limit, "the first step")
        if not first:
            return res
        res["start_s"] = first[0]["time"] - run.t_launch
        run.wait(lambda: len(read_metrics(run.out)) >= 10, limit, "10 steps")
        pids = run.sample()
        states = tcp_states()
        socks = [tcp_sockets(pid, states) for n, pid in pids.items() if re.match(r"w\d+$", n)]
        socks = [s for s in socks if s is not None]
        res["tcp"] = statistics.median(s[0] for s in socks) if socks else None
        res["tcp_listen"] = statistics.median(s[1] for s in socks) if socks else None
        res["kill1_s"], row = kill_and_recover(run, ["w%d" % (workers - 1)], limit)
        k = a.at_once or workers // 8
        world = workers - 1 if a.unsupervised else workers  # restarted by tagctl run
        if k >= 1 and row:
            back = run.wait(lambda: full_world(run, world, row["step"] + 5), limit,
                            "the world back to %d" % world)
            if back:
                # Spread over the ranks from w1 on (rank 0's w0 writes the metrics).
                res["killk_s"], _ = kill_and_recover(
                    run, ["w%d" % (1 + i * (workers - 1) // k) for i in range(k)], limit)
        run.wait(run.ended, limit, "the end of the run")
        run.sample()
        try:
            with open(os.path.join(run.out, "summary.json")) as f:
                end = json.load(f).get("end")
        except (OSError, ValueError):
            end = None
        res["done"] = run.succeeded() and end == "finished"
        res["wall_s"] = time.time() - run.t_launch
    finally:
        if a.keep and os.path.isdir(run.out):
            keep = os.path.join(a.keep, "w%d" % workers)
            shutil.copytree(run.out, keep, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("ckpt", "etcd"))
            if isinstance(run, UnsupervisedRun):
                for log in glob.glob(os.path.join(run.c.tmp, "*.log")):
                    shutil.copy(log, keep)
        run.stop()
        res["etcd"] = run.etcd
        res["coord_cpu_s"], res["coord_rss_mib"] = run.coord
    return res


def fmt(v, f="%.2f"):
    return "-" if v is None else (f % v if isinstance(v, float) else str(v))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build")
    ap.add_argument("--worlds", default="2,4,8,16,32")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--ckpt-every", type=int, default=20)
    ap.add_argument("--limit", type=float, default=600)
    ap.add_argument("--at-once", type=int, default=0, help="workers killed at once (0: W/8)")
    ap.add_argument("--unsupervised", action="store_true",
                    help="workers without tagctl run (no death reports, no restarts)")
    ap.add_argument("--keep", help="copy each run's OUT (less checkpoints) here")
    ap.add_argument("--json", help="write the results here too")
    a = ap.parse_args()
    worlds = [int(w) for w in a.worlds.split(",")]
    if a.quick:
        worlds = [w for w in worlds if w <= 8]
    bindir = os.path.join(os.path.abspath(a.build), "bin")
    tmp = tempfile.mkdtemp(prefix="tagc-scale-")
    results = []
    try:
        print("W   start_s  kill1_s  killW/8_s  done  wall_s  tcp/rank  coord_cpu_s  coord_rss_MiB  "
              "etcd requests by kind")
        for w in worlds:
            r = one(bindir, w, a, tmp)
            results.append(r)
            kinds = " ".join("%s=%d" % kv for kv in sorted(r.get("etcd", {}).items()) if kv[1])
            print("%-3d %-8s %-8s %-10s %-5s %-7s %-9s %-12s %-14s %s" % (
                w, fmt(r.get("start_s")), fmt(r.get("kill1_s")), fmt(r.get("killk_s")),
                fmt(r.get("done")), fmt(r.get("wall_s"), "%.0f"), "%s+%s" % (fmt(r.get("tcp"), "%g"), fmt(r.get("tcp_listen"), "%g")),
                fmt(r.get("coord_cpu_s")), fmt(r.get("coord_rss_mib"), "%.1f"), kinds), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
