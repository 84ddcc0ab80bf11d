#!/usr/bin/env python3
"""`tagctl run` supervises what it starts (tagctl/supervise.h):
  1. a SIGKILLed worker is restarted within 10 s (a new PID under its id in OUT/pids), the job
     returns to full width (metrics rows at world_size 3 after the kill) and finishes, exit 0;
     a SIGKILLed coordinator (the only one) is restarted too;
     so is the local etcd;
  2. --min-workers above --workers fails within 5 s, exit 2, with the coordinator's message;
  3. SIGKILL of tagctl leaves none of the processes it started (OUT/pids) alive, and the next
     run in the same OUT removes the local etcd's leftover data folder (OUT/etcd);
  4. a local etcd that dies on a full disk (OUT on a 2 MiB tmpfs; root only, else this part
     is skipped) fails the run at once with etcd's own reason, not a timeout."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import shutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, job_args, metrics, read_pids, wait_for  # noqa: E402

bindir = sys.argv[1]
tagctl = os.path.join(bindir, "tagctl")
check = Checks()
tmp = tempfile.mkdtemp(prefix="tagc-chaos-supervise-")
started = []  # tagctl processes of this test, killed at the end if still running


def alive(pid):
    """A process that exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def launch(out, *args):
    log = open(out + ".log", "w")
    p = subprocess.Popen([tagctl, "run", "--out", out, "--log", "warn"] + list(args),
                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    started.append(p)
    return p


def text(out):
    with open(out + ".log") as f:
        return f.read()


def training(out, n):
    return os.path.exists(out + "/metrics.jsonl") and len(metrics(out)) >= n


try:
    # 1. a killed worker comes back; so does the only coordinator
    out = os.path.join(tmp, "kill")
    steps = 400
    p = launch(out, "--workers", "3", *job_args(steps, 20, 12))
    wait_for(lambda: training(out, 30), 180, "30 steps")
    before = read_pids(out)
    killed_gen = metrics(out)[-1]["generation"]
    os.kill(before["w1"], signal.SIGKILL)
    t0 = time.time()
    new = wait_for(lambda: read_pids(out).get("w1") not in (None, before["w1"]) and read_pids(out)["w1"],
                   60, "a new w1")
    took = time.time() - t0
    check(took <= 10 and alive(new), "the killed worker w1 was restarted after %.1f s (<= 10 s), pid %d"
          % (took, new))
    full = wait_for(lambda: [r for r in metrics(out) if r["generation"] > killed_gen and r["world_size"] == 3],
                    120, "a step at world size 3 after the kill")
    check(bool(full), "back to full width: step %d at world size 3 in generation %d"
          % (full[0]["step"], full[0]["generation"]))
    coord = read_pids(out)["coordinator-0"]
    os.kill(coord, signal.SIGKILL)
    new_coord = wait_for(lambda: read_pids(out).get("coordinator-0") not in (None, coord)
                         and read_pids(out)["coordinator-0"], 60, "a new coordinator")
    check(alive(new_coord), "the killed coordinator was restarted (pid %d -> %d)" % (coord, new_coord))
    etcd = read_pids(out)["etcd"]
    os.kill(etcd, signal.SIGKILL)
    new_etcd = wait_for(lambda: read_pids(out).get("etcd") not in (None, etcd) and read_pids(out)["etcd"],
                        60, "a new local etcd")
    check(alive(new_etcd), "the killed local etcd was restarted (pid %d -> %d)" % (etcd, new_etcd))
    rc = p.wait(300)
    s = json.load(open(out + "/summary.json"))
    check(rc == 0 and s["steps"] == steps, "tagctl run finished the job: status %d, %d steps" % (rc, s["steps"]))
    log = text(out)
    check("worker w1 (pid %d) was killed by signal 9" % before["w1"] in log,
          "tagctl said why w1 died")
    check("coordinator 0 (pid %d) was killed by signal 9" % coord in log, "and why the coordinator died")

    # 2. a configuration the coordinator refuses: fail fast with its message
    out2 = os.path.join(tmp, "refuse")
    t0 = time.time()
    p = launch(out2, "--workers", "2", "--min-workers", "5", *job_args(20))
    rc = p.wait(60)
    took = time.time() - t0
    log = text(out2)
    check(rc == 2 and took <= 5, "--workers 2 --min-workers 5: status %d after %.1f s (2 within 5 s)"
          % (rc, took))
    check("--max-workers 2 is below --min-workers 5" in log, "with the coordinator's message: %r"
          % log.strip().splitlines()[:1])

    # 3. SIGKILL of tagctl: nothing it started survives
    out3 = os.path.join(tmp, "orphans")
    p = launch(out3, "--workers", "3", "--coordinators", "2", *job_args(100000, 1000, 12))
    wait_for(lambda: training(out3, 5), 180, "5 steps")
    pids = read_pids(out3)
    check(set(pids) >= {"tagctl", "etcd", "coordinator-0", "coordinator-1", "w0", "w1", "w2"},
          "OUT/pids lists tagctl, etcd, 2 coordinators and 3 workers: %s" % sorted(pids))
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    children = [pid for name, pid in pids.items() if name != "tagctl"]
    try:
        wait_for(lambda: not any(alive(pid) for pid in children), 30, "the children to die")
    except RuntimeError:
        pass
    left = [name for name, pid in pids.items() if name != "tagctl" and alive(pid)]
    check(not left, "after SIGKILL of tagctl no child is left (%s)" % (left or "none"))
    check(os.path.isdir(out3 + "/etcd"), "the killed run left its etcd data folder OUT/etcd")
    # the next run in the same OUT reuses the path after removing the leftover
    rc = subprocess.run([tagctl, "run", "--out", out3, "--log", "warn", "--workers", "2"] + job_args(4, 2),
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=180).returncode
    check(rc == 0 and not os.path.exists(out3 + "/etcd") and not os.path.exists(out3 + "/pids"),
          "the next run in that OUT finished (status %d) and removed OUT/etcd and OUT/pids" % rc)

    # 4. a local etcd on a full disk: its own reason at once
    tiny = os.path.join(tmp, "tiny")
    os.makedirs(tiny)
    if os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", tiny],
                                            stderr=subprocess.DEVNULL).returncode == 0:
        try:
            out4 = os.path.join(tiny, "out")
            t0 = time.time()
            r = subprocess.run([tagctl, "run", "--out", out4, "--log", "warn", "--workers", "2"] + job_args(4),
                               capture_output=True, text=True, timeout=120)
            took = time.time() - t0
            check(r.returncode == 1 and took < 15 and "no space left on device" in r.stderr,
                  "a local etcd on a full disk: status %d after %.1f s with its reason: %r"
                  % (r.returncode, took, r.stderr.strip().splitlines()[:1]))
        finally:
            subprocess.run(["umount", tiny])
    else:
        print("skipped: the full-disk part needs root and a tmpfs mount")
finally:
    for p in started:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    if not check.ok():
        for f in sorted(os.listdir(tmp)):
            if f.endswith(".log"):
                print("=====", f)
                print("\n".join(text(os.path.join(tmp, f[:-4])).splitlines()[-15:]))
    if not os.environ.get("TAGC_KEEP_TMP"):
        shutil.rmtree(tmp, ignore_errors=True)
check.exit()
