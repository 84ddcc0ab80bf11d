#!/usr/bin/env python3
"""Chaos soak: a real etcd (3 members by default), 2 coordinators and 3-4 workers under
`tagctl run --etcd`, training while a seeded driver injects one fault every 15-28 s (start to
start; a fault that lasts longer delays the next one until it ends):

  kill_worker    SIGKILL one worker             kill_two     SIGKILL two workers at once
  stop_worker    SIGSTOP one worker for 10 s    kill_leader  SIGKILL the leading coordinator
  etcd_kill      SIGKILL one etcd member, restarted by the driver after 5-20 s
  etcd_stop      SIGSTOP one etcd member for 5-20 s
  cut_worker     cut one worker off the network for 20 s (below)
  inject_oom / inject_hang / inject_nan    `tagctl inject --at-step` (the next steps)
  ckpt_write_crash   `tagctl inject ckpt:mid-write`: the worker dies in its next save

The kinds are drawn as a seeded cycle: the full list shuffled, drawn in that order, shuffled
again when used up, so each cycle of 11 faults holds every kind once (a transient miss - no
coordinator says leader right now, the chosen worker just exited - draws the same kind again
next; a kind `tagctl inject` refuses, status 2, counts as "unsupported"). An injected fault's
key (chaos/<worker>) is cleared once the worker logs that it armed it, so a restarted worker
does not fire it again.

cut_worker is an iptables + cgroup v2 cut on loopback, not a network namespace (a running
process cannot be moved into one): the worker's process moves into a cgroup of its own
(tagc-soak-<pid>-<n> under the cgroup2 root, /sys/fs/cgroup/unified or /sys/fs/cgroup), and
`iptables -I OUTPUT -m cgroup --path ... -j DROP` drops every packet its new sockets send. A
socket keeps the cgroup it was created in, so the worker's existing TCP sockets (Gloo pairs,
listeners, kept-alive etcd connections; listed with `ss -tanp`) get DROP rules by address as
well: each connection's 4-tuple both ways, each listener's port both ways. Nothing flows to or
from the worker (peers stall on it) - in effect the same as cutting its namespace's link. (The
first 20-minute soak had only the cgroup rule: its cuts stopped the worker's etcd traffic but
not its established Gloo connections.) After 20 s the rule goes, the process moves back and the cgroup is removed;
that also happens on any exit of the driver (Ctrl-C, SIGTERM, an exception), and at the end the
driver checks that no rule of its prefix is left. Without root, cgroup2 or the iptables cgroup
match the kind counts as "unsupported" with a one-line reason.

Nothing but `tagctl run` restarts workers and coordinators (the driver only restarts an etcd
member it killed: that is the end of the fault). The job runs with `--op-timeout` (20 s by
default, --op-timeout) and is sized from a fault-free calibration (--steps-per-minute) so that
it outlasts the fault window (--job-factor 1.25: 1.25 times the steps the fault-free rate does
in the window; faults only slow it down, the margin covers a machine less busy than during the
calibration). Afterwards the same job runs fault-free for the same number of steps, and the
driver prints faults by kind (and how many hit the running job), recoveries, steps lost, the
longest pause without progress (gap between completed steps, by the metrics rows' times) per
fault kind, median/max recovery, final val loss and params_crc32c of both runs, then one
verdict line per criterion of issue 15:

  job complete       `tagctl run` status 0 and all steps done
  faults             >= 40 per 20 minutes of window (scaled: 6 for 3 minutes), all while the
                     job ran, and every kind present (a window shorter than one cycle: no kind
                     repeated, none unsupported)
  pause              longest pause without progress <= the job's op timeout (job.json) + 5 s
  survivors          no process the driver did not fault died
  val loss           final val loss (256 eval windows) within 1 % of the fault-free run's

Exit status 1 when any verdict fails (77: etcd not found).

  bench/chaos_soak.py --minutes 3 --seed 1 --workers 3 --out /tmp/soak [--bindir build/dev/bin]
"""
import argparse
import atexit
import errno
import json
import os
import random
import re
import shlex
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


KINDS = ["kill_worker", "kill_two", "stop_worker", "kill_leader", "etcd_kill", "etcd_stop",
         "cut_worker", "inject_oom", "inject_hang", "inject_nan", "ckpt_write_crash"]
