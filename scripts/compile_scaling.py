#!/usr/bin/env python3
"""compile_scaling.py: how cgc's compile time and memory grow with model depth.

Writes two families of generated models and times `cgc MODEL --check --arch none --mode M`
on each (front end, passes, plan and kernel source; no NVRTC, no data, no training):

  chain  N layers h_i = relu(linear(h_{i-1}, 16)), SGD (the training graph grows by
         15 nodes a layer)
  res    N pre-norm residual blocks (layernorm, linear to 32, gelu, dropout, linear back
         to 16, added to the stream), AdamW with clipping (233 nodes a block)

and prints a Markdown table: model, depth, mode, seconds (wall), peak resident memory
(of the cgc process, which includes about 250 MB of mapped CUDA libraries). A benchmark,
not a test: it checks nothing but that each compile succeeds.

    scripts/compile_scaling.py [--cgc build/cgc] [--chain 125,1000,10000] [--res 50,200,800]
                               [--modes eager,default,reduce-overhead,max-autotune]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time


def chain_model(n):
    lines = ["model chain {", "    input x: f32[B, 32]", "    input t: f32[B, 4]",
             "    h0 = relu(linear(x, 16))"]
    lines += [f"    h{i} = relu(linear(h{i - 1}, 16))" for i in range(1, n)]
    lines += [f"    pred = linear(h{n - 1}, 4)", "    output pred", "    loss mse(pred, t)", "}",
              "train {", "    data = synthetic(samples = 1024)", "    batch = 32",
              "    optimizer = sgd(lr = 0.01)", "    seed = 1", "}"]
    return "\n".join(lines) + "\n"


def res_model(n):
    lines = ["model res {", "    input x: f32[B, 32]", "    input t: f32[B, 4]",
             "    h0 = linear(x, 16)"]
    for i in range(1, n + 1):
        lines += [f"    n{i} = layernorm(h{i - 1})",
                  f"    u{i} = dropout(gelu(linear(n{i}, 32)), 0.1)",
                  f"    f{i} = linear(u{i}, 16)",
                  f"    h{i} = h{i - 1} + f{i}"]
    lines += [f"    nf = layernorm(h{n})", "    pred = linear(nf, 4)", "    output pred",
              "    loss mse(pred, t)", "}", "train {", "    data = synthetic(samples = 1024)",
              "    batch = 32", "    optimizer = adamw(lr = 0.001)", "    clip_norm = 1.0",
              "    seed = 1", "}"]
    return "\n".join(lines) + "\n"


def measure(cgc, path, mode):
    """Wall seconds and peak RSS (MB) of one `--check` compile; raises on failure."""
    start = time.perf_counter()
    proc = subprocess.Popen([cgc, path, "--check", "--arch", "none", "--mode", mode],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if status != 0:
        raise RuntimeError(f"{path} --mode {mode} failed: {err.strip()[-400:]}")
    return seconds, usage.ru_maxrss / 1024.0


def depths(text):
    return [int(x) for x in text.split(",") if x]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cgc", default=os.path.join(os.path.dirname(__file__), "..", "build", "cgc"))
    ap.add_argument("--chain", default="125,250,500,1000,2000,5000,10000")
    ap.add_argument("--res", default="50,100,200,400,800")
    ap.add_argument("--modes", default="eager,default,reduce-overhead,max-autotune")
    a = ap.parse_args()
    families = [("chain", chain_model, depths(a.chain)), ("res", res_model, depths(a.res))]
    print("| model | depth | mode | seconds | peak RSS (MB) |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="cgc_scaling_") as tmp:
        for name, make, ns in families:
            for n in ns:
                path = os.path.join(tmp, f"{name}{n}.net")
                with open(path, "w") as f:
                    f.write(make(n))
                for mode in a.modes.split(","):
                    seconds, rss = measure(a.cgc, path, mode)
                    print(f"| {name} | {n} | {mode} | {seconds:.2f} | {rss:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
