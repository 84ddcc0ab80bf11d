#!/usr/bin/env python3
"""Fails when a source file includes a header from a higher floor (docs/architecture.md, Floors).

Floors, lowest first; an include may point down, or to its own folder, never up or sideways:
    common < kernels, comm, ckpt, data < model < engine, cluster < worker, coordinator
           < tagctl, bench
usage: check_layers.py SOURCE_DIR
"""
import os
import re
import sys

FLOORS = {
    "common": 0,
    "kernels": 1, "comm": 1, "ckpt": 1, "data": 1,
    "model": 2,
    "engine": 3, "cluster": 3,
    "worker": 4, "coordinator": 4,
    "tagctl": 5, "bench": 5,
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')
SOURCES = (".c", ".h", ".cc", ".cu", ".cuh")


def violations(root):
    found = []
    for folder, floor in FLOORS.items():
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for name in sorted(files):
                if not name.endswith(SOURCES):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m or m.group(1) == folder:
                            continue
                        target = m.group(1)
                        if target not in FLOORS:
                            found.append(f"{os.path.relpath(path, root)}:{lineno}: includes "
                                         f"unknown folder '{target}/'")
                        elif FLOORS[target] >= floor:
                            found.append(f"{os.path.relpath(path, root)}:{lineno}: {folder}/ "
                                         f"(floor {floor}) includes {target}/ (floor {FLOORS[target]})")
    return found


def main():
    if len(sys.argv) != 2:
        print("usage: check_layers.py SOURCE_DIR", file=sys.stderr)
        return 2
    root = sys.argv[1]
    missing = [f for f in FLOORS if not os.path.isdir(os.path.join(root, f))]
    if missing:
        print(f"check_layers: missing folders: {', '.join(missing)}", file=sys.stderr)
        return 1
    bad = violations(root)
    for b in bad:
        print(b)
    checked = sum(1 for f in FLOORS for _, _, fs in os.walk(os.path.join(root, f))
                  for n in fs if n.endswith(SOURCES))
    print(f"check_layers: {checked} files, {len(bad)} upward or sideways includes")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
