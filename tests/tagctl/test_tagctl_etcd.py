#!/usr/bin/env python3
"""`tagctl status` and `tagctl inject` against a real etcd (started on free loopback ports by
tests/chaos/harness.py): an unknown job is an error (status 1, one line), a job with keys is
shown, inject writes and clears chaos/<worker>. Skipped (77) without an etcd executable.
usage: test_tagctl_etcd.py BINDIR"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "chaos"))
from harness import Checks, Cluster  # noqa: E402

if not shutil.which("etcd"):
    print("etcd not found: skipped")
    sys.exit(77)

bindir = sys.argv[1]
tagctl = os.path.join(bindir, "tagctl")
check = Checks()


def run(*args):
    return subprocess.run([tagctl] + list(args), capture_output=True, text=True, timeout=60)


c = Cluster(bindir, job="tagctl")
try:
    c.start_etcd()
    url = c.etcd_url

    r = run("status", "--etcd", url, "--job", "nosuch")
    err = r.stderr.strip().splitlines()
    check(r.returncode == 1 and len(err) == 1 and "no such job 'nosuch'" in err[0] and r.stdout == "",
          "status of an unknown job: status 1, one line (%d: %s)" % (r.returncode, r.stderr.strip()))

    r = run("inject", "--etcd", url, "--job", "j1", "--worker", "w0", "explode", "--at-step", "5")
    check(r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and r.stdout == "",
          "inject of an unknown kind: status 2, one line")
    r = run("inject", "--etcd", url, "--job", "j1", "--worker", "w0", "crash")
    check(r.returncode == 2 and "crash needs --at-step S" in r.stderr, "inject crash without --at-step: status 2")
    r = run("status", "--etcd", url, "--job", "j1")
    check(r.returncode == 1 and "no such job" in r.stderr, "refused injections wrote nothing")

    r = run("inject", "--etcd", url, "--job", "j1", "--worker", "w0", "crash", "--at-step", "7")
    check(r.returncode == 0 and r.stdout.strip() == "/tagc/j1/chaos/w0 = crash@7",
          "inject crash --at-step 7 writes chaos/w0 (%s)" % r.stdout.strip())
    r = run("inject", "--etcd", url, "--job", "j1", "--worker", "w1", "slow", "--seconds", "0.25")
    check(r.returncode == 0 and r.stdout.strip() == "/tagc/j1/chaos/w1 = slow=0.25", "inject slow --seconds 0.25")

    r = run("status", "--etcd", url, "--job", "j1")
    lines = r.stdout.splitlines()
    check(r.returncode == 0 and r.stderr == "" and lines[:4] == [
        "gen        -", "progress   -", "ckpt       -", "done       -"],
        "status of a job with keys but no generation yet: status 0, every field '-'")

    for w in ("w0", "w1"):
        r = run("inject", "--etcd", url, "--job", "j1", "--worker", w, "--clear")
        check(r.returncode == 0, "inject --clear %s" % w)
    r = run("status", "--etcd", url, "--job", "j1")
    check(r.returncode == 1 and "no such job 'j1'" in r.stderr, "after --clear the job has no keys left")
finally:
    c.close()

r = subprocess.run([tagctl, "status", "--etcd", url, "--job", "j1"], capture_output=True, text=True, timeout=60)
check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1,
      "status with etcd gone: status 1, one line (%s)" % r.stderr.strip())
check.exit()
