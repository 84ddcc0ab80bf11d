#!/usr/bin/env python3
"""tagctl run --init-from on real runs: a run trained for 4 steps is exported (a Hugging Face
folder, an llm.c file) and a new run started from the export with a zero learning rate ends
with exactly the first run's parameters (--dump-params), at world sizes 1 and 2, and exports
again to bit-identical tensors; a checkpoint
in OUT takes precedence over --init-from; a model of another shape and a missing file are
refused with status 2 and one line naming --init-from.
usage: test_init_from.py BINDIR"""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "chaos"))
sys.path.insert(0, HERE)
from harness import Checks  # noqa: E402
import model_files as mf  # noqa: E402

bindir = sys.argv[1]
tagctl = os.path.join(bindir, "tagctl")
check = Checks()
MODEL = ["--threads", "1", "--batch", "8", "--ctx", "32", "--layers", "2", "--heads", "4",
         "--eval-every", "0", "--eval-windows", "4"]


def run(*args, timeout=240):
    return subprocess.run([tagctl] + list(args), capture_output=True, text=True, timeout=timeout)


def train(out, workers, steps, *extra, dim="64"):
    return run("run", "--mode", "static", "--workers", str(workers), "--steps", str(steps),
               *MODEL, "--dim", dim, "--out", out, *extra)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def refused(r, text, what):
    lines = r.stderr.strip().splitlines()
    last = lines[-1] if lines else ""
    check(r.returncode == 2 and "--init-from" in last and text in last,
          "%s: status 2, last stderr line names --init-from and '%s' (status %d: %s)"
          % (what, text, r.returncode, last))


tmp = tempfile.mkdtemp(prefix="tagc-init-from-")
try:
    a = os.path.join(tmp, "a")
    r = train(a, 2, 4, "--dump-params", os.path.join(tmp, "a.params"))
    check(r.returncode == 0, "first run, 2 workers, 4 steps (status %d)" % r.returncode)
    if r.returncode != 0:
        print(r.stderr[-3000:])
        check.exit()
    want = read(os.path.join(tmp, "a.params"))
    hf = os.path.join(tmp, "hf")
    llmc = os.path.join(tmp, "model.bin")
    for fmt, dst in (("safetensors", hf), ("llmc", llmc)):
        e = run("ckpt", "export", a, "--format", fmt, "--out", dst)
        check(e.returncode == 0, "export --format %s (status %d: %s)" % (fmt, e.returncode, e.stderr.strip()))

    # started from the export, lr 0: the parameters are the export's, bit for bit
    for src, workers in ((hf, 1), (llmc, 2), (os.path.join(hf, "model.safetensors"), 2)):
        name = os.path.relpath(src, tmp)
        b = os.path.join(tmp, "b-%s-%d" % (name.replace("/", "_"), workers))
        dump = b + ".params"
        r = train(b, workers, 1, "--lr", "0", "--init-from", src, "--dump-params", dump)
        check(r.returncode == 0 and "starting from the weights of --init-from" in r.stderr,
              "--init-from %s, %d worker(s): trains and says so (status %d)" % (name, workers, r.returncode))
        check(r.returncode == 0 and read(dump) == want,
              "--init-from %s, %d worker(s), lr 0: the first run's parameters bit for bit" % (name, workers))
        if src == hf:  # exported again: the same tensors
            again = os.path.join(tmp, "hf-again")
            e = run("ckpt", "export", b, "--out", again)
            _, t0, _ = mf.read_safetensors(os.path.join(hf, "model.safetensors"))
            _, t1, _ = mf.read_safetensors(os.path.join(again, "model.safetensors")) if e.returncode == 0 else (0, {}, 0)
            same = set(t0) == set(t1) and all(t0[k].tobytes() == t1[k].tobytes() for k in t0)
            check(e.returncode == 0 and same, "--init-from hf, exported again: %d tensors bit-identical" % len(t0))

    # a checkpoint in OUT is resumed; --init-from does not replace it
    r = train(a, 2, 5, "--lr", "0", "--init-from", hf, "--dump-params", os.path.join(tmp, "a5.params"))
    check(r.returncode == 0 and "starting from the weights of --init-from" not in r.stderr
          and read(os.path.join(tmp, "a5.params")) == want,
          "OUT with a checkpoint at step 4 resumes from it, not from --init-from (status %d)" % r.returncode)

    # refused: another shape, a missing file, a file that is no model
    refused(train(os.path.join(tmp, "c"), 1, 1, "--init-from", hf, dim="32"), "width",
            "--init-from a width-64 model into --dim 32")
    refused(train(os.path.join(tmp, "d"), 1, 1, "--init-from", os.path.join(tmp, "nothing")),
            "nothing", "--init-from a missing path")
    junk = os.path.join(tmp, "junk.bin")
    with open(junk, "wb") as f:
        f.write(b"not a model at all" * 10)
    refused(train(os.path.join(tmp, "e"), 1, 1, "--init-from", junk), "junk.bin",
            "--init-from a file that is no model")
    check(not os.path.exists(os.path.join(tmp, "c", "ckpt")), "a refused run saved no checkpoint")
finally:
    shutil.rmtree(tmp, ignore_errors=True)
check.exit()
