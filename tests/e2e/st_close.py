#!/usr/bin/env python3
"""st_close.py: whether two cgc checkpoints hold the same tensors within a tolerance.

Usage: st_close.py [--meta] A.safetensors B.safetensors REL [NAME_PREFIX]

Reads both files with nothing but struct and json (an oracle independent of cgc's
reader), and compares every F32 tensor whose name starts with NAME_PREFIX (default: all):
the largest |a - b| over the largest |a| of that tensor must be at most REL. Prints the
worst tensor; exit status 0 when all are within REL, 1 otherwise (or on a tensor only
one file has, or two shapes that differ). With --meta, the run's position must match
too: cgc.epoch, cgc.step, cgc.loss_count and cgc.skipped equal, cgc.loss_sum within REL.
"""
import json
import struct
import sys


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    tensors = {"__metadata__": header.get("__metadata__", {})}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F32":
            continue
        start, end = info["data_offsets"]
        raw = data[8 + n + start:8 + n + end]
        tensors[name] = (info["shape"], struct.unpack("<%df" % (len(raw) // 4), raw))
    return tensors


def meta_differs(a, b, rel):
    """What differs in the runs' positions (metadata) of A and B, or None."""
    ma, mb = a["__metadata__"], b["__metadata__"]
    for key in ("cgc.epoch", "cgc.step", "cgc.loss_count", "cgc.skipped"):
        if ma.get(key) != mb.get(key):
            return f"{key}: {ma.get(key)} in the first file, {mb.get(key)} in the second"
    x, y = (float.fromhex(m.get("cgc.loss_sum", "nan")) for m in (ma, mb))
    if not abs(x - y) <= rel * max(abs(x), abs(y), 1e-30):
        return f"cgc.loss_sum: {x!r} in the first file, {y!r} in the second"
    return None


def main():
    args = [x for x in sys.argv[1:] if x != "--meta"]
    a, b = load(args[0]), load(args[1])
    rel, prefix = float(args[2]), args[3] if len(args) > 3 else ""
    if "--meta" in sys.argv[1:]:
        why = meta_differs(a, b, rel)
        if why:
            print(why)
            return 1
    names = sorted(k for k in a.keys() | b.keys() if k.startswith(prefix) and k != "__metadata__")
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
