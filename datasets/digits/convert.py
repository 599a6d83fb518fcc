#!/usr/bin/python3
"""Converts scikit-learn's copy of the 8x8 handwritten digits (sklearn/datasets/data/digits.csv.gz) into
datasets/digits/digits.bin, the file troupe::data::Digits reads.

    apt-get install -y python3-sklearn                       # provides digits.csv.gz (a developer step,
                                                             # never part of CI)
    /usr/bin/python3 datasets/digits/convert.py              # rewrites datasets/digits/digits.bin
    /usr/bin/python3 datasets/digits/convert.py --check      # exits 1 if the committed file differs
    /usr/bin/python3 datasets/digits/convert.py --csv PATH   # reads another copy of digits.csv.gz

The CSV has one image per line: 64 pixel values (row-major 8x8, integers 0..16), then the label (0..9).
Output layout (all integers little-endian; see README.md):
    8 bytes   magic "TRDIGITS"
    u32       version (1)
    u32       count (number of images)
    u32       rows (8)
    u32       cols (8)
    count*rows*cols bytes   pixels, uint8, image after image, row-major
    count bytes             labels, uint8
    u32       CRC-32 (zlib.crc32, the IEEE polynomial) of every byte before it
Only the standard library is used, so the output does not depend on numpy or scikit-learn versions.
"""

import gzip
import os
import struct
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "digits.bin")
DEFAULT_CSV = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"
MAGIC = b"TRDIGITS"
VERSION = 1
ROWS = COLS = 8


def read_csv(path):
    pixels = bytearray()
    labels = bytearray()
    with gzip.open(path, "rt") as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            fields = [int(float(v)) for v in line.split(",")]
            if len(fields) != ROWS * COLS + 1:
                raise ValueError("%s:%d: %d fields, expected %d" % (path, lineno, len(fields), ROWS * COLS + 1))
            if any(not 0 <= v <= 16 for v in fields[:-1]):
                raise ValueError("%s:%d: a pixel outside 0..16" % (path, lineno))
            if not 0 <= fields[-1] <= 9:
                raise ValueError("%s:%d: label %d outside 0..9" % (path, lineno, fields[-1]))
            pixels.extend(fields[:-1])
            labels.append(fields[-1])
    return bytes(pixels), bytes(labels)


def encode(pixels, labels):
    count = len(labels)
    assert len(pixels) == count * ROWS * COLS
    body = MAGIC + struct.pack("<IIII", VERSION, count, ROWS, COLS) + pixels + labels
    return body + struct.pack("<I", zlib.crc32(body) & 0xFFFFFFFF)


def main(argv):
    csv = DEFAULT_CSV
    if "--csv" in argv:
        csv = argv[argv.index("--csv") + 1]
    pixels, labels = read_csv(csv)
    data = encode(pixels, labels)
    counts = [labels.count(c) for c in range(10)]
    print("%d images, label counts %s, %d bytes, crc32 0x%08x" %
          (len(labels), counts, len(data), struct.unpack("<I", data[-4:])[0]))
    if "--check" in argv:
        old = open(OUT, "rb").read() if os.path.exists(OUT) else None
        if old != data:
            print("out of date: " + OUT)
            return 1
        return 0
    with open(OUT, "wb") as fh:
        fh.write(data)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
