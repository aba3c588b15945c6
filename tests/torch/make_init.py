#!/usr/bin/python3
"""make_init.py: random initial weights for a model, independent of axlc's own init.

usage: make_init.py PARAMS.json OUT.safetensors [--seed S]

PARAMS.json is the output of `axlc params MODEL.json --json`. Every parameter gets
seeded numpy values (float32):
  init "normal": N(0, 1/sqrt(fan_in)), fan_in = shape[-2] (the `in` of an (in, out)
                 weight; the vocabulary of an embedding table), so attention is far
                 from uniform and every layer does visible work;
  init "ones":   1 + 0.1 N(0, 1)   (norm scales: not all ones, so a missing scale shows);
  init "zeros":  0.1 N(0, 1)       (biases: not all zero, so a missing bias shows).
Parameters are drawn in the order the file lists them, from one generator.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stio  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("params", help="output of `axlc params MODEL.json --json`")
    ap.add_argument("out", help="safetensors file to write")
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    with open(a.params) as f:
        table = json.load(f)["params"]
    rng = np.random.default_rng(a.seed)
    out = {}
    for p in table:
        shape = tuple(int(s) for s in p["shape"])
        z = rng.standard_normal(shape)
        if p["init"] == "normal":
            fan_in = shape[-2] if len(shape) >= 2 else shape[-1]
            v = z / np.sqrt(fan_in)
        elif p["init"] == "ones":
            v = 1.0 + 0.1 * z
        elif p["init"] == "zeros":
            v = 0.1 * z
        else:
            sys.exit(f"make_init.py: {p['path']}: unknown init {p['init']!r}")
        out[p["path"]] = v.astype(np.float32)
    stio.write(a.out, out, {"made_by": "tests/torch/make_init.py", "seed": a.seed})
    print(f"make_init.py: {len(out)} tensors, "
          f"{sum(v.size for v in out.values())} values -> {a.out}")


if __name__ == "__main__":
    main()
