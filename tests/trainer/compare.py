"""compare.py: compares trainer results, for tests/trainer/trainer.sh.

  compare.py close A.safetensors B.safetensors TOL   every tensor of B (parameter paths, or
      "new:"+path in an interpreter dump) within TOL relative (||a-b|| / ||b||) of A's, or
      within 1e-5 per element in RMS: a tensor whose exact gradient is zero (an attention key
      bias: softmax ignores a per-query constant) moves only by Adam steps driven by
      rounding noise, different in each implementation, at most lr per step
  compare.py exact A.safetensors B.safetensors        the same tensors, bit for bit
  compare.py losses A.txt B.txt TOL                    "step N loss X" lines (or metrics
      JSON lines) agree within TOL relative, step by step
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torch"))
import stio  # noqa: E402


def params(path):
    """Parameters by path: an interpreter dump's "new:P", or a checkpoint's P (no opt/)."""
    t = stio.read(path)
    if any(k.startswith("new:") for k in t):
        return {k[4:]: v for k, v in t.items() if k.startswith("new:")}
    return {k: v for k, v in t.items() if not k.startswith("opt/")}


def losses(path):
    out = {}
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            r = json.loads(line)
            out[r["step"]] = r["loss"]
        elif line.startswith("step "):
            f = line.split()
            out[int(f[1])] = float(f[3])
    return out


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def main():
    mode, a, b = sys.argv[1], sys.argv[2], sys.argv[3]
    if mode == "losses":
        tol = float(sys.argv[4])
        la, lb = losses(a), losses(b)
        if sorted(la) != sorted(lb) or not la:
            fail(f"steps differ: {sorted(la)} vs {sorted(lb)}")
        worst = max(abs(la[s] - lb[s]) / max(abs(lb[s]), 1e-12) for s in la)
        print(f"{len(la)} losses, worst relative difference {worst:.3g}")
        if worst > tol:
            fail(f"losses differ by {worst:.3g} > {tol}: {la} vs {lb}")
        return
    pa, pb = params(a), params(b)
    if sorted(pa) != sorted(pb) or not pa:
        fail(f"different tensors: {sorted(set(pa) ^ set(pb))[:5]}")
    worst, name = 0.0, ""
    for k in pa:
        if pa[k].shape != pb[k].shape:
            fail(f"{k}: shape {pa[k].shape} vs {pb[k].shape}")
        if mode == "exact":
            if not np.array_equal(pa[k].view(np.uint32), pb[k].view(np.uint32)):
                fail(f"{k}: not bit-identical")
            continue
        d = np.linalg.norm((pa[k] - pb[k]).astype(np.float64))
        r = d / max(np.linalg.norm(pb[k].astype(np.float64)), 1e-12)
        rms = d / np.sqrt(max(pa[k].size, 1))
        if r > float(sys.argv[4]) and rms <= 1e-5:
            print(f"{k}: relative {r:.3g}, but the RMS difference is {rms:.3g} (noise-driven)")
            continue
        if r > worst:
            worst, name = r, k
    if mode == "exact":
        print(f"{len(pa)} tensors bit-identical")
        return
    print(f"{len(pa)} tensors, worst relative difference {worst:.3g} ({name})")
    if worst > float(sys.argv[4]):
        fail(f"{name} differs by {worst:.3g}")


if __name__ == "__main__":
    main()
