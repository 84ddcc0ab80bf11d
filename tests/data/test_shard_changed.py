#!/usr/bin/env python3
"""A token shard changed under a running tagc-worker: truncated (its mapping would raise SIGBUS)
or rewritten in place at the same size (its tokens would no longer be those the corpus CRC
covers). Either way the run must end with exactly one stderr line naming the shard and a
non-zero exit status that is not a signal. The shards come from tests/train/make_shards.py.
usage: test_shard_changed.py BINDIR"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "chaos"))
from harness import Checks  # noqa: E402

worker = os.path.join(sys.argv[1], "tagc-worker")
check = Checks()
HEADER = 1024


def steps_done(out):
    try:
        with open(os.path.join(out, "metrics.jsonl")) as f:
            return sum(1 for line in f if line.strip())
    except OSError:
        return 0


def run_and_change(tmp, name, change):
    """Starts a long run, lets it train a few steps, applies change(); returns (status, lines)."""
    shards = os.path.join(tmp, name)
    subprocess.run([sys.executable, os.path.join(HERE, "..", "train", "make_shards.py"), shards,
                    "--train-tokens", "400000", "--val-tokens", "4000", "--shards", "2"],
                   check=True, capture_output=True)
    out = os.path.join(tmp, name + "-out")
    argv = [worker, "--steps", "1000000", "--layers", "1", "--dim", "16", "--heads", "2", "--ctx", "32",
            "--batch", "8", "--threads", "1", "--eval-every", "0", "--ckpt-every", "0", "--log", "warn",
            "--data", os.path.join(shards, "tiny_train_*.bin"),
            "--val-data", os.path.join(shards, "tiny_val_000000.bin"), "--out", out]
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and p.poll() is None and steps_done(out) < 3:
        time.sleep(0.05)
    if p.poll() is not None:
        return p.returncode, ["exited before the change: " + p.stderr.read().strip()], shards
    change(shards)
    try:
        _, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
        return None, ["still training 30 s after the change: " + err.strip()], shards
    return p.returncode, err.strip().splitlines(), shards


def truncate(shards):
    os.truncate(os.path.join(shards, "tiny_train_000001.bin"), HEADER + 2000)


def rewrite(shards):
    path = os.path.join(shards, "tiny_train_000000.bin")
    size = os.path.getsize(path)
    time.sleep(0.05)  # past the mtime granularity of the open
    with open(path, "r+b") as f:  # the same size, other (valid) tokens
        f.seek(HEADER)
        f.write(b"\x07\x00" * ((size - HEADER) // 2))


tmp = tempfile.mkdtemp(prefix="tagc-shard-changed-")
try:
    for name, change, shard, word in (("trunc", truncate, "tiny_train_000001.bin", "truncated"),
                                      ("rewrite", rewrite, "tiny_train_000000.bin", "changed")):
        status, lines, shards = run_and_change(tmp, name, change)
        path = os.path.join(shards, shard)
        check(status is not None and status > 0 and len(lines) == 1 and path in lines[0] and word in lines[0],
              "shard %s under the run: one line naming %s, status > 0, not a signal (status %s: %s)"
              % (word, shard, status, " | ".join(lines)))
finally:
    shutil.rmtree(tmp, ignore_errors=True)

if not check.ok():
    print("(the trainer must poll tagc_corpus_check after the fills of a step, before it uses them: engine/engine.c run_passes)")
check.exit()
