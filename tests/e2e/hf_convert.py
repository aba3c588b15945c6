#!/usr/bin/python3
"""hf_convert.py: `axlc convert` against files written here in Hugging Face's naming.

usage: hf_convert.py AXLC MODEL.json WORKDIR MODE
  MODE round_trip  random weights in Hugging Face's names and layouts (GPT-2 or Llama, as
                   the config's family, Mixtral for a MoE model); --from hf must give each axlc
                   parameter as the expected split/transpose of its source; --to hf must give
                   back every source tensor; a second round trip is byte-identical; and the
                   interpreter's step-1 loss with --init of the converted file equals an
                   independent forward pass of the Hugging Face model on the Hugging Face
                   weights (numpy for GPT-2 and Llama, torch for Mixtral's sparse MoE block).
  MODE dump        an interpreter --dump is usable as --init (its new parameters), and
                   --to hf of it gives weights whose numpy forward loss is the loss the
                   interpreter reports when it starts from the dump.
  MODE errors      missing, misshapen, unknown tensors, a bad file, a wrong config: each a
                   clear error naming the file and the tensor, exit 1, output not touched.
  MODE shards      sharded checkpoints: --from hf of a model directory and of its index
                   equals --from hf of the single file, byte for byte; --to hf --max-shard-size
                   writes shards (each within the size) and their index, whose tensors are
                   the source's, config.json beside them, and --from hf of them gives the same
                   axlc bytes; a missing shard, a shard without a tensor the index names, a
                   tensor no index entry names, a malformed index, an output onto an input:
                   each an error naming the file, nothing written.
  MODE dtypes      a BF16 Hugging Face file: --from hf gives the f32 masters (exact widening)
                   and records BF16; --to hf gives every tensor's bits back; --dtype f32,
                   bf16 and f16 round f32 to nearest, ties to even, as numpy does; without
                   --dtype and a record f32 stays F32; a bad --dtype is named with the
                   values it takes.
Exit 0 on success, 1 on a failure (printed), 77 when numpy (or, for Mixtral, torch) is missing.
"""
import json
import math
import os
import subprocess
import sys

sys.dont_write_bytecode = True
try:
    import numpy as np
except ImportError:
    print("SKIP: numpy is missing (apt-get install python3-numpy)")
    sys.exit(77)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torch"))
import stio  # noqa: E402

AXLC, MODEL, WORK, MODE = sys.argv[1:5]
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torch", "data.txt")
os.makedirs(WORK, exist_ok=True)


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def axlc(*args, ok=True):
    r = subprocess.run([AXLC, *args], capture_output=True, text=True)
    if ok and r.returncode != 0:
        fail(f"axlc {' '.join(args)}: status {r.returncode}\n{r.stderr}")
    return r


def path(name):
    return os.path.join(WORK, name)


CFG = json.loads(axlc("config", MODEL).stdout)
M = CFG["model"]
LAYER = M["decoder"]["layer"]
GPT2 = M.get("pos_emb") is not None
V, D, L = M["vocab_size"], M["dim"], M["decoder"]["num_layers"]
NH = LAYER["self_attention"]["num_heads"]
KV = LAYER["self_attention"]["num_kv_heads"] or NH
HD = D // NH
PARAMS = {p["path"]: tuple(p["shape"]) for p in json.loads(axlc("params", MODEL, "--json").stdout)["params"]}
TIED = M["lm_head"]["tied"]
FF = LAYER["feed_forward"]
MOE = FF["kind"] == "moe"  # Mixtral
if MOE:
    try:
        import torch  # noqa: F401  (Mixtral's forward is written in torch)
    except ImportError:
        print("SKIP: torch is missing (apt-get install python3-torch)")
        sys.exit(77)
E, TOPK = (FF["num_experts"], FF["top_k"]) if MOE else (0, 0)


# ---- random weights in Hugging Face's naming -----------------------------------------

def hf_weights(rng):
    """{name: array} as transformers names and lays them out (no prefix)."""
    w = {}

    def rnd(*shape, std=0.2):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def norm(name, bias):
        w[name + ".weight"] = (1 + rnd(D, std=0.1)).astype(np.float32)
        if bias:
            w[name + ".bias"] = rnd(D, std=0.1)

    if GPT2:
        F = PARAMS["model/decoder/layer_0/feed_forward/linear1/weight"][1]
        w["wte.weight"] = rnd(V, D)
        w["wpe.weight"] = rnd(PARAMS["model/pos_emb/weight"][0], D)
        for i in range(L):
            h = f"h.{i}."
            norm(h + "ln_1", True)
            w[h + "attn.c_attn.weight"] = rnd(D, 3 * D)   # Conv1D: (in, out)
            w[h + "attn.c_attn.bias"] = rnd(3 * D, std=0.1)
            w[h + "attn.c_proj.weight"] = rnd(D, D)
            w[h + "attn.c_proj.bias"] = rnd(D, std=0.1)
            norm(h + "ln_2", True)
            w[h + "mlp.c_fc.weight"] = rnd(D, F)
            w[h + "mlp.c_fc.bias"] = rnd(F, std=0.1)
            w[h + "mlp.c_proj.weight"] = rnd(F, D)
            w[h + "mlp.c_proj.bias"] = rnd(D, std=0.1)
        norm("ln_f", True)
    else:
        F = PARAMS["model/decoder/layer_0/feed_forward/linear1_0/weight"][-1]
        w["model.embed_tokens.weight"] = rnd(V, D)
        for i in range(L):
            h = f"model.layers.{i}."
            norm(h + "input_layernorm", False)
            w[h + "self_attn.q_proj.weight"] = rnd(NH * HD, D)   # nn.Linear: (out, in)
            w[h + "self_attn.k_proj.weight"] = rnd(KV * HD, D)
            w[h + "self_attn.v_proj.weight"] = rnd(KV * HD, D)
            w[h + "self_attn.o_proj.weight"] = rnd(D, NH * HD)
            norm(h + "post_attention_layernorm", False)
            if MOE:  # MixtralSparseMoeBlock: the router, then w1 (gate), w3 (up), w2 (down)
                w[h + "block_sparse_moe.gate.weight"] = rnd(E, D, std=0.5)
                for e in range(E):
                    x = h + f"block_sparse_moe.experts.{e}."
                    w[x + "w1.weight"], w[x + "w3.weight"], w[x + "w2.weight"] = rnd(F, D), rnd(F, D), rnd(D, F)
                continue
            w[h + "mlp.gate_proj.weight"] = rnd(F, D)
            w[h + "mlp.up_proj.weight"] = rnd(F, D)
            w[h + "mlp.down_proj.weight"] = rnd(D, F)
        norm("model.norm", False)
        if not TIED:
            w["lm_head.weight"] = rnd(V, D)
    return w


