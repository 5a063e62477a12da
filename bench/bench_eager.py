#!/usr/bin/env python3
"""cgc eager against PyTorch eager on models/mlp.net (GPU machine).

The same model (784-512-128-10, ReLU), the same hyperparameters as models/mlp.net (AdamW
lr 1e-3, weight decay 1e-4, cosine schedule with 200 warm-up steps to 0 over the run,
global-norm clipping at 1.0, fp16 with dynamic loss scaling, 10 epochs), for batch 64
and 256, three ways:

  cgc        `cgc models/mlp.net --device cuda --mode eager --batch B`: the dataset lives on
             the GPU; cgc reports the median step time from CUDA events (-v) and, per epoch,
             the training seconds and test accuracy (--metrics)
  torch-gpu  PyTorch eager, AMP as the tutorials teach (torch.autocast + GradScaler), the
             dataset already on the GPU, batches by indexing a device-side permutation
  torch-dl   PyTorch eager with a standard DataLoader (pin_memory, worker processes), the
             way the tutorials feed Fashion-MNIST

Measured: median step time (CUDA events around each step, after warm-up), the time of one
epoch (wall clock, synchronised), and the training time until the test accuracy first
reaches 0.88 (evaluation after each epoch, not counted).

    python3 bench/bench_eager.py --cgc build-gpu/cgc --data data/fashion-mnist --out OUT
Writes OUT/bench_eager.json and OUT/bench_eager.md (a table for BENCHMARKS.md).
"""
import argparse
import gzip
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn as nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LR, WD, WARMUP, CLIP, EPOCHS, TARGET = 1e-3, 1e-4, 200, 1.0, 10, 0.88
TRAIN_N = 60000


def load_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    rank = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(rank)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * rank).reshape(dims)


def find(data_dir, stem):
    for name in (stem + ".gz", stem):
        p = os.path.join(data_dir, name)
        if os.path.exists(p):
            return p
    sys.exit(f"bench: {stem}(.gz) not found in {data_dir}")


def load_split(data_dir, prefix):
    x = load_idx(find(data_dir, f"{prefix}-images-idx3-ubyte")).reshape(-1, 784)
    y = load_idx(find(data_dir, f"{prefix}-labels-idx1-ubyte"))
    return torch.tensor(x.astype(np.float32) / 255.0), torch.tensor(y.astype(np.int64))


def cosine_factor(total, warmup=WARMUP):
    """cgc's cosine schedule (compiler/training.c) as a LambdaLR factor, min_lr 0."""
    def factor(t):
        if t < warmup:
            return (t + 1) / warmup
        frac = min(t - warmup, total - warmup) / max(total - warmup, 1)
        return 0.5 * (1 + math.cos(math.pi * frac))
    return factor


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2, self.l3 = nn.Linear(784, 512), nn.Linear(512, 128), nn.Linear(128, 10)

    def forward(self, x):
        return self.l3(torch.relu(self.l2(torch.relu(self.l1(x)))))


class TorchRun:
    dtype, clip = torch.float16, CLIP   # autocast's precision; the clipping norm (None: off)

    def __init__(self, batch, steps_total):
        torch.manual_seed(42)
        self.model = Mlp().cuda()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=LR, weight_decay=WD)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, cosine_factor(steps_total))
        self.scaler = torch.amp.GradScaler("cuda")
        self.loss_fn = nn.CrossEntropyLoss()

    def step(self, x, y):
        with torch.autocast("cuda", dtype=self.dtype):
            loss = self.loss_fn(self.model(x), y)
        self.opt.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.opt)
        if self.clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        self.scaler.step(self.opt)
        self.scaler.update()
        self.sched.step()
        return loss

    @torch.no_grad()
    def accuracy(self, x, y):
        correct = 0
        for i in range(0, x.shape[0], 1000):
            with torch.autocast("cuda", dtype=torch.float16):
                logits = self.model(x[i:i + 1000])
            correct += (logits.argmax(1) == y[i:i + 1000]).sum().item()
        return correct / x.shape[0]


def batches_gpu(x, y, batch, epoch):
    g = torch.Generator(device="cuda")
    g.manual_seed(1000 + epoch)
    perm = torch.randperm(x.shape[0], device="cuda", generator=g)
    for i in range(0, x.shape[0] - batch + 1, batch):
        idx = perm[i:i + batch]
        yield x[idx], y[idx]


def batches_dataloader(loader):
    for xb, yb in loader:
        yield xb.cuda(non_blocking=True), yb.cuda(non_blocking=True)


def median_step_ms(run, batch_iter, warmup=50, timed=400):
    times, events = [], []
    for i, (xb, yb) in enumerate(batch_iter):
        if i < warmup:
            run.step(xb, yb)
            continue
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run.step(xb, yb)
        end.record()
        events.append((start, end))
        if len(events) == timed:
            break
    torch.cuda.synchronize()
    times = [s.elapsed_time(e) for s, e in events]
    return statistics.median(times), len(times)