CUT_S = 20
# The final val loss of both runs is compared within 1 %: over 256 windows (16 k tokens), not
# the 12 of earlier soaks, whose verdict spread by about +-1 % between runs of one schedule.
EVAL_WINDOWS = 256


class NetCut:
    """Cuts one process off the network: its own cgroup v2 and an iptables OUTPUT DROP rule
    matching that cgroup (loopback included). Every rule and cgroup it makes carries the
    prefix tagc-soak-<driver pid>-; undo() removes them and runs at exit."""

    def __init__(self):
        self.prefix = "tagc-soak-%d-" % os.getpid()
        self.n = 0
        self.active = {}  # name -> pid
        self.root = next((r for r in ("/sys/fs/cgroup/unified", "/sys/fs/cgroup")
                          if os.path.exists(os.path.join(r, "cgroup.procs")) and
                          os.path.exists(os.path.join(r, "cgroup.controllers"))), None)
        self.reason = self.check()
        atexit.register(self.undo_all)

    def check(self):
        if os.geteuid() != 0:
            return "not root (iptables and cgroups need it)"
        if not self.root:
            return "no cgroup2 hierarchy at /sys/fs/cgroup/unified or /sys/fs/cgroup"
        if not shutil.which("iptables"):
            return "iptables not found"
        name = self.prefix + "probe"
        try:
            os.mkdir(os.path.join(self.root, name))
        except OSError as e:
            return "cannot make a cgroup: %s" % e
        try:
            r = subprocess.run(["iptables", "-I", "OUTPUT", "-m", "cgroup", "--path", name, "-j", "DROP"],
                               capture_output=True, text=True)
            if r.returncode != 0:
                return "iptables cgroup match: %s" % (r.stderr.strip().splitlines() or ["?"])[-1]
            subprocess.run(["iptables", "-D", "OUTPUT", "-m", "cgroup", "--path", name, "-j", "DROP"],
                           capture_output=True)
            return None
        finally:
            os.rmdir(os.path.join(self.root, name))

    def cut(self, pid):
        self.n += 1
        name = "%s%d" % (self.prefix, self.n)
        os.mkdir(os.path.join(self.root, name))
        self.active[name] = pid
        with open(os.path.join(self.root, name, "cgroup.procs"), "w") as f:
            f.write(str(pid))
        subprocess.run(["iptables", "-I", "OUTPUT", "-m", "cgroup", "--path", name, "-j", "DROP"],
                       check=True, capture_output=True)
        # A socket keeps the cgroup it was made in, so the rule above catches only sockets the
        # worker opens from now on. Its existing TCP sockets (Gloo pairs, listeners, reused etcd
        # connections) are cut by address: each connection's 4-tuple both ways, each listener's
        # port (its accepted connections and handshakes) both ways.
        for rule in self.socket_rules(pid):
            subprocess.run(["iptables", "-I", "OUTPUT"] + rule + ["-m", "comment", "--comment", name,
                                                                 "-j", "DROP"],
                           check=True, capture_output=True)
        return name

    @staticmethod
    def socket_rules(pid):
        r = subprocess.run(["ss", "-Htanp"], capture_output=True, text=True)
        rules, tag = [], "pid=%d," % pid
        for line in r.stdout.splitlines():
            f = line.split()
            if tag not in line or len(f) < 5:
                continue
            state, local, peer = f[0], f[3], f[4]
            if local.startswith("[") or peer.startswith("["):
                continue  # IPv6: the workers use IPv4 on loopback
            la, lp = local.rsplit(":", 1)
            pa, pp = peer.rsplit(":", 1)
            if state == "LISTEN":
                la = "127.0.0.1" if la in ("0.0.0.0", "*") else la
                rules.append(["-p", "tcp", "-s", la, "--sport", lp])
                rules.append(["-p", "tcp", "-d", la, "--dport", lp])
            elif pp != "*":
                rules.append(["-p", "tcp", "-s", la, "--sport", lp, "-d", pa, "--dport", pp])
                rules.append(["-p", "tcp", "-s", pa, "--sport", pp, "-d", la, "--dport", lp])
        return rules

    def undo(self, name):
        pid = self.active.pop(name, None)
        while subprocess.run(["iptables", "-D", "OUTPUT", "-m", "cgroup", "--path", name, "-j", "DROP"],
                             capture_output=True).returncode == 0:
            pass
        listed = subprocess.run(["iptables", "-S", "OUTPUT"], capture_output=True, text=True).stdout
        for line in listed.splitlines():  # the socket rules carry the cut's name as a comment
            if line.startswith("-A OUTPUT ") and ('--comment "%s"' % name in line or
                                                  "--comment %s " % name in line):
                subprocess.run(["iptables", "-D"] + shlex.split(line)[1:], capture_output=True)
        path = os.path.join(self.root, name)
        for _ in range(50):
            try:  # every process still in it (the worker, if alive) goes back to the root
                with open(os.path.join(path, "cgroup.procs")) as f:
                    for p in f.read().split():
                        try:
                            with open(os.path.join(self.root, "cgroup.procs"), "w") as r:
                                r.write(p)
                        except OSError:
                            pass
                os.rmdir(path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)
        print("soak: cannot remove cgroup %s (pid %s)" % (path, pid), flush=True)

    def undo_all(self):
        for name in list(self.active):
            self.undo(name)

    def leftovers(self):
        """Rules and cgroups of this driver's prefix still present (should be none)."""
        if self.reason:
            return []
        r = subprocess.run(["iptables", "-S", "OUTPUT"], capture_output=True, text=True)
        left = [l for l in r.stdout.splitlines() if self.prefix in l]
        return left + [d for d in os.listdir(self.root) if d.startswith(self.prefix)]