def expected_axlc(w):
    """The axlc tensors each Hugging Face tensor must become (written independently of
    tools/convert.c's table: from the layouts in docs/convert.md)."""
    e = {}
    if GPT2:
        e["model/emb/weight"] = w["wte.weight"]
        e["model/pos_emb/weight"] = w["wpe.weight"]
        for i in range(L):
            h, a = f"h.{i}.", f"model/decoder/layer_{i}/"
            for hn, an in (("ln_1", "attn_norm"), ("ln_2", "ffn_norm")):
                e[a + an + "/scale"] = w[h + hn + ".weight"]
                e[a + an + "/bias"] = w[h + hn + ".bias"]
            cw, cb = w[h + "attn.c_attn.weight"], w[h + "attn.c_attn.bias"]
            for k, x in enumerate("qkv"):
                e[a + f"self_attention/{x}_proj/weight"] = cw[:, k * D:(k + 1) * D]
                e[a + f"self_attention/{x}_proj/bias"] = cb[k * D:(k + 1) * D]
            for hn, an in (("attn.c_proj", "self_attention/o_proj"), ("mlp.c_fc", "feed_forward/linear1"),
                           ("mlp.c_proj", "feed_forward/linear2")):
                e[a + an + "/weight"] = w[h + hn + ".weight"]
                e[a + an + "/bias"] = w[h + hn + ".bias"]
        e["model/decoder/output_norm/scale"] = w["ln_f.weight"]
        e["model/decoder/output_norm/bias"] = w["ln_f.bias"]
    else:
        e["model/emb/weight"] = w["model.embed_tokens.weight"]
        for i in range(L):
            h, a = f"model.layers.{i}.", f"model/decoder/layer_{i}/"
            e[a + "attn_norm/scale"] = w[h + "input_layernorm.weight"]
            e[a + "ffn_norm/scale"] = w[h + "post_attention_layernorm.weight"]
            for hn, an in (("self_attn.q_proj", "self_attention/q_proj"), ("self_attn.k_proj", "self_attention/k_proj"),
                           ("self_attn.v_proj", "self_attention/v_proj"), ("self_attn.o_proj", "self_attention/o_proj"),
                           ("mlp.gate_proj", "feed_forward/linear1_0"), ("mlp.up_proj", "feed_forward/linear1_1"),
                           ("mlp.down_proj", "feed_forward/linear2")):
                if h + hn + ".weight" in w:
                    e[a + an + "/weight"] = w[h + hn + ".weight"].T
            if MOE:  # the router (D, E); each expert matrix stacked along a leading E, as (in, out)
                x = h + "block_sparse_moe."
                e[a + "feed_forward/gate/weight"] = w[x + "gate.weight"].T
                for hn, an in (("w1", "linear1_0"), ("w3", "linear1_1"), ("w2", "linear2")):
                    e[a + f"feed_forward/{an}/weight"] = np.stack([w[x + f"experts.{j}.{hn}.weight"].T for j in range(E)])
        e["model/decoder/output_norm/scale"] = w["model.norm.weight"]
        if not TIED:
            e["model/lm_head/weight"] = w["lm_head.weight"]
    return e


# ---- an independent forward pass of the Hugging Face models (numpy, float64) ----------

def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def attend(q, k, v):
    """q (B, NH, T, HD), k and v (B, NH, T, HD): causal softmax attention."""
    T = q.shape[2]
    s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1])
    s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def heads(x, n):
    B, T, _ = x.shape
    return x.reshape(B, T, n, -1).transpose(0, 2, 1, 3)


def merge(y):
    B, N, T, H = y.shape
    return y.transpose(0, 2, 1, 3).reshape(B, T, N * H)


def gpt2_logits(w, ids):
    """GPT2LMHeadModel: Conv1D (x @ W + b), gelu_new, tied head."""
    g = {k: v.astype(np.float64) for k, v in w.items()}
    eps = LAYER["norm"]["eps"]
    T = ids.shape[1]
    x = g["wte.weight"][ids] + g["wpe.weight"][:T]
    for i in range(L):
        h = f"h.{i}."
        a = layer_norm(x, g[h + "ln_1.weight"], g[h + "ln_1.bias"], eps)
        qkv = a @ g[h + "attn.c_attn.weight"] + g[h + "attn.c_attn.bias"]
        q, k, v = (heads(t, NH) for t in np.split(qkv, 3, axis=-1))
        x = x + merge(attend(q, k, v)) @ g[h + "attn.c_proj.weight"] + g[h + "attn.c_proj.bias"]
        m = layer_norm(x, g[h + "ln_2.weight"], g[h + "ln_2.bias"], eps)
        m = m @ g[h + "mlp.c_fc.weight"] + g[h + "mlp.c_fc.bias"]
        m = 0.5 * m * (1 + np.tanh(math.sqrt(2 / math.pi) * (m + 0.044715 * m ** 3)))
        x = x + m @ g[h + "mlp.c_proj.weight"] + g[h + "mlp.c_proj.bias"]
    x = layer_norm(x, g["ln_f.weight"], g["ln_f.bias"], M["decoder"]["output_norm"]["eps"])
    return x @ g["wte.weight"].T


