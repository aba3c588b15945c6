#!/usr/bin/env python3
"""The step-time cost of checkpoint saves: one trainer, three runs of the same steps.

usage: tools/bench/ckpt_cost.py --axlc build/tools/axlc [--model tools/bench/small.json]
        [--set /PATH=VALUE ...] [--steps 80] [--every 10] [--threads N] [--rounds 2]

Compiles the model once, then runs it (each round, in turn) with no checkpoints, with
asynchronous saves every --every steps (the default: a snapshot at the step boundary, written
in the background) and with blocking saves (--ckpt-sync). From each run's --metrics lines:
  step ms       the median of step_ms (the compiled step alone: what a background writer
                slows by sharing the cores and the memory bus)
  wall ms       the median and the mean of the wall time from one metrics line to the next
                (the step, the stall of a save that follows it, the bookkeeping)
  stall ms      checkpoint stalls (the metrics' ckpt_s) per save: the snapshot and any wait
                for the previous save (async), or the whole write (blocking)
and the rise of the median and mean wall ms over no saves. The first 5 steps are warm-up and
left out. The runs of each round alternate, so the machine's drift touches all three alike.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WARMUP = 5


def run_trainer(trainer, data, work, name, steps, every, threads, extra):
    ck, metrics = os.path.join(work, name), os.path.join(work, name + ".jsonl")
    shutil.rmtree(ck, ignore_errors=True)
    cmd = [trainer, "--data", data, "--steps", str(steps), "--threads", str(threads),
           "--metrics", metrics]
    if every:
        cmd += ["--ckpt-dir", ck, "--ckpt-every", str(every), "--keep", "2"] + extra
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    lines = [json.loads(x) for x in open(metrics)]
    shutil.rmtree(ck, ignore_errors=True)
    return lines


def summarize(runs, every):
    step, wall, stall, saves = [], [], 0.0, 0
    for m in runs:
        step += [x["step_ms"] for x in m[WARMUP:]]
        wall += [1e3 * (b["wall_s"] - a["wall_s"]) for a, b in zip(m[WARMUP - 1:], m[WARMUP:])]
        stall += m[-1]["ckpt_s"] - m[WARMUP - 1]["ckpt_s"]
        saves += sum(1 for x in m[WARMUP - 1:-1] if every and x["step"] % every == 0)
    return {"step_ms": statistics.median(step), "wall_median_ms": statistics.median(wall),
            "wall_mean_ms": statistics.mean(wall),
            "stall_per_save_ms": 1e3 * stall / saves if saves else 0.0}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--axlc", required=True)
    ap.add_argument("--model", default=os.path.join(TOP, "tools/bench/small.json"))
    ap.add_argument("--set", action="append", default=[], metavar="/PATH=VALUE",
                    help="a config override for axlc compile (repeatable)")
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="axlc-ckpt-cost.")
    try:
        data = os.path.join(work, "text.txt")
        with open(data, "wb") as out:
            for name in ["README.md"] + sorted(os.listdir(os.path.join(TOP, "docs"))):
                path = os.path.join(TOP, name if name == "README.md" else "docs/" + name)
                if path.endswith(".md"):
                    out.write(open(path, "rb").read())
        trainer = os.path.join(work, "trainer")
        sets = [x for s in a.set for x in ("--set", s)]
        subprocess.run([a.axlc, "compile", a.model, "--target", "cpu", "-o", trainer] + sets,
                       check=True, stdout=subprocess.DEVNULL)
        modes = [("none", 0, []), ("async", a.every, []), ("blocking", a.every, ["--ckpt-sync"])]
        runs = {m: [] for m, _, _ in modes}
        for r in range(a.rounds):
            for name, every, extra in modes:
                runs[name].append(run_trainer(trainer, data, work, name, a.steps, every, a.threads,
                                              extra))
        print(f"{' '.join([os.path.relpath(a.model, TOP)] + sets)}: {a.steps} steps x {a.rounds} rounds, "
              f"{a.threads} threads, saves every {a.every} steps")
        base = summarize(runs["none"], 0)
        print(f"{'saves':<9} {'step ms':>8} {'wall ms median':>15} {'mean':>8} "
              f"{'stall/save ms':>14} {'median rise':>12} {'mean rise':>10}")
        for name, every, _ in modes:
            s = summarize(runs[name], every)
            print(f"{name:<9} {s['step_ms']:8.1f} {s['wall_median_ms']:15.1f} "
                  f"{s['wall_mean_ms']:8.1f} {s['stall_per_save_ms']:14.1f} "
                  f"{100 * (s['wall_median_ms'] / base['wall_median_ms'] - 1):+11.1f}% "
                  f"{100 * (s['wall_mean_ms'] / base['wall_mean_ms'] - 1):+9.1f}%")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
