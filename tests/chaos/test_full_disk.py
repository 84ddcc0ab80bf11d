#!/usr/bin/env python3
"""A full checkpoint disk: OUT on a small tmpfs of its own, filled by this test at step ~60
with a file that takes the free space (3 workers on a real etcd).
  1. --on-ckpt-failure warn (every 20 steps, all kept), the disk freed again after 3 failed saves: the progress line
     says CHECKPOINTS FAILING with the last good step, rank 0's /metrics shows the failed
     saves in a row and the checkpoint's age, each failed save is one error line (rank 0's,
     not one per rank), no step-N.tmp is left, every metrics.jsonl line is whole, and once
     there is room again the next save commits and the job finishes (exit 0).
  2. The default policy (stop after --ckpt-failures-max 3), the disk kept full under
     `tagctl run --etcd`: every worker stops at one step with one line naming the cause and
     the newest valid checkpoint, `tagctl run` exits 4 (docs/operations.md: an I/O failure
     while running) without "refused the configuration", summary.json says
     "end": "stopped: checkpoints failing" (the disk filled to the last byte: rank 0 writes it
     into the room of OUT/.summary-reserve), and the checkpoint folder has no step-N.tmp.
Needs root (mount) and etcd: skipped (77) without."""
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, Cluster, job_args, wait_for  # noqa: E402

if not shutil.which("etcd") or os.geteuid() != 0:
    print("needs etcd and root (tmpfs mounts): skipped")
    sys.exit(77)

bindir = sys.argv[1]
tagctl = os.path.join(bindir, "tagctl")
FILL_AT = 60
check = Checks()


