#!/usr/bin/env python3
"""etcd security end to end against a real etcd serving https only, requiring client
certificates of the CA of deploy/k8s/gen-dev-certs.sh (as deploy/k8s/base/etcd.yaml) and with
authentication enabled (user root). With auth on, etcd's JSON gateway refuses a client
certificate that has a CommonName (it could not use it as the user), so the workers' certificate
here is issued by that CA without one:
1. `tagctl run --etcd https://... --workers 2` with the CA, the client certificate and key,
   --etcd-user and TAGC_ETCD_PASSWORD trains the job (its workers and coordinator get the
   files as options, the password through the environment); `tagctl status` reads it, also
   with --etcd-password-file;
2. the same job without credentials, or with the certificate but no user: one clear line
   ("cannot use etcd at https://...") and exit status 1, from tagctl run and from a worker;
3. a password is never sent over http:// (exit 2, one line) and has no command-line flag.
Skipped (77) without etcd or openssl.
usage: test_tagctl_tls.py BINDIR"""
import base64
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "chaos"))
from harness import Checks, free_port  # noqa: E402

if not shutil.which("etcd") or not shutil.which("openssl"):
    print("etcd or openssl not found: skipped")
    sys.exit(77)

bindir = sys.argv[1]
here = os.path.dirname(os.path.abspath(__file__))
certs_script = os.path.join(here, "..", "..", "deploy", "k8s", "gen-dev-certs.sh")
tagctl = os.path.join(bindir, "tagctl")
worker = os.path.join(bindir, "tagc-worker")
PASSWORD = "s3cret-pw"
ETCD_DEADLINE = 5.0  # tagctl's etcd deadline per call: a refusal must come well within a few
check = Checks()
tmp = tempfile.mkdtemp(prefix="tagc-tls-")
etcd = None


def one_line(r):
    lines = r.stderr.strip().splitlines()
    return lines[0] if len(lines) == 1 else " | ".join(lines)


def env(password=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith("TAGC_")}
    if password:
        e["TAGC_ETCD_PASSWORD"] = password
    return e


def run(argv, password=None, timeout=300):
    t0 = time.time()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env(password))
    return r, time.time() - t0


def gateway(url, path, body, ctx, token=None):
    req = urllib.request.Request(url + path, json.dumps(body).encode())
    if token:
        req.add_header("Authorization", token)
    with urllib.request.urlopen(req, timeout=5, context=ctx) as r:
        return json.load(r)


