#!/usr/bin/env python3
"""check_layers.py can fail: on a copy of the source tree it passes, and an upward include
planted in it (model/ -> engine/, engine/ -> cluster/ sideways, worker/ -> coordinator/) makes
it exit 1 naming the file, the line and both floors.

usage: test_check_layers.py SOURCE_DIR
"""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, "check_layers.py")
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import check_layers  # noqa: E402  (its FLOORS: the folders to copy)

failures = []


def expect(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def run(root):
    p = subprocess.run([sys.executable, CHECK, root], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def copy_tree(src, dst):
    keep = check_layers.SOURCES
    for folder in check_layers.FLOORS:
        shutil.copytree(os.path.join(src, folder), os.path.join(dst, folder),
                        ignore=lambda d, names: [n for n in names if not os.path.isdir(
                            os.path.join(d, n)) and not n.endswith(keep)])


def plant(root, path, include):
    full = os.path.join(root, path)
    with open(full, "w") as f:
        f.write(f'/* planted by test_check_layers */\n#include "{include}"\n')
    return full


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="tagc-layers-") as tmp:
        copy_tree(sys.argv[1], tmp)
        rc, out = run(tmp)
        expect(rc == 0, f"the source tree passes (exit {rc})")
        expect("0 upward or sideways includes" in out, "and says so")
        cases = [
            ("model/planted.c", "engine/engine.h", "model/planted.c:2: model/ (floor 2) includes "
             "engine/ (floor 3)"),
            ("engine/planted.h", "cluster/etcd.h", "engine/planted.h:2: engine/ (floor 3) "
             "includes cluster/ (floor 3)"),
            ("worker/planted.c", "coordinator/planner.h", "worker/planted.c:2: worker/ (floor 4) "
             "includes coordinator/ (floor 4)"),
        ]
        for path, include, message in cases:
            full = plant(tmp, path, include)
            rc, out = run(tmp)
            expect(rc == 1, f"{path} including {include}: exit 1 (got {rc})")
            expect(message in out, f"the message names it: {message!r}")
            expect("1 upward or sideways includes" in out, "exactly that one include is counted")
            os.remove(full)
        rc, _ = run(tmp)
        expect(rc == 0, f"clean again once the planted files are gone (exit {rc})")
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
