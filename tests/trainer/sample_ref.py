#!/usr/bin/python3
"""sample_ref.py: the continuation of a prompt by an independent forward of a checkpoint.

usage: sample_ref.py CONFIG.json STATE.safetensors PROMPT_FILE N [TEMPERATURE SEED]

CONFIG.json is the trainer's resolved config (`./trainer --config`: every default explicit),
STATE.safetensors a checkpoint's state file, PROMPT_FILE the prompt's bytes (a byte-level
vocabulary). Prints the N greedy next tokens as decimal ids, one per line, each computed from
the last seq_len tokens of prompt and tokens so far; on stderr, the gap between the best and
the second-best logit of each (a gap near 0 is a tie that f32 rounding may break either way).
With a TEMPERATURE above 0, draws as `trainer --sample` documents (docs/runtime.md, Sampling):
softmax(logits / TEMPERATURE) in index order against draw k of rt_rng_u64(SEED, "axlc.sample",
k, 0), the generator of runtime/init.c written out here; on stderr, how far the draw fell from
the nearest boundary between tokens, relative to the sum.

Plain Python in float64, no numpy or torch, so that the test runs wherever python3 does: the
model is rebuilt from the config with the math of tests/torch/reference.py (pre-norm
transformer layers, layer or RMS norm, learned positions, causal softmax attention scaled by
1/sqrt(head_dim), tanh GELU / ReLU / SwiGLU MLP, tied or untied head). Mixtures of experts,
rotary embeddings and grouped-query attention are refused: the test's models have none.
"""
import json
import math
import struct
import sys

sys.dont_write_bytecode = True


def read_safetensors(path):
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__" or name.startswith("opt/"):
            continue
        if e["dtype"] != "F32":
            raise SystemExit(f"sample_ref.py: {name}: dtype {e['dtype']} (expected F32)")
        b, end = e["data_offsets"]
        flat = list(struct.unpack(f"<{(end - b) // 4}f", data[b:end]))
        shape = e["shape"]
        if len(shape) == 1:
            out[name] = flat
        elif len(shape) == 2:
            r, c = shape
            out[name] = [flat[i * c:(i + 1) * c] for i in range(r)]
        else:
            raise SystemExit(f"sample_ref.py: {name}: rank {len(shape)} (expected 1 or 2)")
    return out


M64 = (1 << 64) - 1


def mix(z):
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M64
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M64
    return z ^ (z >> 31)


def fnv1a64(s):
    h = 0xcbf29ce484222325
    for c in s.encode():
        h = ((h ^ c) * 0x100000001b3) & M64
    return h


def rng_u64(seed, path, index, k):
    key = mix(mix(seed) ^ fnv1a64(path))
    elem = mix(key ^ mix(index & M64))
    return mix((elem + (k + 1) * 0x9e3779b97f4a7c15) & M64)


def draw(logits, temperature, seed, k):
    """The token and the draw's distance to the nearest boundary, relative to the sum."""
    m = max(logits)
    w = [math.exp((v - m) / temperature) for v in logits]
    total = sum(w)
    u = (rng_u64(seed, "axlc.sample", k, 0) >> 11) * 2.0 ** -53 * total
    acc = 0.0
    for i, x in enumerate(w):
        lo = acc
        acc += x
        if u < acc and x > 0:
            return i, min(u - lo, acc - u) / total
    return logits.index(m), 0.0


def transpose(m):
    return [list(col) for col in zip(*m)]


