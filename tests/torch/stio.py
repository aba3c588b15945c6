"""stio.py: a minimal safetensors reader and writer (json + struct + numpy).

Format: 8-byte little-endian header length N, N bytes of JSON
(name -> {"dtype", "shape", "data_offsets": [begin, end]}, optional
"__metadata__"), padded with spaces, then the data buffer. Only the dtypes
these tests need are supported.
"""
import json
import struct

import numpy as np

_DTYPES = {"F32": np.dtype("<f4"), "F64": np.dtype("<f8"), "I32": np.dtype("<i4"),
           "F16": np.dtype("<f2"), "I64": np.dtype("<i8")}
_NAMES = {v: k for k, v in _DTYPES.items()}


def read(path):
    """Returns {name: numpy array} (a copy, native byte order)."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise ValueError(f"{path}: header length {n} runs past the file")
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        dt = _DTYPES.get(e["dtype"])
        if dt is None:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {e['dtype']}")
        b, end = e["data_offsets"]
        shape = tuple(int(s) for s in e["shape"])
        arr = np.frombuffer(data[b:end], dtype=dt)
        if arr.size != int(np.prod(shape, dtype=np.int64)):
            raise ValueError(f"{path}: tensor {name}: {arr.size} elements for shape {shape}")
        out[name] = arr.reshape(shape).astype(dt.newbyteorder("="))
    return out


def write(path, tensors, metadata=None):
    """tensors: {name: numpy array}; written in name order, F32 unless the array is F64/I32/..."""
    header, chunks, off = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        dt = a.dtype.newbyteorder("<")
        if dt not in _NAMES:
            raise ValueError(f"tensor {name}: unsupported dtype {a.dtype}")
        raw = a.astype(dt).tobytes()
        header[name] = {"dtype": _NAMES[dt], "shape": list(a.shape),
                        "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for c in chunks:
            f.write(c)
