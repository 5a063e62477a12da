#!/usr/bin/env python3
"""safetensors_check.py: checks cgc's safetensors writer with an independent reader.

Usage: safetensors_check.py TEST_SAFETENSORS_BINARY

Runs `TEST_SAFETENSORS_BINARY --write FILE` (which saves the sample tensors listed below),
then reads FILE with nothing but struct and json, applying every rule the reference
loader (huggingface/safetensors) applies, plus the ones cgc's writer promises on top
(sorted keys, space padding to 8 bytes, data in name order), and compares the values.
Exit status 0 when all hold, 1 with a message otherwise.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

MAX_HEADER = 100_000_000
DTYPE_SIZES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2,
    "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8,
}


def bf16(bits):
    return struct.unpack("<f", struct.pack("<I", bits << 16))[0]


# What test_safetensors --write saves: name -> (dtype, shape, values, struct format).
EXPECTED = {
    "weight": ("F32", [2, 3], [-1, -0.5, 0, 0.5, 1, 1.5], "f"),
    "bias": ("F32", [3], [1, -2, 3.25], "f"),
    "step": ("I64", [], [12345678901], "q"),
    "half": ("F16", [2], [1.0, -2.5], "e"),
    "bf": ("BF16", [2], [1.0, -2.0], "bf16"),
    "ids": ("I32", [4], [0, -1, 2147483647, -2147483648], "i"),
    "empty": ("F64", [0, 3], [], "d"),
    "Zeta": ("U8", [3], [1, 2, 255], "B"),
    'h1.weight."quoted"': ("F64", [1], [0.1], "d"),
    "huge.but.empty": ("U8", [1, 0, 3000000000], [], "B"),
}
EXPECTED_META = {"format": "pt", "note": 'quote " backslash \\ and \u00fcnicode'}


class Bad(Exception):
    pass


def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise Bad("duplicate key in the header")
    return dict(pairs)


def is_count(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def read_header(blob):
    if len(blob) < 8:
        raise Bad("shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > MAX_HEADER:
        raise Bad(f"header of {n} bytes is over the limit")
    if 8 + n > len(blob):
        raise Bad(f"header says {n} bytes but the file has {len(blob)}")
    raw = blob[8:8 + n]
    if n % 8 != 0:
        raise Bad(f"header length {n} is not a multiple of 8")
    text = raw.decode("utf-8")  # raises on invalid UTF-8, as the reference does
    if not text.startswith("{"):
        raise Bad("header does not start with '{'")
    body = text.rstrip(" ")
    if len(text) - len(body) >= 8:
        raise Bad("more than 7 bytes of padding")
    header = json.loads(text, object_pairs_hook=no_duplicates)
    if not isinstance(header, dict):
        raise Bad("header is not an object")
    return header, blob[8 + n:]


def check_entries(header, buffer):
    keys = list(header.keys())
    if keys != sorted(keys):
        raise Bad(f"keys are not sorted: {keys}")
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise Bad("__metadata__ is not an object of strings")
    spans = []
    for name, e in header.items():
        if not isinstance(e, dict) or set(e) != {"dtype", "shape", "data_offsets"}:
            raise Bad(f"{name}: entry must have exactly dtype, shape, data_offsets")
        if e["dtype"] not in DTYPE_SIZES:
            raise Bad(f"{name}: unknown dtype {e['dtype']}")
        shape, off = e["shape"], e["data_offsets"]
        # An integer printed as 3e+09 or 512.0 parses as a float and fails here.
        if not isinstance(shape, list) or not all(is_count(d) for d in shape):
            raise Bad(f"{name}: bad shape {shape}")
        if not isinstance(off, list) or len(off) != 2 or not all(is_count(o) for o in off):
            raise Bad(f"{name}: bad data_offsets {off}")
        numel = 1
        for d in shape:
            numel *= d
        begin, end = off
        if begin > end or end > len(buffer):
            raise Bad(f"{name}: offsets {off} outside the {len(buffer)}-byte buffer")
        if end - begin != numel * DTYPE_SIZES[e["dtype"]]:
            raise Bad(f"{name}: offsets {off} do not match shape {shape} of {e['dtype']}")
        spans.append((begin, end, name))
    # Contiguous from 0, no gaps or overlaps, covering the buffer, in name order.
    at = 0
    for begin, end, name in sorted(spans):
        if begin != at:
            raise Bad(f"{name}: starts at {begin}, expected {at}")
        at = end
    if at != len(buffer):
        raise Bad(f"tensors cover {at} of {len(buffer)} buffer bytes")
    by_name = [s[2] for s in sorted(spans, key=lambda s: s[2])]
    by_offset = [s[2] for s in sorted(spans, key=lambda s: (s[0], s[1], s[2]))]
    if by_name != by_offset:
        raise Bad("data is not laid out in name order")
    return meta


def values(entry, buffer, fmt):
    begin, end = entry["data_offsets"]
    data = buffer[begin:end]
    if fmt == "bf16":
        return [bf16(b) for b in struct.unpack(f"<{len(data) // 2}H", data)]
    size = struct.calcsize(fmt)
    return list(struct.unpack(f"<{len(data) // size}{fmt}", data))


def check_values(header, meta, buffer):
    if meta != EXPECTED_META:
        raise Bad(f"metadata {meta} != {EXPECTED_META}")
    if set(header) != set(EXPECTED):
        raise Bad(f"tensors {sorted(header)} != {sorted(EXPECTED)}")
    for name, (dtype, shape, want, fmt) in EXPECTED.items():
        e = header[name]
        if e["dtype"] != dtype or e["shape"] != shape:
            raise Bad(f"{name}: {e['dtype']}{e['shape']} != {dtype}{shape}")
        got = values(e, buffer, fmt)
        if fmt == "f":
            want = [struct.unpack("<f", struct.pack("<f", w))[0] for w in want]
        if got != want:
            raise Bad(f"{name}: values {got} != {want}")


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "sample.safetensors")
        subprocess.run([sys.argv[1], "--write", path], check=True)
        with open(path, "rb") as f:
            blob = f.read()
        leftovers = [n for n in os.listdir(tmp) if n != "sample.safetensors"]
    try:
        if leftovers:
            raise Bad(f"temporary files left behind: {leftovers}")
        header, buffer = read_header(blob)
        meta = check_entries(header, buffer)
        check_values(header, meta, buffer)
    except (Bad, UnicodeDecodeError, json.JSONDecodeError) as e:
        print(f"safetensors_check: {path}: {e}", file=sys.stderr)
        return 1
    print(f"safetensors_check: {len(EXPECTED)} tensors and metadata verified")
    return 0


if __name__ == "__main__":
    sys.exit(main())
