#!/usr/bin/env python3
"""Chaos soak: a real etcd (3 members by default), 2 coordinators and 3-4 workers under
`tagctl run --etcd`, training while a seeded driver injects one fault every 15-40 s:

  kill_worker    SIGKILL one worker             kill_two     SIGKILL two workers at once
  stop_worker    SIGSTOP one worker for 10 s    kill_leader  SIGKILL the leading coordinator
  etcd_kill      SIGKILL one etcd member, restarted by the driver after 5-20 s
  etcd_stop      SIGSTOP one etcd member for 5-20 s
  inject_oom / inject_hang / inject_nan          `tagctl inject --at-step` (a kind inject
                                                 refuses counts as "unsupported")
  ckpt_write_crash  armed once at the start with --fault ckpt:mid-write (tagctl inject cannot
                    arm checkpoint stages): the fault-rank worker dies in its first save

Not done: cutting a worker off in a network namespace (a running process cannot be moved into
one; it needs a worker started inside a namespace, see tests/chaos/test_partition.py).

Nothing but `tagctl run` restarts workers and coordinators (the driver only restarts an etcd
member it killed: that is the end of the fault). Afterwards the same job runs fault-free for
the same number of steps, and the driver prints: faults by kind, recoveries, steps lost, the
longest pause without progress per fault kind, median/max recovery (fault -> the first step
beyond the last step before it), and the final val loss and params_crc32c of both runs.
Exit status 1 when the job did not complete or a process the driver did not fault died.

  bench/chaos_soak.py --minutes 3 --seed 1 --workers 3 --out /tmp/soak [--bindir build/dev/bin]
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Etcd:
    """n members on loopback, each restartable on its data folder and ports."""

    def __init__(self, n, root):
        self.root = root
        self.ports = [(free_port(), free_port()) for _ in range(n)]
        self.names = ["m%d" % i for i in range(n)]
        self.cluster = ",".join("%s=http://127.0.0.1:%d" % (nm, pp) for nm, (_, pp) in zip(self.names, self.ports))
        self.urls = ["http://127.0.0.1:%d" % cp for cp, _ in self.ports]
        self.procs = [None] * n
        for i in range(n):
            self.start(i)
        deadline = time.time() + 60
        while time.time() < deadline and not all(self.healthy(i) for i in range(n)):
            time.sleep(0.2)

    def start(self, i):
        cp, pp = self.ports[i]
        log = open(os.path.join(self.root, "etcd-%s.log" % self.names[i]), "a")
        self.procs[i] = subprocess.Popen(
            ["etcd", "--name", self.names[i], "--data-dir", os.path.join(self.root, "etcd-" + self.names[i]),
             "--listen-client-urls", self.urls[i], "--advertise-client-urls", self.urls[i],
             "--listen-peer-urls", "http://127.0.0.1:%d" % pp,
             "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % pp,
             "--initial-cluster", self.cluster, "--initial-cluster-state", "new"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def healthy(self, i):
        try:
            return b"true" in urllib.request.urlopen(self.urls[i] + "/health", timeout=1).read()
        except OSError:
            return False

    def close(self):
        for p in self.procs:
            if p and p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
                p.wait()


def read_pids(out):
    try:
        with open(os.path.join(out, "pids")) as f:
            return dict((l.split()[0], int(l.split()[1])) for l in f if len(l.split()) == 2)
    except OSError:
        return {}


def rows(out):
    try:
        with open(os.path.join(out, "metrics.jsonl")) as f:
            return [json.loads(l) for l in f if l.endswith("\n")]
    except OSError:
        return []


def leader_coordinator(out):
    """The id (coordinator-K) of the coordinator whose /status says leader, or None."""
    for k in range(2):
        try:
            with open(os.path.join(out, "coordinator-%d.log" % k)) as f:
                ports = re.findall(r"on port (\d+)", f.read())
            st = json.loads(urllib.request.urlopen("http://127.0.0.1:%s/status" % ports[-1], timeout=2).read())
            if st.get("role") == "leader":
                return "coordinator-%d" % k
        except (OSError, IndexError, ValueError):
            continue
    return None


class Soak:
    def __init__(self, a):
        self.a = a
        self.rng = random.Random(a.seed)
        self.faults = []        # (time, kind, detail)
        self.expected = set()   # PIDs the driver faulted (their deaths are expected)
        self.unsupported = {}
        self.progress = []      # (time, step, world) per metrics row, as they appear
        self.seen_rows = 0

    def tagctl(self, *args, **kw):
        return subprocess.run([os.path.join(self.a.bindir, "tagctl")] + list(args), capture_output=True,
                              text=True, timeout=60, **kw)

    def poll_progress(self):
        r = rows(self.out)
        now = time.time()
        for row in r[self.seen_rows:]:
            self.progress.append((now, row["step"], row["world_size"]))
        self.seen_rows = len(r)

    def sleep(self, s):
        end = time.time() + s
        while time.time() < end and self.job.poll() is None:
            self.poll_progress()
            time.sleep(0.2)

    def worker_pids(self):
        return {k: v for k, v in read_pids(self.out).items() if re.fullmatch(r"w\d+", k)}

    def kill(self, pid, sig=signal.SIGKILL):
        self.expected.add(pid)
        try:
            os.kill(pid, sig)
            return True
        except ProcessLookupError:
            return False

    def step_now(self):
        return self.progress[-1][1] if self.progress else 0

    def one_fault(self):
        kinds = ["kill_worker", "kill_two", "stop_worker", "kill_leader", "etcd_kill", "etcd_stop",
                 "inject_oom", "inject_hang", "inject_nan"]
        kind = self.rng.choice(kinds)
        workers = self.worker_pids()
        if not workers:
            return
        names = sorted(workers)
        t = time.time()
        detail = ""
        if kind == "kill_worker":
            w = self.rng.choice(names)
            self.kill(workers[w])
            detail = w
        elif kind == "kill_two":
            ws = self.rng.sample(names, 2)
            for w in ws:
                self.kill(workers[w])
            detail = "+".join(ws)
        elif kind == "stop_worker":
            w = self.rng.choice(names)
            self.expected.add(workers[w])  # stopped past its lease: its generation ends
            os.kill(workers[w], signal.SIGSTOP)
            self.faults.append((t, kind, w))
            self.note(kind, w)
            self.sleep(10)
            os.kill(workers[w], signal.SIGCONT)
            return
        elif kind == "kill_leader":
            c = leader_coordinator(self.out)
            if not c:
                self.unsupported[kind] = self.unsupported.get(kind, 0) + 1
                return
            self.kill(read_pids(self.out)[c])
            detail = c
        elif kind in ("etcd_kill", "etcd_stop"):
            i = self.rng.randrange(len(self.etcd.procs))
            down = self.rng.uniform(5, 20)
            p = self.etcd.procs[i]
            self.faults.append((t, kind, "%s for %.0f s" % (self.etcd.names[i], down)))
            self.note(kind, self.faults[-1][2])
            if kind == "etcd_kill":
                p.kill()
                p.wait()
                self.sleep(down)
                self.etcd.start(i)
            else:
                os.kill(p.pid, signal.SIGSTOP)
                self.sleep(down)
                os.kill(p.pid, signal.SIGCONT)
            return
        else:
            what = kind.split("_", 1)[1]
            w = self.rng.choice(names)
            at = self.step_now() + 3
            r = self.tagctl("inject", "--etcd", ",".join(self.etcd.urls), "--job", self.job_name,
                            "--worker", w, "--at-step", str(at), what)
            if r.returncode != 0:
                self.unsupported[kind] = self.unsupported.get(kind, 0) + 1
                print("soak: %s unsupported: %s" % (kind, (r.stderr.strip().splitlines() or [""])[-1]))
                return
            if what == "hang":
                self.expected.add(workers[w])  # a hung worker is ended by its watchdog
            detail = "%s at step %d" % (w, at)
        self.faults.append((t, kind, detail))
        self.note(kind, detail)

    def note(self, kind, detail):
        print("soak: +%.0f s step %d: %s %s" % (time.time() - self.t0, self.step_now(), kind, detail), flush=True)

    def run_job(self, out, job, steps, chaos):
        self.out = out
        self.job_name = job
        args = [os.path.join(self.a.bindir, "tagctl"), "run", "--etcd", ",".join(self.etcd.urls),
                "--job", job, "--out", out, "--workers", str(self.a.workers), "--coordinators", "2",
                "--min-workers", "2", "--max-restarts", "1000", "--log", "warn", "--steps", str(steps),
                "--ckpt-every", "20", "--threads", "1", "--batch", "12", "--eval-every", "0",
                "--eval-windows", "12", "--compress", "tagc"]
        if chaos:
            args += ["--fault", "ckpt:mid-write", "--fault-rank", "0"]
        log = open(out + ".log", "w")
        self.t0 = time.time()
        self.job = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        first = None
        end = time.time() + self.a.minutes * 60 * 3 + 300
        while self.job.poll() is None and time.time() < end:
            self.poll_progress()
            if chaos and first is None and self.worker_pids():
                first = self.worker_pids().get("w0")
                if first:
                    self.expected.add(first)  # armed with ckpt:mid-write
                    self.ckpt_pid = first
            if chaos and time.time() < self.chaos_until and self.progress:
                self.sleep(self.rng.uniform(15, 40))
                if time.time() < self.chaos_until and self.job.poll() is None:
                    self.one_fault()
            else:
                time.sleep(0.2)
        if self.job.poll() is None:
            os.killpg(self.job.pid, signal.SIGKILL)
        rc = self.job.wait()
        self.poll_progress()
        s = json.load(open(out + "/summary.json")) if os.path.exists(out + "/summary.json") else {}
        return rc, s

    def deaths(self, out):
        """(pid, what) of every child death tagctl reported."""
        with open(out + ".log") as f:
            return [(int(m.group(2)), m.group(1)) for m in
                    re.finditer(r"tagctl run: (\S+ \S+) \(pid (\d+)\) (?:was killed|exited)", f.read())]


def report(soak, rc, s, ref_rc, ref, steps, deaths):
    by_kind = {}
    for _, k, _ in soak.faults:
        by_kind[k] = by_kind.get(k, 0) + 1
    ckpt_fired = any(pid == getattr(soak, "ckpt_pid", None) for pid, _ in deaths)
    if ckpt_fired:
        by_kind["ckpt_write_crash"] = 1
    print("faults by kind: %s" % json.dumps(by_kind, sort_keys=True))
    print("unsupported: %s" % json.dumps(soak.unsupported, sort_keys=True))
    # recovery: from a fault to the first step beyond the last step before it
    recov, pauses = [], {}
    prog = soak.progress
    times = [f[0] for f in soak.faults] + [float("inf")]
    for i, (t, kind, _) in enumerate(soak.faults):
        before = max([st for (tt, st, _) in prog if tt <= t] or [0])
        after = [tt for (tt, st, _) in prog if tt > t and st > before]
        if after:
            recov.append(after[0] - t)
        # gaps between the fault, the steps until the next fault and the next fault itself
        nxt = times[i + 1]
        window = [t] + [tt for (tt, _, _) in prog if t < tt < nxt] + ([nxt] if nxt != float("inf") else [])
        gap = max((b - a for a, b in zip(window, window[1:])), default=0.0)
        pauses[kind] = max(pauses.get(kind, 0.0), gap)
    print("recoveries (summary.json): %s; faults followed by new progress: %d of %d"
          % (s.get("recoveries"), len(recov), len(soak.faults)))
    print("steps lost (summary.json): %s; rows written %d for %d steps" % (s.get("steps_lost"), len(prog), steps))
    print("longest pause without progress per fault kind (s): %s"
          % json.dumps({k: round(v, 1) for k, v in sorted(pauses.items())}))
    if recov:
        print("recovery (s): median %.1f, max %.1f over %d faults" % (statistics.median(recov), max(recov), len(recov)))
    print("final val loss: soak %s, fault-free %s" % (s.get("final_val_loss"), ref.get("final_val_loss")))
    print("params_crc32c: soak %s, fault-free %s (%s)" % (s.get("params_crc32c"), ref.get("params_crc32c"),
          "identical" if s.get("params_crc32c") == ref.get("params_crc32c") else
          "different: the widths changed under faults"))
    crashed = [(pid, what) for pid, what in deaths if pid not in soak.expected]
    ok = rc == 0 and s.get("steps") == steps and ref_rc == 0 and not crashed
    if crashed:
        print("survivors that died: %s" % crashed)
    print("soak %s: tagctl run status %d, %s of %d steps; fault-free run status %d"
          % ("passed" if ok else "FAILED", rc, s.get("steps"), steps, ref_rc))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=3, choices=(3, 4))
    ap.add_argument("--out", default=None, help="folder for runs and logs (default: a temporary one, removed)")
    ap.add_argument("--etcd-members", type=int, default=3, choices=(1, 3))
    ap.add_argument("--steps-per-minute", type=int, default=0,
                    help="steps per minute of the job (0: measured by a short calibration run)")
    ap.add_argument("--bindir", default=os.path.join(HERE, "..", "build", "dev", "bin"))
    a = ap.parse_args()
    if not shutil.which("etcd"):
        print("soak: etcd not found")
        return 77
    root = a.out or tempfile.mkdtemp(prefix="tagc-soak-")
    os.makedirs(root, exist_ok=True)
    soak = Soak(a)
    soak.etcd = Etcd(a.etcd_members, root)
    try:
        rate = a.steps_per_minute
        if not rate:  # a fault-free calibration: steps per minute once training runs
            soak.chaos_until = 0
            soak.run_job(os.path.join(root, "calibrate"), "soak-cal", 200, False)
            p = soak.progress
            rate = int(60 * (p[-1][1] - p[0][1]) / max(p[-1][0] - p[0][0], 1e-3)) if len(p) > 2 else 300
            soak.progress, soak.seen_rows = [], 0
        steps = max(40, int(rate * a.minutes * 0.6) // 20 * 20)  # faults slow the job down
        print("soak: seed %d, %d workers, %d etcd members, %d steps (%d steps/min fault-free), faults for %.1f min"
              % (a.seed, a.workers, a.etcd_members, steps, rate, a.minutes))
        soak.chaos_until = time.time() + a.minutes * 60
        rc, s = soak.run_job(os.path.join(root, "soak"), "soak", steps, True)
        deaths = soak.deaths(os.path.join(root, "soak"))
        chaos = soak.progress
        soak.progress, soak.seen_rows, soak.chaos_until = [], 0, 0
        ref_rc, ref = soak.run_job(os.path.join(root, "reference"), "soak-ref", steps, False)
        soak.progress = chaos
        ok = report(soak, rc, s, ref_rc, ref, steps, deaths)
    finally:
        soak.etcd.close()
        if not a.out:
            shutil.rmtree(root, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
