#!/usr/bin/env python3
"""GPT-2 BPE through tagctl on real files: a small BPE (vocab.json + merges.txt, written here
in Hugging Face's format, with GPT-2's byte-to-printable map) is learnt from the fortunes
corpus; a token model is trained for 2 steps on llm.c shards encoded with it, exported with
--tokenizer and sampled. tagctl's encoding of prompts (letters, digits, contractions, runs of
spaces, new lines, accents, CJK, emoji) equals the reference encoder written here from GPT-2's
algorithm (python3-regex for \\p{L}/\\p{N}); the sampled text is the reference decoding of the
sampled ids; llm.c's tokenizer.bin of the same vocabulary decodes the same ids to the same
text; a damaged merges.txt, a tokenizer of another size and --prompt text without merges are
refused with one line.
usage: test_tokenizer.py BINDIR"""
import collections
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

try:
    import regex
except ImportError:
    print("SKIP: python3-regex is not installed")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "chaos"))
from harness import Checks  # noqa: E402

bindir = sys.argv[1]
tagctl = os.path.join(bindir, "tagctl")
check = Checks()
CORPUS = "/usr/share/games/fortunes"
PAT = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
N_MERGES = 200


def byte_map():
    """GPT-2's bytes_to_unicode: printable bytes as themselves, the rest 256 + n in order."""
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    m, n = {}, 0
    for b in range(256):
        if b in keep:
            m[b] = chr(b)
        else:
            m[b] = chr(256 + n)
            n += 1
    return m


BM = byte_map()


def pieces(text):
    return [tuple(BM[b] for b in p.encode("utf-8")) for p in PAT.findall(text)]


def learn(text):
    words = collections.Counter(pieces(text))
    merges = []
    words = {w: c for w, c in words.items()}
    for _ in range(N_MERGES):
        pairs = collections.Counter()
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
        merges.append(best)
        joined = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            joined[tuple(out)] = joined.get(tuple(out), 0) + c
        words = joined
    return merges


def encode(text, vocab, ranks):
    ids = []
    for p in pieces(text):
        w = list(p)
        while len(w) > 1:
            pairs = [(ranks.get((a, b), 1 << 30), i) for i, (a, b) in enumerate(zip(w, w[1:]))]
            r, _ = min(pairs)
            if r == 1 << 30:
                break
            a, b = next(k for k, v in ranks.items() if v == r)
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            w = out
        ids += [vocab[t] for t in w]
    return ids


def decode(ids, inv):
    unmap = {v: k for k, v in BM.items()}
    return bytes(unmap[ch] for i in ids for ch in inv[i]).decode("utf-8", errors="replace")


def ids_of(out):
    try:
        return [int(x) for x in out.decode().replace(",", " ").split()]
    except ValueError:
        return None


def run(*args, timeout=240):
    return subprocess.run([tagctl] + list(args), capture_output=True, timeout=timeout)


def one_line_error(r, status, text, what):
    err = r.stderr.decode("utf-8", "replace").strip().splitlines()
    check(r.returncode == status and len(err) >= 1 and text in err[-1],
          "%s: status %d, '%s' (status %d: %s)" % (what, status, text, r.returncode, err[-1:] if err else ""))


