#!/usr/bin/env python3
"""tagctl ckpt export on the checkpoints of a real two-worker run: the Hugging Face folder's
safetensors and the llm.c file hold exactly the run's final parameters (--dump-params), read
back by readers written here from the formats' definitions; an llm.c export read back by
tagctl's own loader (export again, and export as safetensors) is bit-exact; the same state
saved at world sizes 1, 2 and 3 exports to byte-identical files; an --out that exists is
refused and left as it was; bad arguments and damaged inputs are refused.
usage: test_export.py BINDIR"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "chaos"))
sys.path.insert(0, HERE)
from harness import Checks  # noqa: E402
import model_files as mf  # noqa: E402

bindir = sys.argv[1]
tagctl = os.path.join(bindir, "tagctl")
check = Checks()
V, T, L, NH, C = 256, 32, 2, 4, 64


def run(*args, timeout=120):
    return subprocess.run([tagctl] + list(args), capture_output=True, text=True, timeout=timeout)


def refused(args, status, text):
    r = run(*args)
    err = r.stderr.strip().splitlines()
    check(r.returncode == status and len(err) == 1 and text in err[0],
          "tagctl %s: status %d, one stderr line with '%s' (status %d: %s)"
          % (" ".join(args), status, text, r.returncode, r.stderr.strip()))


def same_bits(a, b):
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def export(src, fmt, dst):
    r = run("ckpt", "export", src, "--format", fmt, "--out", dst)
    check(r.returncode == 0 and os.path.exists(dst), "export %s -> %s (status %d: %s)"
          % (os.path.basename(src.rstrip("/")), os.path.relpath(dst, tmp), r.returncode, r.stderr.strip()))


tmp = tempfile.mkdtemp(prefix="tagc-export-")
try:
    out = os.path.join(tmp, "out")
    dump = os.path.join(tmp, "final.params")
    r = run("run", "--mode", "static", "--workers", "2", "--steps", "6", "--ckpt-every", "3",
            "--threads", "1", "--batch", "8", "--ctx", str(T), "--layers", str(L), "--heads", str(NH),
            "--dim", str(C), "--eval-every", "0", "--eval-windows", "4", "--dump-params", dump,
            "--out", out, timeout=240)
    check(r.returncode == 0, "tagctl run --workers 2 --steps 6 (status %d)" % r.returncode)
    if r.returncode != 0:
        print(r.stderr[-3000:])
        check.exit()
    params = np.fromfile(dump, dtype="<f4")
    step6 = os.path.join(out, "ckpt", "step-6")

    # ---- safetensors ----
    st_dir = os.path.join(tmp, "st")
    st = os.path.join(st_dir, "model.safetensors")
    export(out, "safetensors", st_dir)
    header, tensors, raw = mf.read_safetensors(st)
    n = int.from_bytes(raw[:8], "little")
    check((8 + n) % 8 == 0, "safetensors: the data starts 8-byte aligned")
    check(header["__metadata__"].get("format") == "pt" and header["__metadata__"].get("step") == "6",
          "safetensors metadata: format pt, step 6 (%s)" % header["__metadata__"])
    names = set(mf.hf_name(name)[0] for name, _ in mf.arena_layout(V, T, L, C))
    check(set(tensors) == names and len(tensors) == 2 + 12 * L + 3,
          "safetensors: GPT2LMHeadModel's %d tensor names" % len(names))
    check(list(tensors["transformer.h.0.attn.c_attn.weight"].shape) == [C, 3 * C]
          and list(tensors["transformer.h.1.mlp.c_proj.weight"].shape) == [4 * C, C]
          and list(tensors["lm_head.weight"].shape) == [V, C],
          "safetensors: Conv1D weights (in, out), lm_head (V, C)")
    check(same_bits(mf.safetensors_to_arena(tensors, V, T, L, C), params),
          "safetensors holds the run's final parameters bit for bit (%d floats)" % len(params))
    cfg = json.load(open(os.path.join(st_dir, "config.json")))
    want = {"n_embd": C, "n_layer": L, "n_head": NH, "n_positions": T, "vocab_size": V,
            "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"],
            "activation_function": "gelu_new", "tie_word_embeddings": False}
    check(all(cfg.get(k) == v for k, v in want.items()) and abs(cfg["layer_norm_epsilon"] - 1e-5) < 1e-12,
          "config.json: GPT-2 config of the model, head untied, eps 1e-5")

    # ---- llm.c ----
    llmc = os.path.join(tmp, "model.bin")
    export(out, "llmc", llmc)
    h, t, head = mf.read_llmc(llmc)
    check(list(h[2:9]) == [T, V, L, NH, C, 256, 1],
          "llm.c header: maxT, V, L, NH, C, Vp = 256, untied head flag (%s)" % list(h[2:9]))
    check(same_bits(mf.llmc_to_arena(h, t, head, V), params),
          "llm.c file holds the run's final parameters bit for bit, in llm.c's order")

    # read back by tagctl's own loader: exported again, as llm.c and as safetensors
    llmc2 = os.path.join(tmp, "model2.bin")
    export(llmc, "llmc", llmc2)
    check(open(llmc, "rb").read() == open(llmc2, "rb").read(),
          "llm.c -> tagctl loader -> llm.c: byte-identical")
    st2_dir = os.path.join(tmp, "st2")
    export(llmc, "safetensors", st2_dir)
    h2, t2, _ = mf.read_safetensors(os.path.join(st2_dir, "model.safetensors"))
    check(set(t2) == set(tensors) and all(same_bits(t2[k], tensors[k]) for k in tensors),
          "llm.c -> tagctl loader -> safetensors: every tensor bit-identical to the checkpoint's")

    # ---- the same state at world sizes 1, 2 and 3 ----
    files = {}
    for w in (1, 3):
        root = os.path.join(tmp, "w%d" % w)
        rr = subprocess.run([os.path.join(bindir, "ckpt_reshard"), step6, root, str(w)],
                            capture_output=True, text=True, timeout=60)
        man = json.load(open(os.path.join(root, "step-6", "manifest.json")))
        check(rr.returncode == 0 and man["world_size"] == w and len(man["files"]) == w,
              "step 6 rewritten at world size %d (%s)" % (w, rr.stderr.strip()))
    for src, w in ((out, 2), (os.path.join(tmp, "w1"), 1), (os.path.join(tmp, "w3"), 3),
                   (step6, 2), (os.path.join(tmp, "w3", "step-6"), 3)):
        d = tempfile.mkdtemp(dir=tmp)
        export(src, "safetensors", os.path.join(d, "hf"))
        export(src, "llmc", os.path.join(d, "model.bin"))
        files[(src, w)] = [open(os.path.join(d, f), "rb").read()
                           for f in ("hf/model.safetensors", "hf/config.json", "model.bin")]
    first = files[(out, 2)]
    check(all(v == first for v in files.values()),
          "exports from world sizes 1, 2 and 3 (root, OUT or step dir) are byte-identical")

    # ---- bad arguments and damaged input ----
    refused(["ckpt", "export", out], 2, "--out is required")
    refused(["ckpt", "export", out, "--format", "onnx", "--out", "x"], 2, "'onnx' is not one of safetensors|llmc")
    refused(["ckpt", "export", "--out", "x"], 2, "usage: tagctl ckpt export")
    refused(["ckpt", "export", out, "--bogus", "--out", "x"], 2, "unknown option '--bogus'")
    refused(["ckpt", "export", os.path.join(tmp, "nothing"), "--out", "x"], 2, "No such file")
    names = ["config.json", "generation_config.json", "model.safetensors"]
    before = {f: open(os.path.join(st_dir, f), "rb").read() for f in names}
    refused(["ckpt", "export", out, "--out", os.path.join(st_dir, "config.json")], 2,
            "exists and is not a folder")
    refused(["ckpt", "export", out, "--out", st_dir], 2, "is a folder that is not empty")
    refused(["ckpt", "export", out, "--out", st_dir + "/"], 2, "is a folder that is not empty")
    refused(["ckpt", "export", out, "--format", "llmc", "--out", st_dir + "/"], 2, "is a folder")
    refused(["ckpt", "export", out, "--format", "llmc", "--out", st], 2, "exists: remove it")
    refused(["ckpt", "export", out, "--format", "llmc", "--dtype", "bf16", "--out", "x.bin"], 2,
            "--dtype and --tokenizer are for safetensors")
    refused(["ckpt", "export", out, "--dtype", "f8", "--out", "x"], 2, "'f8' is not one of f32|bf16|f16")
    check(before == {f: open(os.path.join(st_dir, f), "rb").read() for f in before}
          and sorted(os.listdir(st_dir)) == names,
          "a refused --out leaves the folder as it was")
    check(not [f for f in os.listdir(tmp) if ".tmp" in f], "no staging folder left behind")
    bad = os.path.join(tmp, "bad")
    shutil.copytree(os.path.join(out, "ckpt"), bad)
    shard = os.path.join(bad, "step-6", "rank-00001.bin")
    with open(shard, "r+b") as f:
        f.seek(os.path.getsize(shard) // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0xFF]))
    dst = os.path.join(tmp, "bad.bin")
    refused(["ckpt", "export", os.path.join(bad, "step-6"), "--format", "llmc", "--out", dst], 1, "CRC32C")
    check(not os.path.exists(dst) and not os.path.exists(dst + ".tmp"), "a failed export leaves no file")
    trunc = os.path.join(tmp, "trunc.bin")
    with open(trunc, "wb") as f:
        f.write(open(llmc, "rb").read()[:5000])
    refused(["ckpt", "export", trunc, "--out", os.path.join(tmp, "t.bin"), "--format", "llmc"], 1,
            "the header's model needs")
    with open(trunc, "wb") as f:
        f.write(b"\0" * 2048)
    refused(["ckpt", "export", trunc, "--out", os.path.join(tmp, "t.bin")], 1, "not an llm.c model file")
finally:
    shutil.rmtree(tmp, ignore_errors=True)

check.exit()
