#!/usr/bin/env python3
"""cgc's fused `--mode default` against cgc eager, PyTorch eager and torch.compile (the
GPU machine's benchmark).

Part 1, models/mlp.net (784-512-128-10, fp16, the hyperparameters of bench_eager.py) at
batch 64 and 256, four ways, each on the same device with the dataset already on it:

  cgc-default   `cgc models/mlp.net --device cuda --mode default -v`: fused kernels
  cgc-eager     the same with `--mode eager`: one kernel or GEMM per IR op
  torch-eager   bench_eager.TorchRun: PyTorch eager, AMP as the tutorials teach
                (torch.autocast fp16 + GradScaler); TF32 off (the fp32 parts stay fp32)
  torch-compile the same run with its model wrapped by torch.compile (default mode); the
                optimizer step stays eager, as the tutorials do it

Measured for each: median, p10 and p90 step time (CUDA events around each optimizer step,
after warm-up; cgc measures its own with -v), kernels per step (cgc: `--stats`
kernels_per_step, its launches plus its GEMMs, a cuBLAS GEMM counted once; PyTorch: the
CUDA kernels torch.profiler records over a few steps, divided by the steps, memcpy and
memset left out) and peak memory:
  cgc      planned: `--stats` peak_bytes at the run's batch (the arena of one training
           step); measured: the -v line "device memory: plan arena A bytes, in use U
           bytes", U being the driver's free memory at open minus free memory at the end of
           the run (cuMemGetInfo), which also counts the dataset cgc keeps on the device,
           the loaded module and cuBLAS's workspace. Compared: U less the dataset's bytes
           (computed from the files: every split's features and labels, and the epoch's two
           int32 order arrays) against peak_bytes. The runtime arena A may exceed
           peak_bytes: it is also sized for the evaluation batch (1000 rows).
  PyTorch  torch.cuda.max_memory_allocated over the timed steps, less what was allocated
           before the model was built (the dataset).

Part 2, bench/models/wide_mlp.net (784-4096x4-10, bf16, batch 4096) in cgc default:
achieved TFLOP/s = the step's matrix FLOPs / step time, counted from the layer widths
(WIDE_WIDTHS, checked against the parameter count cgc reports): 2 FLOPs per multiply-add,
for each layer the forward product and the weight gradient, and the input gradient for all
but the first (whose input needs none), against the measured bf16 matrix peak: the best of
several timed torch.matmul of two bf16 8192x8192 matrices.

Goals, printed as met / not met from this run's numbers only: mlp.net batch 64
default at least 2x faster per step than cgc eager and faster than torch.compile; measured
peak memory within 10% of the plan; the wide MLP at >= 70% of the measured peak.

    python3 bench/bench_default.py --cgc build-gpu/cgc --data data/fashion-mnist --out OUT
Writes OUT/bench_default.json and OUT/bench_default.md. `--dry-run` runs every path on
the CPU with a few steps and small sizes (cgc --device cpu, which reports no step time or
memory), to find this script's own mistakes without a GPU; its numbers mean nothing.
"""
import argparse
import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_eager as be  # noqa: E402  (the PyTorch model, run and data loading of bench_eager.py)

MLP_NET = os.path.join(be.ROOT, "models/mlp.net")
WIDE_NET = os.path.join(be.ROOT, "bench/models/wide_mlp.net")
WIDE_WIDTHS = (784, 4096, 4096, 4096, 4096, 10)   # WIDE_NET's layers, input to logits
MiB = 1 << 20


class Sizes:
    """Step counts and sizes: the GPU's, or the dry run's tiny ones."""

    def __init__(self, dry):
        self.cgc_steps = 4 if dry else 600            # -v times 500 after 50 of warm-up
        self.wide_steps = 2 if dry else 300
        self.wide_batch = 8 if dry else None          # None: the file's (4096)
        self.torch_warmup, self.torch_timed = (2, 3) if dry else (50, 400)
        self.profiled_steps = 2 if dry else 5
        self.matmul_n, self.matmul_trials = (256, 3) if dry else (8192, 10)


