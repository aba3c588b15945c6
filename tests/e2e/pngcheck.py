"""pngcheck.py PNG COLOR...: checks that an RGB(A) PNG (as rsvg-convert writes) is a real
picture: it decodes (stdlib only: zlib and the PNG filters), between 2% and 60% of its
pixels are not white, and each COLOR (#rrggbb) covers at least 20 pixels. Prints what it
found; exits 1 on a failure. (Near-white, below 235 in no channel, counts as white.)"""
import struct
import sys
import zlib


def decode(path):
    blob = open(path, "rb").read()
    if blob[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit(f"{path}: not a PNG")
    pos, idat, w = 8, b"", 0
    while pos < len(blob):
        n, kind = struct.unpack(">I4s", blob[pos:pos + 8])
        body = blob[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            if depth != 8 or ctype not in (2, 6):
                sys.exit(f"{path}: expected 8-bit RGB or RGBA, got depth {depth} type {ctype}")
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + b) & 255
            elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return w, h, bpp, rows


def main():
    w, h, bpp, rows = decode(sys.argv[1])
    want = {c: tuple(int(c[i:i + 2], 16) for i in (1, 3, 5)) for c in sys.argv[2:]}
    count, ink = {c: 0 for c in want}, 0
    for line in rows:
        for x in range(0, w * bpp, bpp):
            px = (line[x], line[x + 1], line[x + 2])
            if min(px) < 235:  # not white, nor the panels' #fafafa
                ink += 1
            for c, rgb in want.items():
                if all(abs(px[k] - rgb[k]) <= 24 for k in range(3)):
                    count[c] += 1
    frac = ink / (w * h)
    print(f"{w}x{h}, {100 * frac:.1f}% not white, colors: {count}")
    bad = [c for c, n in count.items() if n < 20]
    if not 0.02 <= frac <= 0.6 or bad:
        print("FAIL: " + (f"colors missing: {bad}" if bad else "no picture"))
        sys.exit(1)


main()
