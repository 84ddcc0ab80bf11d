"""The tagc GPT model written with torch.nn, as the reference for the C model.

Same architecture as model/model.h: pre-LayerNorm blocks, causal multi-head attention,
GELU (tanh) MLP, learned positions, untied head without bias. `layout` lists the parameters
in the order of the C arena (model/model.h), so a flat fp32 arena maps onto the modules.
Used by tests/model/torch_ref.py, tests/model/adamw_ref.py and bench/torch_step.py.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH, T):
        super().__init__()
        self.n_head = NH
        self.ln1 = nn.LayerNorm(C, eps=1e-5)
        self.qkv = nn.Linear(C, 3 * C)
        self.attn_proj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C, eps=1e-5)
        self.fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)
        self.gelu = nn.GELU(approximate="tanh")
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))

    def forward(self, x):
        B, T, C = x.shape
        hd = C // self.n_head
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q = q.view(B, T, self.n_head, hd).transpose(1, 2)
        k = k.view(B, T, self.n_head, hd).transpose(1, 2)
        v = v.view(B, T, self.n_head, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(~self.mask[:T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.attn_proj(y)
        return x + self.mlp_proj(self.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, V, T, L, NH, C):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, NH, T) for _ in range(L))
        self.lnf = nn.LayerNorm(C, eps=1e-5)
        self.head = nn.Linear(C, V, bias=False)

    def logits(self, idx):
        """(B, T, V) logits of the tokens idx (B, T), T <= the context."""
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.lnf(x))

    def forward(self, idx, targets):
        B, T = idx.shape
        logits = self.logits(idx)
        return F.cross_entropy(logits.view(B * T, -1), targets.view(-1))

    def layout(self):
        """[(C name, parameter, decay)] in the order of the C arena."""
        out = [("wte", self.wte.weight, True), ("wpe", self.wpe.weight, True)]
        for l, b in enumerate(self.blocks):
            for name, mod in (("ln1", b.ln1), ("ln2", b.ln2)):
                out += [(f"h{l}.{name}_w", mod.weight, False), (f"h{l}.{name}_b", mod.bias, False)]
            for name, mod in (("qkv", b.qkv), ("attn_proj", b.attn_proj), ("fc", b.fc),
                              ("mlp_proj", b.mlp_proj)):
                out += [(f"h{l}.{name}_w", mod.weight, True), (f"h{l}.{name}_b", mod.bias, False)]
        out += [("lnf_w", self.lnf.weight, False), ("lnf_b", self.lnf.bias, False),
                ("head_w", self.head.weight, True)]
        return out

    def load_flat(self, flat):
        """Copies a flat arena (1-D float32 tensor) into the parameters."""
        off = 0
        with torch.no_grad():
            for _, p, _ in self.layout():
                p.copy_(flat[off:off + p.numel()].view_as(p))
                off += p.numel()
        if off != flat.numel():
            raise ValueError(f"arena has {flat.numel()} floats, model {off}")


def max_rel_err(a, b):
    """max|a - b| / max(max|b|, 1e-30) over one tensor: robust for tensors with tiny entries."""
    scale = max(b.abs().max().item(), 1e-30)
    return (a - b).abs().max().item() / scale


class Reader:
    """Sequential little-endian reader over a file written by a C test."""

    def __init__(self, path):
        with open(path, "rb") as f:
            self.buf = bytearray(f.read())
        self.pos = 0

    def take(self, n):
        if self.pos + n > len(self.buf):
            raise ValueError(f"file ends at {len(self.buf)}, wanted {self.pos + n}")
        chunk = self.buf[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def magic(self, expected):
        got = bytes(self.take(len(expected)))
        if got != expected:
            raise ValueError(f"bad magic {got!r}, expected {expected!r}")

    def ints(self, count, dtype=torch.int32, size=4):
        return [int(x) for x in torch.frombuffer(self.take(count * size), dtype=dtype)]

    def f64(self):
        return torch.frombuffer(self.take(8), dtype=torch.float64).item()

    def tensor(self, count, dtype=torch.float32, size=4):
        return torch.frombuffer(self.take(count * size), dtype=dtype).clone()

    def end(self):
        if self.pos != len(self.buf):
            raise ValueError(f"{len(self.buf) - self.pos} trailing bytes")