def bench_device(a, name):
    """The device benchmark NAME runs on, the output folder made: the GPU, or the CPU of a
    --dry-run (A.dry_run; A.out the folder). Exits when there is no GPU for PyTorch."""
    os.makedirs(a.out, exist_ok=True)
    if a.dry_run:
        return "cpu"
    if not torch.cuda.is_available():
        sys.exit(f"{name}: no CUDA device for PyTorch (use --dry-run on a CPU)")
    return "cuda"


# ---- cgc ----

def cgc_env(data_dir):
    return dict(os.environ, CGC_DATA_PATH=os.path.dirname(os.path.abspath(data_dir)))


def cgc_stats(cgc, net, mode, batch, data_dir, out, name):
    """`--stats` of the plan (no GPU needed) and the parameter count `--check` prints."""
    path = os.path.join(out, f"{name}.stats.json")
    cmd = [cgc, net, "--check", "--arch", "none", "--mode", mode, "--stats", path]
    if batch:
        cmd += ["--batch", str(batch)]
    proc = subprocess.run(cmd, env=cgc_env(data_dir), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"cgc --check exited {proc.returncode}: {proc.stderr.strip()}")
    stats = json.load(open(path))
    m = re.search(r"(\d+) parameters", proc.stdout + proc.stderr)
    stats["parameters"] = int(m.group(1)) if m else None
    return stats


def parse_cgc_verbose(text):
    """The step times and memory cgc -v prints on a device (runtime/train_device.c)."""
    r = {"step_ms": None, "p10_ms": None, "p90_ms": None, "arena_bytes": None,
         "in_use_bytes": None, "launches_as_run": None, "gemms_as_run": None}
    m = re.search(r"cgc: median step ([0-9.]+) ms \(p10 ([0-9.]+), p90 ([0-9.]+);", text)
    if m:
        r["step_ms"], r["p10_ms"], r["p90_ms"] = (float(g) for g in m.groups())
    m = re.search(r"cgc: (\d+) launches per step as run, of which (\d+) GEMMs", text)
    if m:
        r["launches_as_run"], r["gemms_as_run"] = (int(g) for g in m.groups())
    m = re.search(r"cgc: device memory: plan arena (\d+) bytes", text)
    if m:
        r["arena_bytes"] = int(m.group(1))
    m = re.search(r"cgc: device memory: .*, in use (\d+) bytes", text)
    if m:
        r["in_use_bytes"] = int(m.group(1))
    return r


def bench_cgc(cgc, net, mode, batch, steps, device, data_dir, out, name):
    try:
        stats = cgc_stats(cgc, net, mode, batch, data_dir, out, name)
    except (RuntimeError, OSError, ValueError) as e:
        return {"error": str(e)}
    cmd = [cgc, net, "--device", device, "--mode", mode, "--steps", str(steps), "-v"]
    if batch:
        cmd += ["--batch", str(batch)]
    proc = subprocess.run(cmd, env=cgc_env(data_dir), capture_output=True, text=True)
    with open(os.path.join(out, f"{name}.log"), "w") as f:
        f.write(" ".join(cmd) + "\n" + proc.stdout + proc.stderr)
    if proc.returncode != 0:
        return {"error": f"cgc exited {proc.returncode} (see {name}.log)"}
    r = parse_cgc_verbose(proc.stdout + proc.stderr)
    r.update(kernels_per_step=stats["kernels_per_step"], gemms_per_step=stats["gemms_per_step"],
             planned_bytes=stats["peak_bytes"], parameters=stats["parameters"],
             batch=stats["batch"], precision=stats["precision"])
    if r["launches_as_run"] is not None:    # the plan's count changed by max-autotune's choices
        r.update(kernels_per_step=r["launches_as_run"], gemms_per_step=r["gemms_as_run"])
    return r


def dataset_device_bytes(train, test):
    """What cgc keeps on the device besides the plan's arena: features and int32 labels of
    both splits, and the epoch's order (two int32 per training row)."""
    rows = lambda split: split[0].shape[0] * (split[0].shape[1] + 1) * 4
    return rows(train) + rows(test) + 2 * train[0].shape[0] * 4


# ---- PyTorch ----

