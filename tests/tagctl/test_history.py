#!/usr/bin/env python3
"""One record of a job's history, read the same by summary.json, `tagctl status OUT` and
`tagctl plot`, on a real sequence: an elastic 3-worker run whose last worker crashes
(--fault crash@40), is restarted by tagctl run and rejoins; the run is then interrupted
(SIGINT, as Ctrl-C) and run again over the same OUT to its end. Then:
1. OUT/history.jsonl counts 2 runs, 1 failure of kind crash, 1 recovery, >= 1 join, 0 leaves,
   1 interrupt, 1 restart (the rejoin and the Ctrl-C are not failures);
2. summary.json's "history", `tagctl status OUT --json` and the text of `tagctl status OUT`
   (a finished run: no etcd left) give those counts;
3. `tagctl plot OUT`: the title gives the same tally, one marker per failure, join,
   interrupt and resume, each labelled by what it was, no two labels overlapping; --x time
   draws against wall-clock time.
Skipped (77) without etcd.
usage: test_history.py BINDIR"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "chaos"))
from harness import Checks  # noqa: E402

if not shutil.which("etcd"):
    print("etcd not found: skipped")
    sys.exit(77)

bindir = sys.argv[1]
tagctl = os.path.join(bindir, "tagctl")
SVG = "{http://www.w3.org/2000/svg}"
JOB = ["--workers", "3", "--layers", "1", "--dim", "32", "--heads", "2", "--ctx", "32",
       "--batch", "4", "--eval-every", "100", "--eval-windows", "2", "--threads", "1",
       "--steps", "1200", "--ckpt-every", "50"]
# the longest a step of this job may wait on a lost peer (--op-timeout's default) plus the
# coordinator's settle and the restart backoff, with room for a busy machine
JOIN_DEADLINE_S = 180
check = Checks()


def history(out):
    try:
        return [json.loads(l) for l in open(os.path.join(out, "history.jsonl")) if l.strip()]
    except OSError:
        return []


def rejoined(lines):
    """A generation with all 3 members after one that lost a member."""
    gens = [l for l in lines if l.get("event") == "generation"]
    return any(len(a["members"]) < 3 and len(b["members"]) == 3 for a, b in zip(gens, gens[1:]))


with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "out")
    p = subprocess.Popen([tagctl, "run", "--fault", "crash@40", "--out", out] + JOB,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    end = time.time() + JOIN_DEADLINE_S
    while time.time() < end and p.poll() is None and not rejoined(history(out)):
        time.sleep(0.2)
    joined = rejoined(history(out))
    check(joined and p.poll() is None, "the crashed worker was restarted and rejoined while the run went on")
    p.send_signal(signal.SIGINT)
    try:
        first_out, _ = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        first_out, _ = p.communicate()
    check(p.returncode == 130, "Ctrl-C: tagctl run exits 130 (%s)" % p.returncode)
    r = subprocess.run([tagctl, "run", "--out", out] + JOB, capture_output=True, text=True, timeout=600)
    check(r.returncode == 0, "the same command again resumes and finishes (status %d)" % r.returncode)

    want = {"runs": 2, "failures": 1, "failures_by_kind": {"crash": 1}, "recoveries": 1,
            "leaves": 0, "interrupts": 1, "restarts": 1}
    summary = json.load(open(os.path.join(out, "summary.json")))
    hist = summary.get("history", {})
    joins = hist.get("joins", 0)
    check({k: hist.get(k) for k in want} == want and joins >= 1,
          "summary.json history: %s" % hist)

    s = subprocess.run([tagctl, "status", out, "--json"], capture_output=True, text=True, timeout=60)
    status = json.loads(s.stdout) if s.returncode == 0 else {}
    check(status.get("history") == hist and status.get("state") == "done" and status.get("step") == 1200,
          "tagctl status OUT --json: the same counts, done at step 1200 (%s)" % s.stdout.strip())
    s = subprocess.run([tagctl, "status", out], capture_output=True, text=True, timeout=60)
    tally = "1 failure (crash 1), 1 recovery, %d join%s, 0 leaves, 1 interrupt, 1 restart" % (
        joins, "" if joins == 1 else "s")
    check(s.returncode == 0 and ("history     2 runs; " + tally) in s.stdout,
          "tagctl status OUT (text): %s" % [l for l in s.stdout.splitlines() if l.startswith("history")])

    svg = os.path.join(tmp, "p.svg")
    r = subprocess.run([tagctl, "plot", out, "--svg", svg, "--png", os.path.join(tmp, "p.png")]
                       if shutil.which("gnuplot") else [tagctl, "plot", out, "--svg", svg],
                       capture_output=True, text=True, timeout=120)
    root = ET.parse(svg).getroot()
    title = next(root.iter(SVG + "text")).text
    check(r.returncode == 0 and (tally + ", 2 runs") in title, "plot title: %s" % title)
    marks = {}
    for g in root.iter(SVG + "g"):
        marks.setdefault(g.get("class"), []).append(g.find(SVG + "title").text)
    check(len(marks.get("failure", [])) == 1 and marks["failure"][0].startswith("crash, w2 lost"),
          "plot: one failure marker, a crash of w2 (%s)" % marks.get("failure"))
    check(len(marks.get("join", [])) == joins and all("w2 joined" in t for t in marks["join"]),
          "plot: %d join marker(s) for w2 (%s)" % (joins, marks.get("join")))
    check(len(marks.get("interrupt", [])) == 1 and len(marks.get("resume", [])) == 1
          and "run 2 resumes" in marks["resume"][0],
          "plot: one interrupt and one resume marker (%s, %s)" % (marks.get("interrupt"), marks.get("resume")))
    check(not {"recovery", "world-change", "leave"} & set(marks),
          "plot: the rejoin and the Ctrl-C are not drawn as failures (%s)" % sorted(marks))
    # labels: same row (y) => disjoint extents, at the plot's own estimate of a character
    boxes = []
    for g in root.iter(SVG + "g"):
        t = g.find(SVG + "text")
        if t is None:
            continue
        x, w = float(t.get("x")), 6.2 * len(t.text)
        boxes.append((float(t.get("y")), x - w if t.get("text-anchor") == "end" else x,
                      x if t.get("text-anchor") == "end" else x + w))
    clash = [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:]
             if a[0] == b[0] and a[1] < b[2] and b[1] < a[2]]
    check(len(boxes) >= 3 and not clash, "plot: %d labels, none overlapping (%s)" % (len(boxes), clash))
    r = subprocess.run([tagctl, "plot", out, "--x", "time", "--svg", svg], capture_output=True,
                       text=True, timeout=120)
    texts = [t.text for t in ET.parse(svg).getroot().iter(SVG + "text")]
    check(r.returncode == 0 and any(re.fullmatch(r"(seconds|minutes|hours) since the first step", t or "")
                                    for t in texts), "plot --x time: a wall-clock axis")

check.exit()
