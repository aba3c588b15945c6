#!/usr/bin/python3
"""reference.py: an independent PyTorch implementation of axlc's training step.

usage: reference.py CONFIG.json --init W.safetensors --data FILE --steps N --dump OUT.safetensors

CONFIG.json is a resolved config (the output of `axlc config MODEL.json`: every default
explicit). The model is rebuilt here from the config alone, with standard PyTorch ops
(F.layer_norm, F.gelu(approximate="tanh"), F.silu, F.cross_entropy, torch.topk,
torch.optim.AdamW), in float64 by default. Only three pieces follow axlc's own
definitions on purpose, because PyTorch has no op with the same semantics:
  - clipping by global norm: g *= c / max(|g|, c)   (torch.nn.utils.clip_grad_norm_
    uses c / (|g| + 1e-6), clamped to 1);
  - the learning-rate schedule (passes/optimizer.c), set on every param group
    before each step (t is 1-based);
  - the MoE load-balance loss: w * E * sum_e (tokens routed to e / (tokens * top_k))
    * (mean router probability of e), summed over layers and added to the loss.

Parameters are named by their axlc paths ("model/decoder/layer_0/self_attention/
q_proj/weight"); linear weights are (in, out): y = x @ W + b. The init file must hold
exactly the parameters the config implies, with the same shapes.

The dump holds F32 tensors: "loss" [N] (the loss of each step, before its update),
"grad:P" (the gradient of the last step, before clipping), "new:P" (P after the last
step), and for diagnosis "lr" [N] and "grad_norm" [N].
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stio  # noqa: E402

DATA_MAGIC = 20240520


def child(node, field):
    v = node.get(field)
    return v if isinstance(v, dict) else None


def hidden_size(ff, dim):
    h = int(ff["hidden_dim"])
    if h == 0:
        m = int(ff["hidden_dim_multiple_of"])
        scaled = math.ceil(float(ff["hidden_dim_scale"]) * dim - 1e-9)
        h = (scaled + m - 1) // m * m
    return h


# ---- the parameter table, from the config alone ------------------------------------

def param_table(cfg):
    """[(path, shape, weight_decay_scale)]: norm scales and all biases are not decayed."""
    model = cfg["model"]
    if model.get("dtype", "f32") != "f32":
        raise SystemExit(f"reference.py: dtype {model['dtype']} is not supported (f32 only)")
    V, D = int(model["vocab_size"]), int(model["dim"])
    out = []

    def add(path, shape, wd):
        out.append((path, tuple(int(s) for s in shape), float(wd)))

    def norm(prefix, ncfg):
        add(prefix + "/scale", (D,), 0.0)
        if ncfg["kind"] == "layer_norm" and ncfg["bias"]:
            add(prefix + "/bias", (D,), 0.0)

    def linear(prefix, shape, bias, lead=None):
        w = shape if lead is None else (lead,) + shape
        add(prefix + "/weight", w, 1.0)
        if bias:
            add(prefix + "/bias", w[:-2] + (w[-1],), 0.0)

    add("model/emb/weight", (V, D), 1.0)
    pos = child(model, "pos_emb")
    if pos:
        if int(pos["max_len"]) < int(cfg["input"]["seq_len"]):
            raise SystemExit("reference.py: pos_emb max_len is shorter than seq_len")
        add("model/pos_emb/weight", (int(pos["max_len"]), D), 1.0)
    dec = model["decoder"]
    layer = dec["layer"]
    att, ff = layer["self_attention"], layer["feed_forward"]
    N = int(att["num_heads"])
    K = int(att["num_kv_heads"]) or N
    H = D // N
    for i in range(int(dec["num_layers"])):
        lp = f"model/decoder/layer_{i}"
        norm(lp + "/attn_norm", layer["norm"])
        ap = lp + "/self_attention"
        linear(ap + "/q_proj", (D, N * H), att["bias"])
        linear(ap + "/k_proj", (D, K * H), att["bias"])
        linear(ap + "/v_proj", (D, K * H), att["bias"])
        linear(ap + "/o_proj", (N * H, D), att["bias"])
        norm(lp + "/ffn_norm", layer["norm"])
        fp = lp + "/feed_forward"
        hid = hidden_size(ff, D)
        lead = None
        if ff["kind"] == "moe":
            lead = int(ff["num_experts"])
            add(fp + "/gate/weight", (D, lead), 1.0)
        if ff["activation"] == "swiglu":
            linear(fp + "/linear1_0", (D, hid), ff["bias"], lead)
            linear(fp + "/linear1_1", (D, hid), ff["bias"], lead)
        else:
            linear(fp + "/linear1", (D, hid), ff["bias"], lead)
        linear(fp + "/linear2", (hid, D), ff["bias"], lead)
    norm("model/decoder/output_norm", dec["output_norm"])
    if not model["lm_head"]["tied"]:
        add("model/lm_head/weight", (V, D), 1.0)
    return out


# ---- the model ---------------------------------------------------------------------

class Model:
    def __init__(self, cfg, params):
        self.cfg, self.p = cfg, params
        self.m = cfg["model"]
        self.aux = []

    def lin(self, x, prefix):
        y = x @ self.p[prefix + "/weight"]
        b = self.p.get(prefix + "/bias")
        return y if b is None else y + b

    def norm(self, x, prefix, ncfg):
        eps = float(ncfg["eps"])
        scale = self.p[prefix + "/scale"]
        if ncfg["kind"] == "layer_norm":
            return F.layer_norm(x, (x.shape[-1],), scale, self.p.get(prefix + "/bias"), eps)
        # RMSNorm (no torch op in this version): x / sqrt(mean(x^2) + eps) * scale
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * scale

    @staticmethod
    def rope(x, theta):
        """x (B, T, heads, H); the GPT-NeoX / Llama-HF "rotate half" form."""
        T, H = x.shape[1], x.shape[3]
        inv = theta ** (-torch.arange(0, H, 2, dtype=torch.float64) / H)     # (H/2,)
        ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]   # (T, H/2)
        ang = torch.cat([ang, ang], -1).to(x.dtype)                          # (T, H)
        cos, sin = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
        x1, x2 = x[..., : H // 2], x[..., H // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    def attention(self, x, prefix, acfg):
        B, T, D = x.shape
        N = int(acfg["num_heads"])
        K = int(acfg["num_kv_heads"]) or N
        H = D // N
        q = self.lin(x, prefix + "/q_proj").view(B, T, N, H)
        k = self.lin(x, prefix + "/k_proj").view(B, T, K, H)
        v = self.lin(x, prefix + "/v_proj").view(B, T, K, H)
        rope = child(acfg, "rope")
        if rope:
            q, k = self.rope(q, float(rope["theta"])), self.rope(k, float(rope["theta"]))
        if K != N:  # query head j reads kv head j // (N / K), as Llama's repeat_kv
            k, v = k.repeat_interleave(N // K, dim=2), v.repeat_interleave(N // K, dim=2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))                     # (B, N, T, H)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(H)
        if acfg["causal"]:
            keep = torch.ones(T, T, dtype=torch.bool).tril()
            s = s.masked_fill(~keep, float("-inf"))
        ctx = torch.softmax(s, -1) @ v                                        # (B, N, T, H)
        return self.lin(ctx.transpose(1, 2).reshape(B, T, N * H), prefix + "/o_proj")

    @staticmethod
    def act(name, a, up):
        if name == "gelu":
            return F.gelu(a, approximate="tanh")
        if name == "relu":
            return F.relu(a)
        if name == "swiglu":
            return F.silu(a) * up
        raise SystemExit(f"reference.py: unknown activation {name}")

    def mlp(self, x, prefix, fcfg):
        gated = fcfg["activation"] == "swiglu"
        a = self.lin(x, prefix + ("/linear1_0" if gated else "/linear1"))
        up = self.lin(x, prefix + "/linear1_1") if gated else None
        return self.lin(self.act(fcfg["activation"], a, up), prefix + "/linear2")

    def moe(self, x, prefix, fcfg):
        B, T, D = x.shape
        E, k = int(fcfg["num_experts"]), int(fcfg["top_k"])
        probs = torch.softmax(x @ self.p[prefix + "/gate/weight"], -1)       # (B, T, E)
        idx = torch.topk(probs, k, dim=-1).indices
        mask = torch.zeros_like(probs).scatter_(-1, idx, 1.0).detach()       # top-k one-hot
        w_lb = float(fcfg["load_balance_loss_weight"])
        if w_lb != 0:
            tokens = B * T
            frac = mask.sum((0, 1)) / (tokens * k)
            mean = probs.sum((0, 1)) / tokens
            self.aux.append(w_lb * E * (frac * mean).sum())
        w = probs * mask
        w = w / w.sum(-1, keepdim=True)

        def expert_in(name):
            y = torch.einsum("btd,edh->bteh", x, self.p[f"{prefix}/{name}/weight"])
            b = self.p.get(f"{prefix}/{name}/bias")
            return y if b is None else y + b

        gated = fcfg["activation"] == "swiglu"
        a = expert_in("linear1_0" if gated else "linear1")
        up = expert_in("linear1_1") if gated else None
        h = self.act(fcfg["activation"], a, up)                               # (B, T, E, H)
        y = torch.einsum("bteh,ehd->bted", h, self.p[prefix + "/linear2/weight"])
        b2 = self.p.get(prefix + "/linear2/bias")
        if b2 is not None:
            y = y + b2
        return (y * w[..., None]).sum(2)

    def loss(self, ids, targets):
        self.aux = []
        m = self.m
        T = ids.shape[1]
        h = self.p["model/emb/weight"][ids]
        if child(m, "pos_emb"):
            h = h + self.p["model/pos_emb/weight"][:T]
        dec = m["decoder"]
        layer = dec["layer"]
        for i in range(int(dec["num_layers"])):
            lp = f"model/decoder/layer_{i}"
            h = h + self.attention(self.norm(h, lp + "/attn_norm", layer["norm"]),
                                   lp + "/self_attention", layer["self_attention"])
            ff = layer["feed_forward"]
            x = self.norm(h, lp + "/ffn_norm", layer["norm"])
            if ff["kind"] == "moe":
                h = h + self.moe(x, lp + "/feed_forward", ff)
            else:
                h = h + self.mlp(x, lp + "/feed_forward", ff)
        h = self.norm(h, "model/decoder/output_norm", dec["output_norm"])
        W = self.p["model/emb/weight" if m["lm_head"]["tied"] else "model/lm_head/weight"]
        logits = h @ W.t()                                                   # (B, T, V)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        for a in self.aux:
            loss = loss + a
        return loss


# ---- data --------------------------------------------------------------------------

class Data:
    """runtime/data.c's batching: window b of a step starts at pos + b*T, holds T+1 tokens;
    pos advances by B*T, and restarts at 0 when a batch would run past the end."""

    def __init__(self, path, vocab):
        raw = open(path, "rb").read()
        if len(raw) >= 4 and int.from_bytes(raw[:4], "little") == DATA_MAGIC:
            hdr = np.frombuffer(raw[:1024], dtype="<i4")
            width = {1: "<u2", 2: "<u4"}[int(hdr[1])]
            self.tokens = np.frombuffer(raw[1024:], dtype=width)[: int(hdr[2])].astype(np.int64)
        else:
            self.tokens = np.frombuffer(raw, dtype=np.uint8).astype(np.int64)
        if self.tokens.size and self.tokens.max() >= vocab:
            raise SystemExit(f"reference.py: {path}: a token is outside the vocabulary {vocab}")
        self.pos = 0

    def next_batch(self, B, T):
        n, step = self.tokens.size, B * T
        if step + 1 > n:
            raise SystemExit(f"reference.py: {n} tokens, too few for a batch of {B} x {T}+1")
        if self.pos + step + 1 > n:
            self.pos = 0
        w = np.stack([self.tokens[self.pos + b * T: self.pos + b * T + T + 1] for b in range(B)])
        self.pos += step
        return torch.from_numpy(w[:, :T].copy()), torch.from_numpy(w[:, 1:].copy())


# ---- the learner -------------------------------------------------------------------

class Schedule:
    """passes/optimizer.c: lr = peak * mult(t); linear warmup to t = warmup, then cosine
    from 1 to min_ratio over [warmup, decay] (or constant 1)."""

    def __init__(self, cfg):
        lrn = cfg["learner"]
        s = lrn["schedule"]
        self.peak = float(lrn["optimizer"]["learning_rate"])
        self.warmup = int(s["warmup_steps"])
        self.cosine = s["kind"] == "cosine_schedule"
        self.decay = (int(s["decay_steps"]) or int(cfg["max_steps"])) if self.cosine else 0
        self.min_ratio = float(s["min_ratio"]) if self.cosine else 0.0

    def __call__(self, t):
        mult = 1.0
        if self.cosine and self.decay > self.warmup:
            prog = min(max((t - self.warmup) / (self.decay - self.warmup), 0.0), 1.0)
            mult = self.min_ratio + 0.5 * (1.0 - self.min_ratio) * (1.0 + math.cos(math.pi * prog))
        if self.warmup > 0 and t <= self.warmup:
            mult = t / self.warmup
        return self.peak * mult


def clip_(grads, max_norm):
    """axlc's clipping: g *= c / max(|g|, c); returns |g| (before clipping)."""
    norm = torch.sqrt(sum((g * g).sum() for g in grads))
    if max_norm > 0:
        coef = max_norm / torch.clamp(norm, min=max_norm)
        for g in grads:
            g.mul_(coef)
    return norm