def bench_torch(kind, batch, train, test):
    xt, yt = train
    xs, ys = test[0].cuda(), test[1].cuda()
    steps_per_epoch = TRAIN_N // batch
    loader = None
    if kind == "torch-gpu":
        xg, yg = xt.cuda(), yt.cuda()
        make_iter = lambda epoch: batches_gpu(xg, yg, batch, epoch)
    else:
        ds = torch.utils.data.TensorDataset(xt, yt)
        loader = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, drop_last=True,
                                             pin_memory=True, num_workers=4,
                                             persistent_workers=True)
        make_iter = lambda epoch: batches_dataloader(loader)
    # Step time on a run of its own (warm-up excluded).
    step_ms, nsteps = median_step_ms(TorchRun(batch, steps_per_epoch * EPOCHS), make_iter(0))
    # Epoch times and time to the target accuracy on a fresh run.
    run = TorchRun(batch, steps_per_epoch * EPOCHS)
    epoch_s, acc, to_target, trained = [], [], None, 0.0
    for epoch in range(EPOCHS):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for xb, yb in make_iter(epoch):
            run.step(xb, yb)
        torch.cuda.synchronize()
        epoch_s.append(time.perf_counter() - t0)
        trained += epoch_s[-1]
        acc.append(run.accuracy(xs, ys))
        if to_target is None and acc[-1] >= TARGET:
            to_target = trained
    return {"step_ms": step_ms, "timed_steps": nsteps, "epoch_s": epoch_s,
            "first_epoch_s": epoch_s[0], "median_epoch_s": statistics.median(epoch_s),
            "test_accuracy": acc, "time_to_target_s": to_target}


def bench_cgc(cgc, batch, data_dir, out):
    metrics = os.path.join(out, f"cgc_b{batch}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    env = dict(os.environ, CGC_DATA_PATH=os.path.dirname(os.path.abspath(data_dir)))
    cmd = [cgc, os.path.join(ROOT, "models/mlp.net"), "--device", "cuda", "--mode", "eager",
           "--batch", str(batch), "--epochs", str(EPOCHS), "--drop-last", "true",
           "--metrics", metrics, "-v"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    with open(os.path.join(out, f"cgc_b{batch}.log"), "w") as f:
        f.write(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        print(proc.stdout + proc.stderr)
        return {"error": f"cgc exited {proc.returncode}"}
    lines = [json.loads(l) for l in open(metrics)]
    epoch_s = [l["seconds"] for l in lines]
    acc = [l.get("test_accuracy") for l in lines]
    to_target, trained = None, 0.0
    for s, a in zip(epoch_s, acc):
        trained += s
        if to_target is None and a is not None and a >= TARGET:
            to_target = trained
    m = re.search(r"median step ([0-9.]+) ms", proc.stdout + proc.stderr)
    return {"step_ms": float(m.group(1)) if m else None, "epoch_s": epoch_s,
            "first_epoch_s": epoch_s[0], "median_epoch_s": statistics.median(epoch_s),
            "test_accuracy": acc, "time_to_target_s": to_target, "process_wall_s": wall}


def fmt(v, unit=""):
    return "n/a" if v is None else f"{v:.3f}{unit}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cgc", required=True)
    ap.add_argument("--data", required=True, help="directory with the Fashion-MNIST IDX files")
    ap.add_argument("--out", required=True)
    ap.add_argument("--batches", default="64,256")
    ap.add_argument("--skip-dataloader", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False   # fp16 autocast; fp32 parts stay fp32
    train, test = load_split(a.data, "train"), load_split(a.data, "t10k")
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "runs": {}}
    for batch in [int(b) for b in a.batches.split(",")]:
        r = {"cgc": bench_cgc(a.cgc, batch, a.data, a.out),
             "torch-gpu": bench_torch("torch-gpu", batch, train, test)}
        if not a.skip_dataloader:
            r["torch-dl"] = bench_torch("torch-dl", batch, train, test)
        results["runs"][str(batch)] = r
        print(json.dumps({batch: r}, indent=1), flush=True)
    with open(os.path.join(a.out, "bench_eager.json"), "w") as f:
        json.dump(results, f, indent=1)
    rows = ["| batch | run | median step (ms) | median epoch (s) | to 0.88 (s) | final test acc |",
            "|---|---|---|---|---|---|"]
    for batch, r in results["runs"].items():
        for name, v in r.items():
            if "error" in v:
                rows.append(f"| {batch} | {name} | {v['error']} | | | |")
                continue
            rows.append(f"| {batch} | {name} | {fmt(v['step_ms'])} | {fmt(v['median_epoch_s'])} | "
                        f"{fmt(v['time_to_target_s'])} | {fmt(v['test_accuracy'][-1])} |")
    table = "\n".join(rows)
    with open(os.path.join(a.out, "bench_eager.md"), "w") as f:
        f.write(f"device: {results['device']}, torch {results['torch']}\n\n{table}\n")
    print(table)


if __name__ == "__main__":
    main()
