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

On a GPU (--device cuda, tools/bench/gpu.sh) the same step runs there, timed between
torch.cuda.synchronize() calls; --tf32 lets f32 products use TF32, --sdpa computes attention
with F.scaled_dot_product_attention (causal where the config says so) and --fused-adamw
takes AdamW's fused CUDA update.

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
import reference  # noqa: E402
from reference import Model, Schedule, param_table  # noqa: E402


class SdpaModel(Model):
    """The reference model with attention through F.scaled_dot_product_attention."""

    def attention(self, x, prefix, acfg):
        F = torch.nn.functional
        B, T, D = x.shape
        N = int(acfg["num_heads"])
        K = int(acfg["num_kv_heads"]) or N
        H = D // N
        q = self.lin(x, prefix + "/q_proj").view(B, T, N, H)
        k = self.lin(x, prefix + "/k_proj").view(B, T, K, H)
        v = self.lin(x, prefix + "/v_proj").view(B, T, K, H)
        rope = reference.child(acfg, "rope")
        if rope:
            q, k = self.rope(q, float(rope["theta"])), self.rope(k, float(rope["theta"]))
        if K != N:
            k, v = k.repeat_interleave(N // K, dim=2), v.repeat_interleave(N // K, dim=2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        ctx = F.scaled_dot_product_attention(q, k, v, is_causal=bool(acfg["causal"]))
        return self.lin(ctx.transpose(1, 2).reshape(B, T, N * H), prefix + "/o_proj")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config", help="the output of `axlc config MODEL.json`")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--autocast", action="store_true",
                    help="forward and loss under torch.autocast(device, dtype=torch.bfloat16)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--tf32", action="store_true", help="f32 products in TF32 (cuda)")
    ap.add_argument("--sdpa", action="store_true", help="attention by F.scaled_dot_product_attention")
    ap.add_argument("--fused-adamw", action="store_true", help="AdamW(fused=True) (cuda)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    if (cuda or a.sdpa) and not hasattr(torch, "set_default_device"):
        raise SystemExit(f"torch_bench.py: --device cuda and --sdpa need PyTorch 2.0 or later "
                         f"(this is {torch.__version__})")
    if cuda:  # the reference model's masks and positions are made where the parameters are
        torch.set_default_device(dev)
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.allow_tf32 = a.tf32
    torch.manual_seed(0)
    with open(a.config) as f:
        cfg = json.load(f)
    params = {}
    for path, shape, _ in param_table(cfg):
        t = torch.ones(shape) if path.endswith("/scale") else torch.randn(shape) * 0.02
        params[path] = t.to(dev).requires_grad_(True)
    opt_cfg = cfg["learner"]["optimizer"]
    wd = float(opt_cfg["weight_decay"])
    groups = {}
    for path, _, scale in param_table(cfg):
        groups.setdefault(scale, []).append(params[path])
    opt = torch.optim.AdamW([{"params": ps, "weight_decay": wd * s} for s, ps in groups.items()],
                            lr=float(opt_cfg["learning_rate"]),
                            betas=(float(opt_cfg["b1"]), float(opt_cfg["b2"])),
                            eps=float(opt_cfg["eps"]),
                            **({"fused": True} if a.fused_adamw else {}))
    sched = Schedule(cfg)
    model = (SdpaModel if a.sdpa else Model)(cfg, params)
    B, T = int(cfg["input"]["global_batch_size"]), int(cfg["input"]["seq_len"])
    V = int(cfg["model"]["vocab_size"])
    max_norm = float(cfg["learner"]["max_grad_norm"])
    times = []
    for t in range(1, a.warmup + a.steps + 1):
        ids = torch.randint(0, V, (B, T)).to(dev)
        targets = torch.randint(0, V, (B, T)).to(dev)
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.autocast):
            loss = model.loss(ids, targets)
        loss.backward()
        if max_norm > 0:
            torch.nn.utils.clip_grad_norm_(params.values(), max_norm)
        for g in opt.param_groups:
            g["lr"] = sched(t)
        opt.step()
        if cuda:
            torch.cuda.synchronize()
        if t > a.warmup:
            times.append(time.perf_counter() - t0)
    ms = 1000 * sorted(times)[len(times) // 2]
    print(json.dumps({"ms_per_step": ms, "tokens_per_s": B * T / (ms / 1000), "loss": loss.item(),
                      "threads": a.threads, "torch": torch.__version__, "autocast": a.autocast,
                      "device": str(dev), "tf32": a.tf32, "sdpa": a.sdpa, "fused_adamw": a.fused_adamw,
                      "step_ms": [round(1000 * t, 3) for t in times]}))


if __name__ == "__main__":
    main()
