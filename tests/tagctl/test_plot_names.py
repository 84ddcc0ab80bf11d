#!/usr/bin/env python3
"""tagctl plot on run folders whose names are hostile to gnuplot and to XML: a newline followed
by a gnuplot system() call, a single quote, a backslash, a backquote, an @ macro and a control
character. Nothing in a name runs (no PWNED file appears), the SVG parses, and the PNG (when
gnuplot is installed) is written where it was asked, also at a hostile --png path. No etcd: the
metrics are hand-written. usage: test_plot_names.py BINDIR"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "chaos"))
from harness import Checks  # noqa: E402

tagctl = os.path.join(sys.argv[1], "tagctl")
check = Checks()
gnuplot = shutil.which("gnuplot") is not None
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

tmp = tempfile.mkdtemp(prefix="tagc-plotnames-")
pwned = os.path.join(tmp, "PWNED")
rows = [{"step": s, "time": 1000.0 + s, "loss": 5.0 - 0.1 * s, "tokens_per_s": 100.0 + s,
         "generation": 1 if s < 4 else 2, "world_size": 2} for s in (1, 2, 3, 4, 3, 4, 5)]
names = {
    "newline + system()": 'pl\nsystem("touch %s")\n#' % pwned,
    "carriage return + system()": "pl\rsystem('touch %s')\r#" % pwned,
    "single quote": "it's'\nsystem('touch %s')\n'" % pwned,
    "backslash": "back\\slash\\'\\n",
    "backquote and @": "`touch %s` @x" % pwned,
    "control character": "ctl\x01\x1b[31m",
}
try:
    for what, name in names.items():
        d = os.path.join(tmp, name)
        os.makedirs(d)
        with open(os.path.join(d, "metrics.jsonl"), "w") as f:
            f.write("".join(json.dumps(r) + "\n" for r in rows))
        r = subprocess.run([tagctl, "plot", d], capture_output=True, timeout=60)
        svg, png = os.path.join(d, "plot.svg"), os.path.join(d, "plot.png")
        check(r.returncode == 0 and not os.path.exists(pwned),
              "%s: status 0, nothing run (status %d, PWNED %s: %s)"
              % (what, r.returncode, os.path.exists(pwned), r.stderr.decode(errors="replace").strip()))
        try:
            title = ET.parse(svg).getroot().find("{http://www.w3.org/2000/svg}text").text
            parsed = "steps 1-5" in title
        except (OSError, ET.ParseError) as e:
            parsed, title = False, str(e)
        check(parsed, "%s: the SVG parses, its title names the steps (%r)" % (what, title))
        if gnuplot:
            ok = os.path.exists(png) and open(png, "rb").read(8) == PNG_MAGIC
            check(ok, "%s: OUT/plot.png written by gnuplot" % what)
            own = os.path.join(d, "own\n'name.png")
            r = subprocess.run([tagctl, "plot", d, "--png", own, "--svg", os.path.join(d, "own.svg")],
                               capture_output=True, timeout=60)
            ok = r.returncode == 0 and os.path.exists(own) and open(own, "rb").read(8) == PNG_MAGIC
            check(ok and r.stdout.decode().endswith(own + "\n") and not os.path.exists(pwned),
                  "%s: --png at a hostile path (status %d)" % (what, r.returncode))
        if os.path.exists(pwned):
            os.unlink(pwned)
    missing = os.path.join(tmp, "no-such-dir", "x.png")
    if gnuplot:
        r = subprocess.run([tagctl, "plot", d, "--png", missing], capture_output=True, text=True, timeout=60)
        err = r.stderr.strip().splitlines()
        check(r.returncode == 1 and len(err) == 1 and missing in err[0] and not os.path.exists(missing),
              "--png in a missing folder: status 1, one line naming it (%s)" % err)
finally:
    shutil.rmtree(tmp, ignore_errors=True)

check.exit()
