#!/usr/bin/env python3
"""Bytes sent per step and rank, measured by the communication layer's counters, equal the
analytic formula of docs/compression.md within 2% for each compression policy.

Per rank and step, with W ranks, M micro-batches, and each segment of len elements split in
shards of S = roundup(ceil(len / W), 1024) elements:
  all-gather of parameters   2 M (W-1) S g       (before forward and before backward;
                                                  M (W-1) S g for the embedding unit, whose
                                                  backward needs no parameters; (W-1) S g
                                                  for every unit with
                                                  --reshard-after-forward false: gathered
                                                  once per step); g = 4 bytes
                                                  (fp32 gathers) or 2 (bf16: --gather auto
                                                  picks it when any role is compressed);
                                                  int8: the q8 chunk, S + 4 ceil(S / 256)
                                                  bytes rounded up to 16, instead of S g
  reduce-scatter, none       (W-1) S 4
  reduce-scatter, bf16       (W-1) S 2
  tagc: bitmap OR            (W-1) (S / 64) 8
        sketch               (W-1) R K 2         (bf16 wire), R = sketch rows at rho, K the
                                                  lanes (kernels/layout.h: the largest power
                                                  of two <= 1024 leaving >= 1024 blocks of K
                                                  elements per lane, at least 32)
  protocol overhead          (W-1) 8 (6 + segments)   (one all-gather of per-step scalars)
"""
import json
import math
import os
import subprocess
import sys
import tempfile

tagctl = sys.argv[1]
C, L, V, T, NH = 64, 2, 256, 64, 4


def lanes(shard):
    k = 1024
    while k > 32 and shard // k < 1024:
        k //= 2
    return k


def rows(shard, rho):
    g = shard // lanes(shard)
    r = max(math.ceil(g / rho), 3)
    while math.comb(r, 3) < 4 * g:
        r += 1
    return r


def segments(policy):
    """(len, kind) of every segment, in the engine's order (roles of one policy merge)."""
    units = [[("tok_emb", V * C), ("pos_emb", T * C)]]
    for _ in range(L):
        units.append([("norm", 4 * C), ("attn_qkv", 3 * C * C + 3 * C), ("attn_proj", C * C + C),
                      ("mlp_fc", 4 * C * C + 4 * C), ("mlp_proj", 4 * C * C + C)])
    units.append([("norm", 2 * C), ("head", V * C)])
    segs = []
    for u, unit in enumerate(units):
        first = len(segs)
        for role, n in unit:
            kind = policy[role]
            if len(segs) > first and segs[-1][1] == kind:
                segs[-1] = (segs[-1][0] + n, kind, u)
            else:
                segs.append((n, kind, u))
    return units, segs


def expected(policy, W, M, rho, gather_bytes, reshard=True):
    units, segs = segments(policy)
    total = 0
    for n, kind, unit in segs:
        S = math.ceil(math.ceil(n / W) / 1024) * 1024
        chunk = (S + 4 * math.ceil(S / 256) + 15) // 16 * 16 if gather_bytes == 1 else S * gather_bytes
        gathers = (M if unit == 0 else 2 * M) if reshard else 1
        total += gathers * (W - 1) * chunk
        if kind == "none":
            total += (W - 1) * S * 4
        elif kind == "bf16":
            total += (W - 1) * S * 2
        else:
            total += (W - 1) * (S // 64) * 8 + (W - 1) * rows(S, rho) * lanes(S) * 2
    return total + (W - 1) * 8 * (6 + len(segs))


def policy_of(name):
    roles = ["tok_emb", "pos_emb", "norm", "attn_qkv", "attn_proj", "mlp_fc", "mlp_proj", "head"]
    if name in ("none", "bf16"):
        return {r: name for r in roles}
    p = {r: "tagc" for r in roles}
    p.update(norm="none", attn_qkv="bf16", attn_proj="bf16")
    return p


RHO = 2.0
SPEC = {"none": "none", "bf16": "bf16",
        "tagc": "tagc,mlp=tagc:0.1:2,tok_emb=tagc:0.1:2,pos_emb=tagc:0.1:2,head=tagc:0.1:2"}
# (policy, --gather, bytes per gathered element; 1 = int8 chunks, --reshard-after-forward):
# the defaults (auto) and the explicit settings
CASES = [("none", "auto", 4, "auto"), ("bf16", "auto", 2, "auto"), ("tagc", "auto", 2, "auto"),
         ("none", "bf16", 2, "auto"), ("tagc", "fp32", 4, "auto"), ("tagc", "int8", 1, "auto"),
         ("none", "fp32", 4, "false"), ("tagc", "int8", 1, "false")]
passed = failed = 0
with tempfile.TemporaryDirectory() as tmp:
    for W, M in ((2, 1), (3, 2)):
        for name, gather, gather_bytes, reshard in CASES:
            spec = SPEC[name]
            out = os.path.join(tmp, "%s-%s-%s%d" % (name, gather, reshard, W))
            batch = 6
            subprocess.run([tagctl, "run", "--workers", str(W), "--steps", "4", "--layers", str(L),
                            "--dim", str(C), "--heads", str(NH), "--ctx", str(T), "--batch",
                            str(batch), "--micro-batch", str(math.ceil(batch / W / M)),
                            "--compress", spec, "--gather", gather, "--reshard-after-forward",
                            reshard, "--ckpt-every", "0", "--compress-warmup", "0",
                            "--eval-every", "0",
                            "--eval-windows", "6", "--log", "warn", "--out", out],
                           check=True, stdout=subprocess.DEVNULL)
            rows_ = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
            got = sorted(r["bytes_sent"] for r in rows_)[len(rows_) // 2]
            want = expected(policy_of(name), W, M, RHO, gather_bytes, reshard != "false")
            err = abs(got - want) / want
            ok = err <= 0.02
            print("W=%d M=%d %-5s gather %-4s reshard %-5s measured %9d  formula %9d  error %.4f%%  %s"
                  % (W, M, name, gather, reshard, got, want, 100 * err, "ok" if ok else "FAILED"))
            passed += ok
            failed += not ok
print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
