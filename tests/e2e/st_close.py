#!/usr/bin/env python3
"""st_close.py: whether two cgc checkpoints hold the same tensors within a tolerance.

Usage: st_close.py A.safetensors B.safetensors REL [NAME_PREFIX]

Reads both files with nothing but struct and json (an oracle independent of cgc's
reader), and compares every F32 tensor whose name starts with NAME_PREFIX (default: all):
the largest |a - b| over the largest |a| of that tensor must be at most REL. Prints the
worst tensor; exit status 0 when all are within REL, 1 otherwise (or on a tensor only
one file has, or two shapes that differ).
"""
import json
import struct
import sys


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F32":
            continue
        start, end = info["data_offsets"]
        raw = data[8 + n + start:8 + n + end]
        tensors[name] = (info["shape"], struct.unpack("<%df" % (len(raw) // 4), raw))
    return tensors


def main():
    a, b = load(sys.argv[1]), load(sys.argv[2])
    rel, prefix = float(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else ""
    names = sorted(k for k in a.keys() | b.keys() if k.startswith(prefix))
    worst, worst_name = 0.0, None
    for name in names:
        if name not in a or name not in b:
            print(f"{name}: only in {'the first' if name in a else 'the second'} file")
            return 1
        (shape_a, va), (shape_b, vb) = a[name], b[name]
        if shape_a != shape_b:
            print(f"{name}: shape {shape_a} in the first file, {shape_b} in the second")
            return 1
        scale = max((abs(v) for v in va), default=0.0) or 1.0
        diff = max((abs(x - y) for x, y in zip(va, vb)), default=0.0)
        if diff / scale >= worst:
            worst, worst_name = diff / scale, name
    print(f"worst relative difference {worst:.3g} ({worst_name}), allowed {rel:g}")
    return 0 if worst <= rel else 1


if __name__ == "__main__":
    sys.exit(main())
