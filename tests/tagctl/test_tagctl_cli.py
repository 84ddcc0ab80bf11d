#!/usr/bin/env python3
"""tagctl's argument errors (status 2 and exactly one line on stderr), and `tagctl ckpt
ls|verify|inspect` on the checkpoints of a real two-worker static run and on corrupted
copies of them.
usage: test_tagctl_cli.py BINDIR"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "chaos"))
from harness import Checks  # noqa: E402

tagctl = os.path.join(sys.argv[1], "tagctl")
check = Checks()


def run(*args, timeout=120):
    return subprocess.run([tagctl] + list(args), capture_output=True, text=True, timeout=timeout)


def refused(args, text):
    r = run(*args)
    err = r.stderr.strip().splitlines()
    check(r.returncode == 2 and len(err) == 1 and text in err[0] and r.stdout == "",
          "tagctl %s: status 2, one stderr line with '%s' (status %d: %s)"
          % (" ".join(args), text, r.returncode, r.stderr.strip()))


def flip_byte(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))


# ---- argument errors ----
refused(["bogus"], "unknown command 'bogus'")
refused(["run", "--bogus"], "unknown option '--bogus'")
refused(["run", "--steps", "abc"], "--steps: 'abc' is not an integer")
refused(["run", "--workers", "0"], "--workers: 0 is out of range")
refused(["run", "--max-restarts", "-1"], "--max-restarts: -1 is out of range")
refused(["run", "--steps", "5", "extra"], "unexpected argument 'extra'")
refused(["status", "--bogus"], "unknown option '--bogus'")
refused(["status", "--job", "bad/job"], "job 'bad/job' holds a character outside")
refused(["inject", "--bogus"], "unknown option '--bogus'")
refused(["inject", "--at-step", "x"], "--at-step: 'x' is not an integer")
refused(["ckpt"], "usage: tagctl ckpt")
refused(["ckpt", "bogus", "/tmp"], "usage: tagctl ckpt")
refused(["ckpt", "verify", "/nonexistent-tagctl-test"], "is not a directory")
r = run()
check(r.returncode == 2 and r.stderr.startswith("usage: tagctl COMMAND"), "tagctl alone: usage, status 2")
r = run("--help")
check(r.returncode == 0 and "commands:" in r.stdout and r.stderr == "", "tagctl --help: status 0")
r = run("run", "--help")
check(r.returncode == 0 and "--workers N" in r.stdout and "--ckpt-every N" in r.stdout,
      "tagctl run --help lists its own and the worker's options")

# ---- checkpoints of a real run ----
tmp = tempfile.mkdtemp(prefix="tagc-tagctl-")
try:
    out = os.path.join(tmp, "out")
    r = run("run", "--mode", "static", "--workers", "2", "--steps", "4", "--ckpt-every", "2",
            "--threads", "1", "--eval-windows", "8", "--out", out, timeout=240)
    check(r.returncode == 0, "tagctl run --mode static --workers 2 --steps 4 (status %d)" % r.returncode)
    summary = json.load(open(os.path.join(out, "summary.json")))
    check(summary["steps"] == 4 and summary["world_size"] == 2 and summary["ckpt"]["saves"] == 2,
          "summary.json: 4 steps, 2 workers, 2 saves")
    root = os.path.join(out, "ckpt")

    r = run("ckpt", "ls", root)
    rows = [l.split() for l in r.stdout.splitlines()[1:]]
    check(r.returncode == 0 and [row[:2] for row in rows] == [["4", "2"], ["2", "2"]]
          and "valid (LATEST)" in r.stdout.splitlines()[1],
          "ckpt ls: steps 4 (LATEST) and 2, world size 2, valid")
    r = run("ckpt", "verify", root)
    check(r.returncode == 0 and r.stdout.splitlines() == [
        "%s/step-4: ok (step 4, 2 files)" % root, "%s/step-2: ok (step 2, 2 files)" % root],
        "ckpt verify: both checkpoints ok")
    r = run("ckpt", "inspect", root)
    check(r.returncode == 0 and "%s/step-4" % root in r.stdout and "world size   2" in r.stdout
          and "rank-00000.bin" in r.stdout and "rank-00001.bin" in r.stdout,
          "ckpt inspect: the newest checkpoint, its world size and shard files")

    # a flipped payload byte: only the full check (verify) sees it
    bad = os.path.join(tmp, "flipped")
    shutil.copytree(root, bad)
    shard = os.path.join(bad, "step-4", "rank-00001.bin")
    flip_byte(shard, os.path.getsize(shard) // 2)
    r = run("ckpt", "verify", bad)
    check(r.returncode == 1 and "step-4: INVALID: rank-00001.bin: CRC32C" in r.stdout
          and "step-2: ok" in r.stdout, "ckpt verify: a flipped byte fails step 4 only (status %d)" % r.returncode)
    r = run("ckpt", "verify", os.path.join(bad, "step-4"))
    check(r.returncode == 1 and "INVALID" in r.stdout, "ckpt verify DIR/step-4: status 1")
    r = run("ckpt", "verify", os.path.join(bad, "step-2"))
    check(r.returncode == 0 and "ok (step 2, 2 files)" in r.stdout, "ckpt verify DIR/step-2: status 0")
    r = run("ckpt", "ls", bad)
    check(r.returncode == 0 and "INVALID" not in r.stdout, "ckpt ls (quick check) does not read the payload")

    # a truncated shard and an uncommitted save: ls sees both
    os.mkdir(os.path.join(bad, "step-6.tmp"))
    with open(os.path.join(bad, "step-2", "rank-00000.bin"), "r+b") as f:
        f.truncate(1000)
    r = run("ckpt", "ls", bad)
    lines = r.stdout.splitlines()
    check(r.returncode == 0 and any(l.startswith("2 ") and "INVALID" in l for l in lines)
          and any(l.startswith("6 ") and "partial (step-6.tmp, never committed)" in l for l in lines),
          "ckpt ls: a truncated shard is INVALID, step-6.tmp is partial")
    r = run("ckpt", "verify", bad)
    check(r.returncode == 1 and r.stdout.count("INVALID") == 2, "ckpt verify: both checkpoints invalid now")
    r = run("ckpt", "inspect", os.path.join(bad, "step-2"))
    check(r.returncode == 0 and "step         2" in r.stdout,
          "ckpt inspect reads the manifest of a damaged checkpoint")
finally:
    shutil.rmtree(tmp, ignore_errors=True)

check.exit()
