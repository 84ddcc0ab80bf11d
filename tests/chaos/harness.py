"""Test harness for elastic runs: a real etcd on loopback (temporary data dir, free ports), a
tagc-coordinator and tagc-worker processes, all stopped by PID at the end."""
import json
import sys
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request


# How long a coordinator waits for the workers a test starts together before it plans
# without the missing ones: far above their start-up time even on a loaded machine.
START_WAIT_S = 120

# The workers' default lease TTL (tagc-worker --lease-ttl): how soon a stopped or vanished
# worker loses its membership. Fault durations that must outlast it are derived from it.
WORKER_LEASE_TTL_S = 3.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self, bindir, job="chaos"):
        self.bindir = bindir
        self.job = job
        self.tmp = tempfile.mkdtemp(prefix="tagc-chaos-")
        self.procs = {}
        self.etcd_url = None

    def start_etcd(self, ports=None):
        cp, pp = ports or (free_port(), free_port())
        self.etcd_ports = (cp, pp)
        self.etcd_url = "http://127.0.0.1:%d" % cp
        log = open(os.path.join(self.tmp, "etcd.log"), "a")
        self.procs["etcd"] = subprocess.Popen(
            ["etcd", "--data-dir", os.path.join(self.tmp, "etcd"), "--name", "chaos",
             "--listen-client-urls", self.etcd_url, "--advertise-client-urls", self.etcd_url,
             "--listen-peer-urls", "http://127.0.0.1:%d" % pp,
             "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % pp,
             "--initial-cluster", "chaos=http://127.0.0.1:%d" % pp],
            stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                urllib.request.urlopen(self.etcd_url + "/version", timeout=1).read()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("etcd did not start")

    def start_etcd_cluster(self, n=3):
        """n etcd members on loopback (etcd0..etcd<n-1>); etcd_url lists every client URL."""
        ports = [(free_port(), free_port()) for _ in range(n)]
        initial = ",".join("etcd%d=http://127.0.0.1:%d" % (i, pp) for i, (_, pp) in enumerate(ports))
        self.etcd_urls = ["http://127.0.0.1:%d" % cp for cp, _ in ports]
        self.etcd_url = ",".join(self.etcd_urls)
        for i, (cp, pp) in enumerate(ports):
            log = open(os.path.join(self.tmp, "etcd%d.log" % i), "a")
            self.procs["etcd%d" % i] = subprocess.Popen(
                ["etcd", "--data-dir", os.path.join(self.tmp, "etcd%d" % i), "--name", "etcd%d" % i,
                 "--listen-client-urls", self.etcd_urls[i], "--advertise-client-urls", self.etcd_urls[i],
                 "--listen-peer-urls", "http://127.0.0.1:%d" % pp,
                 "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % pp,
                 "--initial-cluster", initial, "--initial-cluster-state", "new"],
                stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.etcd_leader() is not None:
                return
            time.sleep(0.2)
        raise RuntimeError("the etcd cluster elected no leader")

    def etcd_leader(self):
        """Index of the etcd member that is the leader (None when none answers)."""
        for i, url in enumerate(self.etcd_urls):
            try:
                req = urllib.request.Request(url + "/v3/maintenance/status", data=b"{}", method="POST")
                st = json.loads(urllib.request.urlopen(req, timeout=1).read())
                if st.get("leader") and st["leader"] == st.get("header", {}).get("member_id"):
                    return i
            except (OSError, ValueError):
                continue
        return None

    def restart_etcd(self, down_s):
        """SIGKILLs etcd, waits down_s seconds, starts it again on the same data dir and ports."""
        self.signal("etcd", signal.SIGKILL)
        self.procs["etcd"].wait()
        time.sleep(down_s)
        self.start_etcd(self.etcd_ports)

    def pause_etcd(self, down_s):
        """SIGSTOPs etcd for down_s seconds, then SIGCONTs it (a hung etcd: connections are
        accepted, nothing answers)."""
        self.signal("etcd", signal.SIGSTOP)
        try:
            time.sleep(down_s)
        finally:
            self.signal("etcd", signal.SIGCONT)

    def start_coordinator(self, name="coord0", *args):
        self._start(name, [os.path.join(self.bindir, "tagc-coordinator"), "--etcd", self.etcd_url,
                           "--job", self.job, "--http", "", "--log", "info"] + list(args))

    def start_job(self, args, workers=3, min_workers=2, max_workers=3, worker_extra=None,
                  worker_env=None, etcd_members=1):
        """etcd, one coordinator (min/max workers) and workers w0..w<workers-1> with the
        options `args` (plus worker_extra[name] and the environment variables
        worker_env[name] where given), all writing to one output folder, which is returned.
        The first generation has all of them: the coordinator waits for every worker started
        here (--start-workers), however slowly they start, instead of planning with the first
        min_workers to register and growing the world a generation later (which retrains
        the steps since the last checkpoint)."""
        if etcd_members > 1:
            self.start_etcd_cluster(etcd_members)
        else:
            self.start_etcd()
        self.start_coordinator("coord0", "--min-workers", str(min_workers), "--max-workers", str(max_workers),
                               "--start-workers", str(min(workers, max_workers)),
                               "--start-wait", str(START_WAIT_S))
        out = os.path.join(self.tmp, "out")
        for i in range(workers):
            name = "w%d" % i
            self.start_worker(name, "--out", out, *(list(args) + (worker_extra or {}).get(name, [])),
                              env=(worker_env or {}).get(name))
        return out

    def start_worker(self, name, *args, env=None):
        self._start(name, [os.path.join(self.bindir, "tagc-worker"), "--etcd", self.etcd_url,
                           "--job", self.job, "--worker-id", name, "--log", "info"] + list(args), env)

    def _start(self, name, argv, env=None):
        log = open(os.path.join(self.tmp, name + ".log"), "w")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True,
                                            env=dict(os.environ, **env) if env else None)

    def signal(self, name, sig):
        os.kill(self.procs[name].pid, sig)

    def pid(self, name):
        return self.procs[name].pid

    def wait(self, name, timeout):
        return self.procs[name].wait(timeout=timeout)

    def log(self, name):
        with open(os.path.join(self.tmp, name + ".log")) as f:
            return f.read()

    def close(self, keep=bool(os.environ.get("TAGC_KEEP_TMP"))):
        for name, p in self.procs.items():
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                    os.kill(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        if not keep:
            shutil.rmtree(self.tmp, ignore_errors=True)


def read_pids(out):
    """{id: pid} of OUT/pids, which `tagctl run` rewrites at every (re)start; {} when absent."""
    try:
        with open(os.path.join(out, "pids")) as f:
            return dict((l.split()[0], int(l.split()[1])) for l in f if len(l.split()) == 2)
    except OSError:
        return {}


def metrics(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(l) for l in f]


def log_time(rec):
    """Wall time (epoch seconds) of a JSON log line's "ts" (2026-12-01T01:12:37.735Z)."""
    import calendar
    ts = rec["ts"]
    return calendar.timegm(time.strptime(ts[:19], "%Y-%m-%dT%H:%M:%S")) + float("0" + ts[19:-1])


def coord_generations(log_text):
    """[(wall time, generation, reason)] of the coordinator's "generation N: ..." lines (when
    it published each generation, and why)."""
    import re
    out = []
    for line in log_text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        m = re.match(r"generation (\d+): (.*)", rec.get("msg", ""))
        if m and rec.get("sys") == "coord":
            out.append((log_time(rec), int(m.group(1)), m.group(2)))
    return out


def coord_generation_times(log_text):
    """{generation: wall time (epoch seconds)} of the coordinator's "generation N: ..." lines
    (the time it published each generation)."""
    return dict((g, t) for t, g, _ in coord_generations(log_text))


def wait_for(pred, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise RuntimeError("timed out waiting for " + what)


class Checks:
    """Counts named checks; print_logs shows the processes' last lines when one failed."""

    def __init__(self):
        self.results = []

    def __call__(self, ok, what):
        self.results.append(bool(ok))
        print(("ok     " if ok else "FAILED ") + what)

    def ok(self):
        return bool(self.results) and all(self.results)

    def print_logs(self, cluster, names):
        if self.ok():
            return
        for n in names:
            print("=====", n)
            print("\n".join(cluster.log(n).splitlines()[-15:]))

    def exit(self):
        passed = sum(self.results)
        print("%d passed, %d failed" % (passed, len(self.results) - passed))
        sys.exit(0 if self.ok() else 1)


def job_args(steps, ckpt_every=10, batch=12, compress="none", *extra):
    """The worker options the chaos tests share: the tiny default model, one thread, no
    periodic evaluation; extra options appended."""
    return ["--steps", str(steps), "--ckpt-every", str(ckpt_every), "--threads", "1",
            "--batch", str(batch), "--eval-every", "0", "--eval-windows", str(batch),
            "--compress", compress] + list(extra)
