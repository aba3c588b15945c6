"""bench.py: axlc's compile time and the training speed of its compiled CPU trainers against
PyTorch, on this machine, in one invocation (issue 12: compile in seconds, train faster than
PyTorch).

    /usr/bin/python3 tools/bench/bench.py --axlc build/tools/axlc \
        --peak build/tools/bench/sgemm_peak [--fma-peak build/tools/bench/fma_peak]
        [--bf16-peak build/tools/bench/bf16_peak]
        [--steps N] [--warmup N] [--rounds R] [--threads N] [--only NAME] [--skip NAME]
        [--no-torch] [--warm auto|always|never] [--json OUT] [--opencl [--ocl-gemm PROGRAM]]
        [--bf16] [--openblas-coretype auto|keep|NAME]

What it measures, in order:

1. The sgemm peak: `sgemm_peak THREADS` (OpenBLAS sgemm, 1024^3, best of 12), the denominator
   of model FLOP utilization (MFU). Measured again at the end; both are printed, and MFU uses
   the first. A large change between the two means the machine's load changed during the run.
   With --fma-peak PROGRAM (tools/bench/fma_peak), also the cores' arithmetic ceiling (both FMA
   units of every core busy, nothing loaded), which the sgemm peak is a share of; the summary
   then gives each axlc step's FLOP rate as a share of it too (docs/bench.md, "The arithmetic
   ceiling"). With --bf16-peak PROGRAM (tools/bench/bf16_peak), also the ceiling of bf16
   products (vdpbf16ps, AVX512_BF16; "absent" on a CPU without it), for bf16 models' FLOP
   rates (docs/bench.md, "bf16 products").

2. Compile time and memory of `axlc compile MODEL --target cpu -o TRAINER` for every benchmark
   model, plus models/llama2-7b.json (compiled only, never trained; see COMPILE_ONLY for its
   reduced settings). Wall seconds from start to exit, and the peak resident set of the axlc
   process (ru_maxrss from os.wait4 on it; Linux reports the largest of axlc and the children
   it waited for, such as the linker). Each model is compiled "cold", with AXLC_CACHE_DIR set to
   a fresh empty directory (and AXLC_NO_CACHE unset), then "warm": again with the same
   directory, when every distinct kernel comes from the compile cache. With --warm auto (the
   default) the warm compile is skipped when the cold one left the directory empty (an axlc
   without the cache, or a backend that does not use it); --warm always forces it, --warm
   never skips it.

3. Training speed, R rounds per benchmark (--rounds, default 3). Each round runs the axlc
   trainer once, then (with --opencl) the OpenCL trainer, then PyTorch once
   (tools/bench/torch_bench.py under /usr/bin/python3, Debian's python3-torch, --threads
   threads, OMP_WAIT_POLICY=PASSIVE, AdamW and clip_grad_norm_ as in the config). Alternating
   lets the machine's noise hit both sides alike. Every run trains --warmup + --steps steps on
   random tokens from the same initial state; the warmup steps are dropped. axlc's step time
   is step_ms of the trainer's --metrics file, PyTorch's is time.perf_counter around the whole
   step (zero_grad, forward, backward, clipping, optimizer). Reported per implementation: the
   median ms/step over all measured steps of all rounds (and each round's median, to see the
   spread), tokens/s = batch * seq / that median, and MFU = model FLOPs per step / median / peak.
   The ratio is PyTorch ms / axlc ms: above 1 means axlc is faster.

4. A summary table with the issue's goals for the ratio (GOALS), marked met or not met.
   --json OUT writes every number above, including every measured step, so docs/bench.md can
   be regenerated from it.

With --bf16, mixed precision beside f32: every benchmark is also compiled with --set
/precision/compute=bf16 (its own compile rows, "NAME bf16"), and each round of step 3 runs, in
this order, the axlc bf16 trainer, the axlc f32 one, PyTorch f32 and PyTorch with
torch.autocast("cpu", dtype=torch.bfloat16) (torch_bench.py --autocast). Each benchmark then
prints the ratios axlc f32 ms / axlc bf16 ms (above 1: bf16 is faster than axlc's own f32),
PyTorch autocast ms / axlc bf16 ms and PyTorch f32 ms / axlc f32 ms, and each axlc step's
FLOP rate as a share of the bf16 ceiling (--bf16-peak) and of the FMA ceiling (--fma-peak);
the summary adds a bf16 table with BF16_GOALS, judged only on a CPU with AVX512_BF16.

OpenBLAS: every process bench.py starts (the peak probe, axlc, the trainers, PyTorch, whose
BLAS is OpenBLAS on Debian) inherits OPENBLAS_CORETYPE. OpenBLAS 0.3.21 does not know some
AVX-512 CPUs and falls back to its Prescott (SSE3) kernels, at a fifth of their speed
(docs/bench.md; bench-log.md, "bf16 against f32 and PyTorch autocast").
--openblas-coretype auto (the default) sets it to SkylakeX when it is unset and the CPU has
AVX-512F, keep leaves the environment alone, NAME sets that core type. What was used is
printed and saved.

Model FLOPs per step: 6 * (matmul parameters) * tokens + 12 * layers * batch * seq^2 * dim
(the attention score and context matmuls, forward and backward, without causal savings).
Lookups (token embedding of an untied head, learned positions) are not matmuls.

The machine is small and shared: run one bench at a time, and compare the ratio more than the
absolute numbers. --only NAME keeps the benchmarks (and compile rows) whose name contains NAME,
--skip NAME leaves them out (--skip llama: no 7B compile, which takes minutes).
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.normpath(os.path.join(HERE, "..", ".."))

# (name, model config, --set overrides). Trained by axlc and PyTorch; compile time measured.
BENCHMARKS = [
    ("tiny-lm b8 s64", os.path.join(TOP, "models", "tiny-lm.json"), []),
    ("gpt2-124m b4 s64", os.path.join(TOP, "models", "gpt2-124m.json"),
     ["/input/global_batch_size=4", "/input/seq_len=64"]),
    ("small 4x256 b8 s256", os.path.join(HERE, "small.json"), []),
    # Attention dominates: 2 layers, dim 256, seq 2048, batch 1 (the (B, heads, T, T) scores).
    ("long 2x256 b1 s2048", os.path.join(HERE, "long.json"), []),
]

# (name, model config, --set overrides, extra compile flags): compiled (cold and warm), never
# trained. llama2-7b keeps its architecture and seq 4096 but runs at batch 1 instead of 1024:
# the step function is the same graph, and batch 1 keeps every buffer addressable (the logits
# are 4096 x 32000 floats instead of 1024 times that). Its weights and AdamW state (81 GB) fit
# no machine here, so the memory check that `axlc compile` runs is off (--no-memcheck): the
# trainer would not run here, the compile is what is measured.
COMPILE_ONLY = [
    ("llama2-7b b1 s4096", os.path.join(TOP, "models", "llama2-7b.json"),
     ["/input/global_batch_size=1"], ["--no-memcheck"]),
]

# The issue's goals for the ratio PyTorch ms / axlc ms, by the benchmark name's first word.
GOALS = {"gpt2-124m": (">=", 2.0), "small": (">=", 1.5), "long": (">", 1.0)}

# --bf16: the override that compiles a benchmark's bf16 trainer, and the goals for the axlc
# bf16 step, by the benchmark name's first word: "f32" is axlc f32 ms / axlc bf16 ms,
# "autocast" is PyTorch autocast ms / axlc bf16 ms. Judged on a CPU with AVX512_BF16 only.
BF16_SET = "/precision/compute=bf16"
BF16_GOALS = {"gpt2-124m": {"f32": (">=", 1.6), "autocast": (">=", 2.0)},
              "small": {"f32": (">=", 1.4)}}
BF16_RATIOS = {"f32": ("axlc", "axlc f32 / axlc bf16"),
               "autocast": ("pytorch-autocast", "PyTorch autocast / axlc bf16")}


def cpu_flags():
    """The CPU's feature flags from /proc/cpuinfo (empty where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def openblas_coretype(choice):
    """Sets OPENBLAS_CORETYPE in this process's environment (every child inherits it) as
    --openblas-coretype says; returns the value in force (None: unset)."""
    if choice == "auto":
        if "OPENBLAS_CORETYPE" not in os.environ and "avx512f" in cpu_flags():
            os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"
    elif choice != "keep":
        os.environ["OPENBLAS_CORETYPE"] = choice
    return os.environ.get("OPENBLAS_CORETYPE")