try:
    certs = os.path.join(tmp, "certs")
    subprocess.run(["sh", certs_script, certs, "tagc"], check=True, capture_output=True)
    ca = os.path.join(certs, "ca.crt")
    cert, key = os.path.join(certs, "nocn.crt"), os.path.join(certs, "nocn.key")
    ext = os.path.join(certs, "nocn.ext")
    with open(ext, "w") as f:
        f.write("basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                "extendedKeyUsage=clientAuth\n")
    subprocess.run(["openssl", "req", "-new", "-nodes", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-keyout", key, "-out", key + ".csr", "-subj",
                    "/O=tagc workers"], check=True, capture_output=True)
    subprocess.run(["openssl", "x509", "-req", "-in", key + ".csr", "-CA", ca, "-CAkey",
                    os.path.join(certs, "ca.key"), "-CAcreateserial", "-days", "1", "-extfile", ext,
                    "-out", cert], check=True, capture_output=True)
    cport, pport = free_port(), free_port()
    url = "https://localhost:%d" % cport
    log = open(os.path.join(tmp, "etcd.log"), "w")
    etcd = subprocess.Popen(
        ["etcd", "--name", "tls", "--data-dir", os.path.join(tmp, "etcd"),
         "--listen-client-urls", "https://127.0.0.1:%d" % cport, "--advertise-client-urls", url,
         "--listen-peer-urls", "http://127.0.0.1:%d" % pport,
         "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % pport,
         "--initial-cluster", "tls=http://127.0.0.1:%d" % pport,
         "--client-cert-auth", "--trusted-ca-file", ca, "--cert-file", os.path.join(certs, "server.crt"),
         "--key-file", os.path.join(certs, "server.key")], stdout=log, stderr=subprocess.STDOUT)
    ctx = ssl.create_default_context(cafile=ca)
    ctx.load_cert_chain(cert, key)
    for _ in range(200):
        try:
            gateway(url, "/v3/kv/range", {"key": "eA=="}, ctx)
            break
        except OSError:
            time.sleep(0.1)
    gateway(url, "/v3/auth/user/add", {"name": "root", "password": PASSWORD}, ctx)
    gateway(url, "/v3/auth/user/grant", {"user": "root", "role": "root"}, ctx)
    gateway(url, "/v3/auth/enable", {}, ctx)
    try:
        gateway(url, "/v3/kv/range", {"key": "eA=="}, ctx)
        anonymous = "served"
    except OSError as e:
        anonymous = "refused (%s)" % e
    check(anonymous != "served", "etcd on https with client certificates and auth (user root) is up: "
          "an anonymous read is %s" % anonymous)

    creds = ["--etcd-ca", ca, "--etcd-cert", cert, "--etcd-key", key, "--etcd-user", "root"]
    train = ["run", "--etcd", url, "--workers", "2", "--steps", "20", "--ckpt-every", "10",
             "--threads", "1", "--batch", "12", "--eval-every", "0", "--compress", "none", "--log", "warn"]

    # 1. with credentials
    out = os.path.join(tmp, "out")
    r, took = run([tagctl] + train + ["--job", "secure", "--out", out] + creds, PASSWORD)
    s = json.load(open(out + "/summary.json")) if os.path.exists(out + "/summary.json") else {}
    check(r.returncode == 0 and s.get("steps") == 20 and s.get("world_size") == 2,
          "tagctl run --workers 2 with certificate, user and TAGC_ETCD_PASSWORD trained 20 steps "
          "at W=2 (status %d, %.1f s%s)" % (r.returncode, took, "" if r.returncode == 0 else ": " + r.stderr.strip()[-300:]))
    for name in ("job.json", "worker.json"):
        text = open(os.path.join(out, name)).read()
        check(PASSWORD not in text and '"etcd_user": "root"' in text.replace('":"', '": "'),
              "OUT/%s names the user and files, never the password" % name)
    r, _ = run([tagctl, "status", "--etcd", url, "--job", "secure"] + creds, PASSWORD)
    check(r.returncode == 0 and "state       done: finished at step 20" in r.stdout,
          "tagctl status with credentials says done")
    pwfile = os.path.join(tmp, "pw")
    with open(pwfile, "w") as f:
        f.write(PASSWORD + "\n")
    r, _ = run([tagctl, "status", "--etcd", url, "--job", "secure", "--etcd-password-file", pwfile] + creds)
    check(r.returncode == 0 and "done: finished at step 20" in r.stdout, "... and with --etcd-password-file")

    # 2. without credentials: one line, status 1, promptly
    for what, extra, pw in (("no credentials", [], None),
                            ("the CA but no client certificate", creds[:2], None),
                            ("certificate but no user", creds[:6], None),
                            ("a wrong password", creds, "wrong")):
        r, took = run([tagctl] + train + ["--job", "secure2", "--out", os.path.join(tmp, "out2")] + extra, pw)
        line = one_line(r)
        check(r.returncode == 1 and "\n" not in r.stderr.strip() and
              line.startswith("tagctl run: cannot use etcd at %s" % url) and took < 3 * ETCD_DEADLINE,
              "tagctl run with %s: status %d after %.1f s, one line: %s" % (what, r.returncode, took, line))
    r, took = run([worker, "--etcd", url, "--job", "secure2", "--out", os.path.join(tmp, "out3")])
    line = one_line(r)
    check(r.returncode == 1 and line.startswith("tagc-worker: cannot use etcd at %s" % url),
          "a worker without credentials: status %d, one line: %s" % (r.returncode, line))
    r, _ = run([tagctl, "status", "--etcd", url, "--job", "secure"])
    check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1,
          "tagctl status without credentials: status 1, one line (%s)" % one_line(r))

    # 3. no password over http://, and no password flag
    plain = "http://127.0.0.1:%d" % cport
    for argv in ([worker, "--etcd", plain, "--etcd-user", "root"],
                 [tagctl, "status", "--etcd", plain, "--etcd-user", "root"],
                 [os.path.join(bindir, "tagc-coordinator"), "--etcd", plain, "--job", "x", "--etcd-user", "root"]):
        r, _ = run(argv, PASSWORD, timeout=60)
        last = r.stderr.strip().splitlines()[-1]
        check(r.returncode == 2 and "refusing to send the etcd password over plain http://" in last,
              "%s with a user over http://: status 2, last line: %s" % (os.path.basename(argv[0]), last))
    for argv in ([worker, "--etcd-password", "x"], [tagctl, "status", "--etcd-password", "x"],
                 [os.path.join(bindir, "tagc-coordinator"), "--etcd-password", "x"]):
        r, _ = run(argv, timeout=60)
        check(r.returncode == 2 and "unknown option '--etcd-password'" in one_line(r),
              "%s has no --etcd-password flag" % os.path.basename(argv[0]))
    r, _ = run([worker, "--etcd", url, "--etcd-user", "root"] + creds[:6])
    check(r.returncode == 2 and "needs a password" in one_line(r),
          "a user without TAGC_ETCD_PASSWORD or a password file: status 2 (%s)" % one_line(r))
finally:
    if etcd:
        etcd.kill()
        etcd.wait()
    if not check.ok() and os.path.exists(os.path.join(tmp, "etcd.log")):
        print("===== etcd.log")
        print("\n".join(open(os.path.join(tmp, "etcd.log")).read().splitlines()[-10:]))
    if not os.environ.get("TAGC_KEEP_TMP"):
        shutil.rmtree(tmp, ignore_errors=True)
check.exit()