class Soak:
    def __init__(self, a):
        self.a = a
        self.rng = random.Random(a.seed)
        self.faults = []        # (time, kind, detail)
        self.expected = set()   # PIDs the driver faulted (their deaths are expected)
        self.unsupported = {}
        self.progress = []      # (time, step, world) per metrics row (the row's own time)
        self.seen_rows = 0
        self.cycle = []
        self.pending_clear = []  # (worker, spec, count of "chaos armed: spec" before)
        self.netcut = NetCut()
        if self.netcut.reason:
            print("soak: cut_worker unsupported: %s" % self.netcut.reason, flush=True)

    def tagctl(self, *args, **kw):
        return subprocess.run([os.path.join(self.a.bindir, "tagctl")] + list(args), capture_output=True,
                              text=True, timeout=60, **kw)

    def poll_progress(self):
        r = rows(self.out)
        now = time.time()
        for row in r[self.seen_rows:]:
            self.progress.append((row.get("time", now), row["step"], row["world_size"]))
        self.seen_rows = len(r)

    def armed_count(self, spec):
        try:
            with open(self.out + ".log") as f:
                return f.read().count('"chaos armed: %s"' % spec)
        except OSError:
            return 0

    def clear_armed(self, final=False):
        """Clears chaos/<worker> once the worker logged that it armed the spec (or at the end)."""
        keep = []
        for w, spec, before in self.pending_clear:
            if final or self.armed_count(spec) > before:
                self.tagctl("inject", "--etcd", ",".join(self.etcd.urls), "--job", self.job_name,
                            "--worker", w, "--clear")
            else:
                keep.append((w, spec, before))
        self.pending_clear = keep

    def sleep(self, s):
        end = time.time() + s
        while time.time() < end and self.job.poll() is None:
            self.poll_progress()
            if self.pending_clear:
                self.clear_armed()
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

    def next_kind(self):
        if not self.cycle:
            self.cycle = list(KINDS)
            self.rng.shuffle(self.cycle)
        return self.cycle.pop(0)

    def skipped(self, kind, why):
        """A transient miss (no leader right now, the worker just died): drawn again next."""
        self.cycle.insert(0, kind)
        print("soak: +%.0f s %s skipped (%s): drawn again next" % (time.time() - self.t0, kind, why), flush=True)

    def unsupported_kind(self, kind, why):
        self.unsupported[kind] = self.unsupported.get(kind, 0) + 1
        print("soak: %s unsupported: %s" % (kind, why), flush=True)

    def one_fault(self):
        workers = self.worker_pids()
        if not workers:
            return
        kind = self.next_kind()
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
            if not self.kill(workers[w], signal.SIGSTOP):
                self.skipped(kind, "%s exited" % w)
                return
            self.record(t, kind, w)
            try:
                self.sleep(10)
            finally:
                self.kill(workers[w], signal.SIGCONT)
            return
        elif kind == "cut_worker":
            if self.netcut.reason:
                self.unsupported_kind(kind, self.netcut.reason)
                return
            w = self.rng.choice(names)
            self.expected.add(workers[w])  # cut off: excluded, may give up and exit
            try:
                name = self.netcut.cut(workers[w])
            except (OSError, subprocess.CalledProcessError) as e:
                self.netcut.undo_all()
                if isinstance(e, ProcessLookupError) or getattr(e, "errno", None) == errno.ESRCH:
                    self.skipped(kind, "%s exited" % w)
                else:
                    self.unsupported_kind(kind, "cannot cut pid %d: %s" % (workers[w], e))
                return
            self.record(t, kind, "%s for %d s" % (w, CUT_S))
            try:
                self.sleep(CUT_S)
            finally:
                self.netcut.undo(name)
            return
        elif kind == "kill_leader":
            c = leader_coordinator(self.out)
            if not c:
                self.skipped(kind, "no coordinator says leader right now")
                return
            self.kill(read_pids(self.out)[c])
            detail = c
        elif kind in ("etcd_kill", "etcd_stop"):
            i = self.rng.randrange(len(self.etcd.procs))
            down = self.rng.uniform(5, 20)
            p = self.etcd.procs[i]
            self.record(t, kind, "%s for %.0f s" % (self.etcd.names[i], down))
            if kind == "etcd_kill":
                p.kill()
                p.wait()
                try:
                    self.sleep(down)
                finally:
                    self.etcd.start(i)
            else:
                os.kill(p.pid, signal.SIGSTOP)
                try:
                    self.sleep(down)
                finally:
                    os.kill(p.pid, signal.SIGCONT)
            return
        else:
            w = self.rng.choice(names)
            if kind == "ckpt_write_crash":
                what, args = "ckpt:mid-write", []
            else:
                what = kind.split("_", 1)[1]
                args = ["--at-step", str(self.step_now() + 3)]
            r = self.tagctl("inject", "--etcd", ",".join(self.etcd.urls), "--job", self.job_name,
                            "--worker", w, what, *args)
            if r.returncode != 0:  # 2: the kind is refused; else (not registered now): transient
                (self.unsupported_kind if r.returncode == 2 else self.skipped)(
                    kind, (r.stderr.strip().splitlines() or [""])[-1])
                return
            spec = r.stdout.strip().split(" = ", 1)[-1]
            self.pending_clear.append((w, spec, self.armed_count(spec)))
            if what in ("hang", "ckpt:mid-write"):
                self.expected.add(workers[w])  # ended by its watchdog / killed in its save
            detail = "%s %s" % (w, spec)
        self.record(t, kind, detail)

    def record(self, t, kind, detail):
        self.faults.append((t, kind, detail))
        print("soak: +%.0f s step %d: %s %s" % (time.time() - self.t0, self.step_now(), kind, detail), flush=True)

    def run_job(self, out, job, steps, chaos):
        self.out = out
        self.job_name = job
        args = [os.path.join(self.a.bindir, "tagctl"), "run", "--etcd", ",".join(self.etcd.urls),
                "--job", job, "--out", out, "--workers", str(self.a.workers), "--coordinators", "2",
                "--min-workers", str(self.a.min_workers), "--max-restarts", "1000", "--log", "warn", "--steps", str(steps),
                "--ckpt-every", "20", "--threads", "1", "--batch", "12", "--eval-every", "0",
                "--eval-windows", str(EVAL_WINDOWS), "--compress", "tagc", "--op-timeout", str(self.a.op_timeout)]
        log = open(out + ".log", "w")
        self.t0 = time.time()
        self.job = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        end = time.time() + self.a.minutes * 60 * 3 + 300
        next_at = None
        try:
            while self.job.poll() is None and time.time() < end:
                self.poll_progress()
                if chaos and time.time() < self.chaos_until and self.progress:
                    if next_at is None:  # the first fault once training runs
                        next_at = time.time() + self.rng.uniform(15, 28)
                    self.sleep(next_at - time.time())
                    next_at += self.rng.uniform(15, 28)  # start to start
                    if time.time() < self.chaos_until and self.job.poll() is None:
                        self.one_fault()
                else:
                    self.sleep(0.2)
        finally:
            self.netcut.undo_all()
            if self.job.poll() is None and time.time() >= end:
                os.killpg(self.job.pid, signal.SIGKILL)
            elif self.job.poll() is None:  # interrupted: end the job and its children
                os.killpg(self.job.pid, signal.SIGKILL)
        rc = self.job.wait()
        self.job_end = time.time()
        self.clear_armed(final=True)
        self.poll_progress()
        s = json.load(open(out + "/summary.json")) if os.path.exists(out + "/summary.json") else {}
        return rc, s

    def deaths(self, out):
        """(pid, what) of every child death tagctl reported."""
        with open(out + ".log") as f:
            return [(int(m.group(2)), m.group(1)) for m in
                    re.finditer(r"tagctl run: (\S+ \S+) \(pid (\d+)\) (?:was killed|exited)", f.read())]


