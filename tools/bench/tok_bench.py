#!/usr/bin/env python3
"""tok_bench.py: tokens per second of `axlc tokenize` on large inputs, per tokenizer kind.

    /usr/bin/python3 tools/bench/tok_bench.py --axlc build/tools/axlc [--mb 4] [--rounds 3]

Tokenizers: byte-level BPE tokenizer.json files written here (bytes 0..255 plus a few merges,
as tests/runtime/test_tok.c's) with GPT-2's and with Llama 3's pre-tokenizer, and a
SentencePiece model of 4096 pieces trained by spm_train on the fortunes (skipped without
spm_train, the fortunes or a libaxrt with SentencePiece). Inputs of MB megabytes: plain text
(the fortunes, repeated), digits, one long word (letters, no space), random bytes. Each cell is
the median over ROUNDS of tokens (from the token file's header) over the wall seconds of the
whole `axlc tokenize` (reading, encoding, writing). A split that is quadratic on some input
shows as a cell far below its row's others.
"""
import argparse
import os
import random
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

FORTUNES = "/usr/share/games/fortunes"
LLAMA3 = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
          "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")


def byte_level():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def bpe_json(llama3):
    import json
    m = byte_level()
    vocab = {m[b]: b for b in range(256)}
    vocab.update({"th": 256, "\u0120th": 257, "the": 258, "\u0120the": 259})
    pre = {"type": "ByteLevel", "use_regex": True}
    if llama3:
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "behavior": "Isolated", "pattern": {"Regex": LLAMA3}},
            {"type": "ByteLevel", "use_regex": False}]}
    return json.dumps({"model": {"type": "BPE", "vocab": vocab,
                                 "merges": ["t h", "\u0120 th", "th e", "\u0120th e"]},
                       "added_tokens": [{"id": 260, "content": "<|endoftext|>"}],
                       "pre_tokenizer": pre})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--axlc", required=True)
    ap.add_argument("--mb", type=float, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="tok-bench.")
    try:
        size = int(a.mb * 1e6)
        toks = {}
        for name, llama3 in (("bpe-gpt2", 0), ("bpe-llama3", 1)):
            path = os.path.join(tmp, name + ".json")
            open(path, "w").write(bpe_json(llama3))
            toks[name] = path
        corpus = b"".join(open(os.path.join(FORTUNES, f), "rb").read()
                          for f in ("fortunes", "literature", "wisdom", "science")
                          if os.path.exists(os.path.join(FORTUNES, f)))
        if corpus and shutil.which("spm_train"):
            open(os.path.join(tmp, "corpus.txt"), "wb").write(corpus)
            r = subprocess.run(["spm_train", "--input=" + os.path.join(tmp, "corpus.txt"),
                                "--model_prefix=" + os.path.join(tmp, "spm"), "--vocab_size=4096",
                                "--model_type=unigram", "--normalization_rule_name=identity",
                                "--remove_extra_whitespaces=false", "--add_dummy_prefix=false",
                                "--byte_fallback=true", "--minloglevel=2"], capture_output=True)
            if r.returncode == 0:
                toks["sentencepiece"] = os.path.join(tmp, "spm.model")
        rng = random.Random(1)
        inputs = {
            "text": (corpus or b"The man who knows how will always have a job. ") * (size // max(1, len(corpus) or 46) + 1),
            "digits": bytes(rng.choice(b"0123456789") for _ in range(size)),
            "one word": bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(size)),
            "random bytes": rng.randbytes(size),
        }
        for k in inputs:
            inputs[k] = inputs[k][:size]
            open(os.path.join(tmp, k.replace(" ", "_")), "wb").write(inputs[k])
        print(f"axlc tokenize, {a.mb:g} MB inputs, median of {a.rounds}: tokens/s (tokens)")
        print(f"| tokenizer | " + " | ".join(inputs) + " |")
        print("|---" * (len(inputs) + 1) + "|")
        for name, path in toks.items():
            cells = []
            for k in inputs:
                rates, n = [], 0
                for _ in range(a.rounds):
                    out = os.path.join(tmp, "out.bin")
                    t0 = time.perf_counter()
                    r = subprocess.run([a.axlc, "tokenize", os.path.join(tmp, k.replace(" ", "_")),
                                        "--tokenizer", path, "-o", out], capture_output=True, text=True)
                    dt = time.perf_counter() - t0
                    if r.returncode != 0:
                        cells.append("error: " + r.stderr.strip().splitlines()[-1][:60])
                        break
                    n = struct.unpack("<3i", open(out, "rb").read(12))[2]
                    rates.append(n / dt)
                else:
                    cells.append(f"{statistics.median(rates) / 1e6:.2f} M ({n / 1e6:.2f} M)")
            print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
    finally:
        shutil.rmtree(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
