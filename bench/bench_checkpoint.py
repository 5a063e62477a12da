#!/usr/bin/env python3
"""Activation checkpointing's plans (no GPU needed): for each model, `none`, `all` and
`auto` at three budgets between them, what `cgc --check --stats` plans: the activation
bytes of a step (the budget's measure), the whole arena's peak, the FLOPs recomputed per
micro-batch as a fraction of the forward's, and the wall time of the `--check` (NVRTC's
kernel cache warmed by a first run, so the time is the passes, the solver and the plan).

    python3 bench/bench_checkpoint.py --cgc build/cgc
Prints a table for BENCHMARKS.md.
"""
import argparse
import json
import os
import subprocess
import tempfile
import time

MODELS = ["bench/models/deep_mlp.net", "models/resmlp.net", "bench/models/gpt12.net"]


def plan(cgc, model, args):
    with tempfile.TemporaryDirectory() as tmp:
        stats = os.path.join(tmp, "stats.json")
        cmd = [cgc, model, "--check", "--stats", stats] + args
        subprocess.run(cmd, check=True, capture_output=True)        # warms NVRTC's cache
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        wall = time.perf_counter() - start
        with open(stats) as f:
            return json.load(f), wall


def mib(n):
    return f"{n / 2**20:.1f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cgc", default="build/cgc")
    a = ap.parse_args()
    print("| model | policy | budget (MiB) | activations (MiB) | peak (MiB) | recomputed / forward FLOPs | segments | `--check` (s) |")
    print("|---|---|---|---|---|---|---|---|")
    for model in MODELS:
        rows = []
        none, t_none = plan(a.cgc, model, ["--checkpoint", "none"])
        least, t_all = plan(a.cgc, model, ["--checkpoint", "all"])
        rows.append(("none", "", none, t_none))
        rows.append(("all", "", least, t_all))
        lo, hi = least["activation_bytes"], none["activation_bytes"]
        for frac in (0.25, 0.5, 0.75):
            budget = int(lo + (hi - lo) * frac)
            s, t = plan(a.cgc, model, ["--checkpoint", "auto", "--memory", str(budget)])
            rows.append(("auto", mib(budget), s, t))
        for policy, budget, s, t in rows:
            frac = s["recomputed_flops"] / s["forward_flops"] if s["forward_flops"] else 0
            print(f"| {os.path.basename(model)} | {policy} | {budget} | {mib(s['activation_bytes'])} | "
                  f"{mib(s['peak_bytes'])} | {frac:.2f} | {s['checkpoint_segments']} | {t:.2f} |")


if __name__ == "__main__":
    main()
