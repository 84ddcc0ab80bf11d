"""Checks one C AdamW step (with clipping) against torch.optim.AdamW.

Usage: adamw_ref.py FILE, where FILE was written by test_adamw_torch (format documented in
tests/model/test_adamw_torch.c). Exits 0 when params, exp_avg and exp_avg_sq of every
tensor agree within a max relative error of 1e-6, 1 on a mismatch, 77 without torch.
"""
import os
import sys

try:
    import torch
except ImportError:
    print("SKIP: torch is not importable by", sys.executable)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt import GPT, Reader, max_rel_err  # noqa: E402

TOLERANCE = 1e-6


def main(path):
    r = Reader(path)
    r.magic(b"TAGCAREF")
    V, T, L, NH, C = r.ints(5)
    n, step = r.ints(2, torch.int64, 8)
    lr, beta1, beta2, eps, wd, clip = [float(x) for x in r.tensor(6)]
    p0, g, m0, v0 = (r.tensor(n) for _ in range(4))
    p1, m1, v1 = (r.tensor(n) for _ in range(3))
    r.end()

    model = GPT(V, T, L, NH, C)
    model.load_flat(p0)
    layout = model.layout()
    decay = [p for _, p, d in layout if d]
    no_decay = [p for _, p, d in layout if not d]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(beta1, beta2), eps=eps)
    off = 0
    for _, p, _ in layout:
        k = p.numel()
        p.grad = g[off:off + k].view_as(p).clone()
        opt.state[p] = {"step": torch.tensor(float(step - 1)),
                        "exp_avg": m0[off:off + k].view_as(p).clone(),
                        "exp_avg_sq": v0[off:off + k].view_as(p).clone()}
        off += k
    norm = torch.nn.utils.clip_grad_norm_([p for _, p, _ in layout], clip)
    opt.step()

    ok, worst, worst_name, off = True, -1.0, "", 0
    for name, p, _ in layout:
        k = p.numel()
        st = opt.state[p]
        for what, c_val, t_val in (("param", p1, p.detach()), ("exp_avg", m1, st["exp_avg"]),
                                   ("exp_avg_sq", v1, st["exp_avg_sq"])):
            err = max_rel_err(c_val[off:off + k].view_as(p), t_val)
            if err > TOLERANCE:
                print(f"MISMATCH {name} {what}: max rel err {err:.3e}")
                ok = False
            if err > worst:
                worst, worst_name = err, f"{name} {what}"
        off += k
    print(f"grad norm {norm.item():.6g} clipped to {clip:.6g}; {len(layout)} tensors x 3, "
          f"worst {worst_name}: max rel err {worst:.3e} (tolerance {TOLERANCE:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
