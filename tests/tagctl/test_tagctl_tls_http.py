#!/usr/bin/env python3
"""TLS files with a plain http:// etcd endpoint are refused, not ignored: `tagctl status`
with --etcd-ca, or --etcd-cert and --etcd-key, and an http:// URL exits 2 with one line naming
the option and the endpoint, whether the files exist or not; the worker and the coordinator
refuse the same (one line, a non-zero exit that is not a signal). With https://, a TLS file that
does not exist is named in one line (exit 2) before any connection. Against a real etcd on
http:// when one is installed (so the plaintext connection would succeed), else a closed port.
usage: test_tagctl_tls_http.py BINDIR"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "chaos"))
from harness import Checks, Cluster, free_port  # noqa: E402

bindir = sys.argv[1]
tagctl, worker, coordinator = (os.path.join(bindir, n) for n in ("tagctl", "tagc-worker", "tagc-coordinator"))
check = Checks()


def run(argv):
    """The finished process; one whose status is None when it ran past 30 s (it was killed)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAGC_")}
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30, env=env)
    except subprocess.TimeoutExpired as e:
        out = lambda b: b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
        return subprocess.CompletedProcess(argv, None, out(e.stdout), out(e.stderr) + "(still running after 30 s)")


def lines(r):
    return r.stderr.strip().splitlines()


c = Cluster(bindir, job="tlshttp")
try:
    if shutil.which("etcd"):
        c.start_etcd()
        url = c.etcd_url
        r = run([tagctl, "status", "--etcd", url, "--job", "nosuch"])
        check(r.returncode == 1 and "no such job" in r.stderr, "plain status reaches the etcd at %s" % url)
    else:
        url = "http://127.0.0.1:%d" % free_port()
    pem = os.path.join(c.tmp, "some.pem")
    with open(pem, "w") as f:
        f.write("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")
    missing = "/nonexistent/ca.pem"

    cases = [("--etcd-ca", ["--etcd-ca", missing]), ("--etcd-ca", ["--etcd-ca", pem]),
             ("--etcd-cert", ["--etcd-cert", pem, "--etcd-key", pem])]
    for opt, tls in cases:
        r = run([tagctl, "status", "--etcd", url, "--job", "j"] + tls)
        err = lines(r)
        check(r.returncode == 2 and len(err) == 1 and opt in err[0] and url in err[0] and r.stdout == "",
              "tagctl status --etcd http:// %s: status 2, one line naming %s and %s (%d: %s)"
              % (" ".join(tls), opt, url, r.returncode, r.stderr.strip()))

    r = run([worker, "--etcd", url, "--job", "j", "--etcd-ca", missing, "--steps", "1"])
    err = lines(r)
    check((r.returncode or 0) > 0 and len(err) == 1 and "--etcd-ca" in err[0] and url in err[0],
          "tagc-worker --etcd http:// --etcd-ca: refused, one line, status > 0 (%d: %s)" % (r.returncode, r.stderr.strip()))
    r = run([coordinator, "--etcd", url, "--job", "j", "--etcd-key", pem, "--etcd-cert", pem])
    err = [l for l in lines(r) if not l.startswith("{")]  # its config log line is JSON
    check((r.returncode or 0) > 0 and len(err) == 1 and "--etcd-cert" in err[0] and url in err[0],
          "tagc-coordinator --etcd http:// --etcd-cert/--etcd-key: refused, one line, status > 0 (%d: %s)"
          % (r.returncode, r.stderr.strip()))

    https = "https://127.0.0.1:%d" % free_port()
    for opt in ("--etcd-ca", "--etcd-cert", "--etcd-key"):
        tls = {"--etcd-ca": ["--etcd-ca", missing],
               "--etcd-cert": ["--etcd-cert", missing, "--etcd-key", pem],
               "--etcd-key": ["--etcd-cert", pem, "--etcd-key", missing]}[opt]
        r = run([tagctl, "status", "--etcd", https, "--job", "j"] + tls)
        err = lines(r)
        check(r.returncode == 2 and len(err) == 1 and ("%s %s" % (opt, missing)) in err[0]
              and "No such file" in err[0],
              "tagctl status --etcd https:// %s %s: status 2, one line naming it (%d: %s)"
              % (opt, missing, r.returncode, r.stderr.strip()))
finally:
    c.close()
    shutil.rmtree(c.tmp, ignore_errors=True)

check.exit()
