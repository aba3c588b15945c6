#!/usr/bin/env python3
"""Seed inputs for the runtime fuzz targets: small valid and nearly valid files.

  usage: tests/fuzz/make_seeds.py OUT   (writes OUT/safetensors, OUT/ckpt, OUT/tokens)

The kept corpora (corpus-safetensors, corpus-ckpt, corpus-tokens) started from these seeds
and grew by fuzzing; to grow one again (build-fuzz as in tools/test.sh):

  build-fuzz/tests/fuzz/fuzz_tokens -dict=tests/fuzz/tokens.dict -max_len=4096 \
      -max_total_time=300 NEW tests/fuzz/corpus-tokens SEEDS/tokens
  build-fuzz/tests/fuzz/fuzz_tokens -merge=1 -max_len=4096 MERGED tests/fuzz/corpus-tokens NEW
  (MERGED, an empty directory, replaces tests/fuzz/corpus-tokens)
"""
import json
import os
import struct
import sys

# ===== safetensors ======================================================================

SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2,
         "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}


def st_file(header, data=b"", pad=True, length=None):
    """A safetensors file: header (dict or text) padded to 8 bytes, then data."""
    text = header if isinstance(header, (str, bytes)) else json.dumps(header)
    text = text.encode() if isinstance(text, str) else text
    if pad:
        text += b" " * (-len(text) % 8)
    n = len(text) if length is None else length
    return struct.pack("<Q", n) + text + data


def st_tensors(tensors, meta=None):
    """tensors: [(name, dtype, shape, data bytes or None)] laid out back to back."""
    header, body = {}, b""
    if meta is not None:
        header["__metadata__"] = meta
    for name, dtype, shape, data in tensors:
        n = SIZES[dtype]
        for d in shape:
            n *= d
        data = data if data is not None else bytes((i * 37 + 11) & 255 for i in range(n))
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(body), len(body) + n]}
        body += data
    return st_file(header, body)


