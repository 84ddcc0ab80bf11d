#!/usr/bin/env python3
"""tagctl run's logs as a person and as a log pipeline see them, on real runs:
1. under a pseudo-terminal (stdin, stdout and stderr a pty, as in an interactive shell), an
   elastic 2-worker run logs text lines "HH:MM:SS.mmmZ w0 info  data: ..." naming each worker,
   no JSON, no effective configuration, not "the job is done" once per worker, a first ETA
   in proportion to the run, and ends with the closing block: what was trained, where the
   metrics, summary, checkpoints and config are, how to continue;
2. under the same pty, --log-format json makes every log line a JSON object with the worker's
   tag; --log warn hides the info lines but not the closing block;
3. with pipes (no terminal) the lines are JSON (auto);
4. a bad --log-format is one line and status 2.
Skipped (77) without etcd.
usage: test_log_format.py BINDIR"""
import json
import os
import pty
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "chaos"))
from harness import Checks  # noqa: E402

if not shutil.which("etcd"):
    print("etcd not found: skipped")
    sys.exit(77)

bindir = sys.argv[1]
tagctl = os.path.join(bindir, "tagctl")
STEPS = 40
TINY = ["--layers", "1", "--dim", "32", "--heads", "2", "--ctx", "32", "--batch", "4",
        "--eval-every", "0", "--eval-windows", "2", "--threads", "1", "--steps", str(STEPS)]
TEXT = re.compile(r"^\d\d:\d\d:\d\d\.\d{3}Z (w\d|r\d|coord) (debug|info|warn|error) +[a-z_]+: ")
check = Checks()


def under_pty(args, deadline=240):
    """Runs tagctl run with a pty as its terminal; returns (status, lines)."""
    master, slave = pty.openpty()
    p = subprocess.Popen([tagctl, "run"] + args, stdin=slave, stdout=slave, stderr=slave,
                         close_fds=True, start_new_session=True)
    os.close(slave)
    chunks, end = [], time.time() + deadline
    while time.time() < end:
        r, _, _ = select.select([master], [], [], 1.0)
        if r:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer closed the pty
                break
            if not data:
                break
            chunks.append(data)
        elif p.poll() is not None:
            break
    os.close(master)
    try:
        rc = p.wait(timeout=max(1.0, end - time.time()))
    except subprocess.TimeoutExpired:
        p.kill()
        rc = p.wait()
    text = b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")
    return rc, text.splitlines()


def log_lines(lines):
    """The lines that are neither progress lines nor tagctl's own."""
    return [l for l in lines if l.strip() and not l.startswith(("step ", "tagctl run:", "  "))]


def first_eta(lines):
    for l in lines:
        m = re.match(r"^step \d+/\d+ .* eta (?:(\d+)m(\d+)s|([\d.]+)s|(\d+)h(\d+)m)$", l)
        if m:
            if m.group(3):
                return float(m.group(3))
            if m.group(1):
                return 60 * int(m.group(1)) + int(m.group(2))
            return 3600 * int(m.group(4)) + 60 * int(m.group(5))
    return None


with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "tty")
    t0 = time.time()
    rc, lines = under_pty(["--workers", "2", "--out", out] + TINY)
    wall = time.time() - t0
    logs = log_lines(lines)
    check(rc == 0, "under a pty: tagctl run exits 0 (%d)" % rc)
    check(logs and all(TEXT.match(l) for l in logs),
          "under a pty: every log line is text (%d lines; not: %s)"
          % (len(logs), [l[:80] for l in logs if not TEXT.match(l)][:3]))
    check({"w0", "w1"} <= {TEXT.match(l).group(1) for l in logs if TEXT.match(l)},
          "under a pty: the lines name the workers w0 and w1")
    check(not any(l.lstrip().startswith("{") for l in lines), "under a pty: no JSON line")
    check(not any("effective configuration" in l for l in lines),
          "the effective configuration is not logged at info (it is OUT/job.json)")
    check(sum("the job is done" in l for l in lines) <= 1,
          "'the job is done' at most once (%d)" % sum("the job is done" in l for l in lines))
    eta = first_eta(lines)
    check(eta is not None and eta <= 3 * wall + 2,
          "the first ETA (%s s) is in proportion to the run (%.1f s)" % (eta, wall))
    summary = json.load(open(os.path.join(out, "summary.json")))
    done = [i for i, l in enumerate(lines) if l.startswith("tagctl run: done: step %d of %d" % (STEPS, STEPS))]
    check(len(done) == 1 and "train loss %.4f" % summary["final_train_loss"] in lines[done[0]],
          "the closing block says what was trained and the final loss: %s"
          % (lines[done[0]] if done else None))
    block = "\n".join(lines[done[0]:]) if done else ""
    for what in ("metrics      %s/metrics.jsonl" % out, "summary      %s/summary.json" % out,
                 "checkpoints  %s/ckpt (newest %s/ckpt/step-%d)" % (out, out, STEPS),
                 "config       %s/job.json" % out,
                 "continue     tagctl run --config %s/job.json --out %s --steps N" % (out, out)):
        check(what in block, "the closing block names: %s" % what)

    # 2. forced JSON under a terminal; --log warn keeps the closing block
    out2 = os.path.join(tmp, "json")
    rc, lines = under_pty(["--workers", "2", "--log-format", "json", "--out", out2] + TINY)
    logs = log_lines(lines)
    parsed = []
    for l in logs:
        try:
            parsed.append(json.loads(l))
        except ValueError:
            pass
    check(rc == 0 and logs and len(parsed) == len(logs),
          "--log-format json under a pty: every log line is JSON (%d of %d)" % (len(parsed), len(logs)))
    check({"w0", "w1"} <= {o.get("tag") for o in parsed}, "the JSON lines carry the worker's tag")
    out3 = os.path.join(tmp, "warn")
    rc, lines = under_pty(["--workers", "2", "--log", "warn", "--out", out3] + TINY)
    check(rc == 0 and not any(" info " in l for l in log_lines(lines))
          and any(l.startswith("tagctl run: done: step %d" % STEPS) for l in lines),
          "--log warn: no info line, the closing block stays")

    # 3. pipes: JSON
    out4 = os.path.join(tmp, "pipe")
    p = subprocess.run([tagctl, "run", "--workers", "2", "--out", out4] + TINY,
                       capture_output=True, text=True, timeout=240)
    logs = log_lines((p.stdout + p.stderr).splitlines())
    ok = p.returncode == 0 and logs
    for l in logs:
        try:
            ok = ok and json.loads(l)["level"] in ("info", "warn")
        except ValueError:
            ok = False
    check(ok, "without a terminal (auto): JSON lines (%d)" % len(logs))

    # 4. a bad format
    p = subprocess.run([tagctl, "run", "--log-format", "xml", "--out", os.path.join(tmp, "bad")]
                       + TINY, capture_output=True, text=True, timeout=60)
    err = p.stderr.strip().splitlines()
    check(p.returncode == 2 and len(err) == 1 and "log-format" in err[0],
          "--log-format xml: status 2 and one line (%d: %s)" % (p.returncode, err))

check.exit()