def sets_args(sets):
    return sum((["--set", s] for s in sets), [])


def run(cmd, **kw):
    """Runs cmd, returns its stdout; exits with its stderr when it fails."""
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return r.stdout


def timed(cmd, env):
    """Runs cmd and returns (wall seconds, peak RSS in MiB) of it, from os.wait4's rusage;
    raises RuntimeError with the end of its stderr when it fails."""
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n"
                               f"{err.read().decode(errors='replace')[-2000:]}")
    return wall, ru.ru_maxrss / 1024.0  # ru_maxrss is in KiB on Linux


def dir_usage(path):
    """(files, bytes) under path."""
    n = size = 0
    for root, _, files in os.walk(path):
        for f in files:
            n += 1
            size += os.path.getsize(os.path.join(root, f))
    return n, size


def compile_bench(axlc, model, sets, flags, out, warm_mode):
    """Compiles model for --target cpu into out, cold then (maybe) warm; returns a dict."""
    cache = tempfile.mkdtemp(prefix="axlc-bench-cache-")
    env = dict(os.environ, AXLC_CACHE_DIR=cache)
    env.pop("AXLC_NO_CACHE", None)
    cmd = [axlc, "compile", model, "--target", "cpu", "-o", out] + sets_args(sets) + flags
    try:
        wall, rss = timed(cmd, env)
        files, size = dir_usage(cache)
        res = {"cold": {"wall_s": wall, "max_rss_mib": rss},
               "cache_after_cold": {"files": files, "bytes": size}, "warm": None}
        if warm_mode == "always" or (warm_mode == "auto" and files):
            wall, rss = timed(cmd, env)
            res["warm"] = {"wall_s": wall, "max_rss_mib": rss}
        elif warm_mode == "auto":
            res["warm_skipped"] = "the cold compile wrote nothing to AXLC_CACHE_DIR"
        else:
            res["warm_skipped"] = "--warm never"
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return res