tmp = tempfile.mkdtemp(prefix="tagc-tokenizer-")
try:
    with open(os.path.join(CORPUS, "fortunes"), encoding="utf-8", errors="replace") as f:
        text = f.read()
    merges = learn(text[:60000])
    tokens = [BM[b] for b in range(256)] + [a + b for a, b in merges]
    tokens = list(dict.fromkeys(tokens))  # a merge may rebuild a token: keep ids unique
    vocab = {t: i for i, t in enumerate(tokens)}
    vocab["<|endoftext|>"] = len(vocab)
    inv = {i: t for t, i in vocab.items()}
    ranks = {m: i for i, m in enumerate(merges)}
    V = len(vocab)
    tok = os.path.join(tmp, "tok")
    os.mkdir(tok)
    with open(os.path.join(tok, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(tok, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join("%s %s\n" % m for m in merges))

    # llm.c shards of the corpus, encoded by the reference
    ids = encode(text[:120000], vocab, ranks)
    check(len(ids) < 120000 * 0.8, "the BPE compresses the corpus (%d tokens for 120000 chars)" % len(ids))
    shards = []
    for k, part in enumerate((ids[: len(ids) * 9 // 10], ids[len(ids) * 9 // 10:])):
        path = os.path.join(tmp, "shard_%d.bin" % k)
        with open(path, "wb") as f:
            f.write(struct.pack("<256i", 20240520, 1, len(part), *([0] * 253)))
            f.write(struct.pack("<%dH" % len(part), *part))
        shards.append(path)
    out = os.path.join(tmp, "out")
    r = run("run", "--mode", "static", "--workers", "1", "--steps", "2", "--threads", "1",
            "--batch", "4", "--ctx", "32", "--layers", "1", "--heads", "2", "--dim", "32",
            "--eval-every", "0", "--eval-windows", "2", "--data", shards[0], "--val-data", shards[1],
            "--vocab", str(V), "--out", out)
    check(r.returncode == 0, "a token model (vocabulary %d) trains 2 steps (status %d)" % (V, r.returncode))
    if r.returncode != 0:
        print(r.stderr.decode()[-3000:])
        check.exit()
    hf = os.path.join(tmp, "hf")
    r = run("ckpt", "export", out, "--out", hf, "--tokenizer", tok)
    check(r.returncode == 0 and all(os.path.exists(os.path.join(hf, n)) for n in
                                    ("vocab.json", "merges.txt", "tokenizer_config.json")),
          "export --tokenizer: vocab.json, merges.txt, tokenizer_config.json in the folder (status %d)"
          % r.returncode)

    prompts = ["The fortune cookie said", "It's   here;  we'll see 42 cats\n\nand 3.14 dogs!",
               "na\u00efve caf\u00e9 \u00fcber", "\u4f60\u597d\u4e16\u754c \U0001F600 ok", "a\tb  \n c"]
    for p in prompts:
        r = run("sample", hf, "--prompt", p, "--tokens", "0", "--ids")
        got = ids_of(r.stdout)
        want = encode(p, vocab, ranks)
        check(r.returncode == 0 and got == want, "tagctl encodes %r as the reference does (%d ids; got %s)"
              % (p, len(want), got if got != want else "same"))

    p = prompts[1]
    a = run("sample", hf, "--prompt", p, "--tokens", "12", "--seed", "3", "--ids")
    b = run("sample", hf, "--prompt", p, "--tokens", "12", "--seed", "3")
    sampled = ids_of(a.stdout)
    check(a.returncode == 0 and b.returncode == 0 and len(sampled) == len(encode(p, vocab, ranks)) + 12,
          "sample --ids: the prompt's ids and 12 more (status %d, %d ids)" % (a.returncode, len(sampled)))
    text_out = b.stdout.decode("utf-8", "replace").rstrip("\n")
    check(text_out == decode(sampled, inv), "the sampled text is the reference decoding of the sampled ids")

    # llm.c's tokenizer.bin of the same vocabulary decodes the same ids to the same text
    unmap = {v: k for k, v in BM.items()}
    tbin = os.path.join(tmp, "tokenizer.bin")
    with open(tbin, "wb") as f:
        f.write(struct.pack("<256I", 20240328, 2, V, vocab["<|endoftext|>"], *([0] * 252)))
        for i in range(V):
            raw = inv[i].encode() if inv[i] == "<|endoftext|>" else bytes(unmap[c] for c in inv[i])
            f.write(bytes([len(raw)]) + raw)
    c = run("sample", hf, "--tokenizer", tbin, "--prompt-ids", ",".join(map(str, sampled)), "--tokens", "0")
    check(c.returncode == 0 and c.stdout.decode("utf-8", "replace").rstrip("\n") == decode(sampled, inv),
          "tokenizer.bin decodes the ids to the same text (status %d)" % c.returncode)
    one_line_error(run("sample", hf, "--tokenizer", tbin, "--prompt", "hello", "--tokens", "0"), 2,
                   "merges", "--prompt with a tokenizer.bin (no merges)")

    # damaged or mismatched tokenizers
    bad = os.path.join(tmp, "bad")
    os.mkdir(bad)
    shutil.copy(os.path.join(tok, "vocab.json"), bad)
    with open(os.path.join(bad, "merges.txt"), "w") as f:
        f.write("#version: 0.2\nzzzzqq yyyyww\n")
    one_line_error(run("sample", hf, "--tokenizer", bad, "--prompt", "hi", "--tokens", "0"), 2,
                   "merges.txt", "a merge naming unknown tokens")
    small = os.path.join(tmp, "small")
    os.mkdir(small)
    with open(os.path.join(small, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({BM[b]: b for b in range(256)}, f, ensure_ascii=False)
    one_line_error(run("ckpt", "export", out, "--out", os.path.join(tmp, "hf2"), "--tokenizer", small), 2,
                   "vocab", "export --tokenizer of 256 tokens for a %d-token model" % V)
    check(not os.path.exists(os.path.join(tmp, "hf2")), "the refused export left no folder")
finally:
    shutil.rmtree(tmp, ignore_errors=True)
check.exit()
