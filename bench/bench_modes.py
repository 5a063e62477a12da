#!/usr/bin/env python3
"""cgc's four modes against PyTorch eager and torch.compile, in one table (the
GPU machine's benchmark).

Models, each at the batch and precision of its file, the same on both sides:

  mlp64    models/mlp.net, 784-512-128-10, fp16, batch 64 (AdamW, cosine, clipping)
  mlp256   the same at batch 256
  narrow   models/narrow_mlp.net, 784-128-128-128-10, bf16, batch 256 (Adam, cosine)
  wide     bench/models/wide_mlp.net, 784-4096x4-10, bf16, batch 4096 (AdamW, clipping)

Runners, for each model (every run with the dataset already on the GPU):

  cgc eager, default, reduce-overhead, max-autotune
      `cgc NET --device cuda --mode MODE --steps 300 --batch B -v`; its -v line gives the
      median, p10 and p90 of the device time between CUDA events around each step (250
      steps after 50 of warm-up). max-autotune runs twice with the same XDG_CACHE_HOME
      (fresh for this script): the first run tunes (its `cgc: autotune: ... timed ... in
      X s` line is the tuning time, kept apart from compile time), the second, timed one
      reads the choices back (`cgc: autotune: N choices from ...`), which the JSON records.
  torch eager
      bench_eager.TorchRun: AMP as the tutorials teach (torch.autocast fp16 with GradScaler
      for fp16; bf16 autocast without a scaler), the model's optimizer, cosine schedule and
      clipping; TF32 off (torch.backends.cuda.matmul.allow_tf32 = False, cudnn too), so the
      fp32 parts stay fp32
  torch.compile default, torch.compile max-autotune
      the same run with its model wrapped by torch.compile(model, mode=...); the optimizer
      step stays eager, as in bench_default.py
  torch.compile whole step
      the strongest PyTorch step: AdamW(fused=True) (Adam likewise), then the whole step
      (forward, backward, GradScaler where fp16, clip_grad_norm_, the update, the schedule,
      zero_grad) compiled with torch.compile(step, mode="max-autotune"), whose Inductor
      records CUDA graphs
  PyTorch: 50 steps of warm-up, then 200 timed with CUDA events around each step (median,
  p10, p90), as bench_default.timed_steps_ms does.

Kernels per step: cgc's launches and GEMM calls per step as its -v line reports them
after the run (a cuBLAS GEMM counted once; max-autotune's fused MLP runs counted as one
launch each; in reduce-overhead and max-autotune these run inside one CUDA graph launch),
or `--stats` kernels_per_step (the plan's) when the run printed none; PyTorch's, the CUDA kernels torch.profiler records over 5 steps divided by 5
(bench_default.kernels_per_step).

Compile times:
  cgc      `cgc NET --bench --mode MODE --device cpu --batch B` (eager's column from the
           default run): cold = front end, passes and NVRTC for the first GPU's
           architecture even when the kernel cache has the module; warm = the same with the
           module from the kernel cache. --device cpu only skips --bench's own step timing.
  PyTorch  each PyTorch run is a process of its own with fresh, empty Inductor and Triton
           caches (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR). It first trains a throwaway
           copy of the run eagerly for 2 steps (CUDA context, cuBLAS, allocator, autocast
           start-up), then times the real run's first 3 steps by the wall clock, each
           synchronised, and the median of the next 10: cold compile = the 3 first steps
           less 3 times that steady step (the first steps trace, compile forward and
           backward, autotune in max-autotune and record its CUDA graphs). Warm = the same
           in a new process that finds the caches the cold one filled.

Ratio: the step time of the fastest PyTorch row on the same model divided by this row's
(> 1: this row is faster than every PyTorch configuration measured).

Goals, printed as met / not met / not measured from this run's numbers only:
mlp.net batch 64 in cgc max-autotune at least 5x faster per step than the fastest PyTorch
row; the wide MLP in cgc max-autotune at least 1.2x faster; cold compile of mlp.net under
2 s and warm under 100 ms (each cgc mode).

    python3 bench/bench_modes.py --cgc build-gpu/cgc --data data/fashion-mnist --out OUT
    python3 bench/bench_modes.py ... --models mlp64,narrow    # a subset
Writes OUT/bench_modes.json (every number), OUT/bench_modes.md (the table for
BENCHMARKS.md and the goals), after each run so that a cut-off run leaves what it measured,
and each run's log (bm_MODEL_*.log) and cgc max-autotune's choices file (bm_MODEL_*.tune).
A run that fails is reported in its row with the reason; the others go on. `--dry-run`
runs every path on the CPU with a few steps and batch 8 (cgc --device cpu, PyTorch on the
CPU): it finds this script's mistakes without a GPU; step times and kernels then read
"not measured", and the other numbers mean nothing.
"""
import argparse
import datetime
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_eager as be  # noqa: E402  (the PyTorch model, run and data loading of bench_eager.py)
import bench_default as bd  # noqa: E402  (cgc runs and PyTorch timing)

