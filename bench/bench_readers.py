#!/usr/bin/env python3
"""Rows per second of cgc's data readers against NumPy's (and pandas' where installed).

The first ROWS images and labels of Fashion-MNIST (data/fashion-mnist) are written as an
.npz (np.savez), a compressed one, a directory of .npy files, a safetensors file and a
CSV table (785 columns, the label first). cgc reads each as a training run of
models/mlp.net does (`-v` prints how long the data took until its rows could be
gathered: a CSV parsed and converted to f32 and i32; arrays mapped, inflated where
compressed, and checked, their rows converted later, as batches gather them, so for
arrays the figures are not like for like); NumPy reads the same file and converts it
(x * S as float32, labels as int32): np.load for the arrays, np.loadtxt for the table,
pandas.read_csv when pandas is there. Each figure is the median of RUNS, side by side.

    python3 bench/bench_readers.py build/cgc [ROWS] [RUNS]   (defaults 20000, 3)
"""
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from npfiles import ROOT, idx, save_formats  # noqa: E402


def cgc_seconds(cgc, data):
    out = subprocess.run([cgc, os.path.join(ROOT, "models", "mlp.net"), "--device", "cpu", "-v",
                          "--steps", "1", "--precision", "fp32", "--data", data],
                         capture_output=True, text=True, check=True).stdout
    return float(re.search(r"the data read and converted in ([0-9.]+) ms", out).group(1)) / 1e3


def timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main():
    cgc = os.path.abspath(sys.argv[1])
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    x, y = idx("train-images-idx3")[:rows].reshape(rows, 784), idx("train-labels-idx1")[:rows]
    scale = 1 / 255

    def convert(a, b):
        return (a * scale).astype(np.float32), b.astype(np.int32)

    try:
        import pandas
    except ImportError:
        pandas = None
    with tempfile.TemporaryDirectory() as w:
        save_formats(w, "t", x, y)
        np.savetxt(f"{w}/t.csv", np.concatenate([y[:, None], x], 1), fmt="%d", delimiter=",",
                   header=",".join(["y"] + [f"p{i}" for i in range(784)]), comments="")
        cases = [
            ("npz (np.savez)", 'tensors("%s/t.npz", scale = 1/255)' % w,
             lambda: convert(*(lambda z: (z["x"], z["y"]))(np.load(f"{w}/t.npz")))),
            ("npz, compressed", 'tensors("%s/t_c.npz", scale = 1/255)' % w,
             lambda: convert(*(lambda z: (z["x"], z["y"]))(np.load(f"{w}/t_c.npz")))),
            ("directory of .npy", 'tensors("%s/t_dir", scale = 1/255)' % w,
             lambda: convert(np.load(f"{w}/t_dir/x.npy"), np.load(f"{w}/t_dir/y.npy"))),
            ("safetensors", 'tensors("%s/t.safetensors", scale = 1/255)' % w, None),
            ("CSV, 785 columns", 'csv("%s/t.csv", label = "y", scale = 1/255)' % w,
             lambda: np.loadtxt(f"{w}/t.csv", delimiter=",", skiprows=1, dtype=np.float32)),
        ]
        print(f"{rows} rows of 784 bytes and a label; medians of {runs} runs; rows per second")
        print(f"| source | cgc | NumPy | ratio |{' pandas.read_csv |' if pandas else ''}")
        print(f"|---|---|---|---|{'---|' if pandas else ''}")
        for name, data, numpy_read in cases:
            ours, theirs, pd = [], [], []
            for _ in range(runs):
                ours.append(cgc_seconds(cgc, data))
                if numpy_read:
                    theirs.append(timed(numpy_read))
                if pandas and name.startswith("CSV"):
                    pd.append(timed(lambda: pandas.read_csv(f"{w}/t.csv")))
            a = rows / statistics.median(ours)
            b = rows / statistics.median(theirs) if theirs else None
            extra = f" {rows / statistics.median(pd):,.0f} |" if pd else (" |" if pandas else "")
            print(f"| {name} | {a:,.0f} | {f'{b:,.0f}' if b else 'n/a'} | "
                  f"{f'{a / b:.2f}x' if b and name.startswith('CSV') else ''} |{extra}")   # arrays: not like for like
    if not pandas:
        print("pandas is not installed: no pandas.read_csv column")


if __name__ == "__main__":
    main()
