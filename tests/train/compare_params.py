#!/usr/bin/env python3
"""Compares two raw fp32 parameter dumps: prints the max relative difference
max|a-b| / max|b| and exits 1 when it exceeds the tolerance."""
import array
import sys

a_path, b_path, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
a, b = array.array("f"), array.array("f")
a.frombytes(open(a_path, "rb").read())
b.frombytes(open(b_path, "rb").read())
if len(a) != len(b) or not a:
    print("FAILED: sizes %d vs %d" % (len(a), len(b)))
    sys.exit(1)
diff = max(abs(x - y) for x, y in zip(a, b))
scale = max(abs(y) for y in b)
rel = diff / scale
print("max |a-b| = %.3g, max |b| = %.3g, relative %.3g (tolerance %.1g)" % (diff, scale, rel, tol))
sys.exit(0 if rel <= tol else 1)