def mount_tmpfs(path, size):
    os.makedirs(path, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=" + size, "tmpfs", path],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print("cannot mount a tmpfs (%s): skipped" % r.stderr.strip())
        sys.exit(77)


def fill(path, reserve):
    """A file under path that leaves `reserve` bytes free."""
    st = os.statvfs(path)
    free = st.f_bavail * st.f_frsize
    print("filling %s: %d bytes free of %d" % (path, free, st.f_blocks * st.f_frsize))
    if free <= reserve:  # already full: show what took the space
        print(subprocess.run(["du", "-a", "-d", "3", path], capture_output=True, text=True).stdout)
        return
    try:
        f = open(os.path.join(path, "filler"), "wb", buffering=0)  # a full disk fails a write, not close
    except OSError as e:  # no room for the file itself: full already (say what took it)
        print("filler: %s; inodes free %d" % (e, st.f_favail))
        print(subprocess.run(["du", "-a", "-d", "3", path], capture_output=True, text=True).stdout)
        return
    with f:
        left = max(free - reserve, 0)
        while left > 0:
            n = min(left, 1 << 20)
            try:
                w = f.write(b"\0" * n)  # unbuffered: may write less than n when nearly full
            except OSError:
                break
            left -= w if w else n


def rows(out):
    """metrics.jsonl rows; raises ValueError on a line that is not whole JSON."""
    try:
        with open(os.path.join(out, "metrics.jsonl")) as f:
            return [json.loads(l) for l in f]
    except FileNotFoundError:
        return []


def last_step(out):
    try:
        r = rows(out)
        return r[-1]["step"] if r else -1
    except ValueError:
        return -1


def tmp_dirs(ckpt):
    return sorted(n for n in os.listdir(ckpt) if n.endswith(".tmp")) if os.path.isdir(ckpt) else []


def failed_lines(text):
    """{step: number of lines} of the "checkpoint of step N failed" error lines."""
    n = {}
    for s in re.findall(r"checkpoint of step (\d+) failed", text):
        n[int(s)] = n.get(int(s), 0) + 1
    return n


def scrape(port):
    """The tagc_worker_checkpoint_ samples of /metrics; {} when it does not answer (yet)."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as r:
            body = r.read().decode()
    except OSError as e:
        print("scrape: %s" % e)
        return {}
    vals = {}
    for line in body.splitlines():
        m = re.match(r"(tagc_worker_checkpoint_[a-z_]+)\{[^}]*\} (\S+)$", line)
        if m:
            vals[m.group(1)] = float(m.group(2))
    return vals


def unmount(path):
    subprocess.run(["umount", "-l", path], capture_output=True)


def case_warn():
    c = Cluster(bindir, job="full-warn")
    out = os.path.join(c.tmp, "out")
    mount_tmpfs(out, "64m")  # every checkpoint is kept: a freed disk stays free
    try:
        c.start_job(job_args(400, 20, 12, "none", "--on-ckpt-failure", "warn", "--ckpt-keep-last", "0",
                             "--metrics-addr", "127.0.0.1:0"))
        port = wait_for(lambda: (lambda m: int(m.group(1)) if m else None)(
            re.search(r"serving /metrics and /healthz on port (\d+)", c.log("w0"))), 60, "w0's port")
        wait_for(lambda: last_step(out) >= FILL_AT, 120, "step %d" % FILL_AT)
        fill(out, 0)
        filled_at = last_step(out)
        failing = wait_for(lambda: (lambda m: m if m.get("tagc_worker_checkpoint_failures_in_a_row",
                                                         0) >= 3 else None)(scrape(port)),
                           120, "3 failed saves in a row on /metrics")
        wait_for(lambda: "CHECKPOINTS FAILING" in c.log("w0"), 60, "the progress line")
        os.unlink(os.path.join(out, "filler"))
        freed = time.time()
        rc = c.wait("w0", 180)
        for n in ("w1", "w2"):
            c.wait(n, 60)
        log0 = c.log("w0")
        check(failing["tagc_worker_checkpoint_failures_total"] >= 3 and
              0 <= failing["tagc_worker_checkpoint_last_step"] <= filled_at + 20 and
              failing["tagc_worker_checkpoint_age_seconds"] > 0,
              "warn: /metrics while full: %d in a row, %d failed, last good step %d, %.1f s old" %
              (failing["tagc_worker_checkpoint_failures_in_a_row"],
               failing["tagc_worker_checkpoint_failures_total"],
               failing["tagc_worker_checkpoint_last_step"],
               failing["tagc_worker_checkpoint_age_seconds"]))
        prog = re.findall(r"CHECKPOINTS FAILING \((\d+) in a row; last good step (\d+)", log0)
        check(prog and int(prog[0][1]) >= FILL_AT - 20,
              "warn: the progress line says so: %s" % (prog[:2],))
        per_step = {}
        for n in ("w0", "w1", "w2"):
            for s, k in failed_lines(c.log(n)).items():
                per_step[s] = per_step.get(s, 0) + k
        check(len(per_step) >= 3 and all(k == 1 for k in per_step.values()),
              "warn: one error line per failed save (steps and lines: %s)" % per_step)
        try:
            r = rows(out)
            whole = True
        except ValueError as e:
            r, whole = [], False
            print("metrics.jsonl: %s" % e)
        check(whole and r and r[-1]["step"] == 400, "warn: every metrics.jsonl line whole (%d rows, "
              "last step %s)" % (len(r), r[-1]["step"] if r else None))
        ckpt = os.path.join(out, "ckpt")
        steps = sorted(int(n[5:]) for n in os.listdir(ckpt) if re.fullmatch(r"step-\d+", n))
        newer = [s for s in steps if s > max(per_step or [0])]
        check(rc == 0 and newer and steps[-1] == 400,
              "warn: room again %.1f s before the end: saves commit (%s), the job finished (exit %d)"
              % (time.time() - freed, steps, rc))
        check(tmp_dirs(ckpt) == [], "warn: no partial save left (%s)" % tmp_dirs(ckpt))
        if not check.ok():
            check.print_logs(c, ["w0", "w1"])
    finally:
        c.close(keep=True)
        unmount(out)
        shutil.rmtree(c.tmp, ignore_errors=True)


def case_stop():
    c = Cluster(bindir, job="full-stop")
    out = os.path.join(c.tmp, "out")
    mount_tmpfs(out, "24m")
    p = None
    try:
        c.start_etcd()
        log_path = os.path.join(c.tmp, "tagctl.log")
        with open(log_path, "w") as log:
            p = subprocess.Popen([tagctl, "run", "--etcd", c.etcd_url, "--job", c.job, "--workers",
                                  "3", "--out", out, "--log", "warn", "--max-restarts", "2"] +
                                 job_args(3000, 10, 12, "none", "--ckpt-keep-last", "0"), stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
            wait_for(lambda: last_step(out) >= FILL_AT, 120, "step %d" % FILL_AT)
            fill(out, 0)  # no room left: summary.json needs OUT/.summary-reserve
            filled_at = last_step(out)
            try:
                rc = p.wait(timeout=120)
            except subprocess.TimeoutExpired:
                rc = None
        with open(log_path) as f:
            text = f.read()
        stops = re.findall(r"(\d+) checkpoint saves in a row failed \(.*?\); the job stops at step "
                           r"(\d+) .*?the newest valid checkpoint: step (\d+)", text)
        check(rc == 4, "stop: tagctl run exits 4 (%s)" % rc)
        check(stops and all(s[0] == "3" for s in stops) and len(set(s[1] for s in stops)) == 1 and
              filled_at <= int(stops[0][1]) <= filled_at + 60 and
              FILL_AT - 10 <= int(stops[0][2]) <= filled_at,
              "stop: every worker at one step, naming the newest valid checkpoint "
              "(filled at step %d; %s)" % (filled_at, stops[:3]))
        check("refused the configuration" not in text.replace("0 refused the configuration", ""),
              "stop: tagctl does not call it a refused configuration")
        check(all(k == 1 for k in failed_lines(text).values()) and len(failed_lines(text)) == 3,
              "stop: one error line per failed save (%s)" % failed_lines(text))
        summ = {}
        try:
            with open(os.path.join(out, "summary.json")) as f:
                summ = json.load(f)
        except (OSError, ValueError) as e:
            print("summary.json: %s" % e)
        check(summ.get("end") == "stopped: checkpoints failing",
              "stop: summary.json end %r at step %s" % (summ.get("end"), summ.get("steps")))
        print("stop: summary.json written %s" % ("into the room of OUT/.summary-reserve"
                                                if "writing it into the room of" in text else
                                                "without the reserve (the failed saves' files freed room)"))
        check(tmp_dirs(os.path.join(out, "ckpt")) == [],
              "stop: no partial save left (%s)" % tmp_dirs(os.path.join(out, "ckpt")))
        try:
            rows(out)
            whole = True
        except ValueError:
            whole = False
        check(whole, "stop: every metrics.jsonl line whole")
        if not check.ok():
            print(text[-4000:])
    finally:
        if p and p.poll() is None:
            os.killpg(p.pid, 9)
            p.wait()
        c.close(keep=True)
        unmount(out)
        shutil.rmtree(c.tmp, ignore_errors=True)


case_warn()
case_stop()
check.exit()
