"""stcheck.py: checks on safetensors files for tests/e2e/lora.sh, with the standard library
alone (the LoRA tests must run where numpy is not installed).

  stcheck.py names FILE                    the tensor names, one a line
  stcheck.py same A B PREFIX_A PREFIX_B    every tensor of B named PREFIX_B+P (P not a LoRA
                                           adapter) equals A's PREFIX_A+P bit for bit
  stcheck.py nonzero FILE NAME_REGEX       every matching tensor has a nonzero value
  stcheck.py loss FILE [I]                 element I (default 0) of the dump's "loss"
"""
import array
import json
import re
import struct
import sys


def read(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, v in header.items():
        if name == "__metadata__":
            continue
        assert v["dtype"] == "F32", f"{path}: {name} is {v['dtype']}"
        a = array.array("f")
        a.frombytes(data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
        out[name] = a
    return out


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def main():
    mode = sys.argv[1]
    if mode == "names":
        print("\n".join(sorted(read(sys.argv[2]))))
    elif mode == "same":
        a, b = read(sys.argv[2]), read(sys.argv[3])
        pa, pb = sys.argv[4], sys.argv[5]
        count = 0
        for name, v in b.items():
            if not name.startswith(pb) or "/lora_" in name:
                continue
            if pa + name[len(pb):] not in a:
                fail(f"{sys.argv[2]} has no {pa + name[len(pb):]}")
            if a[pa + name[len(pb):]].tobytes() != v.tobytes():
                fail(f"{name} differs")
            count += 1
        if count == 0:
            fail("no tensor compared")
        print(f"{count} tensors equal")
    elif mode == "nonzero":
        t = read(sys.argv[2])
        hits = [k for k in t if re.search(sys.argv[3], k)]
        if not hits:
            fail(f"no tensor matches {sys.argv[3]}")
        for k in hits:
            if not any(x != 0 for x in t[k]):
                fail(f"{k} is all zeros")
        print(f"{len(hits)} tensors nonzero")
    elif mode == "loss":
        print(repr(read(sys.argv[2])["loss"][int(sys.argv[3]) if len(sys.argv) > 3 else 0]))
    else:
        fail(f"unknown mode {mode}")


main()