CGC_MODES = ("eager", "default", "reduce-overhead", "max-autotune")
TORCH_RUNNERS = {"torch-eager": None, "torch-compile-default": "default",
                 "torch-compile-max-autotune": "max-autotune", "torch-compile-step": "step"}
LABELS = {"cgc-eager": "cgc eager", "cgc-default": "cgc default",
          "cgc-reduce-overhead": "cgc reduce-overhead", "cgc-max-autotune": "cgc max-autotune",
          "torch-eager": "torch eager", "torch-compile-default": "torch.compile default",
          "torch-compile-max-autotune": "torch.compile max-autotune",
          "torch-compile-step": "torch.compile whole step (max-autotune, fused AdamW)"}


class Model:
    """One model of the table, as its .net file trains it."""

    def __init__(self, key, net, batch, precision, widths, optimizer, lr, wd, warmup, clip):
        self.key, self.net, self.batch, self.precision = key, net, batch, precision
        self.widths, self.optimizer, self.lr, self.wd = widths, optimizer, lr, wd
        self.warmup, self.clip = warmup, clip

    def path(self):
        return os.path.join(be.ROOT, self.net)


MLP_WIDTHS = (784, 512, 128, 10)   # bench_eager.Mlp
MODELS = {m.key: m for m in (
    Model("mlp64", "models/mlp.net", 64, "fp16", MLP_WIDTHS, "adamw", be.LR, be.WD,
          be.WARMUP, be.CLIP),
    Model("mlp256", "models/mlp.net", 256, "fp16", MLP_WIDTHS, "adamw", be.LR, be.WD,
          be.WARMUP, be.CLIP),
    Model("narrow", "models/narrow_mlp.net", 256, "bf16", (784, 128, 128, 128, 10), "adam",
          2e-3, 0.0, 100, None),
    Model("wide", "bench/models/wide_mlp.net", 4096, "bf16", bd.WIDE_WIDTHS, "adamw", 1e-4,
          1e-4, 50, 1.0),
)}


