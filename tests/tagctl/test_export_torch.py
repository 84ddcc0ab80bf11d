#!/usr/bin/env python3
"""The torch twin of tagc's model (tests/model/torch_gpt.py) loaded from a safetensors export
of a real run gives the logits tagc computes (`tagctl sample --logits`) on a batch of prompts,
within a max relative difference of 1e-5 (max |a - b| / max |b| over the batch); greedy
sampling picks torch's most likely next byte. A token model with GPT-2's vocabulary (50257,
trained padded to 50304) exports exactly 50257 rows and its logits (from the checkpoint and
from the export) match the twin's; sampled ids stay below 50257. Exit 77 when torch cannot be imported.
usage: test_export_torch.py BINDIR"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import torch
except ImportError:
    print("torch is not importable by %s: skipped" % sys.executable)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "chaos"))
sys.path.insert(0, os.path.join(HERE, "..", "model"))
sys.path.insert(0, HERE)
from harness import Checks  # noqa: E402
from torch_gpt import GPT, max_rel_err  # noqa: E402
import model_files as mf  # noqa: E402

TOLERANCE = 1e-5
tagctl = os.path.join(sys.argv[1], "tagctl")
check = Checks()
V, T, L, NH, C = 256, 32, 3, 4, 64
PROMPTS = ["The quick brown fox jumps over t",   # a full context window
           "You will be married within a yea",
           "Q: Why did the chicken cross"]       # shorter than the context


def run(*args, timeout=240):
    return subprocess.run([tagctl] + list(args), capture_output=True, timeout=timeout)


def load_twin(st_path, V=V, T=T, L=L, NH=NH, C=C):
    """torch_gpt.GPT with its parameters from GPT-2-named safetensors (Conv1D transposed)."""
    _, tensors, _ = mf.read_safetensors(st_path)
    model = GPT(V, T, L, NH, C)
    with torch.no_grad():
        for name, p, _ in model.layout():
            hf, conv1d = mf.hf_name(name)
            x = torch.from_numpy(tensors[hf].copy())
            p.copy_(x.T if conv1d else x)
    return model


tmp = tempfile.mkdtemp(prefix="tagc-export-torch-")
try:
    out = os.path.join(tmp, "out")
    r = run("run", "--mode", "static", "--workers", "2", "--steps", "8", "--ckpt-every", "8",
            "--threads", "1", "--batch", "8", "--ctx", str(T), "--layers", str(L), "--heads", str(NH),
            "--dim", str(C), "--eval-every", "0", "--eval-windows", "4", "--out", out)
    check(r.returncode == 0, "tagctl run --workers 2 --steps 8, %d layers (status %d)" % (L, r.returncode))
    hf = os.path.join(tmp, "hf")
    r = run("ckpt", "export", out, "--format", "safetensors", "--out", hf)
    check(r.returncode == 0, "tagctl ckpt export --format safetensors (status %d)" % r.returncode)
    model = load_twin(os.path.join(hf, "model.safetensors"))

    worst = 0.0
    for i, prompt in enumerate(PROMPTS):
        path = os.path.join(tmp, "logits-%d" % i)
        r = run("sample", out, "--prompt", prompt, "--tokens", "0", "--logits", path)
        check(r.returncode == 0 and r.stdout.decode() == prompt + "\n",
              "tagctl sample --tokens 0 --logits: prompt %d echoed (status %d)" % (i, r.returncode))
        ours = torch.from_numpy(mf.np.fromfile(path, dtype="<f4").reshape(len(prompt), V))
        idx = torch.tensor([list(prompt.encode())], dtype=torch.long)
        with torch.no_grad():
            theirs = model.logits(idx)[0]
        err = max_rel_err(ours, theirs)
        worst = max(worst, err)
        check(err <= TOLERANCE, "prompt %d (%d bytes): logits max relative difference %.2e <= %g"
              % (i, len(prompt), err, TOLERANCE))

        # greedy: the next byte is torch's most likely one (unless the top two nearly tie)
        top2 = torch.topk(theirs[-1], 2)
        r = run("sample", out, "--prompt", prompt, "--tokens", "1", "--temperature", "0")
        if top2.values[0] - top2.values[1] > 1e-3:
            check(r.returncode == 0 and r.stdout[len(prompt)] == int(top2.indices[0]),
                  "prompt %d: --temperature 0 picks byte %d, torch's argmax" % (i, int(top2.indices[0])))
    print("worst max relative difference of the logits: %.3e" % worst)

    # GPT-2's vocabulary: trained padded to 50304 rows, exported with exactly 50257
    GV, GT = 50257, 16
    shards = []
    for k, n in ((0, 6000), (1, 1500)):
        path = os.path.join(tmp, "tok_%d.bin" % k)
        ids = [(i * 7919 + k * 104729 + (i * i) % 977) % GV for i in range(n)]
        with open(path, "wb") as f:
            f.write(mf.np.array([20240520, 1, n] + [0] * 253, dtype="<i4").tobytes())
            f.write(mf.np.array(ids, dtype="<u2").tobytes())
        shards.append(path)
    gout = os.path.join(tmp, "gout")
    r = run("run", "--mode", "static", "--workers", "2", "--steps", "3", "--threads", "1", "--batch", "4",
            "--ctx", str(GT), "--layers", "1", "--heads", "2", "--dim", "32", "--eval-every", "0",
            "--eval-windows", "2", "--data", shards[0], "--val-data", shards[1], "--vocab", str(GV),
            "--out", gout)
    check(r.returncode == 0, "a token model with --vocab %d trains 3 steps (status %d)" % (GV, r.returncode))
    ghf = os.path.join(tmp, "ghf")
    r = run("ckpt", "export", gout, "--out", ghf)
    header, tensors, _ = mf.read_safetensors(os.path.join(ghf, "model.safetensors"))
    with open(os.path.join(ghf, "config.json")) as f:
        cfg = json.load(f)
    check(r.returncode == 0 and cfg.get("vocab_size") == GV
          and list(tensors["transformer.wte.weight"].shape) == [GV, 32]
          and list(tensors["lm_head.weight"].shape) == [GV, 32],
          "export: vocab_size %s, wte and lm_head with exactly %d rows (not the padded 50304)"
          % (cfg.get("vocab_size"), GV))
    gmodel = load_twin(os.path.join(ghf, "model.safetensors"), GV, GT, 1, 2, 32)
    prompt = [1, 2, 50256, 31337, 50000, 7, 42, 15000]
    for src in (gout, ghf):
        path = os.path.join(tmp, "glogits")
        r = run("sample", src, "--prompt-ids", ",".join(map(str, prompt)), "--tokens", "0",
                "--logits", path)
        ours = mf.np.fromfile(path, dtype="<f4")
        check(r.returncode == 0 and ours.size == len(prompt) * GV,
              "sample %s --logits: %d positions x exactly %d rows (%d floats)"
              % (os.path.basename(src), len(prompt), GV, ours.size))
        if ours.size != len(prompt) * GV:
            continue
        with torch.no_grad():
            theirs = gmodel.logits(torch.tensor([prompt], dtype=torch.long))[0]
        err = max_rel_err(torch.from_numpy(ours.reshape(len(prompt), GV)), theirs)
        check(err <= TOLERANCE, "V = %d, from %s: logits max relative difference %.2e <= %g"
              % (GV, os.path.basename(src), err, TOLERANCE))
    r = run("sample", ghf, "--prompt-ids", "1,2,3", "--tokens", "40", "--seed", "5", "--ids")
    drawn = [int(x) for x in r.stdout.decode().replace(",", " ").split()]
    check(r.returncode == 0 and len(drawn) == 43 and max(drawn) < GV,
          "40 sampled ids, all < %d (no mass on padding rows; max %s)" % (GV, max(drawn) if drawn else None))
finally:
    shutil.rmtree(tmp, ignore_errors=True)

check.exit()
