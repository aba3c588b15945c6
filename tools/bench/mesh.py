"""mesh.py: multi-process training speed and traffic per mesh layout.

For each layout it compiles a trainer with `axlc compile --target cpu-N --set /mesh/shape=...`,
runs it under `mpirun -np N` on random tokens, and prints the median ms/step over the measured
steps (after warmup), the bytes each device sent per step as measured (`comm_bytes` in the
metrics of rank 0), and as the per-device program predicts (the collective table, printed in
the trainer's banner).

    /usr/bin/python3 tools/bench/mesh.py --axlc build/tools/axlc [--model models/tiny-lm.json]
        [--steps N] [--layouts one,data4,fsdp4,model2,data2model2] [--set /PATH=VALUE]...

Layouts: one, data4, fsdp4, model2, model4, data2model2, expert2; spmodel2 (sequence
parallelism on model=2), seq2 (context parallelism), seq2model2, spseq2model2.

Open MPI refuses to run as root unless OMPI_ALLOW_RUN_AS_ROOT=1 and
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 are set; this script sets them.
"""
import argparse
import json
import os
import re
import statistics
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.normpath(os.path.join(HERE, "..", ".."))

SP = ["/mesh/sequence_parallel=true"]

# name: (devices, shape over [pipeline, data, expert, fsdp, seq, model], extra --set values)
LAYOUTS = {
    "one": (1, [1, 1, 1, 1, 1, 1], []),
    "data4": (4, [1, 4, 1, 1, 1, 1], []),
    "fsdp4": (4, [1, 1, 1, 4, 1, 1], []),
    "model2": (2, [1, 1, 1, 1, 1, 2], []),
    "model4": (4, [1, 1, 1, 1, 1, 4], []),
    "data2model2": (4, [1, 2, 1, 1, 1, 2], []),
    "expert2": (2, [1, 1, 2, 1, 1, 1], []),
    "spmodel2": (2, [1, 1, 1, 1, 1, 2], SP),
    "seq2": (2, [1, 1, 1, 1, 2, 1], []),
    "seq2model2": (4, [1, 1, 1, 1, 2, 2], []),
    "spseq2model2": (4, [1, 1, 1, 1, 2, 2], SP),
}


def tokens(path, vocab, n=200000):
    """An llm.c token file of random tokens below vocab."""
    import random
    r = random.Random(1)
    toks = [r.randrange(vocab) for _ in range(n)]
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
        f.write(struct.pack("<%dH" % n, *toks))


def run_layout(args, name, tmp, data):
    devices, shape, extra = LAYOUTS[name]
    exe = os.path.join(tmp, name)
    target = "cpu" if devices == 1 else "cpu-%d" % devices
    cmd = [args.axlc, "compile", args.model, "--target", target, "--set",
           "/mesh/shape=" + json.dumps(shape).replace(" ", ""), "-o", exe]
    for s in extra + args.set:
        cmd += ["--set", s]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    metrics = os.path.join(tmp, name + ".jsonl")
    threads = max(1, (os.cpu_count() or 1) // devices)
    run = [exe, "--data", data, "--steps", str(args.steps), "--metrics", metrics, "--threads", str(threads)]
    if devices > 1:
        run = ["mpirun", "-np", str(devices), "--oversubscribe"] + run
    out = subprocess.run(run, check=True, capture_output=True, text=True).stdout
    m = re.search(r"sending (\d+) bytes per device per step", out)
    predicted = int(m.group(1)) if m else 0
    rows = [json.loads(line) for line in open(metrics)]
    timed = rows[args.warmup:] or rows
    ms = statistics.median(r["step_ms"] for r in timed)
    measured = statistics.median(r.get("comm_bytes", 0) for r in timed)
    return ms, measured, predicted, rows[-1]["loss"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--axlc", default=os.path.join(TOP, "build", "tools", "axlc"))
    ap.add_argument("--model", default=os.path.join(TOP, "models", "tiny-lm.json"))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--layouts", default="one,data4,fsdp4,model2,data2model2")
    ap.add_argument("--vocab", type=int, default=32)
    ap.add_argument("--set", action="append", default=[])
    args = ap.parse_args()
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    with tempfile.TemporaryDirectory(prefix="axlc-mesh-") as tmp:
        data = os.path.join(tmp, "tokens.bin")
        tokens(data, args.vocab)
        print("%-12s %10s %16s %16s %10s" % ("layout", "ms/step", "bytes measured", "bytes predicted", "last loss"))
        for name in args.layouts.split(","):
            if name not in LAYOUTS:
                sys.exit("unknown layout %s (expected one of %s)" % (name, ", ".join(LAYOUTS)))
            ms, measured, predicted, loss = run_layout(args, name, tmp, data)
            print("%-12s %10.2f %16d %16d %10.6f" % (name, ms, measured, predicted, loss))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
