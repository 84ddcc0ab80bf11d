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

--mode goodput (issue 26: the in-memory copies) draws, as a seeded cycle, one fault every
25-35 s from

  kill_worker    SIGKILL one worker             kill_two     SIGKILL two workers at once
  term_worker    SIGTERM one worker             kill_leader  SIGKILL the leading coordinator

plus the restarts `tagctl run` makes, with two in-memory copies of every state (--mirror-copies
2: a kill_two leaves one). A SIGTERMed worker leaves at a step boundary and exits 0,
which `tagctl run` does not restart (a finished worker): the driver then starts a replacement
with the same arguments and a worker id of its own (Replacement), as an orchestrator replaces a
drained node, and restarts it like `tagctl run` would when it dies; it never SIGTERMs the last
live worker of `tagctl run` (with all of its own workers finished, `tagctl run` ends the job).
Disk checkpoints come every 10 minutes of fault-free steps (--ckpt-every from the calibrated
rate). The workers log at warn,train=info, so that rank 0's "rebuilt step", "no in-memory copy"
and "recovered ..., N steps recomputed" lines are in the logs. Per failure it prints the steps
lost (the "steps recomputed" of the recoveries before the next fault), the time to the first
step after it and the time until the last step before it is passed again; then goodput = steps
committed in the fault window x the fault-free run's median step time / the window's length
(first row to the end of the faults or of the job), and verdict lines: job complete, faults
(>= 80 % of one per 30 s, every kind), survivors, steps lost <= 1 per failure on average (the
larger of summary.json's steps_lost and the lines' sum), goodput >= 90 %, val loss within 1 %.
Hangs and partitions are not in this mix: the default mode bounds their pauses.

  bench/chaos_soak.py --mode goodput --minutes 20 --seed 1 --workers 3 --out /tmp/gp
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
# --mode goodput (issue 26): the failures the in-memory copies are for, one about every 30 s
GOODPUT_KINDS = ["kill_worker", "kill_two", "term_worker", "kill_leader"]
GOODPUT_GAP_S = (25, 35)
MIX_GAP_S = (15, 28)
GOODPUT_CKPT_MIN = 10  # disk checkpoints every 10 minutes of fault-free training
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


