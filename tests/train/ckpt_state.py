#!/usr/bin/env python3
"""Compares the full training state held by two committed checkpoints of the same job and
world size (docs/checkpoint-format.md): per unit, the streams param, adam_m, adam_v and
residual, gathered from every rank's shard file.

  ckpt_state.py same DIR_A DIR_B    exit 0 when every stream is equal: param, adam_m and
                                    adam_v bit for bit, residual value for value (a snapshot
                                    sums residual shards, which may turn -0.0 into +0.0)
  ckpt_state.py differ DIR_A DIR_B  exit 0 when the parameters differ (a step was applied)
Prints per stream how many elements differ, and the residual's non-zero count."""
import json
import os
import struct
import sys


def load(d):
    man = json.load(open(os.path.join(d, "manifest.json")))
    streams = man["streams"]
    state = {}  # (unit, stream) -> {element index: raw 4 bytes}
    for f in man["files"]:
        raw = open(os.path.join(d, f["file"]), "rb").read()
        if raw[:8] != b"TAGCSHRD":
            sys.exit("%s: not a shard file" % f["file"])
        header, n_units, n_streams = struct.unpack_from("<I", raw, 12)[0], *struct.unpack_from("<II", raw, 32)
        ranges = [struct.unpack_from("<qq", raw, 64 + 16 * u) for u in range(n_units)]
        off = header
        for u, (lo, hi) in enumerate(ranges):
            for s in range(n_streams):
                n = hi - lo
                vals = state.setdefault((man["units"][u]["name"], streams[s]), {})
                for i in range(n):
                    vals[lo + i] = raw[off + 4 * i: off + 4 * i + 4]
                off += 4 * n
    return state


def main():
    mode, a_dir, b_dir = sys.argv[1], sys.argv[2], sys.argv[3]
    a, b = load(a_dir), load(b_dir)
    if a.keys() != b.keys():
        print("FAILED: the checkpoints hold other units or streams")
        return 1
    diff = {}
    nonzero = 0
    for key in sorted(a):
        va, vb = a[key], b[key]
        if va.keys() != vb.keys():
            print("FAILED: %s: other element ranges" % (key,))
            return 1
        if key[1] == "residual":
            fa = {i: struct.unpack("<f", v)[0] for i, v in va.items()}
            fb = {i: struct.unpack("<f", v)[0] for i, v in vb.items()}
            n = sum(1 for i in fa if not (fa[i] == fb[i]))
            nonzero += sum(1 for x in fa.values() if x != 0)
        else:
            n = sum(1 for i in va if va[i] != vb[i])
        diff[key[1]] = diff.get(key[1], 0) + n
    print("elements that differ: %s; non-zero residual elements: %d" % (diff, nonzero))
    if mode == "same":
        return 0 if all(n == 0 for n in diff.values()) else 1
    return 0 if diff.get("param", 0) > 0 else 1


sys.exit(main())