def rotate_half_rope(x, theta):
    """transformers' apply_rotary_pos_emb: x * cos + rotate_half(x) * sin, x (B, N, T, H)."""
    T, H = x.shape[2], x.shape[3]
    inv = 1.0 / theta ** (np.arange(0, H, 2) / H)
    f = np.outer(np.arange(T), inv)
    emb = np.concatenate([f, f], -1)
    x1, x2 = x[..., :H // 2], x[..., H // 2:]
    return x * np.cos(emb) + np.concatenate([-x2, x1], -1) * np.sin(emb)


def llama_logits(w, ids):
    """LlamaForCausalLM: nn.Linear (x @ W.T), RMSNorm, rotate_half RoPE, repeat_kv, SwiGLU."""
    g = {k: v.astype(np.float64) for k, v in w.items()}
    eps = LAYER["norm"]["eps"]
    theta = LAYER["self_attention"]["rope"]["theta"]
    x = g["model.embed_tokens.weight"][ids]
    for i in range(L):
        h = f"model.layers.{i}."
        a = rms_norm(x, g[h + "input_layernorm.weight"], eps)
        q = rotate_half_rope(heads(a @ g[h + "self_attn.q_proj.weight"].T, NH), theta)
        k = rotate_half_rope(heads(a @ g[h + "self_attn.k_proj.weight"].T, KV), theta)
        v = heads(a @ g[h + "self_attn.v_proj.weight"].T, KV)
        k, v = np.repeat(k, NH // KV, axis=1), np.repeat(v, NH // KV, axis=1)   # repeat_kv
        x = x + merge(attend(q, k, v)) @ g[h + "self_attn.o_proj.weight"].T
        m = rms_norm(x, g[h + "post_attention_layernorm.weight"], eps)
        gate, up = m @ g[h + "mlp.gate_proj.weight"].T, m @ g[h + "mlp.up_proj.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ g[h + "mlp.down_proj.weight"].T
    x = rms_norm(x, g["model.norm.weight"], M["decoder"]["output_norm"]["eps"])
    head = g["model.embed_tokens.weight"] if "lm_head.weight" not in g else g["lm_head.weight"]
    return x @ head.T


def mixtral_logits(w, ids):
    """MixtralForCausalLM in plain torch (float64): Llama's attention, then the sparse MoE
    block as transformers writes it: softmax over the router logits, torch.topk, the top-k
    weights renormalized, each expert SwiGLU (w2(silu(w1 x) * w3 x)) on the tokens routed to it,
    added back with index_add_."""
    import torch
    import torch.nn.functional as tf
    g = {k: torch.from_numpy(v.astype(np.float64)) for k, v in w.items()}
    eps, theta = LAYER["norm"]["eps"], LAYER["self_attention"]["rope"]["theta"]
    x = g["model.embed_tokens.weight"][torch.from_numpy(ids)]
    B, T, _ = x.shape
    inv = 1.0 / theta ** (torch.arange(0, HD, 2, dtype=torch.float64) / HD)
    emb = torch.cat([torch.outer(torch.arange(T, dtype=torch.float64), inv)] * 2, -1)
    cos, sin = emb.cos(), emb.sin()

    def rms(t, wt):
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + eps) * wt

    def rope(t):
        return t * cos + torch.cat([-t[..., HD // 2:], t[..., :HD // 2]], -1) * sin

    def split(t, n):
        return t.view(B, T, n, HD).transpose(1, 2)

    mask = torch.triu(torch.full((T, T), float("-inf"), dtype=torch.float64), 1)
    for i in range(L):
        h = f"model.layers.{i}."
        a = rms(x, g[h + "input_layernorm.weight"])
        q = rope(split(a @ g[h + "self_attn.q_proj.weight"].T, NH))
        k = rope(split(a @ g[h + "self_attn.k_proj.weight"].T, KV)).repeat_interleave(NH // KV, 1)
        v = split(a @ g[h + "self_attn.v_proj.weight"].T, KV).repeat_interleave(NH // KV, 1)
        p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(HD) + mask, -1)
        x = x + (p @ v).transpose(1, 2).reshape(B, T, NH * HD) @ g[h + "self_attn.o_proj.weight"].T
        flat = rms(x, g[h + "post_attention_layernorm.weight"]).reshape(B * T, D)
        probs = torch.softmax(flat @ g[h + "block_sparse_moe.gate.weight"].T, -1)
        top, sel = torch.topk(probs, TOPK, -1)
        top = top / top.sum(-1, keepdim=True)
        out = torch.zeros_like(flat)
        for e in range(E):
            rows, slot = torch.where(sel == e)
            xe, ex = flat[rows], h + f"block_sparse_moe.experts.{e}."
            ye = (tf.silu(xe @ g[ex + "w1.weight"].T) * (xe @ g[ex + "w3.weight"].T)) @ g[ex + "w2.weight"].T
            out.index_add_(0, rows, ye * top[rows, slot, None])
        x = x + out.view(B, T, D)
    x = rms(x, g["model.norm.weight"])
    head = g["model.embed_tokens.weight"] if "lm_head.weight" not in g else g["lm_head.weight"]
    return (x @ head.T).numpy()


def hf_loss(w):
    """Mean cross entropy of step 1's batch (runtime/data.c: window b starts at b*T)."""
    B, T = CFG["input"]["global_batch_size"], CFG["input"]["seq_len"]
    tok = np.frombuffer(open(DATA, "rb").read(), np.uint8).astype(np.int64)
    win = np.stack([tok[b * T: b * T + T + 1] for b in range(B)])
    logits = (gpt2_logits if GPT2 else mixtral_logits if MOE else llama_logits)(w, win[:, :T])
    logits = logits - logits.max(-1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return -np.take_along_axis(logp, win[:, 1:, None], -1).mean()


def axlc_loss(init, *extra):
    r = axlc("run", MODEL, "--target", "interp", "--data", DATA, "--steps", "1", "--init", init, *extra)
    for line in r.stdout.splitlines():
        if line.startswith("step 1 loss "):
            return float(line.split()[3])
    fail(f"no step 1 loss in:\n{r.stdout}")


def expected_config(dtype="float32"):
    """The config.json transformers needs for this model (its field names and meanings), from
    the resolved axlc config."""
    heads, seq = LAYER["self_attention"], CFG["input"]["seq_len"]
    c = {"vocab_size": V, "tie_word_embeddings": TIED, "torch_dtype": dtype}
    if GPT2:
        return {**c, "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": D, "n_layer": L,
                "n_head": NH, "n_inner": PARAMS["model/decoder/layer_0/feed_forward/linear1/weight"][1],
                "n_positions": PARAMS["model/pos_emb/weight"][0], "activation_function": "gelu_new",
                "layer_norm_epsilon": LAYER["norm"]["eps"], "attn_pdrop": 0, "embd_pdrop": 0, "resid_pdrop": 0}
    c.update({"hidden_size": D, "intermediate_size": PARAMS["model/decoder/layer_0/feed_forward/linear1_0/weight"][-1],
              "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": KV, "head_dim": HD,
              "hidden_act": "silu", "max_position_embeddings": seq, "rms_norm_eps": LAYER["norm"]["eps"],
              "rope_theta": heads["rope"]["theta"], "rope_scaling": None, "attention_dropout": 0})
    if not MOE:
        return {**c, "architectures": ["LlamaForCausalLM"], "model_type": "llama",
                "attention_bias": heads["bias"], "mlp_bias": FF["bias"]}
    return {**c, "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_local_experts": E,
            "num_experts_per_tok": TOPK, "router_aux_loss_coef": FF["load_balance_loss_weight"],
            "output_router_logits": False, "router_jitter_noise": 0, "sliding_window": None}


def check_config(directory, dtype="float32"):
    got, want = json.load(open(os.path.join(directory, "config.json"))), expected_config(dtype)
    if got != want:
        diff = {k: (got.get(k), want.get(k)) for k in set(got) | set(want) if got.get(k) != want.get(k)}
        fail(f"config.json differs from the expected (got, expected): {diff}")


def same(a, b, what):
    if a.shape != b.shape or a.dtype != b.dtype or a.tobytes() != b.tobytes():
        fail(f"{what}: {a.dtype}{list(a.shape)} differs from the expected {b.dtype}{list(b.shape)}")


def cmp_files(a, b):
    if open(a, "rb").read() != open(b, "rb").read():
        fail(f"{os.path.basename(a)} and {os.path.basename(b)} differ: the round trip is not byte-identical")


# ---- the modes -----------------------------------------------------------------------

def round_trip():
    w = hf_weights(np.random.default_rng(7))
    src = dict(w)
    if GPT2:  # as GPT2LMHeadModel saves: a "transformer." prefix, the tied head, mask buffers
        src = {"transformer." + k: v for k, v in w.items()}
        src["lm_head.weight"] = w["wte.weight"]
        src["transformer.h.0.attn.bias"] = np.tril(np.ones((1, 1, 4, 4), np.float32))
    stio.write(path("hf.safetensors"), src, {"format": "pt"})
    axlc("convert", MODEL, "--from", "hf", path("hf.safetensors"), "-o", path("axlc.safetensors"))
    got, want = stio.read(path("axlc.safetensors")), expected_axlc(w)
    if sorted(got) != sorted(PARAMS) or sorted(want) != sorted(PARAMS):
        fail(f"converted names {sorted(set(got) ^ set(PARAMS))} differ from axlc params")
    for k in want:
        same(got[k], np.ascontiguousarray(want[k]), k)
    print(f"from hf: {len(got)} tensors, each the expected split/transpose of its source")

    axlc("convert", MODEL, "--to", "hf", path("axlc.safetensors"), "-o", path("hf2.safetensors"))
    back = stio.read(path("hf2.safetensors"))
    if sorted(back) != sorted(w):
        fail(f"--to hf names differ: {sorted(set(back) ^ set(w))}")
    for k in w:
        same(back[k], w[k], k)
    axlc("convert", MODEL, "--from", "hf", path("hf2.safetensors"), "-o", path("axlc2.safetensors"))
    axlc("convert", MODEL, "--to", "hf", path("axlc2.safetensors"), "-o", path("hf3.safetensors"))
    cmp_files(path("axlc.safetensors"), path("axlc2.safetensors"))
    cmp_files(path("hf2.safetensors"), path("hf3.safetensors"))
    check_config(WORK)
    print(f"to hf: {len(back)} tensors equal to the source; hf -> axlc -> hf -> axlc byte-identical; config.json as expected")

    # F16 widens to f32 masters and comes back as F16 (the recorded dtype), bit for bit
    w16 = {k: v.astype(np.float16) for k, v in w.items()}
    stio.write(path("hf16.safetensors"), w16)
    axlc("convert", MODEL, "--from", "hf", path("hf16.safetensors"), "-o", path("axlc16.safetensors"))
    got16 = stio.read(path("axlc16.safetensors"))
    for k, v in expected_axlc(w16).items():
        same(got16[k], np.ascontiguousarray(v).astype(np.float32), "F16 " + k)
    axlc("convert", MODEL, "--to", "hf", path("axlc16.safetensors"), "-o", path("hf16b.safetensors"))
    for k, v in stio.read(path("hf16b.safetensors")).items():
        same(v, w16[k], "F16 --to hf " + k)
    axlc_loss(path("axlc16.safetensors"))
    print("F16: widened to f32 masters, back to F16 bit for bit; --init reads it")

    ref, got_loss = hf_loss(w), axlc_loss(path("axlc.safetensors"))
    print(f"step 1 loss: axlc {got_loss:.6f}, independent Hugging Face forward {ref:.6f}")
    if abs(got_loss - ref) > 2e-5 * max(1.0, abs(ref)):
        fail("the converted weights do not compute the Hugging Face model's loss")


def dump():
    w = hf_weights(np.random.default_rng(11))
    stio.write(path("hf.safetensors"), w)
    axlc("convert", MODEL, "--from", "hf", path("hf.safetensors"), "-o", path("init.safetensors"))
    axlc("run", MODEL, "--target", "interp", "--data", DATA, "--steps", "2",
         "--init", path("init.safetensors"), "--dump", path("dump.safetensors"))
    d = stio.read(path("dump.safetensors"))
    if not any(k.startswith("grad:") for k in d) or "loss" not in d:
        fail("the dump lacks its losses and gradients")
    loss = axlc_loss(path("dump.safetensors"))
    axlc("convert", MODEL, "--to", "hf", path("dump.safetensors"), "-o", path("dump-hf.safetensors"))
    ref = hf_loss(stio.read(path("dump-hf.safetensors")))
    print(f"--init DUMP: step 1 loss {loss:.6f}; numpy forward of the dump converted to hf {ref:.6f}")
    if abs(loss - ref) > 2e-5 * max(1.0, abs(ref)):
        fail("--init of a dump does not start from the dump's new parameters")
    # a checkpoint's state.safetensors: parameters and the optimizer moments, left out
    init = stio.read(path("init.safetensors"))
    state = {**init, **{"opt/m/" + k: v * 0 for k, v in init.items()}, **{"opt/v/" + k: v * 0 for k, v in init.items()}}
    stio.write(path("state.safetensors"), state)
    r = axlc("convert", MODEL, "--to", "hf", path("state.safetensors"), "-o", path("state-hf.safetensors"))
    if f"{2 * len(init)} optimizer tensors (opt/m/, opt/v/) left out" not in r.stderr:
        fail(f"no note on the optimizer tensors: {r.stderr}")
    back = stio.read(path("state-hf.safetensors"))
    if sorted(back) != sorted(w):
        fail(f"checkpoint --to hf: names differ: {sorted(set(back) ^ set(w))}")
    for k in w:
        same(back[k], w[k], "checkpoint --to hf: " + k)
    first = axlc_loss(path("init.safetensors"))
    if abs(first - loss) < 1e-4:
        fail(f"the dump's weights give the initial loss {first:.6f}: were they trained?")


def errors():
    w = hf_weights(np.random.default_rng(3))
    out = path("out.safetensors")
    with open(out, "wb") as f:
        f.write(b"precious")

    def expect(args, *texts):
        r = axlc(*args, ok=False)
        if r.returncode != 1:
            fail(f"axlc {' '.join(args)}: status {r.returncode}, expected 1\n{r.stderr}")
        for t in texts:
            if t not in r.stderr:
                fail(f"axlc {' '.join(args)}: stderr lacks {t!r}:\n{r.stderr}")
        if "Sanitizer" in r.stderr:
            fail("sanitizer report:\n" + r.stderr)
        if open(out, "rb").read() != b"precious" or os.path.exists(out + ".tmp"):
            fail("the existing output was touched")

    def conv(name, tensors, *texts, direction="--from"):
        f = path(name)
        stio.write(f, tensors)
        expect(["convert", MODEL, direction, "hf", f, "-o", out], f, *texts)

    first = sorted(w)[0]
    wide = "h.0.attn.c_attn.weight" if GPT2 else "model.layers.0.self_attn.k_proj.weight"
    conv("missing.safetensors", {k: v for k, v in w.items() if k != wide}, f"missing tensor '{wide}'",
         "not written")
    conv("shape.safetensors", {**w, wide: w[wide].T.copy()}, f"tensor '{wide}': shape",
         "transposed")
    conv("unknown.safetensors", {**w, "extra.weight": w[first]}, "unknown tensor 'extra.weight'")
    conv("dtype.safetensors", {**w, first: w[first].astype(np.int32)}, f"tensor '{first}': dtype I32")
    if MOE:  # a missing expert, and one more expert than the config has
        x = "model.layers.1.block_sparse_moe.experts."
        conv("expert.safetensors", {k: v for k, v in w.items() if k != x + "2.w3.weight"},
             f"missing tensor '{x}2.w3.weight' (for expert 2 of model/decoder/layer_1/feed_forward/linear1_1/weight)")
        conv("experts.safetensors", {**w, f"{x}{E}.w1.weight": w[x + "0.w1.weight"]},
             f"unknown tensor '{x}{E}.w1.weight'", f"the config has {E} experts")
        conv("router.safetensors", {**w, "model.layers.0.block_sparse_moe.gate.weight": w["model.layers.0.block_sparse_moe.gate.weight"].T.copy()},
             "tensor 'model.layers.0.block_sparse_moe.gate.weight': shape", "transposed: Mixtral's nn.Linear")
    # axlc weights given to --from hf, and Hugging Face weights given to --to hf
    stio.write(path("hf.safetensors"), w)
    axlc("convert", MODEL, "--from", "hf", path("hf.safetensors"), "-o", path("a.safetensors"))
    expect(["convert", MODEL, "--from", "hf", path("a.safetensors"), "-o", out],
           "an axlc parameter name (convert axlc weights with --to hf)")
    expect(["convert", MODEL, "--to", "hf", path("hf.safetensors"), "-o", out],
           "missing tensor 'model/emb/weight'", "a Hugging Face name")
    with open(path("bad.safetensors"), "wb") as f:
        f.write(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      ")
    expect(["convert", MODEL, "--from", "hf", path("bad.safetensors"), "-o", out], "bad.safetensors: JSON header")
    expect(["convert", MODEL, "--from", "hf", path("none.safetensors"), "-o", out], "none.safetensors")
    expect(["convert", MODEL, "--from", "gguf", path("hf.safetensors"), "-o", out], "--from gguf: expected hf")
    expect(["convert", MODEL, "--from", "hf", path("hf.safetensors")], "usage: axlc convert")
    if MOE:  # Mixtral has no expert biases
        expect(["convert", MODEL, "--set", "/model/decoder/layer/feed_forward/bias=true", "--from", "hf",
                path("hf.safetensors"), "-o", out],
               "parameter 'model/decoder/layer_0/feed_forward/linear1_0/bias' has no counterpart in Hugging Face Mixtral")
    expect(["convert", MODEL, "--set", "/model/decoder/output_norm/eps=0.001", "--to", "hf", path("a.safetensors"),
            "-o", out], "/model/decoder/output_norm/eps is 0.001;", "/model/decoder/layer/norm/eps's")
    if MOE:  # a capacity drops tokens Mixtral keeps: the weights convert, with a note
        r = axlc("convert", MODEL, "--set", "/model/decoder/layer/feed_forward/capacity_factor=2", "--from", "hf",
                 path("hf.safetensors"), "-o", path("capacity.safetensors"))
        if "capacity_factor is 2: axlc drops the tokens past an expert's capacity, Mixtral none" not in r.stderr:
            fail(f"no note on the capacity factor: {r.stderr}")
        cmp_files(path("a.safetensors"), path("capacity.safetensors"))
    act = "relu" if GPT2 else "gelu"
    expect(["convert", MODEL, "--set", f"/model/decoder/layer/feed_forward/activation=\"{act}\"", "--from",
            "hf", path("hf.safetensors"), "-o", out], "/model/decoder/layer/feed_forward/activation is")
    print("errors: each names the file and the tensor; the existing output is untouched")
    config_beside(w, out)


def config_beside(w, out):
    """--from hf reads the config.json beside the weights: one that agrees converts; one whose
    model_type, sizes, eps or theta differ, or whose sliding window is shorter than seq_len, is
    an error naming config.json, the field and the axlc config path."""
    d = path("withconfig")
    os.makedirs(d)
    stio.write(os.path.join(d, "model.safetensors"), w)
    cfg = os.path.join(d, "config.json")

    def with_config(doc, *texts):
        with open(cfg, "w") as f:
            json.dump(doc, f)
        if not texts:
            axlc("convert", MODEL, "--from", "hf", d, "-o", path("cfg-ok.safetensors"))
        else:
            expect_error(["convert", MODEL, "--from", "hf", d, "-o", out], cfg, *texts)

    good = expected_config()
    with_config(good)
    eps = "layer_norm_epsilon" if GPT2 else "rms_norm_eps"
    with_config({**good, eps: 1e-6}, f"{eps} is 1e-06, but /model/decoder/layer/norm/eps is 1e-05")
    heads = "n_head" if GPT2 else "num_attention_heads"
    with_config({**good, heads: 2 * NH}, f"{heads} is {2 * NH}, but /model/decoder/layer/self_attention/num_heads is {NH}")
    with_config({**good, "model_type": "gpt2" if not GPT2 else "llama"}, "model_type", f"makes a {'GPT-2' if GPT2 else 'Mixtral' if MOE else 'Llama'} model")
    if not GPT2:
        theta = LAYER["self_attention"]["rope"]["theta"]
        with_config({**good, "rope_theta": 2 * theta}, "rope_theta is", "/model/decoder/layer/self_attention/rope/theta")
        T = CFG["input"]["seq_len"]
        with_config({**good, "sliding_window": T // 2}, f"sliding_window is {T // 2}, below /input/seq_len {T}",
                    "axlc does not model sliding-window attention")
        with_config({**good, "sliding_window": T})  # as long as the window: the same attention
        if not MOE:  # Mistral: Llama's names, a sliding window
            with_config({**good, "model_type": "mistral", "architectures": ["MistralForCausalLM"], "sliding_window": 4096})
    if MOE:
        with_config({**good, "num_local_experts": 8}, f"num_local_experts is 8, but /model/decoder/layer/feed_forward/num_experts is {E}")
    with open(cfg, "w") as f:
        f.write("{")
    expect_error(["convert", MODEL, "--from", "hf", d, "-o", out], cfg, "not valid JSON", "a Hugging Face model's config.json")
    print("config.json beside the weights: checked against the config, each difference named")


# ---- sharded checkpoints: model.safetensors.index.json and its shards ---------------------

def write_sharded(directory, w, nshards):
    """w cut into nshards files, as transformers names them, and their index."""
    os.makedirs(directory, exist_ok=True)
    names, weight_map = sorted(w), {}
    for i in range(nshards):
        shard = f"model-{i + 1:05d}-of-{nshards:05d}.safetensors"
        part = names[i::nshards]
        stio.write(os.path.join(directory, shard), {k: w[k] for k in part}, {"format": "pt"})
        weight_map.update({k: shard for k in part})
    index = {"metadata": {"total_size": sum(v.nbytes for v in w.values())}, "weight_map": weight_map}
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f)


def read_sharded(directory):
    """{name: array} through the index, checking that each shard holds what the index says."""
    index = json.load(open(os.path.join(directory, "model.safetensors.index.json")))
    by_shard = {}
    for name, shard in index["weight_map"].items():
        by_shard.setdefault(shard, set()).add(name)
    out = {}
    for shard, names in by_shard.items():
        t = stio.read(os.path.join(directory, shard))
        if set(t) != names:
            fail(f"{shard} holds {sorted(set(t) ^ names)} against the index")
        out.update(t)
    if index["metadata"]["total_size"] != sum(v.nbytes for v in out.values()):
        fail(f"the index's total_size {index['metadata']['total_size']} is not the tensors' bytes")
    return out, sorted(by_shard)


def shards():
    w = hf_weights(np.random.default_rng(13))
    stio.write(path("hf.safetensors"), w)
    axlc("convert", MODEL, "--from", "hf", path("hf.safetensors"), "-o", path("one.safetensors"))
    # --from hf: a model directory and its index give the bytes the single file gives
    write_sharded(path("hfdir"), w, 3)
    for src, out in ((path("hfdir"), "dir.safetensors"), (path("hfdir/model.safetensors.index.json"), "index.safetensors")):
        axlc("convert", MODEL, "--from", "hf", src, "-o", path(out))
        cmp_files(path("one.safetensors"), path(out))
    print("from hf: 3 shards through a directory or its index == the single file, byte for byte")

    # --to hf: the default 5GB gives one file and no index; a small size gives shards
    os.makedirs(path("whole"))
    axlc("convert", MODEL, "--to", "hf", path("one.safetensors"), "-o", path("whole/model.safetensors"))
    if sorted(os.listdir(path("whole"))) != ["config.json", "model.safetensors"]:
        fail(f"--to hf under 5GB wrote {sorted(os.listdir(path('whole')))}")
    total = sum(v.nbytes for v in w.values())
    biggest = max(v.nbytes for v in w.values())
    limit = max(biggest, total // 4)
    os.makedirs(path("cut"))
    axlc("convert", MODEL, "--to", "hf", path("one.safetensors"), "--max-shard-size", str(limit),
         "-o", path("cut/model.safetensors"))
    back, files = read_sharded(path("cut"))
    n = len(files)
    if n < 4 or files != [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]:
        fail(f"--max-shard-size {limit} of {total} bytes gave the shards {files}")
    for f in files:
        size = sum(v.nbytes for v in stio.read(path("cut/" + f)).values())
        if size > limit:
            fail(f"{f}: {size} bytes of tensors, over --max-shard-size {limit}")
    if sorted(back) != sorted(w) or os.path.exists(path("cut/model.safetensors")):
        fail(f"sharded --to hf names differ: {sorted(set(back) ^ set(w))}")
    for k in w:
        same(back[k], w[k], "sharded --to hf " + k)
    check_config(path("cut"))
    axlc("convert", MODEL, "--from", "hf", path("cut"), "-o", path("cut.safetensors"))
    cmp_files(path("one.safetensors"), path("cut.safetensors"))
    print(f"to hf --max-shard-size {limit}: {n} shards of at most that, with their index and config.json;"
          " sharded == unsharded, and back to the same axlc bytes")
    # a write that fails at the second shard (its temporary's temporary is a directory) replaces
    # nothing of the checkpoint already there and leaves no temporary behind
    stio.write(path("hf-other.safetensors"), hf_weights(np.random.default_rng(14)))
    axlc("convert", MODEL, "--from", "hf", path("hf-other.safetensors"), "-o", path("other.safetensors"))
    before = {f: open(path("cut/" + f), "rb").read() for f in os.listdir(path("cut"))}
    blocker = path("cut/" + files[1] + ".tmp.tmp")
    os.makedirs(blocker)
    expect_error(["convert", MODEL, "--to", "hf", path("other.safetensors"), "--max-shard-size", str(limit),
                  "-o", path("cut/model.safetensors")], files[1] + ".tmp.tmp: exists and is a directory")
    os.rmdir(blocker)
    if {f: open(path("cut/" + f), "rb").read() for f in os.listdir(path("cut"))} != before:
        fail("a sharded --to hf that failed at its second shard changed the checkpoint already there")
    print("a write failing at the second shard: the earlier checkpoint intact, no temporary left")
    for size, want in (("1KiB", 1024), ("0.5MB", 500000)):  # the units: each shard within its bytes
        os.makedirs(path(size))
        axlc("convert", MODEL, "--to", "hf", path("one.safetensors"), "--max-shard-size", size, "-o",
             path(size + "/model.safetensors"))
        if not os.path.exists(path(size + "/model.safetensors.index.json")):
            got = [stio.read(path(size + "/model.safetensors"))]
        else:
            got = [stio.read(path(size + "/" + f)) for f in read_sharded(path(size))[1]]
        for t in got:
            if len(t) > 1 and sum(v.nbytes for v in t.values()) > want:
                fail(f"--max-shard-size {size}: a file of {len(t)} tensors holds more than {want} bytes")
        if (len(got) > 1) != (total > want):
            fail(f"--max-shard-size {size}: {len(got)} files for {total} bytes")
    print("--max-shard-size 1KiB and 0.5MB: sharded or not as their bytes say")
    shard_errors(w)


def expect_error(args, *texts):
    """axlc args fails with status 1, saying each of texts, and leaves its -o as it was."""
    out = args[args.index("-o") + 1]
    before = open(out, "rb").read() if os.path.exists(out) else None
    r = axlc(*args, ok=False)
    if r.returncode != 1:
        fail(f"axlc {' '.join(args)}: status {r.returncode}, expected 1\n{r.stderr}")
    for t in texts:
        if t not in r.stderr:
            fail(f"axlc {' '.join(args)}: stderr lacks {t!r}:\n{r.stderr}")
    after = open(out, "rb").read() if os.path.exists(out) else None
    if after != before or os.path.exists(out + ".tmp"):
        fail(f"axlc {' '.join(args)}: {out} was touched")


def shard_errors(w):
    """A bad index or shard: an error naming the index (and the shard, and the tensor)."""
    out = path("out.safetensors")
    with open(out, "wb") as f:
        f.write(b"precious")
    names = sorted(w)

    def bad_dir(name, nshards=3):
        d = path(name)
        write_sharded(d, w, nshards)
        return d, os.path.join(d, "model.safetensors.index.json")

    d, index = bad_dir("no-shard")
    os.remove(os.path.join(d, "model-00002-of-00003.safetensors"))
    expect_error(["convert", MODEL, "--from", "hf", d, "-o", out], index,
                 f"shard model-00002-of-00003.safetensors (of {len(names[1::3])} tensors)", "cannot open")
    d, index = bad_dir("short-shard")
    first = os.path.join(d, "model-00001-of-00003.safetensors")
    held = stio.read(first)
    gone = sorted(held)[0]
    stio.write(first, {k: v for k, v in held.items() if k != gone})
    expect_error(["convert", MODEL, "--from", "hf", index, "-o", out], index,
                 f"tensor '{gone}': the index puts it in model-00001-of-00003.safetensors, which does not hold it")
    d, index = bad_dir("unlisted")
    doc = json.load(open(index))
    del doc["weight_map"][names[0]]
    json.dump(doc, open(index, "w"))
    expect_error(["convert", MODEL, "--from", "hf", index, "-o", out], index,
                 f"holds tensor '{names[0]}', which the index does not name")
    d, index = bad_dir("malformed")
    with open(index, "w") as f:
        f.write('{"weight_map": {"a": ')
    expect_error(["convert", MODEL, "--from", "hf", d, "-o", out], index, "not valid JSON")
    with open(index, "w") as f:
        f.write('{"metadata": {}}')
    expect_error(["convert", MODEL, "--from", "hf", index, "-o", out], index, 'no "weight_map" object')
    with open(index, "w") as f:
        f.write('{"weight_map": {"%s": "../elsewhere.safetensors"}}' % names[0])
    expect_error(["convert", MODEL, "--from", "hf", index, "-o", out], index,
                 'shard "../elsewhere.safetensors" (expected the name of a file beside the index)')
    os.makedirs(path("empty"))
    expect_error(["convert", MODEL, "--from", "hf", path("empty"), "-o", out], path("empty"),
                 "a directory without model.safetensors.index.json or model.safetensors")
    # -o onto a shard the conversion reads, and config.json onto the model's own config
    d, index = bad_dir("clobber")
    shard = os.path.join(d, "model-00001-of-00003.safetensors")
    expect_error(["convert", MODEL, "--from", "hf", index, "-o", shard], shard, "a shard of the weights")
    os.makedirs(path("own"))
    own = path("own/config.json")
    with open(own, "w") as f:
        f.write(open(MODEL).read())
    expect_error(["convert", own, "--to", "hf", path("one.safetensors"), "-o", path("own/model.safetensors")], own,
                 "config.json beside -o", "the config")
    if os.path.exists(path("own/model.safetensors")):
        fail("--to hf wrote the weights although config.json beside them is the model's config")
    for args, text in ((["--to", "hf", path("one.safetensors"), "--max-shard-size", "5XB"], "--max-shard-size 5XB: expected a size"),
                       (["--to", "hf", path("one.safetensors"), "--max-shard-size", "0"], "--max-shard-size 0: expected a size"),
                       (["--from", "hf", path("hf.safetensors"), "--max-shard-size", "1MB"], "--max-shard-size 1MB: an option of --to hf")):
        expect_error(["convert", MODEL, *args, "-o", out], text)
    print("bad shards and indexes: each an error naming the index, the shard and the tensor; nothing written")


# ---- BF16, which numpy lacks: raw safetensors, bf16 kept as uint16 bit patterns ------------

def write_raw(fname, tensors, metadata=None):
    """tensors: {name: array}; uint16 arrays are written as BF16, the rest as stio does."""
    header, chunks, off = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        dt = {np.dtype(np.uint16): "BF16", np.dtype(np.float32): "F32", np.dtype(np.float16): "F16"}[a.dtype]
        raw = a.astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(fname, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + b"".join(chunks))


def read_raw(fname):
    """{name: (dtype, shape, bytes)} and the metadata."""
    blob = open(fname, "rb").read()
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = blob[8 + n:]
    return {k: (e["dtype"], e["shape"], data[e["data_offsets"][0]:e["data_offsets"][1]])
            for k, e in header.items()}, meta


def bf16_bits(x):
    """f32 -> bf16 bits, to nearest, ties to even (NaN-free input)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_value(b):
    return (np.ascontiguousarray(b).astype(np.uint32) << 16).view(np.float32)


def dtypes():
    w = hf_weights(np.random.default_rng(5))
    wb = {k: bf16_bits(v) for k, v in w.items()}
    first = sorted(wb)[0]  # the extremes of bf16: -0, the least subnormal, the largest finite
    wb[first].flat[:4] = [0x8000, 0x0001, 0x7F7F, 0xFF7F]
    write_raw(path("hfbf.safetensors"), wb, {"format": "pt"})
    axlc("convert", MODEL, "--from", "hf", path("hfbf.safetensors"), "-o", path("axlcbf.safetensors"))
    got, meta = read_raw(path("axlcbf.safetensors"))
    if meta.get("axlc.hf_dtype") != "BF16":
        fail(f"--from hf of a BF16 file records {meta!r}, expected axlc.hf_dtype BF16")
    for k, v in expected_axlc({k: bf16_value(v) for k, v in wb.items()}).items():
        dt, shape, raw = got[k]
        v = np.ascontiguousarray(v)
        if dt != "F32" or list(shape) != list(v.shape) or raw != v.tobytes():
            fail(f"BF16 --from hf {k}: {dt}{shape} is not the exact f32 widening of its source")
    print(f"BF16 from hf: {len(got)} f32 masters, each its source widened exactly; BF16 recorded")

    axlc("convert", MODEL, "--to", "hf", path("axlcbf.safetensors"), "-o", path("hfbf2.safetensors"))
    back, _ = read_raw(path("hfbf2.safetensors"))
    if sorted(back) != sorted(wb):
        fail(f"BF16 --to hf names differ: {sorted(set(back) ^ set(wb))}")
    for k, v in wb.items():
        if back[k] != ("BF16", list(v.shape), v.tobytes()):
            fail(f"BF16 round trip: {k} is {back[k][0]}{back[k][1]}, not the source's bits")
    check_config(WORK, "bfloat16")
    print("BF16 to hf (no --dtype: the recorded BF16): every tensor's bits as in the source; config.json says bfloat16")

    # --dtype on f32 weights, ties included: 1 + 2^-8 (to 1, even), 1 + 3 2^-8 (up, to even),
    # 1 + 2^-8 + 2^-23 (above the tie: up); f16: 1 + 2^-11 (to 1), 2^-25 (to 0), 70000 (inf)
    w32 = {k: v.copy() for k, v in w.items()}
    w32[first].flat[:7] = [1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-23, 1 + 2**-11, 2**-25, 7e4, -(2**-24)]
    stio.write(path("hf32.safetensors"), w32)
    axlc("convert", MODEL, "--from", "hf", path("hf32.safetensors"), "-o", path("axlc32.safetensors"))
    with np.errstate(over="ignore"):  # 7e4 is past f16's largest value: inf
        w16 = {k: ("F16", v.astype(np.float16)) for k, v in w32.items()}
    for dtype, want in (("bf16", {k: ("BF16", bf16_bits(v)) for k, v in w32.items()}), ("f16", w16),
                        ("f32", {k: ("F32", v) for k, v in w32.items()})):
        out = path(f"hf-{dtype}.safetensors")
        axlc("convert", MODEL, "--to", "hf", "--dtype", dtype, path("axlc32.safetensors"), "-o", out)
        have, _ = read_raw(out)
        for k, (dt, v) in want.items():
            if have[k] != (dt, list(v.shape), np.ascontiguousarray(v).tobytes()):
                fail(f"--dtype {dtype}: {k} is not its f32 source rounded to nearest even ({have[k][0]})")
    print("--dtype bf16, f16, f32: each tensor its f32 source rounded to nearest, ties to even")

    # no record (a checkpoint's f32 masters): f32, whatever the compute dtype; all-BF16 weights
    # without a record (an older convert kept the dtype): BF16
    stio.write(path("plain.safetensors"), stio.read(path("axlc32.safetensors")))
    write_raw(path("oldbf.safetensors"), {k: bf16_bits(v) for k, v in stio.read(path("plain.safetensors")).items()})
    for src, extra, dt in (("plain", [], "F32"), ("plain", ["--set", '/precision/compute="bf16"'], "F32"),
                           ("oldbf", [], "BF16")):
        out = path("plain-hf.safetensors")
        axlc("convert", MODEL, *extra, "--to", "hf", path(src + ".safetensors"), "-o", out)
        have, _ = read_raw(out)
        if any(e[0] != dt for e in have.values()):
            fail(f"{src} {extra}: --to hf wrote {sorted({e[0] for e in have.values()})}, expected {dt}")
    print("no record: --to hf writes f32 masters as F32 (bf16 compute or not), all-BF16 weights as BF16")

    for args, text in ((["--to", "hf", "--dtype", "f64"], "--dtype f64: expected f32, bf16 or f16"),
                       (["--from", "hf", "--dtype", "bf16"], "--dtype bf16: an option of --to hf")):
        src = path("axlc32.safetensors") if args[0] == "--to" else path("hfbf.safetensors")
        r = axlc("convert", MODEL, *args, src, "-o", path("never.safetensors"), ok=False)
        if r.returncode != 1 or text not in r.stderr or os.path.exists(path("never.safetensors")):
            fail(f"axlc convert {' '.join(args)}: status {r.returncode}, stderr {r.stderr!r}; expected {text!r}")
    print("a bad --dtype, or --dtype with --from hf: refused, naming the option")


{"round_trip": round_trip, "dump": dump, "errors": errors, "dtypes": dtypes, "shards": shards}[MODE]()
print("PASS")
