#!/usr/bin/env python3
"""A straggler: `tagctl run` with 3 workers, w1 (rank 1) held to a fifth of the time by a
SIGSTOP/SIGCONT duty cycle from this process (20 ms running, 80 ms stopped).
1. report: within 30 s of the slow-down the run's log warns "straggler at step N: rank 1
   (worker w1) ..."; metrics.jsonl rows carry every rank's compute seconds (rank 1's above
   --straggler-ratio x the median while slowed) and a worker's /metrics a gauge per rank and the
   straggler's rank; once the duty cycle ends a line says it recovered, and the job finishes
   (exit 0) with all three workers.
2. exclude (--exclude-straggler): the same warning says it is reported, the coordinator plans a
   generation without w1 ("excluded w1: a straggler"), metrics.jsonl goes on with 2 workers, and
   the job finishes while w1 is still held (the job does not wait for it).
Waits derive from the detection window (--straggler-window) and the measured step rate.
Skipped (77) without etcd."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import START_WAIT_S, Checks, job_args, metrics, read_pids, wait_for  # noqa: E402

if not shutil.which("etcd"):
    print("needs etcd: skipped")
    sys.exit(77)

bindir = sys.argv[1]
STEPS, CKPT = 1500, 100
WINDOW_S, RATIO = 10.0, 1.5  # --straggler-window, --straggler-ratio (the defaults)
NAMED_WITHIN_S = 30.0        # what a user is promised at 20 % of a core
RUN_S, STOPPED_S = 0.020, 0.080
PROGRESS_EVERY_S = 1.0       # rank 0's progress record in etcd, at most this often
SLOW_ID, SLOW_RANK = "w1", 1  # the first generation ranks the workers in id order
check = Checks()


class DutyCycle(threading.Thread):
    """Stops and continues one process: RUN_S running, STOPPED_S stopped, until end()."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.done, self.started_at, self.gone_at = pid, threading.Event(), None, None

    def run(self):
        self.started_at = time.time()
        try:
            while not self.done.is_set():
                os.kill(self.pid, signal.SIGSTOP)
                time.sleep(STOPPED_S)
                os.kill(self.pid, signal.SIGCONT)
                time.sleep(RUN_S)
        except ProcessLookupError:
            self.gone_at = time.time()  # the process exited while held

    def end(self):
        self.done.set()
        self.join()
        try:
            os.kill(self.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def log_lines(path, tag=None):
    """The JSON records of the run's log (of one worker's tag when given)."""
    out = []
    with open(path) as f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and (tag is None or rec.get("tag") == tag):
                out.append(rec)
    return out


def find(path, pattern):
    """The first log record whose msg matches pattern, or None."""
    for rec in log_lines(path):
        if re.search(pattern, rec.get("msg", "")):
            return rec
    return None


def rows(out):
    try:
        return metrics(out)
    except (OSError, ValueError):
        return []


def last_step(out):
    r = rows(out)
    return r[-1]["step"] if r else -1


def scrape(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as r:
        return r.read().decode()


def status(*args):
    """tagctl status ARGS --json as an object (None when it fails)."""
    p = subprocess.run([os.path.join(bindir, "tagctl"), "status"] + list(args) + ["--json"],
                       capture_output=True, text=True, timeout=60)
    try:
        return json.loads(p.stdout) if p.returncode in (0, 1) else None
    except ValueError:
        return None


def live_status(out):
    """tagctl status of the running job, through the local etcd tagctl run started."""
    with open(os.path.join(out, "worker.json")) as f:
        etcd = json.load(f)["etcd"]
    return status("--etcd", etcd, "--job", "default")


def named_in_status(out):
    """tagctl status's "stragglers" object once it names a straggler, else None."""
    st = (live_status(out) or {}).get("stragglers") or {}
    return st if st.get("straggler") is not None else None


def start(tmp, name, *extra):
    out = os.path.join(tmp, name)
    log = open(os.path.join(tmp, name + ".log"), "w")
    p = subprocess.Popen([os.path.join(bindir, "tagctl"), "run", "--workers", "3", "--out", out,
                          "--straggler-window", str(WINDOW_S), "--straggler-ratio", str(RATIO)] +
                         job_args(STEPS, CKPT, 12) + list(extra),
                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return p, out, log.name


def slow_down(out, logpath):
    """Waits for 20 training steps, measures the step rate, then starts the duty cycle on w1.
    Returns (duty cycle, steps per second before it)."""
    wait_for(lambda: last_step(out) >= 5, START_WAIT_S, "step 5")
    t0, s0 = time.time(), last_step(out)
    wait_for(lambda: last_step(out) >= s0 + 15, START_WAIT_S, "15 more steps")
    rate = (last_step(out) - s0) / (time.time() - t0)
    pid = read_pids(out)[SLOW_ID]
    duty = DutyCycle(pid)
    duty.start()
    wait_for(lambda: duty.started_at, 5, "the duty cycle")
    print("step rate %.1f/s; %s (pid %d) held to %.0f %% from step %d" %
          (rate, SLOW_ID, pid, 100 * RUN_S / (RUN_S + STOPPED_S), last_step(out)))
    return duty, rate


def wait_warning(logpath, duty, pattern):
    """Seconds from the slow-down to the first record matching pattern (None past 2x the
    promise: then the check fails with the figure missing)."""
    try:
        rec = wait_for(lambda: find(logpath, pattern), 2 * NAMED_WITHIN_S, "the straggler warning")
    except RuntimeError:
        return None, None
    return time.time() - duty.started_at, rec


def finish_wait(out, rate):
    """Seconds to allow the rest of the job at a quarter of the measured rate."""
    return START_WAIT_S + 4 * (STEPS - max(last_step(out), 0)) / max(rate, 0.5)


def report_part(tmp):
    p, out, logpath = start(tmp, "report", "--metrics-addr", "127.0.0.1:0")
    duty = None
    try:
        duty, rate = slow_down(out, logpath)
        named_s, rec = wait_warning(logpath, duty, r"^straggler at step \d+: rank \d+ \(worker ")
        msg = rec["msg"] if rec else ""
        check(named_s is not None and named_s <= NAMED_WITHIN_S and rec["level"] == "warn" and
              ("rank %d (worker %s)" % (SLOW_RANK, SLOW_ID)) in msg,
              "warning naming rank %d (worker %s) %s s after the slow-down (<= %.0f): %r" %
              (SLOW_RANK, SLOW_ID, "%.1f" % named_s if named_s else "never", NAMED_WITHIN_S, msg))
        port = None
        for r in log_lines(logpath, "w0"):
            m = re.search(r"serving /metrics and /healthz on port (\d+)", r.get("msg", ""))
            port = int(m.group(1)) if m else port
        text = scrape(port) if port else ""
        per_rank = dict((int(m.group(1)), float(m.group(2))) for m in re.finditer(
            r'^tagc_worker_compute_seconds\{tagc_job="[^"]*",rank="(\d+)"\} (\S+)$', text, re.M))
        strag = re.search(r'^tagc_worker_straggler_rank\{[^}]*\} (\S+)$', text, re.M)
        check(sorted(per_rank) == [0, 1, 2] and all(v > 0 for v in per_rank.values()),
              "w0's /metrics: a compute_seconds gauge per rank %s" % per_rank)
        check(strag and float(strag.group(1)) == SLOW_RANK,
              "w0's /metrics: straggler_rank %s" % (strag.group(1) if strag else None))
        # rank 0 writes etcd's progress record at most once a second: a few records' time
        try:
            live = wait_for(lambda: named_in_status(out), PROGRESS_EVERY_S * 5,
                            "the straggler in tagctl status")
        except RuntimeError:
            live = (live_status(out) or {}).get("stragglers") or {}
        check(len(live.get("compute_s", [])) == 3 and live.get("straggler") == SLOW_RANK and
              live.get("straggler_worker") == SLOW_ID,
              "tagctl status (etcd): compute_s %s, straggler %s (%s)" %
              (live.get("compute_s"), live.get("straggler"), live.get("straggler_worker")))
        released = time.time()
        duty.end()
        back = wait_for(lambda: find(logpath, r"rank %d \(worker %s\) is no longer a straggler" %
                                     (SLOW_RANK, SLOW_ID)), 3 * WINDOW_S + 30, "the recovery line")
        check(back, "recovery line %.1f s after the release: %r" % (time.time() - released,
                                                                     back["msg"]))
        rc = p.wait(timeout=finish_wait(out, rate))
        check(rc == 0, "the job finished (exit %s)" % rc)
        done = status(out) or {}
        check(len(done.get("compute_s", [])) == 3 and done.get("straggler") is None,
              "tagctl status OUT: compute_s %s, no straggler at the end" % done.get("compute_s"))
        all_rows = rows(out)
        with_ranks = [r for r in all_rows if len(r.get("compute_s", [])) == 3]
        slow_rows = [r for r in with_ranks
                     if r["compute_s"][SLOW_RANK] > RATIO * r["compute_s_median"]]
        check(all_rows and len(with_ranks) == len(all_rows),
              "every metrics.jsonl row has 3 ranks' compute_s (%d of %d)" %
              (len(with_ranks), len(all_rows)))
        check(len(slow_rows) >= 10 and all_rows[-1]["step"] == STEPS and
              all_rows[-1]["world_size"] == 3,
              "%d rows show rank %d above %.1fx the median; the last row is step %d, W=%d" %
              (len(slow_rows), SLOW_RANK, RATIO, all_rows[-1]["step"], all_rows[-1]["world_size"]))
    finally:
        if duty:
            duty.end()
        stop(p)


def exclude_part(tmp):
    p, out, logpath = start(tmp, "exclude", "--exclude-straggler", "--straggler-rejoin", "3600")
    duty = None
    try:
        duty, rate = slow_down(out, logpath)
        named_s, rec = wait_warning(logpath, duty, r"^straggler at step \d+: rank \d+ \(worker ")
        msg = rec["msg"] if rec else ""
        check(named_s is not None and named_s <= NAMED_WITHIN_S and
              ("rank %d (worker %s)" % (SLOW_RANK, SLOW_ID)) in msg and "reporting it" in msg,
              "warning and report %s s after the slow-down: %r" %
              ("%.1f" % named_s if named_s else "never", msg))
        coord = os.path.join(out, "coordinator-0.log")
        gen = wait_for(lambda: find(coord, r"^generation \d+: .*excluded %s: a straggler" % SLOW_ID),
                       2 * WINDOW_S + 30, "a generation without " + SLOW_ID)
        check(gen, "coordinator: %r" % gen["msg"])
        wait_for(lambda: last_step(out) >= STEPS or p.poll() is not None,
                 finish_wait(out, rate), "the final step")
        rc = p.wait(timeout=START_WAIT_S)
        duty.end()
        after = [r for r in rows(out) if r["generation"] > 1]
        final_at = after[-1]["time"] if after else 0
        held = duty.gone_at is None or duty.gone_at >= final_at
        check(rc == 0 and held, "the job finished (exit %s) while %s was still held (it exited "
              "%s s after the final step)" % (rc, SLOW_ID, "%.1f" % (duty.gone_at - final_at)
                                               if duty.gone_at else "no"))
        check(after and all(r["world_size"] == 2 for r in after) and after[-1]["step"] == STEPS,
              "%d rows after the exclusion, all W=2, the last step %d" %
              (len(after), after[-1]["step"] if after else -1))
    finally:
        if duty:
            duty.end()
        stop(p)


def stop(p):
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


tmp = tempfile.mkdtemp(prefix="tagc-chaos-straggler-")
try:
    for name, part in (("report", report_part), ("exclude", exclude_part)):
        n = len(check.results)
        print("-- " + name)
        try:
            part(tmp)
        except (RuntimeError, subprocess.TimeoutExpired, OSError) as e:
            check(False, "%s: %s" % (name, e))
        if not all(check.results[n:]):
            with open(os.path.join(tmp, name + ".log")) as f:
                print("\n".join(l[:400] for l in f.read().splitlines()[-40:]))
finally:
    if not os.environ.get("TAGC_KEEP_TMP"):
        shutil.rmtree(tmp, ignore_errors=True)
check.exit()
