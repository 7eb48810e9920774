#!/usr/bin/env python3
"""A small Fashion-MNIST for script tests that train whole epochs: the first
TRAIN training and TEST test examples of the installed dataset, written as
plain IDX files into DIR (what `parallax train --data DIR` reads).

    fashion_subset.py DIR TRAIN TEST
"""
import gzip
import os
import struct
import sys

SOURCE = "/usr/share/datasets/fashion-mnist"


def read(name):
    path = os.path.join(SOURCE, name)
    if os.path.exists(path + ".gz"):
        with gzip.open(path + ".gz", "rb") as f:
            return f.read()
    with open(path, "rb") as f:
        return f.read()


def write_split(out_dir, prefix, n):
    images = read(f"{prefix}-images-idx3-ubyte")
    labels = read(f"{prefix}-labels-idx1-ubyte")
    magic, count, rows, cols = struct.unpack(">IIII", images[:16])
    assert magic == 0x803 and count >= n, (magic, count, n)
    with open(os.path.join(out_dir, f"{prefix}-images-idx3-ubyte"), "wb") as f:
        f.write(struct.pack(">IIII", magic, n, rows, cols) + images[16:16 + n * rows * cols])
    with open(os.path.join(out_dir, f"{prefix}-labels-idx1-ubyte"), "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + labels[8:8 + n])


def main():
    out_dir, train, test = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    os.makedirs(out_dir, exist_ok=True)
    write_split(out_dir, "train", train)
    write_split(out_dir, "t10k", test)


if __name__ == "__main__":
    main()