class Sizes:
    """Step counts and batches: the GPU's, or the dry run's tiny ones."""

    def __init__(self, dry):
        self.batch = 8 if dry else None                  # None: the model's
        self.cgc_steps = 4 if dry else 300               # -v times 250 after 50 of warm-up
        self.first, self.steady = (1, 1) if dry else (3, 10)   # compile-time steps
        self.torch_warmup, self.torch_timed = (2, 3) if dry else (50, 200)
        self.profiled = 2 if dry else 5


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def last_line(path):
    lines = [line.strip() for line in read(path).splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


# ---- cgc ----

def seconds(token):
    """'3.05 s', '12.3 ms' or '-' (as driver/bench.c prints them) in seconds, or None."""
    if token == "-":
        return None
    value, unit = token.split()
    return float(value) / (1e3 if unit == "ms" else 1)


def cgc_compile_times(a, m, batch):
    """Cold and warm compile seconds of each cgc mode from `cgc --bench` (driver/bench.c's
    "compile, cold" and "compile, warm" rows: eager's column, then the mode's)."""
    res = {}
    for mode in CGC_MODES[1:]:
        name = f"bm_{m.key}_cgc_bench_{mode}"
        cmd = [a.cgc, m.path(), "--bench", "--mode", mode, "--device", "cpu",
               "--batch", str(batch)]
        proc = subprocess.run(cmd, env=bd.cgc_env(a.data), capture_output=True, text=True)
        text = proc.stdout + proc.stderr
        with open(os.path.join(a.out, f"{name}.log"), "w") as f:
            f.write(" ".join(cmd) + "\n" + text)
        rows = {}
        for kind in ("cold", "warm"):
            g = re.search(rf"^compile, {kind}\s+(-|[0-9.]+ m?s)\s+(-|[0-9.]+ m?s)", text, re.M)
            rows[kind] = (seconds(g.group(1)), seconds(g.group(2))) if g else (None, None)
        why = None
        if proc.returncode != 0:
            why = f"cgc --bench exited {proc.returncode} (see {name}.log)"
        elif rows["cold"] == (None, None):
            why = f"not measured: cgc --bench printed no compile times (see {name}.log)"
        cached = "the module from the kernel cache" in text
        for i, key in ((0, "eager"), (1, mode)):
            if key in res:
                continue
            res[key] = {"cold_s": rows["cold"][i], "warm_s": rows["warm"][i],
                        "warm_from_cache": cached if rows["warm"][i] is not None else None}
            if why:
                res[key]["compile_note"] = why
    return res


def parse_autotune(text):
    """What max-autotune's `cgc: autotune:` lines say (runtime/train_device.c)."""
    r = {"tuning_s": None, "candidates": None, "read_back": False, "untimed": 0, "refused": 0}
    g = re.search(r"cgc: autotune: (\d+) candidates timed for \d+ kernels, \d+ GEMMs(?:,| and) \d+ "
                  r"fused MLP runs(?: and \d+ convolutions \(implicit GEMMs, cuDNN\))? "
                  r"in ([0-9.]+) s", text)
    if g:
        r["candidates"], r["tuning_s"] = int(g.group(1)), float(g.group(2))
    g = re.search(r"cgc: autotune: (\d+) choices from .* \(tuned in ([0-9.]+) s when written",
                  text)
    if g:
        r["read_back"], r["choices"], r["tuned_when_written_s"] = (True, int(g.group(1)),
                                                                  float(g.group(2)))
    g = re.search(r"cgc: autotune: the time ran out: (\d+) kernels", text)
    if g:
        r["untimed"] = int(g.group(1))
    g = re.search(r"cgc: warning: autotune: (\d+) candidates? refused", text)
    if g:
        r["refused"] = int(g.group(1))
    return r


def cgc_run(a, m, mode, batch, steps, device, name):
    """bench_default.bench_cgc, with the failing run's last log line as the reason."""
    r = bd.bench_cgc(a.cgc, m.path(), mode, batch, steps, device, a.data, a.out, name)
    if "error" in r:
        r["error"] += ": " + last_line(os.path.join(a.out, f"{name}.log"))
    return r


def bench_cgc(a, m, mode, batch, sizes, device, compile_times):
    """cgc in MODE on model M: the timed run's numbers, its compile times, and in
    max-autotune the tuning run before it."""
    name = f"bm_{m.key}_cgc_{mode}"
    tune = None
    if mode == "max-autotune":   # tunes into the (fresh) cache; the timed run reads it back
        tune = cgc_run(a, m, mode, batch, sizes.cgc_steps, device, name + "_tune")
    r = cgc_run(a, m, mode, batch, sizes.cgc_steps, device, name)
    r.update(compile_times.get(mode, {}))
    if tune is not None:
        r["tuning_run"] = dict(parse_autotune(read(os.path.join(a.out, f"{name}_tune.log"))),
                               step_ms=tune.get("step_ms"), error=tune.get("error"))
        r["tuning_s"] = r["tuning_run"]["tuning_s"]
        r["timed_run"] = parse_autotune(read(os.path.join(a.out, f"{name}.log")))
        for path in glob.glob(os.path.join(os.environ["XDG_CACHE_HOME"], "cgc", "tune", "*")):
            shutil.copy(path, os.path.join(a.out, f"bm_{m.key}_{os.path.basename(path)}"))
    if "error" not in r and r.get("precision") != m.precision:
        r["precision_note"] = f"cgc reports {r.get('precision')}, the table {m.precision}"
    return r


# ---- PyTorch (each run in a process of its own: --torch-worker) ----

def mlp(widths):
    layers = []
    for i, (n_in, n_out) in enumerate(zip(widths, widths[1:])):
        layers += [nn.Linear(n_in, n_out)] + ([nn.ReLU()] if i < len(widths) - 2 else [])
    return nn.Sequential(*layers)


def torch_run(m, batch, steps_total, device):
    """A bench_eager.TorchRun of model M: bench_default.torch_run's for mlp.net; otherwise
    the model's widths, optimizer, schedule and clipping, bf16 autocast without a scaler."""
    if m.widths == MLP_WIDTHS:
        return bd.torch_run(batch, steps_total, device)
    run = be.TorchRun.__new__(be.TorchRun)
    torch.manual_seed(42)
    run.model = mlp(m.widths).to(device)
    opt = torch.optim.AdamW if m.optimizer == "adamw" else torch.optim.Adam
    run.opt = opt(run.model.parameters(), lr=m.lr, weight_decay=m.wd)
    run.sched = torch.optim.lr_scheduler.LambdaLR(run.opt, be.cosine_factor(steps_total,
                                                                            m.warmup))
    run.scaler = torch.amp.GradScaler(device, enabled=False)   # bf16: no loss scaling
    run.loss_fn = nn.CrossEntropyLoss()
    run.dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[m.precision]
    run.clip = m.clip
    return run


def wall_steps_s(step, data, n, device):
    """Wall seconds of each of N steps, each synchronised."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        step(*next(data))
        if device == "cuda":
            torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
    return out


def compile_whole_step(run, device):
    """The strongest PyTorch step: the optimizer made fused (AdamW(fused=True) where CUDA
    has it), then the whole step (forward, backward, the scaler, clip_grad_norm_, the
    update, the schedule, zero_grad) compiled with torch.compile max-autotune, whose
    Inductor records CUDA graphs of what it compiles."""
    d = run.opt.defaults
    fused = type(run.opt)(run.model.parameters(), lr=d["lr"], betas=d["betas"], eps=d["eps"],
                          weight_decay=d["weight_decay"], fused=device == "cuda")
    run.sched = torch.optim.lr_scheduler.LambdaLR(fused, run.sched.lr_lambdas[0])
    run.opt = fused
    run.step = torch.compile(run.step, mode="max-autotune")


def torch_worker(spec_path):
    """One PyTorch run (SPEC: model, compile mode, phase timed or warm); writes its JSON."""
    spec = json.load(open(spec_path))
    m, sizes, device, mode = MODELS[spec["model"]], Sizes(spec["dry_run"]), spec["device"], \
        spec["compile"]
    if mode:
        why = bd.compile_unavailable()
        if why:
            sys.exit(why)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    batch = sizes.batch or m.batch
    train = be.load_split(spec["data"], "train")
    data = bd.batches(train[0].to(device), train[1].to(device), batch, device)
    total = sizes.torch_warmup + sizes.torch_timed + sizes.profiled
    throwaway = torch_run(m, batch, total, device)   # start-up costs, outside the timing
    wall_steps_s(throwaway.step, data, 2, device)
    del throwaway
    run = torch_run(m, batch, total, device)
    r = {"device": torch.cuda.get_device_name() if device == "cuda" else "CPU (dry run)",
         "torch": torch.__version__, "cuda": torch.version.cuda, "batch": batch,
         "precision": m.precision, "parameters": sum(p.numel() for p in run.model.parameters())}
    if mode == "step":
        compile_whole_step(run, device)
    elif mode:
        run.model = torch.compile(run.model, mode=mode)
    walls = wall_steps_s(run.step, data, sizes.first + sizes.steady, device)
    steady = statistics.median(walls[sizes.first:])
    r.update(first_steps_s=walls[:sizes.first], steady_step_wall_s=steady,
             compile_s=sum(walls[:sizes.first]) - sizes.first * steady if mode else None)
    if spec["phase"] == "timed":
        ms = bd.timed_steps_ms(run.step, data, sizes.torch_warmup - sizes.first - sizes.steady,
                               sizes.torch_timed, device)
        r.update(bd.percentiles(ms))
        r["kernels_per_step"], why = bd.kernels_per_step(run.step, data, sizes.profiled, device)
        if why:
            r["kernels_note"] = why
        if device != "cuda":
            r.update(step_ms=None, p10_ms=None, p90_ms=None, cpu_wall_ms=r["step_ms"],
                     step_note="not measured: no CUDA")   # the CPU's wall time: cpu_wall_ms
    with open(spec["result"], "w") as f:
        json.dump(r, f)


def torch_process(a, spec, name, env):
    """Runs one --torch-worker process; its result, or {"error": the reason}."""
    spec["result"] = os.path.join(a.tmp, f"{name}.result.json")
    spec_path = os.path.join(a.tmp, f"{name}.spec.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    log = os.path.join(a.out, f"{name}.log")
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-worker", spec_path]
    with open(log, "w") as f:
        f.write(" ".join(cmd) + "\n" + json.dumps(spec) + "\n")
        f.flush()
        try:
            proc = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT,
                                  timeout=a.torch_timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"not measured: still running after {a.torch_timeout} s, stopped "
                             f"(see {name}.log)"}
    if proc.returncode != 0:
        return {"error": f"failed (exit {proc.returncode}): {last_line(log)} (see {name}.log)"}
    return json.load(open(spec["result"]))


def bench_torch(a, m, runner, device):
    """RUNNER on model M: a timed process with fresh compile caches, then (compiled) a
    warm one that finds them filled."""
    mode, name = TORCH_RUNNERS[runner], f"bm_{m.key}_{runner}"
    cache = os.path.join(a.tmp, name)
    shutil.rmtree(cache, ignore_errors=True)
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"),
               TRITON_CACHE_DIR=os.path.join(cache, "triton"))
    spec = {"model": m.key, "compile": mode, "dry_run": a.dry_run, "device": device,
            "data": os.path.abspath(a.data)}
    r = torch_process(a, dict(spec, phase="timed"), name, env)
    if "error" in r:
        return r
    r["cold_s"], r["warm_s"] = r.pop("compile_s"), None
    if mode and not a.no_torch_warm:
        w = torch_process(a, dict(spec, phase="warm"), name + "_warm", env)
        r["warm_run"] = w
        r["warm_s"] = w.get("compile_s")
        if "error" in w:
            r["compile_note"] = "warm: " + w["error"]
    elif mode:
        r["compile_note"] = "warm: not measured (--no-torch-warm)"
    return r


# ---- report ----

def num(v, digits=4):
    return "n/a" if v is None else f"{v:.{digits}f}"


def fastest_torch(runs):
    """The PyTorch runner with the shortest measured step, or None."""
    timed = [k for k in TORCH_RUNNERS if runs.get(k, {}).get("step_ms")]
    return min(timed, key=lambda k: runs[k]["step_ms"]) if timed else None


def add_ratios(runs):
    best = fastest_torch(runs)
    ref = runs[best]["step_ms"] if best else None
    for r in runs.values():
        if "error" not in r:
            r["ratio_vs_reference"] = ref / r["step_ms"] if ref and r.get("step_ms") else None


def table(res):
    rows = ["| model | batch | precision | runner | median ms/step | p10 | p90 | "
            "the fastest PyTorch row's ms / this ms (>1: this faster) | kernels/step | "
            "cold compile s | warm compile s | cgc tuning s |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for v in res["models"].values():
        head = f"| {v['net']} | {v['batch']} | {v['precision']} |"
        for runner, r in v["runs"].items():
            if "error" in r:
                why = r["error"].replace("|", "\\|")
                rows.append(f"{head} {LABELS[runner]} | {why} | | | | | | | |")
                continue
            k = r.get("kernels_per_step")
            kernels = r.get("kernels_note", "n/a") if k is None else f"{k:g}"
            warm = num(r.get("warm_s"), 3)
            if r.get("warm_from_cache") is False:
                warm += " (not from the cache)"
            step = num(r.get("step_ms"))
            if r.get("step_ms") is None:
                step = r.get("step_note", "not measured")
            rows.append(f"{head} {LABELS[runner]} | {step} | {num(r.get('p10_ms'))} | "
                        f"{num(r.get('p90_ms'))} | {num(r.get('ratio_vs_reference'), 2)} | "
                        f"{kernels} | {num(r.get('cold_s'), 3)} | {warm} | "
                        f"{num(r.get('tuning_s'), 1) if runner == 'cgc-max-autotune' else ''} |")
    return "\n".join(rows)


def verdict(ok):
    return "not measured" if ok is None else ("met" if ok else "not met")


def why_not(*runs):
    """The first of RUNS' errors, else their step notes, else "no step time"."""
    for key in ("error", "step_note"):
        for r in runs:
            if r.get(key):
                return r[key].removeprefix("not measured: ")
    return "no step time"


def goals(res):
    out, models = [], res["models"]
    for key, label, want, test in (
            ("mlp64", "cgc max-autotune at least 5x faster per step than the fastest PyTorch "
                      "row", ">= 5x", lambda x: x >= 5),
            ("wide", "cgc max-autotune at least 1.2x faster per step than the fastest PyTorch "
                     "row", ">= 1.2x", lambda x: x >= 1.2)):
        if key not in models:
            out.append(f"{key}: {label}: not measured ({key} not in --models)")
            continue
        v = models[key]
        best = fastest_torch(v["runs"])
        c, t = v["runs"].get("cgc-max-autotune", {}), v["runs"].get(best, {}) if best else {}
        label += f" ({LABELS[best]})" if best else ""
        where = f"{v['net']} batch {v['batch']}"
        if c.get("step_ms") and t.get("step_ms"):
            x = t["step_ms"] / c["step_ms"]
            out.append(f"{where}: {label}: {c['step_ms']:.4f} ms against {t['step_ms']:.4f} ms, "
                       f"{x:.2f}x (goal {want}): {verdict(test(x))}")
        else:
            out.append(f"{where}: {label}: not measured ({why_not(c, t)})")
    if "mlp64" not in models:
        out.append("mlp.net compile, cold under 2 s and warm under 100 ms: not measured "
                   "(mlp64 not in --models)")
        return out
    v = models["mlp64"]
    for mode in CGC_MODES:
        r = v["runs"].get(f"cgc-{mode}", {})
        cold, warm = r.get("cold_s"), r.get("warm_s")
        where = f"{v['net']} batch {v['batch']}, cgc {mode}"
        if cold is None or warm is None:
            out.append(f"{where}: compile cold under 2 s and warm under 100 ms: not measured "
                       f"({r.get('compile_note', why_not(r))})")
        elif not r.get("warm_from_cache"):
            out.append(f"{where}: cold {cold:.3f} s (goal < 2 s): {verdict(cold < 2)}; warm: "
                       f"not measured (the module did not come from the kernel cache)")
        else:
            out.append(f"{where}: cold {cold:.3f} s (goal < 2 s): {verdict(cold < 2)}; warm "
                       f"{warm * 1e3:.1f} ms (goal < 100 ms): {verdict(warm < 0.1)}")
    return out


def notes(res):
    out = []
    for v in res["models"].values():
        for runner, r in v["runs"].items():
            for key in ("compile_note", "precision_note"):
                if r.get(key):
                    out.append(f"{v['net']} batch {v['batch']}, {LABELS[runner]}: {r[key]}")
        params = {r.get("parameters") for r in v["runs"].values() if r.get("parameters")}
        if len(params) > 1:
            out.append(f"{v['net']} batch {v['batch']}: the runners count different parameters "
                       f"({sorted(params)}): not the same model")
        ma = v["runs"].get("cgc-max-autotune", {})
        tr, where = ma.get("tuning_run"), f"{v['net']} batch {v['batch']}, cgc max-autotune"
        if not tr or "error" in ma:
            continue
        read = ma.get("timed_run", {}).get("read_back")
        if tr["tuning_s"] is None:
            out.append(f"{where}: tuning not measured: the first run printed no `cgc: autotune: "
                       f"... timed` line (nothing is tuned on the CPU)")
            continue
        out.append(f"{where}: tuned in {tr['tuning_s']:.1f} s by a first run "
                   f"({tr['candidates']} candidates, {tr['untimed']} left untimed, "
                   f"{tr['refused']} candidates refused by the device); the timed run "
                   + ("read the choices back" if read else
                      "did not read them back (see its log)"))
    return out


def write_report(a, res):
    for v in res["models"].values():
        add_ratios(v["runs"])
    res["goals"], res["notes"] = goals(res), notes(res)
    with open(os.path.join(a.out, "bench_modes.json"), "w") as f:
        json.dump(res, f, indent=1)
    dry = ("DRY RUN on the CPU: these numbers check the script and mean nothing\n\n"
           if a.dry_run else "")
    z = res["sizes"]
    text = (f"{dry}device: {res['device']}; torch {res['torch']} (CUDA {res['cuda']}); "
            f"{res['cgc']}; {res['date']}; commit {res['commit']}\n\n"
            "Step times: device time between CUDA events around each training step after "
            f"warm-up (cgc: {max(z['cgc_steps'] - 50, 0)} after 50, its -v line; PyTorch: "
            f"{z['torch_timed']} after {z['torch_warmup']}). PyTorch: AMP (autocast fp16 with "
            "GradScaler, bf16 autocast without), TF32 off; torch.compile wraps the model, the "
            "optimizer step staying eager, except in the whole-step row (the optimizer fused, "
            "forward, backward, clipping and update compiled in max-autotune). Compile: cgc, `--bench`'s front end, passes and NVRTC "
            "(cold) or the kernel cache (warm); PyTorch, the wall time of its first "
            f"{z['first']} steps less {z['first']} steady ones, in a process with empty "
            "Inductor and Triton caches (cold) or the ones the cold process filled (warm). "
            "torch.compile max-autotune's autotuning is inside its compile time; cgc "
            "max-autotune's tuning is the last column.\n\n"
            f"{table(res)}\n\n"
            + "".join(f"- {n}\n" for n in res["notes"])
            + "\ngoals:\n" + "".join(f"- {g}\n" for g in res["goals"]))
    with open(os.path.join(a.out, "bench_modes.md"), "w") as f:
        f.write(text)
    return text


def output(*cmd):
    """CMD's standard output and error, stripped; None when it cannot run or fails."""
    try:
        p = subprocess.run(cmd, cwd=be.ROOT, capture_output=True, text=True)
    except OSError:
        return None
    return (p.stdout + p.stderr).strip() if p.returncode == 0 else None


def provenance(cgc):
    """Commit, cgc's version and its devices, for the report's header."""
    commit = output("git", "rev-parse", "--short", "HEAD") or "unknown"
    if output("git", "status", "--porcelain", "--untracked-files=no"):
        commit += " (with uncommitted changes)"
    devices = output(cgc, "--devices")
    return {"commit": commit, "cgc": output(cgc, "--version") or "cgc (version unknown)",
            "cgc_devices": devices,
            "device": "unknown (see cgc_devices in bench_modes.json)"}


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--torch-worker":
        return torch_worker(sys.argv[2])
    ap = argparse.ArgumentParser()
    ap.add_argument("--cgc", required=True)
    ap.add_argument("--data", required=True, help="directory with the Fashion-MNIST IDX files")
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default=",".join(MODELS),
                    help=f"a comma-separated subset of {','.join(MODELS)} (default: all)")
    ap.add_argument("--no-torch-warm", action="store_true",
                    help="skip torch.compile's warm compile (a second process per compile)")
    ap.add_argument("--torch-timeout", type=int, default=480,
                    help="seconds one PyTorch process may take before it is stopped")
    ap.add_argument("--dry-run", action="store_true",
                    help="every path on the CPU with a few steps: checks this script, "
                         "measures nothing")
    a = ap.parse_args()
    keys = [k for k in a.models.split(",") if k]
    unknown = [k for k in keys if k not in MODELS]
    if unknown:
        ap.error(f"--models: unknown {','.join(unknown)} (known: {','.join(MODELS)})")
    device = bd.bench_device(a, "bench_modes")
    sizes = Sizes(a.dry_run)
    a.tmp = tempfile.mkdtemp(prefix="bench_modes_")
    os.environ["XDG_CACHE_HOME"] = os.path.join(a.tmp, "cache")   # cgc's, empty: tuned anew
    res = dict(provenance(a.cgc), torch=torch.__version__, cuda=None,
               date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               dry_run=a.dry_run, tf32=False, sizes=vars(sizes), models={})
    try:
        for key in keys:
            m = MODELS[key]
            v = res["models"][key] = {"net": m.net, "batch": sizes.batch or m.batch,
                                      "precision": m.precision, "runs": {}}
            compile_times = cgc_compile_times(a, m, v["batch"])
            for mode in CGC_MODES:
                v["runs"][f"cgc-{mode}"] = bench_cgc(a, m, mode, v["batch"], sizes, device,
                                                     compile_times)
                write_report(a, res)
            for runner in TORCH_RUNNERS:
                r = v["runs"][runner] = bench_torch(a, m, runner, device)
                if "device" in r:
                    res["device"], res["cuda"] = r["device"], r["cuda"]
                write_report(a, res)
            print(json.dumps({key: v}, indent=1), flush=True)
        print(write_report(a, res))
    finally:
        shutil.rmtree(a.tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
