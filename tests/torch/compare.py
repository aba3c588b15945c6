#!/usr/bin/python3
"""compare.py: compares axlc's --dump with reference.py's, tensor by tensor.

usage: compare.py AXLC.safetensors REF.safetensors [--tol 1e-4] [--log AXLC.log] [--all]

Compared: "loss" and every "grad:P" and "new:P" of the reference; each must be in
the axlc dump with the same shape, and axlc must have no "grad:"/"new:" tensor the
reference lacks. Per tensor, rel = ||a - b|| / max(||b||, floor) (Frobenius norms,
b the reference). For "grad:" tensors floor is 1e-3 of the global gradient norm G:
a gradient that is zero in exact arithmetic (the attention's k_proj bias: softmax
ignores a per-query constant) holds only rounding noise (axlc rounds every op to
f32), so it is held to |a - b| <= tol * 1e-3 * G instead of to itself. Every other
gradient of the test models is above that floor, so the floor does not loosen them.
For "loss" and "new:" the floor is 1e-30. With --log, the "step N loss X" lines axlc
printed must match the reference's losses to 1e-5 relative (they print 6 decimals).
Exit 0 when every check passes, 1 otherwise; the worst tensor is printed.
"""
import argparse
import os
import re
import sys

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stio  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("axlc")
    ap.add_argument("ref")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--all", action="store_true", help="print every tensor's error")
    ap.add_argument("--log", help="axlc run's stdout, checked for its 'step N loss X' lines")
    a = ap.parse_args()
    A, R = stio.read(a.axlc), stio.read(a.ref)

    def ours(n):
        return n == "loss" or n.startswith("grad:") or n.startswith("new:")

    problems = []
    names = sorted(n for n in R if ours(n))
    for n in sorted(n for n in A if ours(n) and n not in R):
        problems.append(f"{n}: in the axlc dump, not in the reference (unknown parameter?)")
    grad_norm = np.sqrt(sum(float(np.sum(R[n].astype(np.float64) ** 2))
                            for n in names if n.startswith("grad:")))
    rows, floored = [], []
    for n in names:
        if n not in A:
            problems.append(f"{n}: missing from the axlc dump")
            continue
        a_, b_ = A[n].astype(np.float64), R[n].astype(np.float64)
        if a_.shape != b_.shape:
            problems.append(f"{n}: shape {list(a_.shape)} in axlc, {list(b_.shape)} in the reference")
            continue
        if not np.all(np.isfinite(a_)):
            problems.append(f"{n}: axlc has non-finite values")
            continue
        floor = 1e-3 * grad_norm if n.startswith("grad:") else 1e-30
        nb = float(np.linalg.norm(b_))
        err = float(np.linalg.norm(a_ - b_))
        rel = err / max(nb, floor)
        if nb < floor:
            floored.append(n)
        rows.append((rel, n, err, nb, float(np.max(np.abs(a_ - b_))) if a_.size else 0.0))
    rows.sort(reverse=True)
    if a.all:
        for rel, n, err, nb, mx in sorted(rows, key=lambda r: r[1]):
            print(f"  {rel:9.2e}  {n}  (|a-b| {err:.3e}, |ref| {nb:.3e}, max abs {mx:.3e})")
    if "loss" in A and "loss" in R and A["loss"].shape == R["loss"].shape:
        print("loss axlc:", " ".join(f"{x:.6f}" for x in A["loss"]))
        print("loss ref: ", " ".join(f"{x:.6f}" for x in R["loss"]))
    if a.log:
        with open(a.log) as f:
            logged = {int(m.group(1)): float(m.group(2)) for m in
                      re.finditer(r"^step (\d+) loss (\S+)", f.read(), re.M)}
        ref_loss = R.get("loss", np.zeros(0))
        for i, want in enumerate(ref_loss.astype(np.float64), 1):
            got = logged.get(i)
            if got is None:
                problems.append(f"{a.log}: no 'step {i} loss X' line")
            elif not abs(got - want) <= 1e-5 * max(abs(want), 1e-6):
                problems.append(f"{a.log}: step {i} printed loss {got}, the reference has {want:.6f}")
        if len(logged) != ref_loss.size:
            problems.append(f"{a.log}: {len(logged)} step lines, expected {ref_loss.size}")
    bad = [r for r in rows if not r[0] <= a.tol]
    for rel, n, err, nb, mx in bad:
        problems.append(f"{n}: relative error {rel:.3e} > {a.tol:g} "
                        f"(|a-b| {err:.3e}, |ref| {nb:.3e}, max abs diff {mx:.3e})")
    by_kind = {}
    for r in rows:
        k = r[1].split(":")[0] if ":" in r[1] else r[1]
        by_kind.setdefault(k, r)
    print(f"compared {len(rows)} tensors; worst relative error per kind: " +
          ", ".join(f"{k} {r[0]:.2e} ({r[1]})" for k, r in sorted(by_kind.items())))
    if floored:
        print("zero in exact arithmetic, held to the floor:", ", ".join(floored))
    if rows:
        print(f"worst: {rows[0][1]} relative error {rows[0][0]:.3e} (tolerance {a.tol:g})")
    if problems:
        for p in problems:
            print("FAIL:", p)
        return 1
    print("OK: every tensor within", a.tol)
    return 0


if __name__ == "__main__":
    sys.exit(main())