def torch_run(batch, steps_total, device):
    """bench_eager's TorchRun; on the CPU of a dry run, the same model, optimizer, schedule
    and step with the CUDA parts off (autocast("cuda") turns itself off without CUDA; the
    loss scaler passes values through)."""
    if device == "cuda":
        return be.TorchRun(batch, steps_total)
    run = be.TorchRun.__new__(be.TorchRun)
    torch.manual_seed(42)
    run.model = be.Mlp()
    run.opt = torch.optim.AdamW(run.model.parameters(), lr=be.LR, weight_decay=be.WD)
    run.sched = torch.optim.lr_scheduler.LambdaLR(run.opt, be.cosine_factor(steps_total))
    run.scaler = torch.cuda.amp.GradScaler(enabled=False)
    run.loss_fn = nn.CrossEntropyLoss()
    return run


def batches(x, y, batch, device):
    """Shuffled batches by indexing a device-side permutation, epoch after epoch."""
    for epoch in itertools.count():
        g = torch.Generator(device=device)
        g.manual_seed(1000 + epoch)
        perm = torch.randperm(x.shape[0], device=device, generator=g)
        for i in range(0, x.shape[0] - batch + 1, batch):
            idx = perm[i:i + batch]
            yield x[idx], y[idx]


def percentiles(ms):
    ms = sorted(ms)
    return {"step_ms": statistics.median(ms), "p10_ms": ms[len(ms) // 10],
            "p90_ms": ms[len(ms) * 9 // 10], "timed_steps": len(ms)}


def timed_steps_ms(step, data, warmup, timed, device):
    """Times each of TIMED steps after WARMUP: CUDA events, or the wall clock on the CPU."""
    for _ in range(warmup):
        step(*next(data))
    if device != "cuda":
        ms = []
        for _ in range(timed):
            t0 = time.perf_counter()
            step(*next(data))
            ms.append((time.perf_counter() - t0) * 1e3)
        return ms
    events = []
    for _ in range(timed):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step(*next(data))
        end.record()
        events.append((start, end))
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in events]


def kernels_per_step(step, data, steps, device):
    """CUDA kernels per step as torch.profiler records them (memcpy and memset left out)."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(steps):
            step(*next(data))
        if device == "cuda":
            torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
               and not e.name.startswith(("Memcpy", "Memset"))]
    if device != "cuda":
        return None, "not measured: no CUDA"
    return len(kernels) / steps, None


def compile_unavailable():
    if not hasattr(torch, "compile"):
        return f"not measured: torch {torch.__version__} has no torch.compile"
    return None


def bench_torch(batch, compiled, train, sizes, device, make_run=None, compile_mode=None):
    """PyTorch's run of MAKE_RUN(batch, steps, device) (default torch_run: mlp.net), eager
    or under torch.compile (COMPILE_MODE: its `mode`, None for the default)."""
    why = compile_unavailable() if compiled else None
    if why:
        return {"error": why}
    x, y = train[0].to(device), train[1].to(device)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated() if device == "cuda" else 0
    total = sizes.torch_warmup + sizes.torch_timed + sizes.profiled_steps
    run = (make_run or torch_run)(batch, total, device)
    data = batches(x, y, batch, device)
    try:
        if compiled:
            run.model = torch.compile(run.model, mode=compile_mode)
        ms = timed_steps_ms(run.step, data, sizes.torch_warmup, sizes.torch_timed, device)
        peak = torch.cuda.max_memory_allocated() - base if device == "cuda" else None
        kps, kernels_why = kernels_per_step(run.step, data, sizes.profiled_steps, device)
    except Exception as e:  # torch.compile fails in many ways (no compiler, no Triton)
        if not compiled:
            raise
        return {"error": f"not measured: torch.compile failed: {type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''}"}
    r = percentiles(ms)
    r.update(kernels_per_step=kps, measured_bytes=peak)
    if kernels_why:
        r["kernels_note"] = kernels_why
    return r


def matmul_peak_tflops(n, trials, device):
    """The best of TRIALS timings of five back-to-back bf16 n x n matmuls."""
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(trials):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(5):
                a @ b
            end.record()
            end.synchronize()
            s = start.elapsed_time(end) / 1e3 / 5
        else:
            t0 = time.perf_counter()
            for _ in range(5):
                a @ b
            s = (time.perf_counter() - t0) / 5
        best = min(best, s)
    return 2 * n ** 3 / best / 1e12


# ---- report ----

def mib(v):
    return "n/a" if v is None else f"{v / MiB:.1f}"


def ms(v):
    return "n/a" if v is None else f"{v:.4f}"


def add_memory(r, data_bytes):
    """cgc: the memory in use less the dataset, and whether it is within 10% of the plan's
    peak (None: not measured)."""
    r["measured_bytes"] = r["memory_ok"] = None
    if r.get("in_use_bytes") is not None and r.get("planned_bytes"):
        r["measured_bytes"] = r["in_use_bytes"] - data_bytes
        r["memory_ok"] = abs(r["measured_bytes"] - r["planned_bytes"]) <= 0.10 * r["planned_bytes"]


def verdict(ok):
    return "not measured" if ok is None else ("met" if ok else "not met")


def goals(res):
    runs, wide = res["mlp"].get("64", {}), res["wide"]
    d, e, c = (runs.get(k, {}) for k in ("cgc-default", "cgc-eager", "torch-compile"))
    out = []
    if d.get("step_ms") and e.get("step_ms"):
        ratio = e["step_ms"] / d["step_ms"]
        out.append(f"mlp.net batch 64: default {ratio:.2f}x faster than cgc eager (goal >= 2x): "
                   f"{verdict(ratio >= 2)}")
    else:
        out.append("mlp.net batch 64: default >= 2x faster than cgc eager: not measured")
    if d.get("step_ms") and c.get("step_ms"):
        out.append(f"mlp.net batch 64: default {d['step_ms']:.4f} ms vs torch.compile "
                   f"{c['step_ms']:.4f} ms (goal: faster): {verdict(d['step_ms'] < c['step_ms'])}")
    else:
        out.append("mlp.net batch 64: default faster than torch.compile: "
                   + c.get("error", "not measured"))
    for batch, r in res["mlp"].items():
        for name in ("cgc-default", "cgc-eager"):
            ok = r.get(name, {}).get("memory_ok")
            out.append(f"mlp.net batch {batch} {name}: measured memory within 10% of the plan: "
                       f"{verdict(ok)}")
    if wide.get("fraction") is not None:
        out.append(f"wide MLP: {wide['tflops']:.1f} TFLOP/s = {100 * wide['fraction']:.1f}% of the "
                   f"measured bf16 peak {wide['peak_tflops']:.1f} TFLOP/s (goal >= 70%): "
                   f"{verdict(wide['fraction'] >= 0.70)}")
    else:
        out.append("wide MLP >= 70% of the measured bf16 peak: "
                   + wide.get("error", "not measured"))
    return out


def table(res):
    rows = ["| batch | run | median step (ms) | p10 | p90 | kernels/step | planned peak (MiB) | "
            "measured (MiB) | runtime arena (MiB) |", "|---|---|---|---|---|---|---|---|---|"]
    for batch, r in res["mlp"].items():
        for name, v in r.items():
            if "error" in v:
                rows.append(f"| {batch} | {name} | {v['error']} | | | | | | |")
                continue
            k = v.get("kernels_per_step")
            kernels = v.get("kernels_note", "n/a") if k is None else f"{k:g}"
            rows.append(f"| {batch} | {name} | {ms(v['step_ms'])} | {ms(v['p10_ms'])} | "
                        f"{ms(v['p90_ms'])} | {kernels} | {mib(v.get('planned_bytes'))} | "
                        f"{mib(v.get('measured_bytes'))} | {mib(v.get('arena_bytes'))} |")
    return "\n".join(rows)


def wide_line(w):
    if "error" in w:
        return f"wide MLP: {w['error']}"
    flops = "n/a" if w["flops"] is None else f"{w['flops']:.4g}"
    tflops = "n/a" if w["tflops"] is None else f"{w['tflops']:.1f}"
    return (f"wide MLP (cgc default, {w['precision']}, batch {w['batch']}, {w['parameters']} "
            f"parameters): median step {ms(w['step_ms'])} ms (p10 {ms(w['p10_ms'])}, p90 "
            f"{ms(w['p90_ms'])}), {w['kernels_per_step']} kernels/step; matrix work {flops} "
            f"FLOP/step -> {tflops} TFLOP/s; bf16 matmul peak {w['peak_tflops']:.1f} TFLOP/s "
            f"(best of {w['peak_trials']} timings of five {w['peak_n']}^3 products)")


# ---- the runs ----

def bench_mlp(a, sizes, device, train, data_bytes):
    res = {}
    for batch in [int(b) for b in a.batches.split(",")]:
        r = {}
        for mode in ("default", "eager"):
            v = bench_cgc(a.cgc, MLP_NET, mode, batch, sizes.cgc_steps, device, a.data, a.out,
                          f"cgc_{mode}_b{batch}")
            if "error" not in v:
                add_memory(v, data_bytes)
            r[f"cgc-{mode}"] = v
        r["torch-eager"] = bench_torch(batch, False, train, sizes, device)
        r["torch-compile"] = bench_torch(batch, True, train, sizes, device)
        res[str(batch)] = r
        print(json.dumps({batch: r}, indent=1), flush=True)
    return res


def wide_flops(parameters, batch):
    """Matrix FLOPs of one training step of WIDE_NET at BATCH; None unless WIDE_WIDTHS
    gives the parameter count cgc reported (weights and biases)."""
    layers = list(zip(WIDE_WIDTHS, WIDE_WIDTHS[1:]))
    if parameters != sum(i * o + o for i, o in layers):
        return None
    products = sum(i * o for i, o in layers)
    first = layers[0][0] * layers[0][1]
    return 2 * batch * (3 * products - first)


def bench_wide(a, sizes, device):
    w = bench_cgc(a.cgc, WIDE_NET, "default", sizes.wide_batch, sizes.wide_steps, device,
                  a.data, a.out, "cgc_wide_default")
    if "error" in w:
        return w
    w["peak_n"], w["peak_trials"] = sizes.matmul_n, sizes.matmul_trials
    w["peak_tflops"] = matmul_peak_tflops(sizes.matmul_n, sizes.matmul_trials, device)
    w["flops"] = wide_flops(w["parameters"], w["batch"])
    w["tflops"] = w["fraction"] = None
    if w["flops"] and w["step_ms"]:
        w["tflops"] = w["flops"] / (w["step_ms"] / 1e3) / 1e12
        w["fraction"] = w["tflops"] / w["peak_tflops"]
    return w


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cgc", required=True)
    ap.add_argument("--data", required=True, help="directory with the Fashion-MNIST IDX files")
    ap.add_argument("--out", required=True)
    ap.add_argument("--batches", default="64,256")
    ap.add_argument("--dry-run", action="store_true",
                    help="every path on the CPU with a few steps: checks this script, "
                         "measures nothing")
    a = ap.parse_args()
    device = bench_device(a, "bench_default")
    torch.backends.cuda.matmul.allow_tf32 = False   # fp16 autocast; fp32 parts stay fp32
    sizes = Sizes(a.dry_run)
    train, test = be.load_split(a.data, "train"), be.load_split(a.data, "t10k")
    data_bytes = dataset_device_bytes(train, test)
    res = {"device": torch.cuda.get_device_name() if device == "cuda" else "CPU (dry run)",
           "torch": torch.__version__, "dry_run": a.dry_run, "dataset_bytes": data_bytes}
    res["mlp"] = bench_mlp(a, sizes, device, train, data_bytes)
    res["wide"] = bench_wide(a, sizes, device)
    res["goals"] = goals(res)
    with open(os.path.join(a.out, "bench_default.json"), "w") as f:
        json.dump(res, f, indent=1)
    note = ("DRY RUN on the CPU: these numbers check the script and mean nothing\n\n"
            if a.dry_run else "")
    text = (f"{note}device: {res['device']}, torch {res['torch']}; measured memory: cgc, the "
            f"driver's in use less the dataset ({mib(data_bytes)} MiB); PyTorch, "
            f"max_memory_allocated less the dataset; the runtime arena is also sized for "
            f"evaluation batches\n\n{table(res)}\n\n"
            f"{wide_line(res['wide'])}\n\ngoals:\n" + "\n".join(f"- {g}" for g in res["goals"]))
    with open(os.path.join(a.out, "bench_default.md"), "w") as f:
        f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
