"""Readers written for the tests, from the formats' definitions (docs/operations.md), so that
tagctl's writers are checked against something independent of them: safetensors (8-byte
little-endian header length, JSON header, raw data) and llm.c model files (256 int32 header,
then the 16 tensors in llm.c's order). numpy only; tagc's arena layout is model/model.h's."""
import json
import struct

import numpy as np

# tagc block tensor -> (GPT-2 name, stored transposed as a Conv1D weight), in llm.c's order
BLOCK = [("ln1_w", "ln_1.weight", False), ("ln1_b", "ln_1.bias", False),
         ("qkv_w", "attn.c_attn.weight", True), ("qkv_b", "attn.c_attn.bias", False),
         ("attn_proj_w", "attn.c_proj.weight", True), ("attn_proj_b", "attn.c_proj.bias", False),
         ("ln2_w", "ln_2.weight", False), ("ln2_b", "ln_2.bias", False),
         ("fc_w", "mlp.c_fc.weight", True), ("fc_b", "mlp.c_fc.bias", False),
         ("mlp_proj_w", "mlp.c_proj.weight", True), ("mlp_proj_b", "mlp.c_proj.bias", False)]
ARENA_BLOCK_ORDER = ["ln1_w", "ln1_b", "ln2_w", "ln2_b", "qkv_w", "qkv_b", "attn_proj_w",
                     "attn_proj_b", "fc_w", "fc_b", "mlp_proj_w", "mlp_proj_b"]


def arena_layout(V, T, L, C):
    """[(tagc name, (rows, cols))] in the order of tagc's arena (model/model.h)."""
    shapes = {"ln1_w": (C,), "ln1_b": (C,), "ln2_w": (C,), "ln2_b": (C,), "qkv_w": (3 * C, C),
              "qkv_b": (3 * C,), "attn_proj_w": (C, C), "attn_proj_b": (C,), "fc_w": (4 * C, C),
              "fc_b": (4 * C,), "mlp_proj_w": (C, 4 * C), "mlp_proj_b": (C,)}
    out = [("wte", (V, C)), ("wpe", (T, C))]
    for l in range(L):
        out += [("h%d.%s" % (l, k), shapes[k]) for k in ARENA_BLOCK_ORDER]
    return out + [("lnf_w", (C,)), ("lnf_b", (C,)), ("head_w", (V, C))]


def hf_name(tagc_name):
    """GPT2LMHeadModel's name of a tagc tensor and whether it is stored transposed."""
    top = {"wte": "transformer.wte.weight", "wpe": "transformer.wpe.weight",
           "lnf_w": "transformer.ln_f.weight", "lnf_b": "transformer.ln_f.bias",
           "head_w": "lm_head.weight"}
    if tagc_name in top:
        return top[tagc_name], False
    layer, kind = tagc_name[1:].split(".", 1)
    for k, hf, conv1d in BLOCK:
        if k == kind:
            return "transformer.h.%s.%s" % (layer, hf), conv1d
    raise KeyError(tagc_name)


def read_safetensors(path):
    """(header dict, {name: float32 array}, raw bytes); checks the header's own rules."""
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    tensors, end = {}, 0
    for name, t in header.items():
        if name == "__metadata__":
            assert all(isinstance(v, str) for v in t.values()), "metadata values must be strings"
            continue
        assert t["dtype"] == "F32", name
        begin, stop = t["data_offsets"]
        assert begin == end, "%s: data_offsets not contiguous" % name
        count = int(np.prod(t["shape"])) if t["shape"] else 1
        assert stop - begin == 4 * count, "%s: size" % name
        tensors[name] = np.frombuffer(data[begin:stop], dtype="<f4").reshape(t["shape"])
        end = stop
    assert end == len(data), "trailing bytes after the last tensor"
    return header, tensors, raw


def safetensors_to_arena(tensors, V, T, L, C):
    """The flat tagc arena from GPT-2-named tensors (wte and head cut to V rows)."""
    parts = []
    for name, shape in arena_layout(V, T, L, C):
        hf, conv1d = hf_name(name)
        x = tensors[hf]
        x = x.T if conv1d else x
        if name in ("wte", "head_w"):
            x = x[:V]
        assert x.shape == shape, "%s: %s, expected %s" % (hf, x.shape, shape)
        parts.append(np.ascontiguousarray(x).reshape(-1))
    return np.concatenate(parts)


def read_llmc(path):
    """(header ints, {llm.c name: array}, head or None) of an llm.c fp32 model file."""
    raw = open(path, "rb").read()
    h = np.frombuffer(raw[:1024], dtype="<i4")
    assert h[0] == 20240326 and h[1] == 3, "magic/version %d/%d" % (h[0], h[1])
    maxT, V, L, NH, C, Vp = (int(x) for x in h[2:8])
    sizes = [("wte", Vp * C), ("wpe", maxT * C), ("ln1w", L * C), ("ln1b", L * C),
             ("qkvw", L * 3 * C * C), ("qkvb", L * 3 * C), ("attprojw", L * C * C),
             ("attprojb", L * C), ("ln2w", L * C), ("ln2b", L * C), ("fcw", L * 4 * C * C),
             ("fcb", L * 4 * C), ("fcprojw", L * C * 4 * C), ("fcprojb", L * C), ("lnfw", C),
             ("lnfb", C)]
    vals = np.frombuffer(raw[1024:], dtype="<f4")
    out, off = {}, 0
    for name, n in sizes:
        out[name] = vals[off:off + n]
        off += n
    head = None
    if h[8] == 1:  # tagc's untied head follows
        head = vals[off:off + Vp * C]
        off += Vp * C
    assert off == len(vals), "file size: %d floats, the header says %d" % (len(vals), off)
    return h, out, head


def llmc_to_arena(h, t, head, V):
    """The flat tagc arena (wte and head with V rows) from an llm.c file's tensors."""
    maxT, L, C = int(h[2]), int(h[4]), int(h[6])
    per_layer = {"ln1_w": "ln1w", "ln1_b": "ln1b", "ln2_w": "ln2w", "ln2_b": "ln2b",
                 "qkv_w": "qkvw", "qkv_b": "qkvb", "attn_proj_w": "attprojw",
                 "attn_proj_b": "attprojb", "fc_w": "fcw", "fc_b": "fcb",
                 "mlp_proj_w": "fcprojw", "mlp_proj_b": "fcprojb"}
    parts = [t["wte"][:V * C], t["wpe"]]
    for l in range(L):
        for k in ARENA_BLOCK_ORDER:
            x = t[per_layer[k]]
            n = len(x) // L
            parts.append(x[l * n:(l + 1) * n])
    parts += [t["lnfw"], t["lnfb"], (head if head is not None else t["wte"])[:V * C]]
    return np.concatenate(parts)
