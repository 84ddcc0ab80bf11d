#!/usr/bin/env python3
"""tagctl plot and tagctl metrics on a real elastic run whose last worker crashes
(`tagctl run --workers 2 --fault crash@15 --max-restarts 0`): the SVG marks the failure as
OUT/history.jsonl records it (kind, the lost worker, the new world, the step resumed from),
with one line per generation; a PNG comes from gnuplot when it is installed, and asking for one without gnuplot
is an error; the CSV has a fixed header and the values of metrics.jsonl. Hand-written rows
check the wall-clock `time` field, unknown fields and a line cut short. Skipped (77) without
etcd. usage: test_plot.py BINDIR"""
import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "chaos"))
from harness import Checks  # noqa: E402

if not shutil.which("etcd"):
    print("etcd not found: skipped")
    sys.exit(77)

tagctl = os.path.join(sys.argv[1], "tagctl")
check = Checks()
SVG = "{http://www.w3.org/2000/svg}"
KNOWN = ["step", "time", "elapsed_s", "generation", "world_size", "loss", "val_loss"]


def run(*args, env=None, timeout=240):
    return subprocess.run([tagctl] + list(args), capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **(env or {})))


def markers(svg_path):
    """{class: [title text]} of the marker groups of an SVG."""
    found = {}
    for g in ET.parse(svg_path).getroot().iter(SVG + "g"):
        found.setdefault(g.get("class"), []).append(g.find(SVG + "title").text)
    return found


def polylines(svg_path, cls):
    return [p for p in ET.parse(svg_path).getroot().iter(SVG + "polyline") if p.get("class") == cls]


