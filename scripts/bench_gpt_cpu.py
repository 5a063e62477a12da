#!/usr/bin/env python3
"""CPU benchmark (not a test): models/gpt.net's training in cgc against the same model in
PyTorch, eager and under torch.compile, on the same machine in one run, alternating, RUNS
times each.

    python3 scripts/bench_gpt_cpu.py [build/cgc] [--runs 3] [--threads 2] [--steps 282]

cgc: `cgc models/gpt.net --device cpu --epochs 1` (fp32, one epoch: 282 steps of batch 12,
context 64), its training throughput (the samples/s it prints: training steps only, the
evaluation left out). PyTorch: bench/bench_gpt.py's Gpt (nn.Embedding, nn.LayerNorm,
nn.Linear, F.scaled_dot_product_attention with is_causal, F.gelu, F.cross_entropy),
torch.optim.AdamW with the file's settings, STEPS steps of random windows of the same
corpus, timed from the first step to the last after 10 of warm-up (which, for
torch.compile, compile the model). Both with the same number of threads
(torch.set_num_threads; cgc's OpenMP and OpenBLAS through their variables). Prints each
run in tokens per second (samples times 64) and the ratios of the medians.
Needs torch (for torch.compile, 2.x: PyPI's, in a virtual environment) and Debian's
fortunes.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import bench_gpt as bg  # noqa: E402

TEXT = "/usr/share/games/fortunes/cookie"


def cgc_tokens_per_s(cgc, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    out = subprocess.run([cgc, os.path.join(ROOT, "models", "gpt.net"), "--device", "cpu", "--epochs", "1"],
                         check=True, capture_output=True, text=True, env=env).stdout
    return float(re.search(r"(\d+) samples/s", out).group(1)) * bg.CONTEXT


def torch_tokens_per_s(x, y, steps, compiled):
    run = bg.Run(False, "cpu")
    if compiled:
        run.model = torch.compile(run.model)
    g = torch.Generator().manual_seed(3)
    batches = [torch.randint(0, len(x), (bg.BATCH,), generator=g) for _ in range(steps + 10)]
    for idx in batches[:10]:
        run.step(x[idx], y[idx])
    start = time.perf_counter()
    for idx in batches[10:]:
        run.step(x[idx], y[idx])
    return steps * bg.BATCH * bg.CONTEXT / (time.perf_counter() - start)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cgc", nargs="?", default=os.path.join(ROOT, "build", "cgc"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=282)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    x, y = bg.windows(TEXT, 4096)
    runners = {"cgc": lambda: cgc_tokens_per_s(a.cgc, a.threads),
               "PyTorch eager": lambda: torch_tokens_per_s(x, y, a.steps, False)}
    if hasattr(torch, "compile"):
        runners["torch.compile"] = lambda: torch_tokens_per_s(x, y, a.steps, True)
    print(f"machine: {os.cpu_count()} cores; threads {a.threads}; torch {torch.__version__}; "
          f"models/gpt.net fp32, batch {bg.BATCH}, context {bg.CONTEXT}")
    got = {k: [] for k in runners}
    for r in range(a.runs):
        for k, f in runners.items():
            got[k].append(f())
        print(f"run {r + 1}: " + ", ".join(f"{k} {v[-1]:.0f}" for k, v in got.items()) + " tokens/s",
              flush=True)
    med = {k: statistics.median(v) for k, v in got.items()}
    print("median tokens/s: " + ", ".join(f"{k} {v:.0f}" for k, v in med.items()))
    for k in runners:
        if k != "cgc":
            print(f"cgc / {k} = {med['cgc'] / med[k]:.2f}")


if __name__ == "__main__":
    main()
