#!/usr/bin/env python3
"""Which sketch lane count would let small shards compress (issue 13, tiny default model).

A model, not the kernels: for each tagc segment of a GPT model at world size W it takes the
shard the engine cuts (S = roundup(ceil(len / W), 1024)), splits it into blocks of `lanes`
elements (the kernels fix lanes = 1024, kernels/layout.h), sizes the sketch rows with the
advisor's formula (kernels/rho.c: the densest lane's density x 1.1 headroom; the densest lane
is estimated as mean + 2.5 sigma of a binomial lane), and peels random distinct row triples
with i.i.d. items at the measured union density, `trials` layouts x `lanes` lanes each.
Prints blocks G, rows R, rho = G / R and the items left unpeeled. Deterministic (seeded).
usage: sketch_lanes_sim.py [--layers 2] [--dim 64] [--vocab 256] [--ctx 64] [--world 2]
                           [--density 0.0945] [--trials 40]"""
import argparse
import math
import random

LIMIT, SLOPE, LOAD_MAX, HEADROOM = 0.8185, 4.5, 0.78, 1.1  # kernels/rho.h, engine/grad_codec.c


def advised_rows(density, blocks):
    m = density * blocks
    s = (SLOPE + math.sqrt(SLOPE * SLOPE + 4 * LIMIT * m)) / (2 * LIMIT)
    return max(math.ceil(s * s), math.ceil(m / LOAD_MAX), 3)


def triples(blocks, rows, rng):
    seen, out = set(), []
    for _ in range(blocks):
        while True:
            t = tuple(sorted(rng.sample(range(rows), 3)))
            if t not in seen:
                seen.add(t)
                out.append(t)
                break
    return out


def unpeeled(items, tri, rows):
    count = [0] * rows
    members = [[] for _ in range(rows)]
    for i in items:
        for r in tri[i]:
            count[r] += 1
            members[r].append(i)
    alive = set(items)
    stack = [r for r in range(rows) if count[r] == 1]
    while stack:
        r = stack.pop()
        if count[r] != 1:
            continue
        i = next(x for x in members[r] if x in alive)
        alive.discard(i)
        for q in tri[i]:
            count[q] -= 1
            if count[q] == 1:
                stack.append(q)
    return len(alive)


ap = argparse.ArgumentParser()
ap.add_argument("--layers", type=int, default=2)
ap.add_argument("--dim", type=int, default=64)
ap.add_argument("--vocab", type=int, default=256)
ap.add_argument("--ctx", type=int, default=64)
ap.add_argument("--world", type=int, default=2)
ap.add_argument("--density", type=float, default=0.0945)  # union density the default job measured
ap.add_argument("--trials", type=int, default=40)
a = ap.parse_args()
C, Vp = a.dim, (a.vocab + 127) // 128 * 128
segments = [("emb", Vp * C + a.ctx * C), ("mlp", 8 * C * C + 5 * C), ("head", Vp * C)]
rng = random.Random(1)
print("segment  len  shard  lanes  G  R  rho  unpeeled/items")
for name, n in segments:
    S = (-(-n // a.world) + 1023) // 1024 * 1024
    for lanes in (1024, 256, 64, 32):
        G = S // lanes
        mean = a.density * G
        peak = min(1.0, (mean + 2.5 * math.sqrt(G * a.density * (1 - a.density))) / G)
        R = advised_rows(min(1.0, HEADROOM * peak), G)
        bad = total = 0
        for _ in range(a.trials):
            tri = triples(G, R, rng)
            for _ in range(lanes):
                items = [b for b in range(G) if rng.random() < a.density]
                total += len(items)
                bad += unpeeled(items, tri, R)
        print("%-6s %6d %6d %5d %4d %4d %5.2f  %d/%d" % (name, n, S, lanes, G, R, G / R, bad, total))
