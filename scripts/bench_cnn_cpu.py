#!/usr/bin/env python3
"""CPU benchmark (not a test): one epoch of models/cnn.net in cgc against the same network
in PyTorch eager, on the same machine in one run, alternating, RUNS times each.

    /usr/bin/python3 scripts/bench_cnn_cpu.py [build/cgc] [--runs 3] [--threads 2]

cgc: `cgc models/cnn.net --device cpu --epochs 1` (fp32), its training throughput (the
samples/s it prints: training steps only, the evaluation left out). PyTorch: nn.Conv2d,
nn.BatchNorm2d, nn.MaxPool2d, nn.Linear and nn.Dropout as the file writes them, AdamW
with the file's settings, batch 64, the epoch's batches shuffled and the last partial one
dropped (as cgc's drop_last), Fashion-MNIST preloaded as one float tensor, the same
number of threads (torch.set_num_threads; cgc's OpenMP through OMP_NUM_THREADS), timed
from the first step to the last. Prints each run and the medians' ratio.
Needs Debian's python3-torch and Fashion-MNIST (dataset-fashion-mnist).
"""
import argparse
import gzip
import os
import re
import statistics
import subprocess
import time

import numpy as np
import torch
import torch.nn as nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = "/usr/share/datasets/fashion-mnist"


def load_idx(name):
    with gzip.open(os.path.join(DATA, name + ".gz")) as f:
        raw = f.read()
    rank = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(rank)]
    return np.frombuffer(raw[4 + 4 * rank:], np.uint8).reshape(dims)


def torch_epoch(x, y, batch):
    """Samples per second of one training epoch of cnn.net's network in PyTorch."""
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Dropout(0.3), nn.Linear(128, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    loss_fn = nn.CrossEntropyLoss()
    order = torch.randperm(len(x))
    steps = len(x) // batch
    model.train()
    start = time.perf_counter()
    for s in range(steps):
        idx = order[s * batch:(s + 1) * batch]
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x[idx]), y[idx]).backward()
        opt.step()
    return steps * batch / (time.perf_counter() - start)


def cgc_epoch(cgc, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run([cgc, os.path.join(ROOT, "models", "cnn.net"), "--device", "cpu",
                          "--epochs", "1", "--precision", "fp32"],
                         check=True, capture_output=True, text=True, env=env).stdout
    return float(re.search(r"(\d+) samples/s", out).group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cgc", nargs="?", default=os.path.join(ROOT, "build", "cgc"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    x = torch.tensor(load_idx("train-images-idx3-ubyte").astype(np.float32) / 255).reshape(-1, 1, 28, 28)
    y = torch.tensor(load_idx("train-labels-idx1-ubyte").astype(np.int64))
    print(f"machine: {os.cpu_count()} cores; threads {a.threads}; torch {torch.__version__}")
    ours, theirs = [], []
    for r in range(a.runs):
        ours.append(cgc_epoch(a.cgc, a.threads))
        theirs.append(torch_epoch(x, y, 64))
        print(f"run {r + 1}: cgc {ours[-1]:.0f} samples/s, PyTorch eager {theirs[-1]:.0f} samples/s")
    mo, mt = statistics.median(ours), statistics.median(theirs)
    print(f"median: cgc {mo:.0f}, PyTorch eager {mt:.0f} samples/s; cgc / PyTorch = {mo / mt:.2f}")


if __name__ == "__main__":
    main()