tmp = tempfile.mkdtemp(prefix="tagc-plot-")
try:
    out = os.path.join(tmp, "out")
    r = run("run", "--workers", "2", "--steps", "30", "--ckpt-every", "10", "--eval-every", "10",
            "--eval-windows", "8", "--batch", "8", "--threads", "1", "--fault", "crash@15",
            "--max-restarts", "0",  # the crashed worker stays gone: the world shrinks 2 -> 1
            "--out", out, timeout=280)
    check(r.returncode == 0, "tagctl run --workers 2 --fault crash@15 (status %d)" % r.returncode)
    summary = json.load(open(os.path.join(out, "summary.json")))
    check(summary["failures"] == 1 and summary["recoveries"] == 1 and summary["world_size"] == 1,
          "summary.json: 1 failure, 1 recovery, finished at world size 1")
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if l.strip()]

    gnuplot = shutil.which("gnuplot") is not None
    r = run("plot", out)
    svg, png = os.path.join(out, "plot.svg"), os.path.join(out, "plot.png")
    check(r.returncode == 0 and r.stdout.splitlines() == [svg] + ([png] if gnuplot else []),
          "tagctl plot OUT: writes OUT/plot.svg%s (status %d: %s)"
          % (" and OUT/plot.png" if gnuplot else "", r.returncode, r.stderr.strip()))
    m = markers(svg)
    resumed = summary["resumed_from"]
    # OUT/history.jsonl says what happened: one failure marker naming its kind, the worker
    # lost, the new generation's world, the last step before it and the step resumed from
    fail = m.get("failure", [])
    check(len(fail) == 1 and fail[0].startswith("crash, w1 lost") and "gen 2 on 1" in fail[0]
          and "after step 15" in fail[0] and ("resumed at step %d" % resumed) in fail[0],
          "SVG: one failure marker: crash, w1 lost, gen 2 on 1, after step 15, resumed at step %d (%s)"
          % (resumed, fail))
    check(set(m) == {"failure"}, "SVG: no other marker (no join, leave, interrupt; %s)" % sorted(m))
    check(len(polylines(svg, "train-loss")) == 2 and len(polylines(svg, "tokens-per-s")) == 2
          and len(polylines(svg, "tokens-per-s-smoothed")) == 2,
          "SVG: train loss and tokens/s (raw and smoothed) drawn as one line per generation")
    n_val = sum(1 for row in rows if "val_loss" in row)
    circles = [c for c in ET.parse(svg).getroot().iter(SVG + "circle") if c.get("class") == "val-loss"]
    check(n_val >= 3 and len(circles) == n_val, "SVG: a point per validation loss (%d)" % n_val)
    if gnuplot:
        data = open(png, "rb").read()
        check(data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, "PNG written by gnuplot (%d bytes)" % len(data))
        own = os.path.join(tmp, "x.png")
        r = run("plot", out, "--png", own, "--svg", os.path.join(tmp, "x.svg"))
        check(r.returncode == 0 and open(own, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
              and os.path.exists(os.path.join(tmp, "x.svg")), "--png FILE --svg FILE")
    nogp = os.path.join(tmp, "empty-path")
    os.mkdir(nogp)
    r = run("plot", out, "--png", os.path.join(tmp, "y.png"), env={"PATH": nogp})
    err = r.stderr.strip().splitlines()
    check(r.returncode == 1 and len(err) == 1 and "--png needs gnuplot" in err[0]
          and not os.path.exists(os.path.join(tmp, "y.png")),
          "--png without gnuplot in PATH: status 1, one line (%s)" % err)
    r = run("plot", out, "--svg", os.path.join(tmp, "z.svg"), env={"PATH": nogp})
    check(r.returncode == 0 and r.stdout.strip() == os.path.join(tmp, "z.svg"),
          "without gnuplot and without --png: the SVG only, status 0")

    # ---- metrics --csv ----
    r = run("metrics", out, "--csv")
    table = list(csv.reader(io.StringIO(r.stdout)))
    check(r.returncode == 0 and table[0][:len(KNOWN)] == KNOWN and len(table) == len(rows) + 1,
          "metrics --csv: header %s..., one row per line of metrics.jsonl (%d)" % (KNOWN, len(rows)))
    col = {name: i for i, name in enumerate(table[0])}
    same = all(float(t[col["loss"]]) == row["loss"] and int(t[col["step"]]) == row["step"]
               and int(t[col["generation"]]) == row["generation"]
               and float(t[col["paths.bf16"]]) == row["paths"]["bf16"]
               and (t[col["val_loss"]] == "") == ("val_loss" not in row)
               for t, row in zip(table[1:], rows))
    check(same, "metrics --csv: step, generation, loss, val_loss and paths.bf16 equal the JSON values exactly")
    r = run("metrics", out)
    check(r.returncode == 0 and r.stdout.splitlines()[0].split()[:3] == ["STEP", "GEN", "WORLD"]
          and len(r.stdout.splitlines()) == len(rows) + 1, "metrics (table): a header and a line per row")

    # ---- hand-written rows: time, unknown fields, a line cut short ----
    hand = os.path.join(tmp, "hand")
    os.mkdir(hand)
    lines = [{"step": 1, "time": 1000.0, "loss": 5.0, "tokens_per_s": 100.0, "generation": 1, "world_size": 3, "zeta": 1},
             {"step": 2, "time": 1001.0, "loss": 4.5, "tokens_per_s": 110.0, "generation": 1, "world_size": 3, "alpha": "a,\"b\""},
             {"step": 2, "time": 1004.5, "loss": 4.6, "tokens_per_s": 90.0, "generation": 2, "world_size": 3},
             {"step": 3, "time": 1005.0, "loss": 4.1, "val_loss": 4.2, "tokens_per_s": 95.0, "generation": 3, "world_size": 4}]
    with open(os.path.join(hand, "metrics.jsonl"), "w") as f:
        f.write("".join(json.dumps(l) + "\n" for l in lines) + '{"step": 4, "loss"')
    r = run("plot", hand, "--svg", os.path.join(hand, "p.svg"))
    m = markers(os.path.join(hand, "p.svg"))
    check(r.returncode == 0 and "1 line is not a JSON object (skipped)" in r.stderr, "plot: a cut line is skipped with a warning")
    check(m.get("recovery") == ["recovery: resumed at step 1 (gen 2, next step 3.5 s after the last)"]
          and m.get("world-change") == ["world 3 -> 4"],
          "plot: recovery time from the `time` field, a world size change without a failure (%s)" % m)
    r = run("metrics", hand, "--csv")
    table = list(csv.reader(io.StringIO(r.stdout)))
    check(r.returncode == 0 and table[0][-2:] == ["alpha", "zeta"] and table[2][-2] == 'a,"b"'
          and table[1][1] == "1000.0" and len(table) == 5,
          "metrics --csv: unknown fields last, sorted; quoted text; the time column")

    for cmd in ("plot", "metrics"):
        r = run(cmd, os.path.join(tmp, "nothing"))
        err = r.stderr.strip().splitlines()
        check(r.returncode == 2 and len(err) == 1 and "No such file" in err[0], "%s of a missing OUT: status 2, one line" % cmd)
    r = run("plot")
    check(r.returncode == 2 and r.stderr.startswith("usage: tagctl plot"), "plot without OUT: usage, status 2")
finally:
    shutil.rmtree(tmp, ignore_errors=True)

check.exit()
