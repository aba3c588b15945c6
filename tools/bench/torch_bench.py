"""torch_bench.py: the PyTorch side of tools/bench: trains the same model as axlc (built
from `axlc config` output by tests/torch/reference.py's Model, in float32) with
torch.optim.AdamW and clip_grad_norm_, and prints one JSON line: the median milliseconds per
step and tokens/s over the measured steps, and every measured step's milliseconds (step_ms,
so tools/bench/bench.py can take the median over several runs).

A step is timed with time.perf_counter around zero_grad, forward, backward, gradient clipping
and the optimizer update: the same work as one step of an axlc trainer (whose step_ms in
--metrics also covers the whole compiled step). Fetching the random batch is outside it.

With --autocast the forward pass and the loss run under torch.autocast("cpu",
dtype=torch.bfloat16): PyTorch's own mixed precision, the counterpart of an axlc trainer
compiled with --set /precision/compute=bf16. The products (matmul) run in bf16 with f32
accumulation (oneDNN on a CPU with AVX512_BF16), the ops autocast keeps in f32 (softmax,
layer_norm, cross_entropy) in f32; the parameters, gradients and AdamW stay f32. Backward
runs outside the context, as PyTorch's documentation has it (each op's backward in the dtype
of its forward).

    OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 torch_bench.py RESOLVED.json [--steps N]
        [--warmup N] [--threads N] [--autocast]

Random weights (std 0.02) and random tokens: the numbers measure speed, not learning.
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tests", "torch"))
from reference import Model, Schedule, param_table  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config", help="the output of `axlc config MODEL.json`")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--autocast", action="store_true",
                    help="forward and loss under torch.autocast('cpu', dtype=torch.bfloat16)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    with open(a.config) as f:
        cfg = json.load(f)
    params = {}
    for path, shape, _ in param_table(cfg):
        t = torch.ones(shape) if path.endswith("/scale") else torch.randn(shape) * 0.02
        params[path] = t.requires_grad_(True)
    opt_cfg = cfg["learner"]["optimizer"]
    wd = float(opt_cfg["weight_decay"])
    groups = {}
    for path, _, scale in param_table(cfg):
        groups.setdefault(scale, []).append(params[path])
    opt = torch.optim.AdamW([{"params": ps, "weight_decay": wd * s} for s, ps in groups.items()],
                            lr=float(opt_cfg["learning_rate"]),
                            betas=(float(opt_cfg["b1"]), float(opt_cfg["b2"])),
                            eps=float(opt_cfg["eps"]))
    sched = Schedule(cfg)
    model = Model(cfg, params)
    B, T = int(cfg["input"]["global_batch_size"]), int(cfg["input"]["seq_len"])
    V = int(cfg["model"]["vocab_size"])
    max_norm = float(cfg["learner"]["max_grad_norm"])
    times = []
    for t in range(1, a.warmup + a.steps + 1):
        ids = torch.randint(0, V, (B, T))
        targets = torch.randint(0, V, (B, T))
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast):
            loss = model.loss(ids, targets)
        loss.backward()
        if max_norm > 0:
            torch.nn.utils.clip_grad_norm_(params.values(), max_norm)
        for g in opt.param_groups:
            g["lr"] = sched(t)
        opt.step()
        if t > a.warmup:
            times.append(time.perf_counter() - t0)
    ms = 1000 * sorted(times)[len(times) // 2]
    print(json.dumps({"ms_per_step": ms, "tokens_per_s": B * T / (ms / 1000), "loss": loss.item(),
                      "threads": a.threads, "torch": torch.__version__, "autocast": a.autocast,
                      "step_ms": [round(1000 * t, 3) for t in times]}))


if __name__ == "__main__":
    main()