class Model:
    def __init__(self, cfg, p):
        self.cfg, self.p = cfg, p
        m = cfg["model"]
        self.m = m
        dec = m["decoder"]
        self.layer = dec["layer"]
        att = self.layer["self_attention"]
        ff = self.layer["feed_forward"]
        if ff["kind"] != "feed_forward":
            raise SystemExit("sample_ref.py: only dense feed-forward layers")
        if att.get("rope") or (int(att["num_kv_heads"]) not in (0, int(att["num_heads"]))):
            raise SystemExit("sample_ref.py: no rotary embeddings or grouped-query attention")
        self.wt = {}  # weights transposed (out, in): rows are the columns of W

    def w_t(self, name):
        if name not in self.wt:
            self.wt[name] = transpose(self.p[name])
        return self.wt[name]

    def lin(self, x, prefix):
        wt = self.w_t(prefix + "/weight")
        b = self.p.get(prefix + "/bias")
        out = []
        for row in x:
            y = [sum(a * c for a, c in zip(row, col)) for col in wt]
            out.append([u + v for u, v in zip(y, b)] if b is not None else y)
        return out

    def norm(self, x, prefix, ncfg):
        eps = float(ncfg["eps"])
        scale = self.p[prefix + "/scale"]
        bias = self.p.get(prefix + "/bias")
        out = []
        for row in x:
            n = len(row)
            if ncfg["kind"] == "layer_norm":
                mu = sum(row) / n
                var = sum((v - mu) ** 2 for v in row) / n
                y = [(v - mu) / math.sqrt(var + eps) for v in row]
            else:
                ms = sum(v * v for v in row) / n
                y = [v / math.sqrt(ms + eps) for v in row]
            y = [v * s for v, s in zip(y, scale)]
            out.append([v + b for v, b in zip(y, bias)] if bias is not None else y)
        return out

    def attention(self, x, prefix, acfg):
        T, D = len(x), len(x[0])
        N = int(acfg["num_heads"])
        H = D // N
        q = self.lin(x, prefix + "/q_proj")
        k = self.lin(x, prefix + "/k_proj")
        v = self.lin(x, prefix + "/v_proj")
        ctx = [[0.0] * D for _ in range(T)]
        for h in range(N):
            lo = h * H
            for t in range(T):
                span = range(t + 1) if acfg["causal"] else range(T)
                s = [sum(q[t][lo + i] * k[u][lo + i] for i in range(H)) / math.sqrt(H) for u in span]
                mx = max(s)
                e = [math.exp(a - mx) for a in s]
                tot = sum(e)
                for j, u in enumerate(span):
                    wgt = e[j] / tot
                    for i in range(H):
                        ctx[t][lo + i] += wgt * v[u][lo + i]
        return self.lin(ctx, prefix + "/o_proj")

    def mlp(self, x, prefix, fcfg):
        act = fcfg["activation"]
        if act == "swiglu":
            a = self.lin(x, prefix + "/linear1_0")
            up = self.lin(x, prefix + "/linear1_1")
            h = [[(g / (1 + math.exp(-g))) * u for g, u in zip(ra, ru)] for ra, ru in zip(a, up)]
        else:
            a = self.lin(x, prefix + "/linear1")
            if act == "gelu":
                c = math.sqrt(2 / math.pi)
                h = [[0.5 * g * (1 + math.tanh(c * (g + 0.044715 * g ** 3))) for g in r] for r in a]
            elif act == "relu":
                h = [[max(g, 0.0) for g in r] for r in a]
            else:
                raise SystemExit(f"sample_ref.py: activation {act}")
        return self.lin(h, prefix + "/linear2")

    def last_logits(self, ids):
        p, m = self.p, self.m
        h = [list(p["model/emb/weight"][t]) for t in ids]
        if isinstance(m.get("pos_emb"), dict):
            pos = p["model/pos_emb/weight"]
            h = [[a + b for a, b in zip(row, pos[t])] for t, row in enumerate(h)]
        dec = m["decoder"]
        layer = self.layer
        for i in range(int(dec["num_layers"])):
            lp = f"model/decoder/layer_{i}"
            a = self.attention(self.norm(h, lp + "/attn_norm", layer["norm"]), lp + "/self_attention",
                               layer["self_attention"])
            h = [[u + v for u, v in zip(r, s)] for r, s in zip(h, a)]
            f = self.mlp(self.norm(h, lp + "/ffn_norm", layer["norm"]), lp + "/feed_forward",
                         layer["feed_forward"])
            h = [[u + v for u, v in zip(r, s)] for r, s in zip(h, f)]
        last = self.norm([h[-1]], "model/decoder/output_norm", dec["output_norm"])[0]
        W = p["model/emb/weight"] if m["lm_head"]["tied"] else transpose(p["model/lm_head/weight"])
        return [sum(a * b for a, b in zip(last, row)) for row in W]


def main():
    if len(sys.argv) not in (5, 7):
        raise SystemExit(__doc__)
    temperature = float(sys.argv[5]) if len(sys.argv) == 7 else 0.0
    seed = int(sys.argv[6]) if len(sys.argv) == 7 else 0
    cfg = json.load(open(sys.argv[1]))
    model = Model(cfg, read_safetensors(sys.argv[2]))
    tokens = list(open(sys.argv[3], "rb").read()) or [10]
    seq = int(cfg["input"]["seq_len"])
    for k in range(int(sys.argv[4])):
        logits = model.last_logits(tokens[-seq:])
        if temperature > 0:
            tok, margin = draw(logits, temperature, seed, k)
            print(f"margin {margin:.3g}", file=sys.stderr)
        else:
            order = sorted(range(len(logits)), key=lambda i: (-logits[i], i))
            tok = order[0]
            print(f"gap {logits[order[0]] - logits[order[1]]:.6f}", file=sys.stderr)
        print(tok)
        tokens.append(tok)


main()
