#!/usr/bin/env python3
"""The engine, the model and the data link no etcd client: no libcurl among the shared
libraries of their test binaries, nor of probes linked against tagc_engine, tagc_model and
tagc_data without --as-needed (which would otherwise hide a library that is linked but not
called). tagc-worker and a probe of tagc_worker do link it, so the check can fail.

usage: test_no_curl.py --without FILE... --with FILE...
"""
import re
import shutil
import subprocess
import sys


def needed(path):
    """The DT_NEEDED entries of an ELF file (objdump -p, else readelf -d)."""
    if shutil.which("objdump"):
        out = subprocess.run(["objdump", "-p", path], capture_output=True, text=True,
                             check=True).stdout
        return re.findall(r"^\s*NEEDED\s+(\S+)", out, re.M)
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\).*\[(.+?)\]", out)


def main():
    groups = {"--without": [], "--with": []}
    current = None
    for arg in sys.argv[1:]:
        if arg in groups:
            current = arg
        elif current:
            groups[current].append(arg)
        else:
            print(__doc__, file=sys.stderr)
            return 2
    if not groups["--without"] or not groups["--with"]:
        print(__doc__, file=sys.stderr)
        return 2
    bad = 0
    for want, files in (("--without", groups["--without"]), ("--with", groups["--with"])):
        for path in files:
            curl = [n for n in needed(path) if n.startswith("libcurl")]
            ok = not curl if want == "--without" else bool(curl)
            print(f"{'ok  ' if ok else 'FAIL'} {path}: "
                  f"{', '.join(curl) if curl else 'no libcurl'} (expected {want[2:]} libcurl)")
            bad += not ok
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
