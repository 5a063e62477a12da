#!/usr/bin/env python3
"""Attention's training step, cgc against PyTorch's scaled_dot_product_attention (the GPU
machine's benchmark).

For each context T (512 to 4096) and head width D (64 and 128), 8 heads, N = 8192 / T
sequences, bf16, causal, one model on both sides:

    x f32[N, T, 8 D] -> q = linear(x, 8 D, bias = false) -> attention(q, q, q, heads = 8,
    causal = true) -> the mean as the loss; SGD

cgc: a .net of that model written to OUT, `cgc NET --device cuda --mode MODE --steps S -v`
in default and max-autotune (bench_default.bench_cgc: the median device time of a step).
PyTorch: the same step with F.scaled_dot_product_attention(is_causal=True) under
torch.autocast(bfloat16), its backend chosen by PyTorch (FlashAttention-2 where it
applies), eager. Besides each step time the table gives attention's own FLOPs per step
over it, in TFLOP/s: forward 4 N H T^2 D / 2 (causal: half the scores), backward 2.5 times
that, FlashAttention's convention; the projection and the loss are in the step's time
but not in that count (the projection is 2 N T C^2 per product, a sixth to a half of
attention's FLOPs here). A second PyTorch row times SDPA's forward and backward alone
(no projection, no optimizer), the number FlashAttention's papers report; beside it, cgc's
attention kernels alone: the forward and backward launches of step 50 as `-v` times each
(launch by launch, between events), from the default mode's run.

    python3 bench/bench_attention.py --cgc build-gpu/cgc --out OUT [--contexts 512,1024]
Writes OUT/bench_attention.json and .md after each configuration. `--dry-run` runs every
path on the CPU at T = 64 with few steps (cgc --device cpu reports no step time).
"""
import argparse
import json
import os
import re
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_default as bd  # noqa: E402

HEADS, TOKENS = 8, 8192


def net_text(t, c, n):
    return f"""# bench_attention.py: attention's training step at T = {t}, width {c}
model attn {{
    input x: f32[N, {t}, {c}]

    q = linear(x, {c}, bias = false)
    a = attention(q, q, q, heads = {HEADS}, causal = true)

    output a
    loss   mean(a)
}}

train {{
    data      = synthetic(samples = {4 * n})
    batch     = {n}
    optimizer = sgd(lr = 1e-6)
    precision = bf16
}}
"""


def attention_flops(n, t, d):
    forward = 4 * n * HEADS * t * t * d / 2
    return forward * 3.5


def cgc_kernels_alone(log):
    """The ms of the attention launches (forward and backward) in the launch-by-launch
    lines of a -v run's LOG, or None where it has none (no GPU, or too few steps)."""
    try:
        text = open(log).read()
    except OSError:
        return None
    us = [float(m.group(1)) for m in re.finditer(r"^cgc:\s+([\d.]+) us measured .* fused attention(_grad)?_line\d+",
                                                  text, re.M)]
    return {"step_ms": sum(us) / 1e3, "launches": len(us)} if len(us) == 2 else None


def torch_step_ms(n, t, c, device, sizes, alone):
    """PyTorch's step (or SDPA's forward and backward alone): bench_default.timed_steps_ms."""
    torch.manual_seed(0)
    proj = torch.nn.Linear(c, c, bias=False).to(device)
    opt = torch.optim.SGD(proj.parameters(), lr=1e-6)
    x = torch.randn(n, t, c, device=device)
    qa = torch.randn(n, HEADS, t, c // HEADS, device=device, dtype=torch.bfloat16, requires_grad=True)

    def heads(v):
        return v.view(n, t, HEADS, c // HEADS).transpose(1, 2)

    def step(x):
        if alone:
            out = F.scaled_dot_product_attention(qa, qa, qa, is_causal=True)
            out.backward(torch.ones_like(out))
            return out
        with torch.autocast(device, dtype=torch.bfloat16):
            q = heads(proj(x))
            a = F.scaled_dot_product_attention(q, q, q, is_causal=True).transpose(1, 2).reshape(n, t, c)
            loss = a.float().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    data = iter(lambda: (x,), None)
    return bd.percentiles(bd.timed_steps_ms(step, data, sizes.torch_warmup, sizes.torch_timed, device))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cgc", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--contexts", default="512,1024,2048,4096")
    ap.add_argument("--widths", default="64,128")
    ap.add_argument("--dry-run", action="store_true",
                    help="every path on the CPU at T = 64 with few steps: checks this script, measures nothing")
    a = ap.parse_args()
    device = bd.bench_device(a, "bench_attention")
    sizes = bd.Sizes(a.dry_run)
    contexts = [64] if a.dry_run else [int(v) for v in a.contexts.split(",")]
    res = {"device": torch.cuda.get_device_name() if device == "cuda" else "CPU (dry run)",
           "torch": torch.__version__, "dry_run": a.dry_run, "runs": []}
    rows = []
    for t in contexts:
        for d in (int(v) for v in a.widths.split(",")):
            n, c = max(1, TOKENS // t) if not a.dry_run else 2, HEADS * d
            flops = attention_flops(n, t, d)
            net = os.path.join(a.out, f"attn_{t}_{d}.net")
            with open(net, "w") as f:
                f.write(net_text(t, c, n))
            runs = {}
            for mode in ("default", "max-autotune"):
                runs[f"cgc {mode}"] = bd.bench_cgc(a.cgc, net, mode, n, sizes.cgc_steps, device,
                                                   os.path.join(a.out, "none"), a.out, f"attn_{t}_{d}_{mode}")
            alone = cgc_kernels_alone(os.path.join(a.out, f"attn_{t}_{d}_default.log"))
            runs["cgc default: attention kernels alone"] = alone or {"error": "not measured: no launch-by-launch lines"}
            for runner, alone in (("torch SDPA step", False), ("torch SDPA fwd+bwd alone", True)):
                try:
                    runs[runner] = torch_step_ms(n, t, c, device, sizes, alone)
                except RuntimeError as e:   # out of memory, no kernel for the shape
                    runs[runner] = {"error": f"not measured: {str(e).splitlines()[0]}"}
            for runner, v in runs.items():
                ms = v.get("step_ms") if "error" not in v else None
                tflops = f"{flops / (ms * 1e-3) / 1e12:.1f}" if ms else "n/a"
                rows.append(f"| {t} | {d} | {n} | {runner} | {bd.ms(ms) if 'error' not in v else v['error']} | {tflops} |")
            res["runs"].append({"T": t, "D": d, "N": n, "attention_flops": flops, "runs": runs})
            note = "DRY RUN on the CPU: these numbers check the script and mean nothing\n\n" if a.dry_run else ""
            text = (f"{note}device: {res['device']}, torch {res['torch']}; {HEADS} heads, causal, bf16\n\n"
                    "| T | head width | N | runner | median ms/step | attention TFLOP/s |\n"
                    "|---|---|---|---|---|---|\n" + "\n".join(rows))
            with open(os.path.join(a.out, "bench_attention.json"), "w") as f:
                json.dump(res, f, indent=1)
            with open(os.path.join(a.out, "bench_attention.md"), "w") as f:
                f.write(text + "\n")
            print(rows[-1], flush=True)
    print(text)


if __name__ == "__main__":
    main()
