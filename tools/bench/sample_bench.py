"""sample_bench.py: `trainer --sample` with the KV cache against the whole window per token.

    /usr/bin/python3 tools/bench/sample_bench.py --axlc build/tools/axlc
        [--model tools/bench/small.json] [--seq 512] [--prompt 64] [--tokens N]
        [--rounds 3] [--threads 1] [--json OUT]

Compiles MODEL with seq_len SEQ (and a learned position table of SEQ rows when it has one),
batch 1, writes its seeded initial weights as a checkpoint (--steps 0), and then, --rounds
times, samples greedily the same text both ways, one run after the other so that the
machine's load hits both alike: with the KV cache (the default: the prompt's prefill, then one
decode step per token) and with --no-kv-cache (the forward over the whole window for every
token). The prompt is PROMPT bytes and TOKENS new tokens follow (default: SEQ - PROMPT, so
the window is full at the end and no re-prefill happens). Per mode, from the trainer's own
line (`N tokens in S s (C s of CPU)`, which leaves out loading the weights): the median
tokens per second of wall time and tokens per CPU second (the process's CPU time over the
generation: steadier than wall time on a loaded machine), and the ratios cached / uncached.
The two texts must be the same (greedy), else it exits 1.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile


def must(cmd, out=None):
    """stderr of cmd (stdout to the file out); exits when cmd fails."""
    with open(out or os.devnull, "wb") as o:
        p = subprocess.run(cmd, stdout=o, stderr=subprocess.PIPE)
    err = p.stderr.decode("utf-8", "replace")
    if p.returncode != 0:
        sys.exit(f"sample_bench: {' '.join(cmd)} failed ({p.returncode}):\n{err}")
    return err


def compile_model(args, work):
    cfg = json.loads(subprocess.check_output([args.axlc, "config", args.model]))
    sets = ["--set", f"/input/seq_len={args.seq}", "--set", "/input/global_batch_size=1"]
    if cfg["model"].get("pos_emb"):
        sets += ["--set", f"/model/pos_emb/max_len={args.seq}"]
    trainer = os.path.join(work, "trainer")
    must([args.axlc, "compile", args.model, "--target", "cpu", "-o", trainer, *sets])
    return trainer, cfg


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--axlc", required=True)
    ap.add_argument("--model", default=os.path.join(os.path.dirname(__file__), "small.json"))
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--prompt", type=int, default=64, help="prompt bytes")
    ap.add_argument("--tokens", type=int, default=0, help="new tokens (0: seq - prompt)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json")
    args = ap.parse_args()
    tokens = args.tokens or args.seq - args.prompt
    work = tempfile.mkdtemp(prefix="axlc-sample-bench.")
    try:
        trainer, cfg = compile_model(args, work)
        if cfg["model"]["vocab_size"] != 256:
            sys.exit("sample_bench: the model's vocabulary is not bytes; the prompt is text")
        text = os.path.join(work, "text.txt")
        with open(text, "w") as f:
            f.write("The quick brown fox jumps over the lazy dog. " * (4 * args.seq // 45 + 4))
        ck = os.path.join(work, "ck")
        must([trainer, "--data", text, "--steps", "0", "--ckpt-dir", ck])
        prompt = open(text).read()[: args.prompt]
        base = [trainer, "--sample", str(tokens), "--ckpt-dir", ck, "--prompt", prompt,
                "--temperature", "0", "--threads", str(args.threads)]
        modes = {"KV cache": [], "whole window": ["--no-kv-cache"]}
        got = {m: {"tok_s": [], "tok_cpu_s": []} for m in modes}
        texts = {}
        for r in range(args.rounds):
            for m, extra in modes.items():
                out = os.path.join(work, f"out-{len(texts)}")
                err = must(base + extra, out)
                line = re.search(r"(\d+) tokens in ([0-9.]+) s \(([0-9.]+) s of CPU\)", err)
                if not line:
                    sys.exit(f"sample_bench: no timing line in:\n{err}")
                got[m]["tok_s"].append(tokens / max(float(line.group(2)), 1e-9))
                got[m]["tok_cpu_s"].append(tokens / max(float(line.group(3)), 1e-9))
                texts.setdefault(m, open(out, "rb").read())
                print(f"round {r + 1}: {m:13s} {got[m]['tok_s'][-1]:9.1f} tokens/s, "
                      f"{got[m]['tok_cpu_s'][-1]:9.1f} tokens per CPU second", flush=True)
        same = texts["KV cache"] == texts["whole window"]
        print(f"\n{os.path.basename(args.model)}: seq {args.seq}, prompt {args.prompt} bytes, "
              f"{tokens} new tokens, {args.threads} thread(s), load average "
              f"{os.getloadavg()[0]:.1f}; same greedy text both ways: {'yes' if same else 'NO'}")
        print(f"{'mode':14s} {'tokens/s':>10s} {'tokens/CPU s':>13s}")
        med = {m: {k: statistics.median(v) for k, v in got[m].items()} for m in modes}
        for m in modes:
            print(f"{m:14s} {med[m]['tok_s']:10.1f} {med[m]['tok_cpu_s']:13.1f}")
        ratio = {k: med["KV cache"][k] / med["whole window"][k] for k in ("tok_s", "tok_cpu_s")}
        print(f"{'cached/whole':14s} {ratio['tok_s']:9.1f}x {ratio['tok_cpu_s']:12.1f}x")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"model": args.model, "seq": args.seq, "prompt": args.prompt,
                           "tokens": tokens, "threads": args.threads, "runs": got,
                           "median": med, "ratio": ratio, "same_text": same}, f, indent=1)
        return 0 if same else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
