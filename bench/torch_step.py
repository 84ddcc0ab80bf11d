"""Tokens per second of one torch training step of the tagc GPT model (the torch.nn twin in
tests/model/torch_gpt.py): zero_grad, forward, backward, clip_grad_norm_(1.0), AdamW step.

Usage: torch_step.py L C NH T B [STEPS [WARMUP [THREADS]]]  (vocab 256). Prints the BLAS that
torch uses, then one line with the median step time and tokens/s, in the format of
bench_model_step.
"""
import os
import re
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "worker"))
from torch_gpt import GPT  # noqa: E402


def blas_in_use():
    """The BLAS libraries mapped into this process, and torch's own build note."""
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if "blas" in os.path.basename(path) or "lapack" in os.path.basename(path):
                libs.add(os.path.realpath(path))
    info = re.findall(r"BLAS_INFO=\w+", torch.__config__.show())
    return sorted(libs), info


def main(argv):
    if len(argv) < 6:
        print(__doc__)
        return 2
    L, C, NH, T, B = (int(x) for x in argv[1:6])
    steps = int(argv[6]) if len(argv) > 6 else 10
    warmup = int(argv[7]) if len(argv) > 7 else 3
    threads = int(argv[8]) if len(argv) > 8 else int(os.environ.get("OMP_NUM_THREADS", "1"))
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    model = GPT(256, T, L, NH, C)
    layout = model.layout()
    opt = torch.optim.AdamW([{"params": [p for _, p, d in layout if d], "weight_decay": 0.1},
                             {"params": [p for _, p, d in layout if not d], "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    tokens = torch.randint(0, 256, (B, T))
    targets = torch.randint(0, 256, (B, T))
    params = [p for _, p, _ in layout]
    times = []
    for s in range(warmup + steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = model(tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if s >= warmup:
            times.append(time.perf_counter() - t0)
    libs, info = blas_in_use()
    print(f"torch {torch.__version__} threads={torch.get_num_threads()} {' '.join(info)} "
          f"blas libraries mapped: {' '.join(libs) or 'none'}")
    med = statistics.median(times)
    n = sum(p.numel() for p in params)
    print(f"torch L={L} C={C} NH={NH} T={T} B={B} params={n} step_ms={med * 1e3:.2f} "
          f"tokens_per_s={B * T / med:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
