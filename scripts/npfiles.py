"""Array files for the tests and benchmarks, written without cgc: Fashion-MNIST's IDX
files (data/fashion-mnist) read into NumPy, and safetensors files written and read as
the reference implementation does (no library needed)."""
import gzip
import json
import os
import struct

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "data", "fashion-mnist")
ST_DTYPES = {np.dtype("uint8"): "U8", np.dtype("int64"): "I64", np.dtype("float32"): "F32",
             np.dtype("int32"): "I32", np.dtype("float64"): "F64"}


def idx(name):
    """data/fashion-mnist/NAME-ubyte.gz as a uint8 array of its dimensions."""
    with gzip.open(os.path.join(DATA, name + "-ubyte.gz")) as f:
        raw = f.read()
    dims = struct.unpack(">" + "I" * raw[3], raw[4:4 + 4 * raw[3]])
    return np.frombuffer(raw[4 + 4 * raw[3]:], np.uint8).reshape(dims)


def save_safetensors(path, arrays):
    header, blobs, at = {}, [], 0
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        header[name] = {"dtype": ST_DTYPES[a.dtype], "shape": list(a.shape), "data_offsets": [at, at + a.nbytes]}
        blobs.append(a.tobytes())
        at += a.nbytes
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def load_safetensors(path):
    """Each tensor's raw bytes by name (the metadata left out)."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    return {k: raw[8 + n + t["data_offsets"][0]:8 + n + t["data_offsets"][1]] for k, t in header.items()}


def save_formats(work, stem, x, y):
    """X and Y as arrays x and y in each format tensors(...) reads, as WORK/STEM.npz (np.savez),
    STEM_c.npz (compressed), STEM_dir/ (x.npy, y.npy) and STEM.safetensors."""
    np.savez(f"{work}/{stem}.npz", x=x, y=y)
    np.savez_compressed(f"{work}/{stem}_c.npz", x=x, y=y)
    os.mkdir(f"{work}/{stem}_dir")
    np.save(f"{work}/{stem}_dir/x.npy", x)
    np.save(f"{work}/{stem}_dir/y.npy", y)
    save_safetensors(f"{work}/{stem}.safetensors", {"x": x, "y": y})
