"""bench.py: training speed of axlc's compiled CPU trainers against PyTorch.

For each benchmark model it compiles a trainer with `axlc compile --target cpu`, trains it on
random tokens, and reads ms/step from the trainer's --metrics file (median over the measured
steps, after warmup). It then runs the same model in PyTorch (torch_bench.py: Debian's
python3-torch, 2 threads, OMP_WAIT_POLICY=PASSIVE, AdamW) and prints ms/step, tokens/s and
model FLOP utilization against the machine's measured sgemm peak (sgemm_peak).

    /usr/bin/python3 tools/bench/bench.py --axlc build/tools/axlc --peak build/tools/bench/sgemm_peak
        [--steps N] [--threads N] [--only NAME] [--no-torch] [--opencl [--ocl-gemm PROGRAM]]

--opencl also trains each model with `axlc compile --target opencl` on the first OpenCL device
(PoCL's CPU device here) and, with --ocl-gemm (build/tools/bench/ocl_gemm), prints the matmul
GFLOP/s of the OpenCL backend's GEMM kernel next to OpenBLAS (and CLBlast where built in).

Model FLOPs per step: 6 * (matmul parameters) * tokens + 12 * layers * batch * seq^2 * dim
(the attention score and context matmuls, forward and backward, without causal savings).
"""
import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.normpath(os.path.join(HERE, "..", ".."))

BENCHMARKS = [
    ("tiny-lm b8 s64", os.path.join(TOP, "models", "tiny-lm.json"), []),
    ("gpt2-124m b4 s64", os.path.join(TOP, "models", "gpt2-124m.json"),
     ["/input/global_batch_size=4", "/input/seq_len=64"]),
    ("small 4x256 b8 s256", os.path.join(HERE, "small.json"), []),
]


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return r.stdout


def model_flops(axlc, model, sets):
    cfg = json.loads(run([axlc, "config", model] + sum((["--set", s] for s in sets), [])))
    params = json.loads(run([axlc, "params", model, "--json"] +
                            sum((["--set", s] for s in sets), [])))
    m = cfg["model"]
    tied = m["lm_head"]["tied"]
    n = 0
    for p in params["params"]:
        path = p["path"]
        if path.startswith("model/pos_emb/"):
            continue  # a lookup, no matmul
        if path == "model/emb/weight" and not tied:
            continue  # a lookup; the untied head has its own matrix
        n += p["count"]
    B, T = cfg["input"]["global_batch_size"], cfg["input"]["seq_len"]
    L, D = m["decoder"]["num_layers"], m["dim"]
    return 6 * n * B * T + 12 * L * B * T * T * D, B * T, cfg


def token_file(path, vocab, n):
    """An llm.c token file of n random tokens below vocab."""
    import random
    rnd = random.Random(0)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
        f.write(struct.pack("<%dH" % n, *(rnd.randrange(vocab) for _ in range(n))))


def bench_axlc(axlc, name, model, sets, cfg, steps, warmup, threads, work, target="cpu"):
    trainer = os.path.join(work, "trainer-" + target)
    run([axlc, "compile", model, "--target", target, "-o", trainer] +
        sum((["--set", s] for s in sets), []))
    data = os.path.join(work, "tokens.bin")
    B, T = cfg["input"]["global_batch_size"], cfg["input"]["seq_len"]
    token_file(data, cfg["model"]["vocab_size"], (steps + warmup + 1) * B * T + 1)
    metrics = os.path.join(work, "metrics-%s.jsonl" % target)
    run([trainer, "--data", data, "--steps", str(steps + warmup), "--metrics", metrics] +
        (["--threads", str(threads)] if target == "cpu" else []), cwd=work)
    rows = [json.loads(line) for line in open(metrics)]
    return statistics.median(r["step_ms"] for r in rows[warmup:])


def bench_torch(resolved, steps, warmup, threads):
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    out = run(["/usr/bin/python3", os.path.join(HERE, "torch_bench.py"), resolved,
               "--steps", str(steps), "--warmup", str(warmup), "--threads", str(threads)], env=env)
    return json.loads(out.strip().splitlines()[-1])["ms_per_step"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--axlc", required=True)
    ap.add_argument("--peak", required=True, help="the sgemm_peak program")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", help="run only benchmarks whose name contains this")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--opencl", action="store_true", help="also the OpenCL backend")
    ap.add_argument("--ocl-gemm", help="the ocl_gemm program: OpenCL GEMM GFLOP/s")
    a = ap.parse_args()
    if a.ocl_gemm:
        for m, n, k in [(512, 512, 512), (512, 256, 64), (2048, 256, 256)]:
            out = run([a.ocl_gemm, str(m), str(n), str(k), "--threads", str(a.threads)])
            print("matmul GFLOP/s, " + " | ".join(out.strip().splitlines()))
    peak = float(run([a.peak, str(a.threads)]).strip())
    print(f"sgemm peak ({a.threads} threads): {peak:.1f} GFLOP/s")
    print(f"{'benchmark':22} {'impl':8} {'ms/step':>10} {'tokens/s':>10} {'MFU':>7}")
    for name, model, sets in BENCHMARKS:
        if a.only and a.only not in name:
            continue
        flops, tokens, cfg = model_flops(a.axlc, model, sets)
        with tempfile.TemporaryDirectory() as work:
            resolved = os.path.join(work, "resolved.json")
            with open(resolved, "w") as f:
                json.dump(cfg, f)
            results = [("axlc", bench_axlc(a.axlc, name, model, sets, cfg, a.steps, a.warmup,
                                           a.threads, work))]
            if a.opencl:
                results.append(("opencl", bench_axlc(a.axlc, name, model, sets, cfg, a.steps,
                                                     a.warmup, a.threads, work, "opencl")))
            if not a.no_torch:
                results.append(("pytorch", bench_torch(resolved, a.steps, a.warmup, a.threads)))
        for impl, ms in results:
            mfu = flops / (ms / 1000) / (peak * 1e9)
            print(f"{name:22} {impl:8} {ms:10.1f} {tokens / (ms / 1000):10.0f} {100 * mfu:6.1f}%")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