def model_flops(axlc, model, sets):
    """(model FLOPs per step, tokens per step, resolved config)."""
    cfg = json.loads(run([axlc, "config", model] + sets_args(sets)))
    params = json.loads(run([axlc, "params", model, "--json"] + sets_args(sets)))
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


def run_trainer(trainer, data, steps, warmup, threads, work, tag):
    """Trains warmup + steps steps; returns (the measured steps' step_ms, the last loss)."""
    metrics = os.path.join(work, "metrics-%s.jsonl" % tag)
    if os.path.exists(metrics):
        os.remove(metrics)
    run([trainer, "--data", data, "--steps", str(steps + warmup), "--metrics", metrics] +
        (["--threads", str(threads)] if threads else []), cwd=work)
    rows = [json.loads(line) for line in open(metrics)]
    rows = [r for r in rows if "step_ms" in r]
    return [r["step_ms"] for r in rows][warmup:], rows[-1].get("loss")


def run_torch(resolved, steps, warmup, threads, autocast=False):
    """One torch_bench.py run (with autocast: under bf16 autocast); returns (measured steps'
    ms, the last loss, torch version)."""
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    out = run(["/usr/bin/python3", os.path.join(HERE, "torch_bench.py"), resolved,
               "--steps", str(steps), "--warmup", str(warmup), "--threads", str(threads)] +
              (["--autocast"] if autocast else []), env=env)
    r = json.loads(out.strip().splitlines()[-1])
    return r["step_ms"], r["loss"], r["torch"]