def main():
    ap = argparse.ArgumentParser(description="PyTorch reference of axlc's training step")
    ap.add_argument("config", help="resolved config: the output of `axlc config MODEL.json`")
    ap.add_argument("--init", required=True, help="initial parameters (safetensors)")
    ap.add_argument("--data", required=True, help="text or llm.c token file")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--dump", required=True, help="safetensors to write after the last step")
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    a = ap.parse_args()
    dt = getattr(torch, a.dtype)
    torch.set_num_threads(1)  # small tensors; deterministic sums

    with open(a.config) as f:
        cfg = json.load(f)
    table = param_table(cfg)
    init = stio.read(a.init)
    want = {p for p, _, _ in table}
    missing, extra = sorted(want - set(init)), sorted(set(init) - want)
    if missing or extra:
        raise SystemExit(f"reference.py: {a.init} does not match the config's parameters: "
                         f"missing {missing[:5]}, unexpected {extra[:5]}")
    params = {}
    for path, shape, _ in table:
        if tuple(init[path].shape) != shape:
            raise SystemExit(f"reference.py: {path}: shape {list(init[path].shape)} in "
                             f"{a.init}, the config implies {list(shape)}")
        params[path] = torch.tensor(init[path].astype(np.float64), dtype=dt, requires_grad=True)

    lrn = cfg["learner"]
    opt_cfg = lrn["optimizer"]
    if opt_cfg["kind"] != "adamw":
        raise SystemExit(f"reference.py: optimizer {opt_cfg['kind']} is not supported")
    wd = float(opt_cfg["weight_decay"])
    groups = {}
    for path, _, scale in table:
        groups.setdefault(scale, []).append(params[path])
    opt = torch.optim.AdamW(
        [{"params": ps, "weight_decay": wd * s} for s, ps in sorted(groups.items())],
        lr=0.0, betas=(float(opt_cfg["b1"]), float(opt_cfg["b2"])), eps=float(opt_cfg["eps"]),
        amsgrad=False, maximize=False, foreach=False)
    sched = Schedule(cfg)
    max_norm = float(lrn["max_grad_norm"])

    model = Model(cfg, params)
    data = Data(a.data, int(cfg["model"]["vocab_size"]))
    B, T = int(cfg["input"]["global_batch_size"]), int(cfg["input"]["seq_len"])
    losses, lrs, norms, last_grads = [], [], [], {}
    for t in range(1, a.steps + 1):
        ids, targets = data.next_batch(B, T)
        opt.zero_grad(set_to_none=False)
        loss = model.loss(ids, targets)
        loss.backward()
        for p in params.values():
            if p.grad is None:  # AdamW skips grad-less tensors; axlc updates every one
                p.grad = torch.zeros_like(p)
        last_grads = {k: p.grad.detach().clone() for k, p in params.items()}
        norm = clip_([p.grad for p in params.values()], max_norm)
        lr = sched(t)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        losses.append(loss.item())
        lrs.append(lr)
        norms.append(norm.item())
        print(f"step {t} loss {loss.item():.6f} grad_norm {norm.item():.6f} lr {lr:.6g}",
              flush=True)

    out = {"loss": np.array(losses, np.float32), "lr": np.array(lrs, np.float32),
           "grad_norm": np.array(norms, np.float32)}
    for k, p in params.items():
        out["grad:" + k] = last_grads[k].numpy().astype(np.float32)
        out["new:" + k] = p.detach().numpy().astype(np.float32)
    stio.write(a.dump, out, {"made_by": "tests/torch/reference.py", "dtype": a.dtype})


if __name__ == "__main__":
    main()
