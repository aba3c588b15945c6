"""mesh.py: multi-process training speed and traffic per mesh layout.

For each layout it compiles a trainer with `axlc compile --target cpu-N --set /mesh/shape=...`
(and the layout's own settings: fsdp2mb2 and fsdp2mb4 set /learner/microbatches), runs it under
`mpirun -np N` on random tokens, and prints the median ms/step over the measured steps (after
warmup), the bytes each device sent per step as measured (`comm_bytes` in the metrics of rank
0), as the per-device program predicts (the collective table, printed in the trainer's banner),
and as `axlc memcheck --json` predicts for the same job (`bytes_sent`).

    /usr/bin/python3 tools/bench/mesh.py --axlc build/tools/axlc [--model models/tiny-lm.json]
        [--steps N] [--layouts one,data4,fsdp4,model2,data2model2] [--apply MOD]...
        [--set /PATH=VALUE]...

Layouts: one, data2, data4, fsdp2, fsdp4, model2, model4, data2model2, expert2; spmodel2
(sequence parallelism on model=2), seq2 (context parallelism), seq2model2, spseq2model2.

With --memory it checks memory instead: for each layout, the heap the trainer of rank 0 measured
at its peak (the `memory: ... measured X MiB` line it prints at the end of a run: its slab, the
collectives' scratch and the MPI library's heap, as glibc's mallinfo2 counts them) against
`axlc memcheck --json`'s peak_memory_in_bytes, and exits 1 when one is off by more than
--tolerance (5%). Its last column is the MPI library's own heap as the run measured it (the
measured heap less the slab and the scratch): RT_MPI_HEAP_BYTES (runtime/axrt.h) is its mean
over tiny-lm's data2, fsdp2, model2 and data4.

    /usr/bin/python3 tools/bench/mesh.py --memory --layouts data2,fsdp2,model2,expert2 \
        --model models/gpt2-124m.json --set /input/global_batch_size=4 --set /input/seq_len=64

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

# name: (devices, shape over [pipeline, data, expert, fsdp, seq, model], more --set)
LAYOUTS = {
    "one": (1, [1, 1, 1, 1, 1, 1], []),
    "data2": (2, [1, 2, 1, 1, 1, 1], []),
    "data4": (4, [1, 4, 1, 1, 1, 1], []),
    "fsdp4": (4, [1, 1, 1, 4, 1, 1], []),
    "fsdp2": (2, [1, 1, 1, 2, 1, 1], []),
    "fsdp2mb2": (2, [1, 1, 1, 2, 1, 1], ["/learner/microbatches=2"]),
    "fsdp2mb4": (2, [1, 1, 1, 2, 1, 1], ["/learner/microbatches=4"]),
    "model2": (2, [1, 1, 1, 1, 1, 2], []),
    "model4": (4, [1, 1, 1, 1, 1, 4], []),
    "data2model2": (4, [1, 2, 1, 1, 1, 2], []),
    "expert2": (2, [1, 1, 2, 1, 1, 1], []),
    "expert2fsdp2": (4, [1, 1, 2, 2, 1, 1], []),
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


def job_args(args, name):
    """The options that name the job of layout `name`: target, mesh, --apply, --set."""
    devices, shape, sets = LAYOUTS[name]
    target = "cpu" if devices == 1 else "cpu-%d" % devices
    out = ["--target", target, "--set", "/mesh/shape=" + json.dumps(shape).replace(" ", "")]
    for a in args.apply:
        out += ["--apply", a]
    for s in sets + args.set:
        out += ["--set", s]
    return out


def memcheck_bytes(args, name):
    """The bytes each device sends per step as `axlc memcheck --json` predicts."""
    r = subprocess.run([args.axlc, "memcheck", args.model] + job_args(args, name) + ["--json"],
                       capture_output=True, text=True)
    if r.returncode not in (0, 1):
        sys.exit("axlc memcheck failed on %s: %s" % (name, r.stderr.strip()))
    return int(json.loads(r.stdout)["bytes_sent"])


def run_layout(args, name, tmp, data):
    devices = LAYOUTS[name][0]
    exe = os.path.join(tmp, name)
    cmd = [args.axlc, "compile", args.model] + job_args(args, name) + ["-o", exe]
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
    return ms, measured, predicted, memcheck_bytes(args, name), rows[-1]["loss"]


def memcheck_peak(args, name):
    """The peak per device and the MPI library's part of it, in bytes, as `axlc memcheck --json`
    predicts."""
    r = subprocess.run([args.axlc, "memcheck", args.model] + job_args(args, name) + ["--json"],
                       capture_output=True, text=True)
    if r.returncode not in (0, 1) or not r.stdout.strip():
        sys.exit("axlc memcheck failed on %s: %s" % (name, r.stderr.strip()))
    j = json.loads(r.stdout)
    return int(j["peak_memory_in_bytes"]), int(j["breakdown_in_bytes"]["mpi_library"])


def measure_memory(args, name, tmp, data):
    """The heap (bytes) the trainer of rank 0 held at its peak, as it prints it."""
    devices = LAYOUTS[name][0]
    exe = os.path.join(tmp, name)
    cmd = [args.axlc, "compile", args.model] + job_args(args, name) + ["-o", exe]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    run = [exe, "--data", data, "--steps", str(args.steps), "--threads", "1"]
    if devices > 1:
        run = ["mpirun", "-np", str(devices), "--oversubscribe"] + run
    out = subprocess.run(run, check=True, capture_output=True, text=True).stdout
    m = re.search(r"memory: .*measured ([0-9.]+) MiB", out)
    if not m:
        sys.exit("%s: the trainer printed no memory line:\n%s" % (name, out[-2000:]))
    return float(m.group(1)) * 1048576


def check_memory(args, tmp, data):
    # the last column is the MPI library's heap as this run measured it: the measured heap less
    # the rest of the prediction (slab and collective scratch), the figure RT_MPI_HEAP_BYTES holds
    print("%-12s %14s %14s %8s %16s" % ("layout", "predicted MiB", "measured MiB", "error",
                                        "MPI library MiB"))
    off = []
    for name in args.layouts.split(","):
        if name not in LAYOUTS:
            sys.exit("unknown layout %s (expected one of %s)" % (name, ", ".join(LAYOUTS)))
        pred, mpi = memcheck_peak(args, name)
        meas = measure_memory(args, name, tmp, data)
        err = 100 * (meas - pred) / pred
        lib = "%.2f" % ((meas - (pred - mpi)) / 1048576) if mpi else "-"
        print("%-12s %14.2f %14.2f %+7.2f%% %16s" % (name, pred / 1048576, meas / 1048576, err, lib))
        sys.stdout.flush()
        if abs(err) > args.tolerance:
            off.append(name)
    if off:
        sys.exit("memcheck is off by more than %g%% of the measured heap on %s"
                 % (args.tolerance, ", ".join(off)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--axlc", default=os.path.join(TOP, "build", "tools", "axlc"))
    ap.add_argument("--model", default=os.path.join(TOP, "models", "tiny-lm.json"))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--layouts", default="one,data4,fsdp4,model2,data2model2")
    ap.add_argument("--vocab", type=int, default=32)
    ap.add_argument("--apply", action="append", default=[])
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--memory", action="store_true",
                    help="check memcheck's peak against the measured heap instead of speed")
    ap.add_argument("--tolerance", type=float, default=5.0, help="percent, for --memory")
    args = ap.parse_args()
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    with tempfile.TemporaryDirectory(prefix="axlc-mesh-") as tmp:
        data = os.path.join(tmp, "tokens.bin")
        tokens(data, args.vocab)
        if args.memory:
            check_memory(args, tmp, data)
            return
        print("%-12s %10s %16s %16s %16s %10s" % ("layout", "ms/step", "bytes measured",
                                                  "bytes predicted", "memcheck bytes", "last loss"))
        for name in args.layouts.split(","):
            if name not in LAYOUTS:
                sys.exit("unknown layout %s (expected one of %s)" % (name, ", ".join(LAYOUTS)))
            ms, measured, predicted, mc, loss = run_layout(args, name, tmp, data)
            print("%-12s %10.2f %16d %16d %16d %10.6f" % (name, ms, measured, predicted, mc, loss))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