def op_timeout_of(out):
    try:
        with open(os.path.join(out, "job.json")) as f:
            return float(json.load(f)["op_timeout"])
    except (OSError, KeyError, ValueError, TypeError):
        return None


def report(soak, rc, s, ref_rc, ref, steps, deaths, job_end, op_timeout, leftovers):
    """Prints the figures and one verdict line per criterion; True when all pass."""
    by_kind = {}
    for _, k, _ in soak.faults:
        by_kind[k] = by_kind.get(k, 0) + 1
    on_job = sum(1 for t, _, _ in soak.faults if t < job_end)
    print("faults by kind: %s" % json.dumps(by_kind, sort_keys=True))
    print("faults: %d, %d of them while the job ran" % (len(soak.faults), on_job))
    print("unsupported: %s" % json.dumps(soak.unsupported, sort_keys=True))
    # recovery: from a fault to the first step beyond the last step before it
    recov, pauses = [], {}
    prog = sorted(soak.progress)
    row_t = [tt for (tt, _, _) in prog]
    gaps = [(b - a, a) for a, b in zip(row_t, row_t[1:])]  # pauses without progress (row times)
    for t, kind, _ in soak.faults:
        before = max([st for (tt, st, _) in prog if tt <= t] or [0])
        after = [tt for (tt, st, _) in prog if tt > t and st > before]
        if after:
            recov.append(after[0] - t)

    # a pause is charged to the fault that began it: the latest fault at most 1 s after the
    # last step before the pause (a kill lands in a step that then never ends); a fault that
    # lands later in a pause that is already going on is not charged with it
    def cause(a):
        return ([k for t, k, _ in soak.faults if t <= a + 1.0] or ["before any fault"])[-1]
    for d, a in gaps:
        k = cause(a)
        if k in pauses or k in by_kind:
            pauses[k] = max(pauses.get(k, 0.0), d)
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
    if crashed:
        print("survivors that died: %s" % crashed)
    if leftovers:
        print("cut_worker left behind: %s" % leftovers)

    verdicts = []

    def verdict(name, ok, detail):
        verdicts.append(ok)
        print("verdict %-10s %s: %s" % (name, "PASS" if ok else "FAIL", detail))

    verdict("job", rc == 0 and s.get("steps") == steps and ref_rc == 0,
            "tagctl run status %d, %s of %d steps; fault-free run status %d" % (rc, s.get("steps"), steps, ref_rc))
    need = max(1, int(40 * soak.a.minutes / 20))
    missing = [k for k in KINDS if k not in by_kind]
    if len(soak.faults) >= len(KINDS):
        kinds_ok, kinds_txt = not missing, "every kind present" if not missing else "missing %s" % missing
    else:  # a window shorter than one cycle: the cycle still draws no kind twice
        kinds_ok = len(by_kind) == len(soak.faults) and not soak.unsupported
        kinds_txt = "%d distinct kinds of %d (window shorter than one cycle of %d)" % (
            len(by_kind), len(soak.faults), len(KINDS))
    verdict("faults", on_job >= need and on_job == len(soak.faults) and kinds_ok and not soak.unsupported,
            "%d faults, %d on the running job (need >= %d), %s, unsupported %s"
            % (len(soak.faults), on_job, need, kinds_txt, json.dumps(soak.unsupported, sort_keys=True)))
    longest, at = max(gaps, default=(0.0, 0.0))
    worst = cause(at)
    verdict("pause", op_timeout is not None and longest <= op_timeout + 5,
            "longest pause without progress %.1f s (after %s) vs op timeout %s s + 5 s" % (longest, worst, op_timeout))
    verdict("survivors", not crashed and not leftovers,
            "%d deaths, all of processes the driver faulted%s" % (len(deaths), "" if not crashed else
            " except %d" % len(crashed)) + ("; no cut rule or cgroup left" if not leftovers else "; cut left behind"))
    a, b = s.get("final_val_loss"), ref.get("final_val_loss")
    rel = abs(a - b) / abs(b) if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None
    verdict("val_loss", rel is not None and rel <= 0.01,
            "soak %s vs fault-free %s (%s)" % (a, b, "%+.2f %%" % (100 * (a - b) / b) if rel is not None else "n/a"))
    ok = all(verdicts)
    print("soak %s" % ("passed" if ok else "FAILED"))
    return ok