def proc_alive(pid):
    """True while pid exists and is not a zombie (a worker of tagctl run is reaped by it)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def borrow_out_lock(tagctl_pid, out):
    """A duplicate (pidfd_getfd, Linux >= 5.6) of the descriptor by which `tagctl run` holds
    OUT/.lock: its workers inherit it (TAGC_OUT_LOCK_FD), and a worker without it is refused
    the folder. The same open file, so the same flock. A descriptor, or OSError."""
    import ctypes
    lock = os.path.realpath(os.path.join(out, ".lock"))
    fd_dir = "/proc/%d/fd" % tagctl_pid
    target = next((int(n) for n in os.listdir(fd_dir)
                   if os.path.realpath(os.path.join(fd_dir, n)) == lock), None)
    if target is None:
        raise OSError(errno.ENOENT, "tagctl run (pid %d) holds no descriptor of %s" % (tagctl_pid, lock))
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(tagctl_pid)
    try:
        fd = libc.syscall(438, pidfd, target, 0)  # SYS_pidfd_getfd
        if fd < 0:
            e = ctypes.get_errno()
            raise OSError(e, "pidfd_getfd: %s" % os.strerror(e))
        return fd
    finally:
        os.close(pidfd)


class Replacement:
    """A worker the driver starts in place of one that left on SIGTERM: `tagctl run` does not
    restart a worker that exited 0 (supervise.c: finished), as an orchestrator replaces a
    drained node. Same program, arguments, folder and environment as the one it replaces
    (with tagctl's lock of OUT, lock_fd), a worker id of its own; restarted after 0.5 s when it
    dies with a status `tagctl run` restarts (common/exit_codes.c), so that the faults treat
    every worker alike."""

    def __init__(self, name, argv, cwd, env, log, lock_fd):
        self.name, self.argv, self.cwd, self.log, self.lock_fd = name, argv, cwd, log, lock_fd
        self.env = dict(env, TAGC_OUT_LOCK_FD=str(lock_fd))
        self.proc, self.restart_at, self.finished = None, None, False
        self.start()

    def start(self):
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(self.argv, cwd=self.cwd, env=self.env, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True,
                                         pass_fds=(self.lock_fd,))

    def pid(self):
        return self.proc.pid if self.proc and self.proc.poll() is None else None

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Soak:
    def __init__(self, a):
        self.a = a
        self.kinds = GOODPUT_KINDS if a.mode == "goodput" else KINDS
        self.gap = GOODPUT_GAP_S if a.mode == "goodput" else MIX_GAP_S
        self.ckpt_every = 20
        self.replaced = {}      # name -> Replacement (term_worker)
        self.lock_fd = None     # tagctl run's lock of the job's OUT, shared with the replacements
        self.own_deaths = []    # (pid, what) of replacements that died non-zero
        self.loads = []         # 1-minute load average, sampled once per fault
        self.rng = random.Random(a.seed)
        self.faults = []        # (time, kind, detail)
        self.expected = set()   # PIDs the driver faulted (their deaths are expected)
        self.unsupported = {}
        self.progress = []      # (time, step, world) per metrics row (the row's own time)
        self.seen_rows = 0
        self.cycle = []
        self.pending_clear = []  # (worker, spec, count of "chaos armed: spec" before)
        self.netcut = NetCut()
        if self.netcut.reason and "cut_worker" in self.kinds:
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
            if self.replaced:
                self.tend_replacements()
            time.sleep(0.2)

    def worker_pids(self):
        w = {k: v for k, v in read_pids(self.out).items() if re.fullmatch(r"w\d+", k)}
        w.update({n: r.pid() for n, r in self.replaced.items() if r.pid()})
        return w

    def stop_replacements(self):
        for r in self.replaced.values():
            r.stop()

    def tend_replacements(self):
        """Restarts a replacement that died non-zero while the job runs (0.5 s later)."""
        for r in self.replaced.values():
            if r.finished or r.proc.poll() is None:
                continue
            if r.restart_at is None:
                if r.proc.returncode in (0, 2, 3, 4) or self.job.poll() is not None:
                    r.finished = True  # done, or a status tagctl run does not restart
                    if r.proc.returncode:
                        self.own_deaths.append((r.proc.pid, "worker " + r.name))
                        print("soak: replacement %s (pid %d) exited with status %d: not restarted"
                              % (r.name, r.proc.pid, r.proc.returncode), flush=True)
                    continue
                self.own_deaths.append((r.proc.pid, "worker " + r.name))
                print("soak: +%.0f s replacement %s (pid %d) died (status %d); restarting in 0.5 s"
                      % (time.time() - self.t0, r.name, r.proc.pid, r.proc.returncode), flush=True)
                r.restart_at = time.time() + 0.5
            elif time.time() >= r.restart_at:
                r.restart_at = None
                r.start()
                print("soak: restarted replacement %s (pid %d)" % (r.name, r.proc.pid), flush=True)

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
            self.cycle = list(self.kinds)
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
            if len(names) < 2:
                self.skipped(kind, "one worker runs now")
                return
            ws = self.rng.sample(names, 2)
            for w in ws:
                self.kill(workers[w])
            detail = "+".join(ws)
        elif kind == "term_worker":
            self.term_worker(t, workers)
            return
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

    def term_worker(self, t, workers):
        """SIGTERMs one worker (it leaves at a step boundary once its copy is with its buddy and
        exits 0) and starts a Replacement once it is gone. Never the last live worker of `tagctl
        run`: when all of its own workers have finished, `tagctl run` ends the job (not done:
        status 1) and stops the coordinators, whoever else still trains."""
        own = [n for n in sorted(workers) if n in self.replaced]
        theirs = [n for n in sorted(workers) if n not in self.replaced]
        names = own + (theirs if len(theirs) > 1 else [])
        if not names:
            self.skipped("term_worker", "only one worker of tagctl run is left")
            return
        w = self.rng.choice(names)
        pid = workers[w]
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                argv = [x.decode() for x in f.read().split(b"\0") if x]
            with open("/proc/%d/environ" % pid, "rb") as f:
                env = dict(x.decode(errors="replace").split("=", 1) for x in f.read().split(b"\0") if b"=" in x)
            cwd = os.readlink("/proc/%d/cwd" % pid)
        except OSError:
            self.skipped("term_worker", "%s exited" % w)
            return
        if not self.kill(pid, signal.SIGTERM):
            self.skipped("term_worker", "%s exited" % w)
            return
        self.record(t, "term_worker", w)
        own = self.replaced.get(w)

        def alive():  # the driver's own child stays a zombie until polled
            return own.proc.poll() is None if own else proc_alive(pid)
        end = time.time() + 60
        while alive() and time.time() < end and self.job.poll() is None:
            self.sleep(0.2)
        if alive():
            print("soak: %s (pid %d) still runs 60 s after SIGTERM; no replacement" % (w, pid), flush=True)
            return
        if self.job.poll() is not None:
            return
        base = w.split(".r")[0]
        n = 1 + sum(1 for k in self.replaced if k.split(".r")[0] == base)
        name = "%s.r%d" % (base, n)
        argv[0] = os.path.join(self.a.bindir, "tagc-worker")
        if "--worker-id" in argv:
            argv[argv.index("--worker-id") + 1] = name
        else:
            argv += ["--worker-id", name]
        left = ("exited with status %d" % own.proc.returncode if own
                else "exited (tagctl run reports nothing for status 0, and does not restart it)")
        try:
            if self.lock_fd is None:
                self.lock_fd = borrow_out_lock(read_pids(self.out)["tagctl"], self.out)
        except (OSError, KeyError) as e:
            print("soak: no replacement for %s: cannot share tagctl run's lock of %s: %s" % (w, self.out, e),
                  flush=True)
            return
        self.replaced[name] = Replacement(name, argv, cwd, env, os.path.join(self.out, name + ".log"),
                                          self.lock_fd)
        print("soak: +%.0f s %s (pid %d) %s after %.1f s; replacement %s started (pid %d)"
              % (time.time() - self.t0, w, pid, left, time.time() - t, name, self.replaced[name].proc.pid),
              flush=True)

    def record(self, t, kind, detail):
        self.faults.append((t, kind, detail))
        self.loads.append(os.getloadavg()[0])
        print("soak: +%.0f s step %d: %s %s" % (time.time() - self.t0, self.step_now(), kind, detail), flush=True)

    def run_job(self, out, job, steps, chaos):
        self.out = out
        self.job_name = job
        args = [os.path.join(self.a.bindir, "tagctl"), "run", "--etcd", ",".join(self.etcd.urls),
                "--job", job, "--out", out, "--workers", str(self.a.workers), "--coordinators", "2",
                "--min-workers", str(self.a.min_workers), "--max-restarts", "1000", "--log", self.log_spec(), "--steps", str(steps),
                "--ckpt-every", str(self.ckpt_every), "--threads", "1", "--batch", "12", "--eval-every", "0",
                "--eval-windows", str(EVAL_WINDOWS), "--compress", "tagc", "--op-timeout", str(self.a.op_timeout),
                "--mirror-copies", str(self.a.mirror_copies)]
        log = open(out + ".log", "w")
        self.t0 = self.job_t0 = time.time()
        self.job = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        end = time.time() + self.a.minutes * 60 * 3 + 300
        next_at = None
        atexit.register(self.stop_replacements)
        try:
            while self.job.poll() is None and time.time() < end:
                self.poll_progress()
                if chaos and time.time() < self.chaos_until and self.progress:
                    if next_at is None:  # the first fault once training runs
                        next_at = time.time() + self.rng.uniform(*self.gap)
                    self.sleep(next_at - time.time())
                    next_at += self.rng.uniform(*self.gap)  # start to start
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
        for r in self.replaced.values():  # done with the job by now, or ended with it
            if r.proc.poll() is None:
                try:
                    r.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    r.stop()
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None
        self.job_end = time.time()
        self.clear_armed(final=True)
        self.poll_progress()
        s = json.load(open(out + "/summary.json")) if os.path.exists(out + "/summary.json") else {}
        return rc, s

    def log_spec(self):
        # goodput: the rank-0 "rebuilt step" lines (info) as well as "recovered ... recomputed" (warn)
        return "warn,train=info" if self.a.mode == "goodput" else "warn"

    def deaths(self, out):
        """(pid, what) of every child death tagctl reported."""
        with open(out + ".log") as f:
            return [(int(m.group(2)), m.group(1)) for m in
                    re.finditer(r"tagctl run: (\S+ \S+) \(pid (\d+)\) (?:was killed|exited)", f.read())] + \
                self.own_deaths


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


RECOVERED_RE = re.compile(r'"ts":"([^"]+)".*"msg":"recovered from (\S+) at step (\d+) in ([\d.]+) s with '
                          r'(\d+) workers, (\d+) steps recomputed"')
REBUILT_RE = re.compile(r'"ts":"([^"]+)".*"msg":"rebuilt step (\d+) from the in-memory copies')
FALLBACK_RE = re.compile(r'"ts":"([^"]+)".*"msg":"(no in-memory copy of the shards[^"]*|the in-memory copies hold[^"]*)"')


def log_time(ts):
    """Seconds since the epoch of a log line's ts (UTC, 2026-12-04T01:34:04.709Z)."""
    import calendar
    day, frac = ts.rstrip("Z").split(".")
    return calendar.timegm(time.strptime(day, "%Y-%m-%dT%H:%M:%S")) + float("0." + frac)


def recovery_lines(soak, out):
    """(time, what, detail) of the rank-0 lines of every recovery: 'recovered' with its steps
    recomputed, 'rebuilt' (from memory), 'disk' (a fallback to the disk checkpoint); from the
    job's log and the replacements' logs."""
    got = []
    for path in [out + ".log"] + [r.log for r in soak.replaced.values()]:
        try:
            text = open(path, errors="replace").read()
        except OSError:
            continue
        for m in RECOVERED_RE.finditer(text):
            got.append((log_time(m.group(1)), "recovered", int(m.group(6))))
        for m in REBUILT_RE.finditer(text):
            got.append((log_time(m.group(1)), "rebuilt", int(m.group(2))))
        for m in FALLBACK_RE.finditer(text):
            got.append((log_time(m.group(1)), "disk", m.group(2)))
    return sorted(got, key=lambda g: g[0])


def median_step_s(progress):
    """Median seconds between consecutive rows of a fault-free run (one row per step)."""
    t = sorted(tt for tt, _, _ in progress)
    d = [b - a for a, b in zip(t, t[1:])]
    return statistics.median(d) if d else None


def report_goodput(soak, rc, s, ref_rc, ref, steps, deaths, ref_progress, lines):
    """--mode goodput: per failure steps lost and times; goodput; one verdict line per goal of
    issue 26 (and whether the soak itself ran as meant). True when all pass."""
    by_kind = {}
    for _, k, _ in soak.faults:
        by_kind[k] = by_kind.get(k, 0) + 1
    on_job = sum(1 for t, _, _ in soak.faults if t < soak.job_end)
    prog = sorted(soak.progress)
    print("faults by kind: %s" % json.dumps(by_kind, sort_keys=True))
    print("faults: %d, %d of them while the job ran; replacements started (term_worker): %d"
          % (len(soak.faults), on_job, len(soak.replaced)))
    # per failure: the recovery lines between it and the next fault are its own
    bounds = [t for t, _, _ in soak.faults] + [float("inf")]
    lost_by_fault, rows_lost, firsts, regains = [], [], [], []
    print("per failure (steps lost = the 'steps recomputed' of the recoveries it caused):")
    for i, (t, kind, detail) in enumerate(soak.faults):
        mine = [g for g in lines if bounds[i] <= g[0] < bounds[i + 1]]
        lost = sum(g[2] for g in mine if g[1] == "recovered")
        lost_by_fault.append(lost)
        before = ([st for (tt, st, _) in prog if tt <= t] or [0])[-1]  # where it stood (after any rollback)
        first = next((tt - t for (tt, st, _) in prog if tt > t), None)
        regain = next((tt - t for (tt, st, _) in prog if tt > t and st > before), None)
        firsts.append(first)
        regains.append(regain)
        # by the rows: how far back the job went before the next fault (a restarted process
        # that is rank 0 of the next generation logs no "recovered" line: it saw no failure)
        low = min([st for (tt, st, _) in prog if t < tt < bounds[i + 1]] or [before + 1])
        rows_lost.append(max(0, before + 1 - low))
        how = ", ".join("%d %s" % (sum(1 for g in mine if g[1] == w), w) for w in ("recovered", "rebuilt", "disk")
                        if any(g[1] == w for g in mine))
        print("  %3d +%5.0f s %-11s %-10s step %6d: %d steps lost (rows: %d; %s); first step after %s, "
              "step %d regained after %s"
              % (i + 1, t - soak.t0, kind, detail, before, lost, rows_lost[-1], how or "no recovery",
                 "%.1f s" % first if first is not None else "never",
                 before + 1, "%.1f s" % regain if regain is not None else "never"))
    for g in lines:
        if g[1] == "disk":
            print("  disk fallback at +%.0f s: %s" % (g[0] - soak.t0, g[2]))
    n_fail = max(on_job, 1)
    s_lost = s.get("steps_lost")
    n_disk = sum(1 for g in lines if g[1] == "disk")
    print("steps lost: %d by the recovery lines, %d by the rows, %s by summary.json (%s memory rebuilds, %s disk "
          "fallbacks: the final rank-0 process's own counts); %d disk fallbacks logged over %d failures"
          % (sum(lost_by_fault), sum(rows_lost), s_lost, s.get("memory_rebuilds"), s.get("disk_fallbacks"),
             n_disk, on_job))
    for kind in soak.kinds:
        idx = [i for i, (_, k, _) in enumerate(soak.faults) if k == kind]
        f = [firsts[i] for i in idx if firsts[i] is not None]
        r = [regains[i] for i in idx if regains[i] is not None]
        if idx:
            print("  %-11s %2d: steps lost %d (max %d); first step after: median %.1f, max %.1f s; "
                  "regained: median %.1f, max %.1f s" % (kind, len(idx), sum(rows_lost[i] for i in idx),
                                                         max(rows_lost[i] for i in idx),
                                                         statistics.median(f or [0]), max(f or [0]),
                                                         statistics.median(r or [0]), max(r or [0])))
    row_t = [tt for (tt, _, _) in prog]
    gaps = sorted(((b - a, a) for a, b in zip(row_t, row_t[1:])), reverse=True)
    print("longest pauses without progress (s): %s" % ", ".join("%.1f at +%.0f" % (d, a - soak.t0) for d, a in gaps[:5]))
    # goodput over the fault window: from the first row to the end of the faults (or of the job)
    med = median_step_s(ref_progress)
    goodput = None
    if prog and med:
        t0, s0 = prog[0][0], prog[0][1]
        t1 = min(soak.chaos_end, prog[-1][0])
        s1 = [st for (tt, st, _) in prog if tt <= t1][-1]
        goodput = (s1 - s0) * med / max(t1 - t0, 1e-9)
        rt = sorted(ref_progress)
        ref_own = (rt[-1][1] - rt[0][1]) * med / max(rt[-1][0] - rt[0][0], 1e-9)
        print("goodput: %d steps committed in the fault window of %.0f s x fault-free median step %.4f s "
              "= %.1f %% (the fault-free run by the same formula: %.1f %%; whole jobs: %.0f s faulted, "
              "%.0f s fault-free for %d steps)" % (s1 - s0, t1 - t0, med, 100 * goodput, 100 * ref_own,
                                                    soak.job_end - soak.job_t0, soak.ref_wall, steps))
    if soak.loads:
        print("load average (1 min) at the faults: median %.2f, max %.2f; after the fault-free run %.2f"
              % (statistics.median(soak.loads), max(soak.loads), os.getloadavg()[0]))
    print("final val loss: soak %s, fault-free %s" % (s.get("final_val_loss"), ref.get("final_val_loss")))
    crashed = [(pid, what) for pid, what in deaths if pid not in soak.expected]
    if crashed:
        print("survivors that died: %s" % crashed)

    verdicts = []

    def verdict(name, ok, detail):
        verdicts.append(ok)
        print("verdict %-10s %s: %s" % (name, "PASS" if ok else "FAIL", detail))

    verdict("job", rc == 0 and s.get("steps") == steps and ref_rc == 0,
            "tagctl run status %d, %s of %d steps; fault-free run status %d" % (rc, s.get("steps"), steps, ref_rc))
    need = max(1, int(0.8 * soak.a.minutes * 60 / statistics.mean(GOODPUT_GAP_S)))
    missing = [k for k in soak.kinds if k not in by_kind]
    verdict("faults", on_job >= need and on_job == len(soak.faults) and not missing,
            "%d faults, %d on the running job (need >= %d), %s" % (
                len(soak.faults), on_job, need, "every kind present" if not missing else "missing %s" % missing))
    verdict("survivors", not crashed, "%d deaths, all of processes the driver faulted%s"
            % (len(deaths), "" if not crashed else " except %d" % len(crashed)))
    # summary.json counts what its rank-0 process saw (a restarted rank 0 starts again from 0):
    # the largest of it, the recovery lines' sum and the rows' is charged
    lost = max(sum(lost_by_fault), sum(rows_lost), s_lost if isinstance(s_lost, int) else 0)
    verdict("steps_lost", lost / n_fail <= 1.0,
            "%d steps lost over %d failures: %.2f per failure (goal <= 1)" % (lost, on_job, lost / n_fail))
    verdict("goodput", goodput is not None and goodput >= 0.90,
            "%s (goal >= 90 %%)" % ("%.1f %%" % (100 * goodput) if goodput is not None else "n/a"))
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
    ap.add_argument("--mode", choices=("mix", "goodput"), default="mix",
                    help="mix (default): the 11 kinds of issue 15, one every 15-28 s; goodput (issue 26): "
                         "kill_worker, kill_two, term_worker, kill_leader one every 25-35 s, disk "
                         "checkpoints every 10 minutes of fault-free steps, goodput and steps lost per failure")
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
    ap.add_argument("--job-factor", type=float, default=None,
                    help="job steps = fault-free steps per minute x minutes x this (default 1.25: faults "
                         "only slow the job, and the margin covers a machine less busy than in calibration; "
                         "goodput: 1.05, so that the faults last about as long as the job)")
    ap.add_argument("--op-timeout", type=float, default=20,
                    help="the workers' --op-timeout in seconds (default 20)")
    ap.add_argument("--mirror-copies", type=int, default=None, choices=(1, 2),
                    help="the workers' --mirror-copies (default: 2 in goodput mode, where two "
                         "workers are killed at once; 1 otherwise)")
    ap.add_argument("--bindir", default=os.path.join(HERE, "..", "build", "dev", "bin"))
    a = ap.parse_args()
    if a.job_factor is None:
        a.job_factor = 1.05 if a.mode == "goodput" else 1.25
    if a.mirror_copies is None:
        a.mirror_copies = 2 if a.mode == "goodput" else 1
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
        if a.mode == "goodput":  # no wall-clock option: 10 minutes in steps at the fault-free rate
            soak.ckpt_every = max(20, rate * GOODPUT_CKPT_MIN)
        print("soak: mode %s, seed %d, %d workers, %d etcd members, %d steps (%d steps/min fault-free), "
              "checkpoint every %d steps, op timeout %g s, faults for %.1f min; load average %s"
              % (a.mode, a.seed, a.workers, a.etcd_members, steps, rate, soak.ckpt_every, a.op_timeout,
                 a.minutes, " ".join("%.2f" % x for x in os.getloadavg())), flush=True)
        soak.chaos_until = time.time() + a.minutes * 60
        soak.chaos_end = soak.chaos_until
        rc, s = soak.run_job(os.path.join(root, "soak"), "soak", steps, True)
        job_end, t0, job_t0 = soak.job_end, soak.t0, soak.job_t0
        op_timeout = op_timeout_of(os.path.join(root, "soak"))
        deaths = soak.deaths(os.path.join(root, "soak"))
        lines = recovery_lines(soak, os.path.join(root, "soak"))
        chaos = soak.progress
        soak.progress, soak.seen_rows, soak.chaos_until = [], 0, 0
        ref_rc, ref = soak.run_job(os.path.join(root, "reference"), "soak-ref", steps, False)
        soak.ref_wall = soak.job_end - soak.job_t0
        ref_progress = soak.progress
        soak.progress, soak.job_end, soak.t0, soak.job_t0 = chaos, job_end, t0, job_t0
        soak.netcut.undo_all()
        if a.mode == "goodput":  # the raw figures too, to be read again without a rerun
            with open(os.path.join(root, "goodput.json"), "w") as f:
                json.dump({"faults": soak.faults, "progress": soak.progress, "ref_progress": ref_progress,
                           "lines": lines, "summary": s, "ref_summary": ref, "rc": rc, "ref_rc": ref_rc,
                           "steps": steps, "t0": soak.t0, "job_t0": soak.job_t0, "job_end": soak.job_end,
                           "chaos_end": soak.chaos_end, "ref_wall": soak.ref_wall, "loads": soak.loads,
                           "deaths": deaths, "expected": sorted(soak.expected)}, f)
            ok = report_goodput(soak, rc, s, ref_rc, ref, steps, deaths, ref_progress, lines)
        else:
            ok = report(soak, rc, s, ref_rc, ref, steps, deaths, job_end, op_timeout, soak.netcut.leftovers())
    finally:
        soak.netcut.undo_all()
        soak.etcd.close()
        if not a.out:
            shutil.rmtree(root, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