def goal_of(name):
    return GOALS.get(name.split()[0])


def goal_met(goal, ratio):
    if goal is None or ratio is None:
        return None
    op, v = goal
    return ratio >= v if op == ">=" else ratio > v


def git_rev():
    try:
        rev = subprocess.run(["git", "-C", TOP, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", TOP, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except OSError:
        return None


def fmt(x, spec, none="-"):
    return none if x is None else format(x, spec)


def bf16_ratios(res, bf16_cpu):
    """Fills res["bf16"]: the ratios of BF16_RATIOS (and PyTorch f32 / axlc f32) and
    BF16_GOALS' verdicts (met None: not measured, or not judged on a CPU without
    AVX512_BF16)."""
    impls = res["impls"]
    bf = impls["axlc-bf16"]["ms_per_step"]
    ratios = {k: impls[i]["ms_per_step"] / bf if i in impls else None
              for k, (i, _) in BF16_RATIOS.items()}
    goals = {}
    for k, g in BF16_GOALS.get(res["benchmark"].split()[0], {}).items():
        goals[k] = {"op": g[0], "ratio": g[1],
                    "met": goal_met(g, ratios[k]) if bf16_cpu else None}
    res["bf16"] = {"ratios": ratios, "goals": goals, "judged": bf16_cpu}


def ceiling_shares(x, flops, report):
    """The FLOP rate of x (one implementation's results) as shares of the FMA and bf16
    ceilings that were measured, into x["share_fma"] and x["share_bf16"]."""
    rate = flops / (x["ms_per_step"] / 1000) / 1e9
    for key, peak in (("share_fma", report.get("fma_peak_gflops")),
                      ("share_bf16", report.get("bf16_peak_gflops"))):
        x[key] = rate / peak["start"] if peak else None


def bench_training(a, name, model, sets, trainer, peak, top, report, bf16_trainer=None):
    """R rounds of ([axlc bf16], axlc, [OpenCL], PyTorch, [PyTorch autocast]) on one
    benchmark; prints and returns its results."""
    flops, tokens, cfg = model_flops(a.axlc, model, sets)
    work = os.path.join(top, "work-" + name.split()[0])
    os.makedirs(work)
    resolved = os.path.join(work, "resolved.json")
    with open(resolved, "w") as f:
        json.dump(cfg, f)
    B, T = cfg["input"]["global_batch_size"], cfg["input"]["seq_len"]
    data = os.path.join(work, "tokens.bin")
    token_file(data, cfg["model"]["vocab_size"], (a.steps + a.warmup + 1) * B * T + 1)
    ocl = None
    if a.opencl:
        ocl = os.path.join(work, "trainer-opencl")
        run([a.axlc, "compile", model, "--target", "opencl", "-o", ocl] + sets_args(sets))
    impls = (["axlc-bf16"] if bf16_trainer else []) + ["axlc"] + (["opencl"] if a.opencl else []) \
        + ([] if a.no_torch else ["pytorch"] + (["pytorch-autocast"] if bf16_trainer else []))
    steps = {i: [] for i in impls}
    rounds = []
    torch_version = None
    print(f"\n{name}: {' '.join([os.path.relpath(model, TOP)] + sets)}, batch {B}, seq {T}, "
          f"{flops / 1e9:.2f} GFLOP/step")
    for r in range(a.rounds):
        got, loss = {}, {}
        if bf16_trainer:
            got["axlc-bf16"], loss["axlc-bf16"] = run_trainer(bf16_trainer, data, a.steps,
                                                              a.warmup, a.threads, work, "bf16")
        got["axlc"], loss["axlc"] = run_trainer(trainer, data, a.steps, a.warmup, a.threads,
                                                work, "cpu")
        if a.opencl:
            got["opencl"], loss["opencl"] = run_trainer(ocl, data, a.steps, a.warmup, 0, work,
                                                        "opencl")
        if not a.no_torch:
            got["pytorch"], loss["pytorch"], torch_version = run_torch(resolved, a.steps,
                                                                       a.warmup, a.threads)
            if bf16_trainer:
                got["pytorch-autocast"], loss["pytorch-autocast"], _ = run_torch(
                    resolved, a.steps, a.warmup, a.threads, autocast=True)
        for i in impls:
            steps[i] += got[i]
        rounds.append(dict(got, last_loss=loss))
        print(f"  round {r + 1}/{a.rounds}: " + ", ".join(
            f"{i} {statistics.median(got[i]):.1f}" for i in impls) + " ms/step (median); "
            "last loss " + ", ".join(f"{loss[i]:.4f}" for i in impls))
        sys.stdout.flush()
    res = {"benchmark": name, "model": os.path.relpath(model, TOP), "sets": sets,
           "batch": B, "seq": T, "tokens_per_step": tokens, "flops_per_step": flops,
           "torch_version": torch_version, "rounds": rounds, "impls": {}}
    for i in impls:
        ms = statistics.median(steps[i])
        res["impls"][i] = {
            "ms_per_step": ms, "tokens_per_s": tokens / (ms / 1000),
            "mfu": flops / (ms / 1000) / (peak * 1e9),
            "round_medians": [statistics.median(g[i]) for g in rounds],
            "measured_steps": len(steps[i])}
        ceiling_shares(res["impls"][i], flops, report)
    pt = res["impls"].get("pytorch")
    res["ratio"] = pt["ms_per_step"] / res["impls"]["axlc"]["ms_per_step"] if pt else None
    goal = goal_of(name)
    res["goal"] = {"op": goal[0], "ratio": goal[1],
                   "met": goal_met(goal, res["ratio"])} if goal else None
    for i in impls:
        x = res["impls"][i]
        shares = "".join(f", {100 * x[k]:.0f}% of the {c} ceiling"
                         for k, c in (("share_bf16", "bf16"), ("share_fma", "FMA"))
                         if bf16_trainer and x[k] is not None)
        print(f"  {i:16} {x['ms_per_step']:10.1f} ms/step {x['tokens_per_s']:9.0f} tokens/s "
              f"MFU {100 * x['mfu']:5.1f}%{shares}  (rounds: "
              + " ".join("%.1f" % m for m in x["round_medians"]) + ")")
    if res["ratio"] is not None:
        print(f"  ratio PyTorch/axlc {res['ratio']:.2f}"
              + (" (axlc faster)" if res["ratio"] > 1 else " (PyTorch faster)"))
    if bf16_trainer:
        bf16_ratios(res, report.get("bf16_cpu", False))
        for k, (_, what) in BF16_RATIOS.items():
            r = res["bf16"]["ratios"][k]
            if r is not None:
                print(f"  ratio {what} {r:.2f}"
                      + (" (axlc bf16 faster)" if r > 1 else " (axlc bf16 slower)"))
    sys.stdout.flush()
    return res


def pct(x):
    return "-" if x is None else f"{100 * x:.0f}%"


def goal_text(g):
    return f"{g['op']} {g['ratio']:.1f}: " + (
        "not measured" if g["met"] is None else "met" if g["met"] else "NOT MET")


def print_bf16_summary(report):
    """The --bf16 table: each implementation's ms, the three ratios, the bf16 step's shares of
    the ceilings, and BF16_GOALS."""
    print(f"\nbf16 (--set {BF16_SET}); ratios above 1: the first named is slower\n"
          f"{'benchmark':22} | {'axlc bf16':>9} | {'axlc f32':>8} | {'PT f32':>8} | "
          f"{'PT autoc':>8} | {'f32/bf16':>8} | {'autoc/bf16':>10} | {'PT/axlc f32':>11} | "
          f"{'bf16 ceil':>9} | {'FMA ceil':>8} | goals (bf16)")
    for res in report["train"]:
        if "bf16" not in res:
            continue
        x, r = res["impls"], res["bf16"]["ratios"]

        def ms(i):
            return fmt(x[i]["ms_per_step"] if i in x else None, "8.1f")
        bf = x["axlc-bf16"]
        goals = "; ".join(f"{BF16_RATIOS[k][1]} {goal_text(g)}"
                          for k, g in res["bf16"]["goals"].items())
        if res["bf16"]["goals"] and not res["bf16"]["judged"]:
            goals += " (not judged: the CPU lacks AVX512_BF16)"
        print(f"{res['benchmark']:22} | {ms('axlc-bf16'):>9} | {ms('axlc'):>8} | "
              f"{ms('pytorch'):>8} | {ms('pytorch-autocast'):>8} | "
              f"{fmt(r['f32'], '8.2f'):>8} | {fmt(r['autocast'], '10.2f'):>10} | "
              f"{fmt(res['ratio'], '11.2f'):>11} | "
              f"{pct(bf['share_bf16']):>9} | {pct(bf['share_fma']):>8} | {goals or '-'}")


def print_summary(report):
    """benchmark | axlc ms | PyTorch ms | ratio | MFU axlc | MFU torch | the issue's goal."""
    print(f"\n{'benchmark':22} | {'axlc ms':>8} | {'PyTorch ms':>10} | {'ratio':>5} | "
          f"{'MFU axlc':>8} | {'MFU torch':>9} | goal (ratio)")
    for res in report["train"]:
        ax, pt = res["impls"]["axlc"], res["impls"].get("pytorch")
        g = res["goal"]
        goal = "-" if g is None else goal_text(g)
        print(f"{res['benchmark']:22} | {ax['ms_per_step']:8.1f} | "
              f"{fmt(pt and pt['ms_per_step'], '10.1f'):>10} | "
              f"{fmt(res['ratio'], '5.2f'):>5} | {100 * ax['mfu']:7.1f}% | "
              f"{fmt(pt and 100 * pt['mfu'], '8.1f') + ('%' if pt else ''):>9} | {goal}")
    ceiling = report.get("fma_peak_gflops")
    if ceiling:  # MFU is against the sgemm peak; rescaled to the ceiling
        scale = report["sgemm_peak_gflops"]["start"] / ceiling["start"]
        shares = [f"{res['benchmark']} {100 * res['impls']['axlc']['mfu'] * scale:.0f}%"
                  for res in report["train"]]
        print(f"axlc against the FMA ceiling ({ceiling['start']:.1f} GFLOP/s): "
              + ", ".join(shares))


def save(report, path):
    """Writes the report so far to path (after each section: a failed run keeps what it got)."""
    if path:
        with open(path, "w") as f:
            json.dump(report, f, indent=1)
            f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()),
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("--axlc", required=True, help="the axlc program (build/tools/axlc)")
    ap.add_argument("--peak", required=True, help="the sgemm_peak program")
    ap.add_argument("--fma-peak", metavar="PROGRAM",
                    help="the fma_peak program: also print the cores' arithmetic ceiling, and "
                         "the sgemm peak and each step's FLOP rate as shares of it")
    ap.add_argument("--bf16-peak", metavar="PROGRAM",
                    help="the bf16_peak program: also print the ceiling of bf16 products "
                         "(vdpbf16ps), or that the CPU lacks AVX512_BF16")
    ap.add_argument("--steps", type=int, default=10, help="measured steps per run (10)")
    ap.add_argument("--warmup", type=int, default=2, help="unmeasured steps first in each run (2)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="runs of each implementation, alternating (3)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", help="run only benchmarks whose name contains this")
    ap.add_argument("--skip", action="append", default=[], metavar="NAME",
                    help="leave out benchmarks whose name contains NAME (repeatable; e.g. "
                         "--skip llama: no llama2-7b compile)")
    ap.add_argument("--no-torch", action="store_true", help="train axlc only")
    ap.add_argument("--warm", choices=["auto", "always", "never"], default="auto",
                    help="the second (warm-cache) compile: auto skips it when the cold compile "
                         "wrote no cache")
    ap.add_argument("--json", metavar="OUT", help="write all results to OUT as JSON")
    ap.add_argument("--opencl", action="store_true", help="also the OpenCL backend")
    ap.add_argument("--ocl-gemm", help="the ocl_gemm program: OpenCL GEMM GFLOP/s")
    ap.add_argument("--bf16", action="store_true",
                    help="also axlc bf16 trainers (--set %s) and PyTorch under bf16 autocast, "
                         "alternating with the f32 runs" % BF16_SET)
    ap.add_argument("--openblas-coretype", default="auto", metavar="auto|keep|NAME",
                    help="OPENBLAS_CORETYPE for every process started: auto (default) sets "
                         "SkylakeX when unset on an AVX-512 CPU, keep leaves it alone")
    a = ap.parse_args()
    a.axlc = os.path.abspath(a.axlc)
    coretype = openblas_coretype(a.openblas_coretype)

    def selected(name):
        return (not a.only or a.only in name) and not any(k in name for k in a.skip)
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(), "cpus": os.cpu_count(), "git": git_rev(),
        "settings": {"steps": a.steps, "warmup": a.warmup, "rounds": a.rounds,
                     "threads": a.threads, "torch": not a.no_torch, "opencl": a.opencl,
                     "only": a.only, "skip": a.skip, "warm": a.warm, "bf16": a.bf16},
        "openblas_coretype": coretype, "bf16_cpu": "avx512_bf16" in cpu_flags(),
        "loadavg_start": list(os.getloadavg()), "goals": GOALS,
        "compile": [], "train": [], "ocl_gemm": [],
    }
    print(f"axlc {report['git']}, {report['cpus']} CPUs, load average "
          f"{report['loadavg_start'][0]:.2f}, {a.rounds} rounds of {a.warmup}+{a.steps} steps, "
          f"{a.threads} threads, OPENBLAS_CORETYPE {coretype or 'unset'}")
    if report["loadavg_start"][0] > (os.cpu_count() or 1) - 0.5:
        print("note: the machine is busy (load average near or above its CPU count): expect "
              "noisy numbers, a low sgemm peak and so a high MFU; read the ratios")

    if a.ocl_gemm:
        for m, n, k in [(512, 512, 512), (512, 256, 64), (2048, 256, 256)]:
            out = run([a.ocl_gemm, str(m), str(n), str(k), "--threads", str(a.threads)])
            report["ocl_gemm"].append({"mnk": [m, n, k], "output": out.strip().splitlines()})
            print("matmul GFLOP/s, " + " | ".join(out.strip().splitlines()))

    peak = float(run([a.peak, str(a.threads)]).strip())
    report["sgemm_peak_gflops"] = {"threads": a.threads, "start": peak}
    print(f"sgemm peak ({a.threads} threads), start: {peak:.1f} GFLOP/s")
    if a.fma_peak:
        ceiling = float(run([a.fma_peak, str(a.threads)]).strip())
        report["fma_peak_gflops"] = {"threads": a.threads, "start": ceiling}
        print(f"FMA ceiling ({a.threads} threads): {ceiling:.1f} GFLOP/s; the sgemm peak is "
              f"{100 * peak / ceiling:.0f}% of it")
    if a.bf16_peak:
        r = subprocess.run([a.bf16_peak, str(a.threads)], capture_output=True, text=True)
        if r.returncode == 0:
            bf16 = float(r.stdout.strip())
            report["bf16_peak_gflops"] = {"threads": a.threads, "start": bf16}
            fma = report.get("fma_peak_gflops")
            print(f"bf16 ceiling ({a.threads} threads, vdpbf16ps): {bf16:.1f} GFLOP/s"
                  + (f"; {100 * bf16 / fma['start']:.0f}% of the FMA ceiling" if fma else ""))
        else:  # exit 1 with a message: the CPU lacks AVX512_BF16
            report["bf16_peak_gflops"] = None
            print(f"bf16 ceiling: absent ({r.stderr.strip() or 'bf16_peak failed'})")
    sys.stdout.flush()

    with tempfile.TemporaryDirectory(prefix="axlc-bench-") as top:
        # 2. Compile time and peak memory, every model first (the trainers are kept for 3).
        print("\ncompile (axlc compile --target cpu; cold: fresh AXLC_CACHE_DIR, "
              "warm: same dir again)")
        print(f"{'model':22} {'cold s':>8} {'cold MiB':>9} {'cache written':>18} {'warm s':>8} "
              f"{'warm MiB':>9}")
        trainers = {}
        bf16_rows = [(n + " bf16", m, s + [BF16_SET], []) for n, m, s in BENCHMARKS] \
            if a.bf16 else []
        for name, model, sets, flags in [b + ([],) for b in BENCHMARKS] + bf16_rows \
                + COMPILE_ONLY:
            if not selected(name):
                continue
            train = (name, model, sets) in BENCHMARKS or (name, model, sets, flags) in bf16_rows
            out = os.path.join(top, "trainer-%d" % len(report["compile"]))
            try:
                c = compile_bench(a.axlc, model, sets, flags, out, a.warm)
            except RuntimeError as e:
                if train:
                    sys.exit(f"bench: {e}")
                print(f"{name:22} compile failed (compile only, the bench goes on): {e}")
                report["compile"].append({"benchmark": name, "model": os.path.relpath(model, TOP),
                                          "sets": sets, "flags": flags, "trained": False,
                                          "error": str(e)})
                continue
            if train:
                trainers[name] = out
            else:
                os.remove(out)
            cache = c["cache_after_cold"]
            w = c["warm"] or {}
            print(f"{name:22} {c['cold']['wall_s']:8.2f} {c['cold']['max_rss_mib']:9.0f} "
                  f"{'%d files %.1f MiB' % (cache['files'], cache['bytes'] / 2**20):>18} "
                  f"{fmt(w.get('wall_s'), '8.2f', 'skipped'):>8} "
                  f"{fmt(w.get('max_rss_mib'), '9.0f', '-'):>9}"
                  + ("" if train else "  (compile only)"))
            report["compile"].append(dict(c, benchmark=name, model=os.path.relpath(model, TOP),
                                          sets=sets, flags=flags, trained=train))
            sys.stdout.flush()
        reasons = sorted({c["warm_skipped"] for c in report["compile"] if "warm_skipped" in c})
        if reasons:
            print("warm compiles skipped: " + "; ".join(reasons))
        save(report, a.json)

        # 3. Training speed, axlc and PyTorch alternating.
        for name, model, sets in BENCHMARKS:
            if selected(name):
                report["train"].append(bench_training(a, name, model, sets, trainers[name],
                                                      peak, top, report,
                                                      trainers.get(name + " bf16")))
                save(report, a.json)

    end_peak = float(run([a.peak, str(a.threads)]).strip())
    report["sgemm_peak_gflops"]["end"] = end_peak
    report["loadavg_end"] = list(os.getloadavg())
    print(f"\nsgemm peak ({a.threads} threads): start {peak:.1f}, end {end_peak:.1f} GFLOP/s "
          f"({100 * (end_peak / peak - 1):+.0f}%); MFU uses the start. Load average at the end "
          f"{report['loadavg_end'][0]:.2f}")

    # 4. Summary, with the issue's goals.
    if report["train"]:
        print_summary(report)
        if a.bf16:
            print_bf16_summary(report)
    save(report, a.json)
    if a.json:
        print(f"\nwrote {a.json}")


if __name__ == "__main__":
    main()