def on_signal(sig, frame):
    raise KeyboardInterrupt  # unwinds through every finally (etcd, cuts, the job)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=3, choices=(3, 4))
    ap.add_argument("--min-workers", type=int, default=1, choices=(1, 2),
                    help="the job's --min-workers (default 1: two overlapping faults that take out "
                         "two workers, e.g. a hang and a cut, leave one that can train; with 2 the "
                         "job waits for one to come back, beyond any per-fault pause bound)")
    ap.add_argument("--out", default=None, help="folder for runs and logs (default: a temporary one, removed)")
    ap.add_argument("--etcd-members", type=int, default=3, choices=(1, 3))
    ap.add_argument("--steps-per-minute", type=int, default=0,
                    help="fault-free steps per minute of the job (0: measured by a short calibration run)")
    ap.add_argument("--job-factor", type=float, default=1.25,
                    help="job steps = fault-free steps per minute x minutes x this (default 1.25: faults "
                         "only slow the job, and the margin covers a machine less busy than in calibration)")
    ap.add_argument("--op-timeout", type=float, default=20,
                    help="the workers' --op-timeout in seconds (default 20)")
    ap.add_argument("--bindir", default=os.path.join(HERE, "..", "build", "dev", "bin"))
    a = ap.parse_args()
    if not shutil.which("etcd"):
        print("soak: etcd not found")
        return 77
    signal.signal(signal.SIGTERM, on_signal)
    root = a.out or tempfile.mkdtemp(prefix="tagc-soak-")
    os.makedirs(root, exist_ok=True)
    soak = Soak(a)
    soak.etcd = Etcd(a.etcd_members, root)
    ok = False
    try:
        rate = a.steps_per_minute
        if not rate:  # a fault-free calibration: steps per minute once training runs
            soak.chaos_until = 0
            soak.run_job(os.path.join(root, "calibrate"), "soak-cal", 200, False)
            p = soak.progress
            rate = int(60 * (p[-1][1] - p[0][1]) / max(p[-1][0] - p[0][0], 1e-3)) if len(p) > 2 else 300
            soak.progress, soak.seen_rows = [], 0
        steps = max(40, int(rate * a.minutes * a.job_factor) // 20 * 20)
        print("soak: seed %d, %d workers, %d etcd members, %d steps (%d steps/min fault-free), "
              "op timeout %g s, faults for %.1f min" % (a.seed, a.workers, a.etcd_members, steps, rate,
                                                       a.op_timeout, a.minutes), flush=True)
        soak.chaos_until = time.time() + a.minutes * 60
        rc, s = soak.run_job(os.path.join(root, "soak"), "soak", steps, True)
        job_end = soak.job_end
        op_timeout = op_timeout_of(os.path.join(root, "soak"))
        deaths = soak.deaths(os.path.join(root, "soak"))
        chaos = soak.progress
        soak.progress, soak.seen_rows, soak.chaos_until = [], 0, 0
        ref_rc, ref = soak.run_job(os.path.join(root, "reference"), "soak-ref", steps, False)
        soak.progress = chaos
        soak.netcut.undo_all()
        ok = report(soak, rc, s, ref_rc, ref, steps, deaths, job_end, op_timeout, soak.netcut.leftovers())
    finally:
        soak.netcut.undo_all()
        soak.etcd.close()
        if not a.out:
            shutil.rmtree(root, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
