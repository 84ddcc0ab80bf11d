#!/usr/bin/env python3
"""Writes token shards for tests and benchmarks, so that nothing needs a download.

Usage: make_shards.py OUTDIR [--format llmc|nanogpt] [--train-tokens N] [--val-tokens N]
                      [--shards K] [--vocab V] [--corpus PATH] [--prefix NAME]

Tokens: a deterministic toy tokenization of a text corpus (default: the fortunes, tagc's
default corpus): every word becomes id 256 + crc32(word) % (V - 257), every other byte
(spaces, newlines, punctuation runs) its byte value, and each fortune's end ("%" line) the
end-of-text id V - 1 (50256 for GPT-2's vocabulary). The text is repeated as needed. Ids are
all < V and spread over the whole range, with real structure for the model to learn.

Writes OUTDIR/NAME_train_00000K.bin (K shards, the training tokens split evenly) and
OUTDIR/NAME_val_000000.bin. llmc: llm.c's format (dev/data/data_common.py write_datafile):
a header of 256 little-endian int32 (magic 20240520, version 1, token count), then the
tokens as little-endian uint16. nanogpt: the uint16 tokens alone (nanoGPT's train.bin).
"""
import argparse
import os
import re
import struct
import sys
import zlib

LLMC_MAGIC = 20240520


def corpus_text(path):
    if os.path.isfile(path):
        files = [path]
    else:
        files = []
        for root, dirs, names in os.walk(path):
            dirs.sort()
            files += [os.path.join(root, n) for n in sorted(names)
                      if not n.endswith(".dat") and not n.startswith(".")
                      and not os.path.islink(os.path.join(root, n))]
    parts = []
    for f in sorted(files):
        with open(f, "rb") as fh:
            parts.append(fh.read())
    return b"".join(parts)


def tokenize(text, vocab):
    eot = vocab - 1
    out = []
    for piece in re.findall(rb"%\n|[A-Za-z0-9']+|.", text, re.S):
        if piece == b"%\n":
            out.append(eot)
        elif len(piece) > 1 or piece.isalnum():
            out.append(256 + zlib.crc32(piece) % (vocab - 257))
        else:
            out.append(piece[0])
    return out


def write(path, tokens, fmt):
    body = struct.pack("<%dH" % len(tokens), *tokens)
    with open(path, "wb") as f:
        if fmt == "llmc":
            header = [0] * 256
            header[0], header[1], header[2] = LLMC_MAGIC, 1, len(tokens)
            f.write(struct.pack("<256i", *header))
        f.write(body)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--format", choices=["llmc", "nanogpt"], default="llmc")
    ap.add_argument("--train-tokens", type=int, default=200000)
    ap.add_argument("--val-tokens", type=int, default=20000)
    ap.add_argument("--shards", type=int, default=3)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--corpus", default="/usr/share/games/fortunes")
    ap.add_argument("--prefix", default="tiny")
    a = ap.parse_args()
    if a.vocab < 300 or a.vocab > 65536:
        sys.exit("make_shards: --vocab must be in [300, 65536]")
    text = corpus_text(a.corpus)
    if not text:
        sys.exit("make_shards: corpus %s is empty" % a.corpus)
    toks = tokenize(text, a.vocab)
    need = a.train_tokens + a.val_tokens
    while len(toks) < need:
        toks = toks + toks
    os.makedirs(a.outdir, exist_ok=True)
    val, train = toks[:a.val_tokens], toks[a.val_tokens:need]
    for k in range(a.shards):
        lo, hi = len(train) * k // a.shards, len(train) * (k + 1) // a.shards
        write(os.path.join(a.outdir, "%s_train_%06d.bin" % (a.prefix, k)), train[lo:hi], a.format)
    write(os.path.join(a.outdir, "%s_val_%06d.bin" % (a.prefix, 0)), val, a.format)


if __name__ == "__main__":
    main()
