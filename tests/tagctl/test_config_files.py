#!/usr/bin/env python3
"""tagctl run's config files on real runs:
1. replay: after `tagctl run --workers 2` (elastic, a local etcd), OUT/job.json holds tagctl
   run's own options and the worker options but nothing per worker or per invocation (rank,
   world, rendezvous, worker_id, out, fault, metrics_addr, the local etcd's URL);
   OUT/worker.json is what the workers read; `tagctl run --config OUT/job.json --out NEW`
   trains the same parameters (params_crc32c of summary.json), also for a static run;
2. an external --etcd URL stays in job.json (the user gave it);
3. TOML: a .toml file with [tables] giving a flag run's options trains the same parameters;
   a malformed file (tagctl run and tagc-worker), an unknown key and a key in two tables
   are refused with a non-zero status and one line naming the file and the key.
Skipped (77) without etcd.
usage: test_config_files.py BINDIR"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "chaos"))
from harness import Checks, Cluster  # noqa: E402

if not shutil.which("etcd"):
    print("etcd not found: skipped")
    sys.exit(77)

bindir = sys.argv[1]
tagctl = os.path.join(bindir, "tagctl")
worker = os.path.join(bindir, "tagc-worker")
TINY = ["--layers", "1", "--dim", "32", "--heads", "2", "--ctx", "32", "--batch", "4",
        "--eval-every", "0", "--eval-windows", "2", "--threads", "1"]
PER_RUN = ["rank", "world", "rendezvous", "worker_id", "out", "fault", "metrics_addr"]
check = Checks()


def run(*args):
    return subprocess.run([tagctl, "run"] + list(args), capture_output=True, text=True,
                          timeout=240)


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def crc(out):
    return load(os.path.join(out, "summary.json")).get("params_crc32c")


def why(r):
    """The end of a failed run's stderr, for the check's line."""
    return "" if r.returncode == 0 else "; status %d: %s" % (r.returncode, r.stderr.strip()[-300:])


def refused(r, *needles):
    lines = r.stderr.strip().splitlines()
    return (r.returncode != 0 and len(lines) == 1 and all(n in lines[0] for n in needles),
            "status %d: %s" % (r.returncode, r.stderr.strip()))


tmp = tempfile.mkdtemp(prefix="tagc-config-files-")
cluster = None
try:
    # 1. replay of an elastic run with a local etcd
    a, b = os.path.join(tmp, "A"), os.path.join(tmp, "B")
    r = run("--workers", "2", "--steps", "6", *TINY, "--out", a)
    check(r.returncode == 0 and crc(a) is not None, "an elastic run of 2 workers%s" % why(r))
    job, wk = load(os.path.join(a, "job.json")), load(os.path.join(a, "worker.json"))
    check(not [k for k in PER_RUN + ["etcd"] if k in job],
          "job.json has no per-worker or per-invocation key nor the local etcd's URL (%s)"
          % [k for k in PER_RUN + ["etcd"] if k in job])
    check("127.0.0.1:" not in open(os.path.join(a, "job.json")).read(), "... no loopback URL")
    check(job.get("workers") == 2 and job.get("mode") == "auto" and job.get("dim") == 32
          and job.get("steps") == 6 and isinstance(job.get("lr"), float)
          and isinstance(job.get("op_timeout"), float) and isinstance(job.get("warmup"), int)
          and isinstance(job.get("min_lr_ratio"), float),
          "job.json has tagctl run's options and the worker options at the top level")
    check(wk.get("etcd", "").startswith("http://127.0.0.1:") and wk.get("out") == a
          and "workers" not in wk and wk.get("fault") == "" and wk.get("metrics_addr") == "",
          "worker.json is the workers' view (the local etcd, out, no tagctl run option)")
    r = run("--config", os.path.join(a, "job.json"), "--out", b)
    check(r.returncode == 0 and crc(b) == crc(a) and crc(a) is not None,
          "tagctl run --config A/job.json --out B trains the same parameters (%s, %s%s)"
          % (crc(a), crc(b), why(r)))
    check(load(os.path.join(b, "summary.json")).get("world_size") == 2, "... with 2 workers")

    # ... and of a static run
    s, s2 = os.path.join(tmp, "S"), os.path.join(tmp, "S2")
    r = run("--mode", "static", "--workers", "2", "--steps", "4", "--seed", "5", *TINY, "--out", s)
    r2 = run("--config", os.path.join(s, "job.json"), "--out", s2)
    check(r.returncode == 0 and r2.returncode == 0 and crc(s) == crc(s2) and crc(s) is not None,
          "a static run replayed from its job.json: the same parameters (%s, %s%s%s)"
          % (crc(s), crc(s2), why(r), why(r2)))

    # 2. an external etcd: its URL is the user's and stays
    cluster = Cluster(bindir, job="config-files")
    cluster.start_etcd()
    e = os.path.join(tmp, "E")
    r = run("--workers", "2", "--steps", "2", *TINY, "--etcd", cluster.etcd_url, "--job",
            "config-files", "--out", e)
    check(r.returncode == 0 and load(os.path.join(e, "job.json")).get("etcd") == cluster.etcd_url,
          "an external --etcd URL stays in job.json%s" % why(r))

    # 3. TOML with tables, as the static run S by flags
    t = os.path.join(tmp, "T")
    toml = os.path.join(tmp, "job.toml")
    with open(toml, "w") as f:
        f.write("# the static run S\n[run]\nmode = \"static\"\nworkers = 2\n"
                "[training]\nsteps = 4\nseed = 5\nbatch = 4\nthreads = 1\neval-every = 0\n"
                "eval_windows = 2\n[model]\nlayers = 1\ndim = 32\nheads = 2\nctx = 32\n")
    r = run("--config", toml, "--out", t)
    check(r.returncode == 0 and crc(t) == crc(s),
          "a .toml file with tables trains what the same flags train (%s, %s%s)"
          % (crc(t), crc(s), why(r)))

    bad = os.path.join(tmp, "bad.toml")
    with open(bad, "w") as f:
        f.write("[training]\nsteps = = 4\n")
    ok, what = refused(run("--config", bad, "--out", os.path.join(tmp, "X")), bad + ":2:")
    check(ok, "a malformed .toml: one line with FILE:LINE:COLUMN (%s)" % what)
    r = subprocess.run([worker, "--config", bad], capture_output=True, text=True, timeout=60)
    ok, what = refused(r, bad + ":2:")
    check(ok, "... from tagc-worker too (%s)" % what)

    unknown = os.path.join(tmp, "unknown.toml")
    with open(unknown, "w") as f:
        f.write("[training]\nsteps = 4\nstepz = 4\n")
    ok, what = refused(run("--config", unknown, "--out", os.path.join(tmp, "X")), unknown,
                       "unknown key 'stepz'")
    check(ok, "an unknown key: one line naming it (%s)" % what)

    twice = os.path.join(tmp, "twice.toml")
    with open(twice, "w") as f:
        f.write("[training]\nsteps = 4\n[model]\nsteps = 5\n")
    ok, what = refused(run("--config", twice, "--out", os.path.join(tmp, "X")), twice,
                       "'model.steps' is given twice", "'training.steps'")
    check(ok, "a key in two tables: one line naming both (%s)" % what)
finally:
    if cluster:
        cluster.close()
    shutil.rmtree(tmp, ignore_errors=True)
check.exit()