def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def safetensors_seeds():
    f16 = struct.pack("<8H", 0x3C00, 0xC000, 0x0001, 0x03FF, 0x7BFF, 0x7C00, 0xFC00, 0x7E01)
    bf16 = struct.pack("<4H", 0x3F80, 0xC040, 0x7F80, 0x7FC1)
    f32 = struct.pack("<4f", 1.0, -2.5, float("inf"), float("nan"))
    seeds = {
        "empty-header": st_file({}),
        "meta-only": st_file({"__metadata__": {"axlc.step": "20", "note": "x"}}),
        "one-f32": st_tensors([("w", "F32", [2, 2], f32)]),
        "f16-specials": st_tensors([("h", "F16", [8], f16)]),
        "bf16-specials": st_tensors([("b", "BF16", [2, 2], bf16)]),
        "scalar": st_tensors([("s", "F32", [], struct.pack("<f", 42))]),
        "zero-size": st_tensors([("e", "F32", [0, 4], b""), ("f", "F16", [3, 0], b""), ("g", "U8", [1], None)]),
        "rank8": st_tensors([("r", "BF16", [1, 2, 1, 1, 2, 1, 1, 1], None)]),
        "all-dtypes": st_tensors([(d.lower(), d, [2], None) for d in SIZES]),
        "meta-and-tensors": st_tensors([("model/decoder/w", "F32", [2, 3], None), ("opt/m/model/decoder/w", "F32", [2, 3], None)],
                                       meta={"axlc.step": "20", "axlc.config": "{\"a\": 1}", "": ""}),
        "names": st_tensors([("", "U8", [1], None), ("a\u00e9\u4e2d", "U8", [1], None), ("a/b\\c\"d", "U8", [1], None)]),
        "nul-name": st_file('{"a\\u0000b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"x"),
        "nul-name-shadow": st_file('{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                                   '"w\\u0000x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', b"\0\0\x80?\0\0\0@"),
        "nul-meta": st_file('{"__metadata__":{"k\\u0000":"v\\u0000w"}}'),
        "dup-key": st_file('{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                           '"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}', b"xy"),
        "dup-meta": st_file('{"__metadata__":{"k":"1"},"__metadata__":{"j":"2","k":"3"}}'),
        "reversed-order": st_file({"b": entry("F32", [1], 4, 8), "a": entry("F32", [1], 0, 4)}, b"\0\0\x80?\0\0\0@"),
        "whitespace": st_file(' \t\n{ "a" : { "dtype" : "I8" , "shape" : [ 3 ] , "data_offsets" : [ 0 , 3 ] } } \r\n', b"abc"),
        "unpadded": st_file({"a": entry("U8", [3], 0, 3)}, b"abc", pad=False),
        # nearly valid
        "short": b"\x02\x00\x00",
        "len-too-big": st_file({}, length=64),
        "len-huge": st_file({}, length=(1 << 64) - 1),
        "len-short": st_file({"a": entry("U8", [1], 0, 1)}, b"x", length=20),
        "not-object": st_file("[1,2]"),
        "trailing-text": st_file("{} x"),
        "nul-in-header": st_file(b"{}\0 "),
        "gap": st_file({"a": entry("U8", [1], 1, 2)}, b"xy"),
        "overlap": st_file({"a": entry("U8", [2], 0, 2), "b": entry("U8", [2], 1, 3)}, b"xyz"),
        "trailing-data": st_file({"a": entry("U8", [1], 0, 1)}, b"xy"),
        "size-mismatch": st_file({"a": entry("F32", [2], 0, 4)}, b"abcd"),
        "begin-after-end": st_file({"a": entry("U8", [0], 2, 1)}, b"xy"),
        "offsets-outside": st_file({"a": entry("U8", [4], 0, 4)}, b"xy"),
        "overflow-shape": st_file({"a": entry("F32", [4611686018427387904, 4], 0, 0)}),
        "zero-times-huge": st_file({"a": entry("F32", [0, 4611686018427387904, 4], 0, 0)}),
        "int64-max": st_file('{"a":{"dtype":"U8","shape":[9223372036854775807],"data_offsets":[0,9223372036854775807]}}'),
        "negative-shape": st_file({"a": entry("U8", [-1], 0, 0)}),
        "float-shape": st_file({"a": entry("U8", [1.0], 0, 1)}, b"x"),
        "nine-dims": st_file({"a": entry("U8", [1] * 9, 0, 1)}, b"x"),
        "bad-dtype": st_file({"a": entry("F17", [1], 0, 1)}, b"x"),
        "dtype-number": st_file({"a": {"dtype": 4, "shape": [1], "data_offsets": [0, 1]}}, b"x"),
        "missing-offsets": st_file({"a": {"dtype": "U8", "shape": [1]}}, b"x"),
        "three-offsets": st_file({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1, 1]}}, b"x"),
        "entry-not-object": st_file({"a": 7}),
        "meta-not-strings": st_file({"__metadata__": {"k": 1}}),
        "meta-array": st_file({"__metadata__": []}),
        "deep": st_file("[" * 40 + "]" * 40),
    }
    return seeds


# ===== checkpoint index =================================================================

def index(step=20, files=None, **extra):
    files = files if files is not None else [{"name": "state.safetensors", "bytes": "@BYTES@", "crc32": "@CRC@"}]
    d = {"format": "axlc-checkpoint", "version": 1, "step": step, "files": files}
    d.update(extra)
    # placeholders are written as bare words, so that they become numbers
    return json.dumps(d).replace('"@BYTES@"', "@BYTES@").replace('"@CRC@"', "@CRC@").encode()


def state(**kw):
    e = {"name": "state.safetensors", "bytes": "@BYTES@", "crc32": "@CRC@"}
    e.update(kw)
    return e


def ckpt_seeds():
    written = ('{"format": "axlc-checkpoint", "version": 1, "step": 20,\n'
               ' "files": [{"name": "state.safetensors", "bytes": @BYTES@, "crc32": @CRC@}]}\n').encode()
    seeds = {
        "as-written": written,
        "compact": index(),
        "step-10": index(step=10),
        "step-string": index(step="20"),
        "step-float": written.replace(b"20,", b"20.0,"),
        "no-step": written.replace(b'"step": 20,', b""),
        "wrong-bytes": index(files=[state(bytes=1)]),
        "wrong-crc": index(files=[state(crc32=12345)]),
        "negative-crc": index(files=[state(crc32=-1)]),
        "crc-string": index(files=[state(crc32="0x1234")]),
        "huge-bytes": index(files=[state(bytes=99999999999999999999)]),
        "no-files": index(files=[]),
        "files-object": index(files={"name": "state.safetensors"}),
        "twice": index(files=[state(), state()]),
        "other-file": index(files=[{"name": "other.bin", "bytes": 0, "crc32": 0}]),
        "with-index": index(files=[state(), {"name": "index.json", "bytes": 1, "crc32": 0}]),
        "dot-name": index(files=[state(), {"name": ".", "bytes": 0, "crc32": 0}]),
        "slash-name": index(files=[state(name="../step_00000010/state.safetensors")]),
        "empty-name": index(files=[state(name="")]),
        "nul-name": written.replace(b'"state.safetensors"', b'"state.safetensors\\u0000x"'),
        "tmp-name": index(files=[state(name="state.safetensors.tmp")]),
        "number-name": index(files=[state(name=5)]),
        "trailing": written + b"garbage",
        "two-objects": written + written,
        "dup-step": written.replace(b'"step": 20,', b'"step": 10, "step": 20,'),
        "array": b"[" + written + b"]",
        "empty": b"",
        "nul": b"\0",
        "truncated": written[:40],
        "deep": b'{"a":' * 40 + b"1" + b"}" * 40,
        # directory names
        "dir-canonical": b"/step_00000020\n" + written,
        "dir-nine-digits": b"/step_000000020\n" + written,
        "dir-short": b"/step_20\n" + written,
        "dir-30": b"/step_00000030\n" + index(step=30),
        "dir-19": b"/step_00000019\n" + index(step=19),
        "dir-10": b"/step_00000010\n" + index(step=10),
        "dir-5": b"/step_00000005\n" + index(step=5),
        "dir-damaged": b"/step_00000020.damaged\n" + written,
        "dir-18-digits": b"/step_999999999999999999\n" + written,
        "dir-19-digits": b"/step_9999999999999999999\n" + written,
        "dir-dotdot": b"/..\n" + written,
        "dir-slash": b"/a/b\n" + written,
        "dir-empty": b"/\n" + written,
    }
    return seeds


# ===== token files ======================================================================

MAGIC = 20240520


def tokens(version, toks, count=None, magic=MAGIC, extra=b""):
    header = [0] * 256
    header[0], header[1], header[2] = magic, version, len(toks) if count is None else count
    fmt = "<%d%s" % (len(toks), "H" if version == 1 else "I")
    return struct.pack("<256i", *header) + struct.pack(fmt, *toks) + extra


def tokens_seeds():
    return {
        "text": b"hello, world\n",
        "text-long": b"The quick brown fox jumps over the lazy dog.\n" * 8,
        "text-2": b"ab",
        "text-1": b"a",
        "text-nul": b"\0\0\0\0\0",
        "text-high": bytes(range(256)),
        "text-utf8": "na\u00efve \u4e2d\u6587\n".encode(),
        "v1": tokens(1, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]),
        "v1-2": tokens(1, [0, 255]),
        "v1-big": tokens(1, [50256, 50257, 65535, 0, 256, 1]),
        "v2": tokens(2, [1, 2, 3, 4, 5, 6, 7, 8, 9]),
        "v2-big": tokens(2, [65535, 65536, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 3]),
        "v2-vocab": tokens(2, [50256, 0, 255, 256, 65535]),
        "v1-one": tokens(1, [7]),
        "v1-none": tokens(1, []),
        "v2-count-short": tokens(2, [1, 2, 3], count=2),
        "v2-count-long": tokens(2, [1, 2, 3], count=4),
        "v1-count-negative": tokens(1, [1, 2], count=-1),
        "v1-count-huge": tokens(1, [1, 2], count=0x7FFFFFFF),
        "v3": tokens(3, [1, 2]),
        "v0": tokens(0, [1, 2]),
        "v-negative": tokens(-1, [1, 2]),
        "magic-plus-one": tokens(1, [1, 2, 3], magic=MAGIC + 1),
        "magic-minus-one": tokens(2, [1, 2, 3], magic=MAGIC - 1),
        "magic-swapped": struct.pack(">i", MAGIC) + tokens(1, [1, 2, 3])[4:],
        "magic-only": struct.pack("<i", MAGIC),
        "magic-short-header": tokens(1, [1, 2])[:1023],
        "header-only": tokens(2, [])[:1024],
        "odd-tail": tokens(1, [1, 2, 3], extra=b"\x01"),
        "no-magic-header": tokens(1, [1, 2, 3], magic=0),
    }


def main():
    out = sys.argv[1]
    for name, seeds in (("safetensors", safetensors_seeds()), ("ckpt", ckpt_seeds()), ("tokens", tokens_seeds())):
        os.makedirs(os.path.join(out, name), exist_ok=True)
        for seed, data in seeds.items():
            with open(os.path.join(out, name, seed), "wb") as f:
                f.write(data)


if __name__ == "__main__":
    main()
