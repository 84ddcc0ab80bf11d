"""Checks the C model's loss and every parameter gradient against torch.

Usage: torch_ref.py FILE, where FILE was written by test_model_torch (format documented in
tests/model/test_model_torch.c). Exits 0 when the loss and every gradient tensor agree
within a max relative error of 1e-4, 1 on a mismatch, 77 when torch cannot be imported.
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

TOLERANCE = 1e-4


def main(path):
    r = Reader(path)
    r.magic(b"TAGCMREF")
    V, T, L, NH, C, B = r.ints(6)
    (n_params,) = r.ints(1, torch.int64, 8)
    params = r.tensor(n_params)
    # uint16 ids (< 32768 here): read as int16
    tokens = r.tensor(B * T, torch.int16, 2).long().view(B, T)
    targets = r.tensor(B * T, torch.int16, 2).long().view(B, T)
    c_loss = r.f64()
    c_grads = r.tensor(n_params)
    r.end()

    torch.manual_seed(0)
    model = GPT(V, T, L, NH, C)
    model.load_flat(params)
    loss = model(tokens, targets)
    loss.backward()

    ok = True
    loss_err = abs(c_loss - loss.item()) / abs(loss.item())
    print(f"loss: C {c_loss:.8f} torch {loss.item():.8f} rel err {loss_err:.3e}")
    ok &= loss_err <= TOLERANCE
    worst, worst_name, off = -1.0, "", 0
    for name, p, _ in model.layout():
        g = c_grads[off:off + p.numel()].view_as(p)
        off += p.numel()
        err = max_rel_err(g, p.grad)
        if err > TOLERANCE:
            print(f"MISMATCH {name}: max rel err {err:.3e} (max|grad| {p.grad.abs().max():.3e})")
            ok = False
        if err > worst:
            worst, worst_name = err, name
    print(f"{len(model.layout())} gradient tensors, worst {worst_name}: max rel err {worst:.3e} "
          f"(tolerance {TOLERANCE:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
