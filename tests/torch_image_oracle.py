#!/usr/bin/env python3
"""Randomised oracle for cgc's image layers against PyTorch (ctest torch_image_oracle).

From a fixed seed, draws small models that each put ONE image layer under test between
an image input f32[N, C, H, W] (H and W odd and different) and `flatten` + `linear` to a
few outputs with a cross_entropy or mse loss:

  - conv2d with kernel, stride, padding and dilation each possibly different per axis,
    written as a number or as [h, w], groups > 1, with or without bias, and
    padding = "same" with dilations > 1 and even kernels where the extent is odd;
  - max_pool2d and avg_pool2d with per-axis kernel, stride (or its default) and padding;
  - batchnorm over the image, with its momentum and eps.

Most layers get a 1x1 (or 3x3) convolution in front, so that the gradient flows through
the layer under test into a parameter (max pooling's and the convolutions' data
gradients), not only into its own weights.

For each model cgc trains one or two plain SGD steps on the CPU (`--device cpu`, fp32)
on IDX files this script writes, and saves a checkpoint. PyTorch then takes the same
steps with torch.nn.functional (F.conv2d, F.max_pool2d, F.avg_pool2d, F.batch_norm with
training=True, and PyTorch's own padding="same") from the same initial weights, which
scripts/crosscheck_torch.py's re-implementation of cgc's Philox initialisation
reproduces, on the same batches. Compared:
  - the linear layer's weight shape in cgc's model against the one PyTorch's layer output
    implies (the layer's output shape);
  - every parameter after the steps (relative L2 error <= 1e-4), and each parameter's
    update (new - initial, relative error <= 1e-3 of the update: a wrong gradient that is
    small next to the weight still shows);
  - batchnorm's running statistics and num_batches_tracked;
  - the mean training loss cgc reports.
Then a few malformed layers that PyTorch or the language refuses must make cgc fail with
a located error.

    /usr/bin/python3 tests/torch_image_oracle.py [build/cgc] [--seed S] [--cases K]
                                                 [--write-models DIR] [--only I ...] [-v]
--write-models DIR writes each drawn model, with synthetic data in its train block, to
DIR/img_<seed>_<I>.net instead of training (for the CUDA emulation, tests/emu/emu.cmake).
Prints one line per case and a summary; exits 1 if any case disagrees.
"""
import argparse
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from crosscheck_torch import buffers_of, init_tensor, load_safetensors, params_of, rel_error  # noqa: E402

PARAM_RTOL = 1e-4    # parameters after the steps: fp32 rounding only
UPDATE_RTOL = 1e-3   # their updates, relative to the update (rounding of new - initial)
LOSS_RTOL = 1e-4
PIXEL_SCALE = 1 / 128    # a power of two: byte * scale is exact in both


# ---- drawing the cases ----

def pair(rng, lo, hi):
    """(h, w), each in [lo, hi]; equal half of the time."""
    h = rng.randint(lo, hi)
    return (h, h) if rng.random() < 0.5 else (h, rng.randint(lo, hi))


def extent(size, k, s, p, d):
    """Output size of a window along one axis (docs/language.md, conv2d)."""
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def draw_conv(rng, case, same):
    """A conv2d layer's arguments; with SAME, padding = "same" (stride 1, odd extents)."""
    g = rng.choice([1, 1, 2, 3])
    layer = dict(kind="conv2d", groups=g, cin=g * rng.randint(1, 2), out=g * rng.randint(1, 3),
                 bias=rng.random() < 0.7)
    while True:
        k, d = pair(rng, 1, 5), pair(rng, 1, 3)
        if same:
            s, p = (1, 1), "same"
            # "same" needs dilation * (kernel - 1) even on each axis: with an even kernel
            # that takes an even dilation.
            if any(dd * (kk - 1) % 2 for kk, dd in zip(k, d)):
                continue
        else:
            s, p = pair(rng, 1, 3), pair(rng, 0, 3)
        pads = [dd * (kk - 1) // 2 for kk, dd in zip(k, d)] if same else p
        if all(extent(n, kk, ss, pp, dd) >= 1
               for n, kk, ss, pp, dd in zip((case["H"], case["W"]), k, s, pads, d)):
            break
    layer.update(kernel=k, stride=s, padding=p, dilation=d)
    return layer


def draw_pool(rng, case, kind):
    """A max_pool2d or avg_pool2d layer's arguments: padding at most half the kernel."""
    while True:
        k = pair(rng, 1, 4)
        if k != (1, 1):
            break
    s = None if rng.random() < 0.25 else pair(rng, 1, 3)   # None: the default, the kernel
    p = tuple(rng.randint(0, kk // 2) for kk in k)
    return dict(kind=kind, cin=rng.randint(1, 3), kernel=k, stride=s, padding=p)


def draw_batchnorm(rng):
    return dict(kind="batchnorm", cin=rng.randint(1, 4), momentum=rng.choice([None, 0.1, 0.3, 0.5]),
                eps=rng.choice([None, 1e-5, 1e-3]))


THEMES = ["conv", "conv_same", "max_pool2d", "conv", "avg_pool2d", "batchnorm", "conv_same", "conv"]


def draw_case(seed, index):
    """Case INDEX of the run drawn from SEED (the same whatever other cases are run)."""
    rng = random.Random(seed * 1000003 + index)
    H = rng.choice([5, 7, 9, 11])
    W = rng.choice([w for w in (5, 7, 9, 11, 13) if w != H])
    case = dict(index=index, seed=seed, H=H, W=W, batch=rng.randint(2, 4), steps=rng.randint(1, 2),
                lr=rng.choice([0.05, 0.1, 0.2]), outputs=rng.randint(2, 4),
                loss=rng.choice(["cross_entropy", "mse"]), init_seed=rng.randint(0, 1000))
    theme = THEMES[index % len(THEMES)]
    if theme.startswith("conv"):
        layer = draw_conv(rng, case, theme == "conv_same")
    elif theme == "batchnorm":
        layer = draw_batchnorm(rng)
    else:
        layer = draw_pool(rng, case, theme)
    case["layer"] = layer
    layer["as_list"] = rng.random() < 0.3    # [3, 3] rather than 3
    # The convolution in front: always before pooling (whose input gradient must reach a
    # parameter) and often before the others; bias-free before a batchnorm, whose shift
    # makes that bias's gradient zero. A 1x1 one before max pooling leaves its ties
    # harmless: tied values there come from equal pixels, whose gradient to the weight is
    # the same whichever of them takes it (cgc splits a tie evenly, PyTorch gives it to
    # the first).
    if theme in ("max_pool2d", "avg_pool2d") or rng.random() < 0.6:
        k = 1 if theme != "batchnorm" or rng.random() < 0.5 else 3
        # Two input channels at least before a batchnorm: each of its channels is then no
        # mere multiple of one input channel, whose weight's gradient batchnorm's scale
        # invariance would make zero (both sides would step on rounding noise).
        cin = rng.randint(2 if theme == "batchnorm" else 1, 3)
        case["pre"] = dict(cin=cin, kernel=k, padding=k // 2, bias=theme != "batchnorm")
        case["cin"] = case["pre"]["cin"]
    else:
        case["pre"] = None
        case["cin"] = layer["cin"]
    return case


# ---- the model as cgc's language writes it ----

def window_arg(v, as_list=False):
    """A window argument: a number where both axes agree (unless AS_LIST), else [h, w]."""
    if isinstance(v, str):
        return f'"{v}"'
    h, w = v
    return str(h) if h == w and not as_list else f"[{h}, {w}]"


def layer_text(layer, src):
    kind = layer["kind"]
    def arg(v):
        return window_arg(v, layer["as_list"])
    if kind == "conv2d":
        args = [src, str(layer["out"]), arg(layer["kernel"])]
        if layer["stride"] != (1, 1):
            args.append(f"stride = {arg(layer['stride'])}")
        if layer["padding"] != (0, 0):
            args.append(f"padding = {arg(layer['padding'])}")
        if layer["dilation"] != (1, 1):
            args.append(f"dilation = {arg(layer['dilation'])}")
        if layer["groups"] != 1:
            args.append(f"groups = {layer['groups']}")
        if not layer["bias"]:
            args.append("bias = false")
    elif kind == "batchnorm":
        args = [src] + [f"{key} = {layer[key]!r}" for key in ("momentum", "eps") if layer[key] is not None]
    else:
        args = [src, arg(layer["kernel"])]
        if layer["stride"] is not None:
            args.append(f"stride = {arg(layer['stride'])}")
        if layer["padding"] != (0, 0):
            args.append(f"padding = {arg(layer['padding'])}")
    return f"{kind}({', '.join(args)})"


def describe(case):
    """One line: the layer's call as the model writes it, the input and the run."""
    pre = case["pre"]
    front = f"conv2d({pre['kernel']}) -> " if pre else ""
    return (f"x[{case['batch']}, {case['cin']}, {case['H']}, {case['W']}] -> {front}"
            f"{layer_text(case['layer'], 'p' if pre else 'x')}, {case['loss']}, {case['steps']} step(s)")


def model_text(case, data):
    """The .net file of CASE with DATA as the train block's data."""
    pre, layer = case["pre"], case["layer"]
    lines = [f"# Case {case['index']} of tests/torch_image_oracle.py --seed {case['seed']} (its --write-models "
             "writes it):",
             f"# {describe(case)}",
             f"model img_{case['seed']}_{case['index']} {{",
             f"    input x: f32[N, {case['cin']}, {case['H']}, {case['W']}]",
             "    input y: i32[N]" if case["loss"] == "cross_entropy" else "    input y: f32[N, 1]"]
    src = "x"
    if pre:
        lines.append(f"    p = conv2d(x, {layer['cin']}, {pre['kernel']}, padding = {pre['padding']}"
                     f"{'' if pre['bias'] else ', bias = false'})")
        src = "p"
    lines += [f"    h = {layer_text(layer, src)}",
              f"    out = linear(flatten(h), {case['outputs']})",
              "    output out",
              f"    loss {case['loss']}(out, y)",
              "}",
              "train {",
              f"    data = {data}",
              f"    batch = {case['batch']}",
              f"    steps = {case['steps']}",
              f"    optimizer = sgd(lr = {case['lr']})",
              "    shuffle = false",
              "    precision = fp32",
              f"    seed = {case['init_seed']}",
              "}"]
    return "\n".join(lines) + "\n"


# ---- the same model in PyTorch ----

def torch_layer(layer, p, v, training=True):
    kind = layer["kind"]
    if kind == "conv2d":
        return F.conv2d(v, p["h.weight"], p.get("h.bias"), stride=layer["stride"], padding=layer["padding"],
                        dilation=layer["dilation"], groups=layer["groups"])
    if kind == "max_pool2d":
        return F.max_pool2d(v, layer["kernel"], stride=layer["stride"], padding=layer["padding"])
    if kind == "avg_pool2d":
        return F.avg_pool2d(v, layer["kernel"], stride=layer["stride"], padding=layer["padding"])
    momentum = layer["momentum"] if layer["momentum"] is not None else 0.1
    eps = layer["eps"] if layer["eps"] is not None else 1e-5
    return F.batch_norm(v, p["h.running_mean"], p["h.running_var"], p["h.weight"], p["h.bias"], training,
                        momentum, eps)


def torch_body(case, p, x):
    """The layer under test's output (the input to flatten)."""
    pre = case["pre"]
    if pre:
        x = F.conv2d(x, p["p.weight"], p.get("p.bias"), padding=pre["padding"])
    return torch_layer(case["layer"], p, x)


def torch_loss(case, out, y):
    if case["loss"] == "cross_entropy":
        return F.cross_entropy(out, y)
    return ((out - y) ** 2).mean()    # mse after broadcasting [N, K] against [N, 1]


def train_torch(case, init, buffers, x_all, y_all):
    """CASE's SGD steps from INIT: the final parameters and buffers, and the mean loss."""
    params = {k: torch.tensor(v.copy(), requires_grad=True) for k, v in init.items()}
    running = {k: torch.tensor(v.copy()) for k, v in buffers.items()}
    opt = torch.optim.SGD(list(params.values()), lr=case["lr"])
    losses = []
    b = case["batch"]
    for step in range(case["steps"]):
        opt.zero_grad()
        x, y = x_all[step * b:(step + 1) * b], y_all[step * b:(step + 1) * b]
        p = {**params, **running}
        h = torch_body(case, p, x)
        out = F.linear(h.flatten(1), p["out.weight"], p["out.bias"])
        loss = torch_loss(case, out, y)
        loss.backward()
        losses.append(loss.item())
        opt.step()
    final = {k: v.detach().numpy() for k, v in {**params, **running}.items()}
    return final, float(np.mean(losses))


def torch_flat_width(case, init, buffers, x_all):
    """The width flatten gives the layer's output in PyTorch."""
    with torch.no_grad():
        p = {k: torch.tensor(v.copy()) for k, v in {**init, **buffers}.items()}
        return int(torch_body(case, p, x_all[:case["batch"]]).flatten(1).shape[1])


# ---- data ----

def write_idx(directory, case, rng):
    """IDX files of batch * steps samples; returns them as the model's inputs."""
    n = case["batch"] * case["steps"]
    pixels = rng.integers(0, 256, size=(n, case["cin"] * case["H"], case["W"]), dtype=np.uint8)
    classes = case["outputs"] if case["loss"] == "cross_entropy" else 4
    labels = rng.integers(0, classes, size=n, dtype=np.uint8)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "train-images-idx3-ubyte"), "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, case["cin"] * case["H"], case["W"]) + pixels.tobytes())
    with open(os.path.join(directory, "train-labels-idx1-ubyte"), "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + labels.tobytes())
    x = torch.tensor(pixels.reshape(n, case["cin"], case["H"], case["W"]).astype(np.float32) * PIXEL_SCALE)
    if case["loss"] == "cross_entropy":
        return x, torch.tensor(labels.astype(np.int64))
    return x, torch.tensor(labels.astype(np.float32).reshape(n, 1))


# ---- one case ----

def run_cgc(cgc, net, save):
    r = subprocess.run([cgc, net, "--device", "cpu", "-q", "--save", save, "--metrics", save + ".jsonl"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None, None, r.stderr.strip().splitlines()[:3]
    with open(save + ".jsonl") as f:
        loss = json.loads(f.read().splitlines()[-1])["train_loss"]
    return load_safetensors(save)[0], loss, None


def compare_tensors(case, got, want, init):
    """(worst name, worst error, problems): every tensor of WANT against cgc's GOT."""
    problems, worst = [], ("", 0.0)
    for name, w in want.items():
        g = got.get(name)
        if g is None or g.shape != w.shape:
            problems.append(f"{name}: cgc {None if g is None else list(g.shape)} torch {list(w.shape)}")
            continue
        err = rel_error(g, w)
        if name in init:   # a parameter: its update too
            # relative to the larger of the new and the initial weight: a step that
            # nearly cancels the weight leaves the rounding of the two
            err = float(np.linalg.norm(g - w) / max(np.linalg.norm(w), np.linalg.norm(init[name]), 1e-30))
            dw, dg = w.astype(np.float64) - init[name], g.astype(np.float64) - init[name]
            upd = float(np.linalg.norm(dg - dw) / max(np.linalg.norm(dw), 1e-30))
            # new - initial carries the rounding of new (2^-24 of the weight) undivided
            floor = 4e-7 * np.linalg.norm(w) / max(np.linalg.norm(dw), 1e-30)
            if upd > UPDATE_RTOL + floor:
                problems.append(f"{name} update rel {upd:.1e}")
        if err > PARAM_RTOL:
            problems.append(f"{name} rel {err:.1e}")
        worst = max(worst, (name, err), key=lambda t: t[1])
    tracked = got.get("h.num_batches_tracked")
    if case["layer"]["kind"] == "batchnorm" and (tracked is None or float(tracked) != case["steps"]):
        problems.append(f"h.num_batches_tracked {tracked} != {case['steps']}")
    return worst, problems


def check_case(cgc, case, work):
    """Runs CASE on both sides; returns the problems found (empty: it agrees)."""
    d = os.path.join(work, f"case{case['index']}")
    x_all, y_all = write_idx(d, case, np.random.default_rng(case["seed"] * 7919 + case["index"]))
    net = os.path.join(d, "model.net")
    with open(net, "w") as f:
        f.write(model_text(case, f'idx("{d}", scale = {PIXEL_SCALE!r})'))
    plist = params_of(cgc, net, [])
    init = {name: init_tensor(case["init_seed"], i, shape, kind, bound).astype(np.float64)
            for i, name, shape, kind, bound in plist}
    buffers = buffers_of(cgc, net, [])
    init32 = {k: v.astype(np.float32) for k, v in init.items()}
    width = torch_flat_width(case, init32, buffers, x_all)
    cgc_width = dict((name, shape) for _, name, shape, _, _ in plist)["out.weight"][1]
    if width != cgc_width:
        return [f"layer output: cgc flattens to {cgc_width} values, torch to {width}"], None
    got, cgc_loss, err = run_cgc(cgc, net, os.path.join(d, "out.st"))
    if err:
        return ["cgc failed: " + " / ".join(err)], None
    want, loss = train_torch(case, init32, buffers, x_all, y_all)
    worst, problems = compare_tensors(case, got, want, init)
    loss_err = abs(cgc_loss - loss) / max(abs(loss), 1e-30)
    if loss_err > LOSS_RTOL:
        problems.append(f"train loss cgc {cgc_loss:.7g} torch {loss:.7g}")
    return problems, f"worst {worst[0]} rel {worst[1]:.1e}, loss rel {loss_err:.1e}, {len(want)} tensors"


# ---- refusals: layers the language does not accept ----

REFUSED = [
    ("padding = \"same\" with stride 2", "conv2d(x, 2, 3, stride = 2, padding = \"same\")"),
    ("padding = \"same\" with an even extent", "conv2d(x, 2, [3, 2], padding = \"same\")"),
    ("padding = \"same\" with dilation 3 on an even kernel", "conv2d(x, 2, 4, dilation = [2, 3], padding = \"same\")"),
    ("groups not dividing the channels", "conv2d(x, 4, 3, groups = 4)"),
    ("a dilated kernel larger than the padded input", "conv2d(x, 2, 3, dilation = [5, 1], padding = 1)"),
    ("pooling padding more than half the kernel", "max_pool2d(x, [3, 2], padding = [1, 2])"),
    ("a pooling window larger than the input", "avg_pool2d(x, [9, 2])"),
]


def check_refusal(cgc, work, name, call):
    """CALL on an f32[N, 2, 7, 9] image must be a located error (FILE:LINE:COL: error:)."""
    net = os.path.join(work, "refused.net")
    with open(net, "w") as f:
        f.write("model refused {\n    input x: f32[N, 2, 7, 9]\n    input y: i32[N]\n"
                f"    h = {call}\n    out = linear(flatten(h), 2)\n    output out\n"
                "    loss cross_entropy(out, y)\n}\n")
    r = subprocess.run([cgc, net, "--check", "--arch", "none"], capture_output=True, text=True)
    ok = r.returncode == 1 and f"{net}:4:" in r.stderr and ": error: " in r.stderr
    print(f"{'ok  ' if ok else 'FAIL'} refused: {name}: {call}"
          + ("" if ok else f" (exit {r.returncode}: {r.stderr.strip()[:200]!r})"))
    return ok


# ---- main ----

def write_models(cases, directory):
    os.makedirs(directory, exist_ok=True)
    for case in cases:
        path = os.path.join(directory, f"img_{case['seed']}_{case['index']}.net")
        with open(path, "w") as f:
            f.write(model_text(case, "synthetic(samples = 64)"))
        print(f"{path}: {describe(case)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cgc", nargs="?", default=os.path.join(ROOT, "build", "cgc"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--only", type=int, nargs="+", help="run only these case indices")
    ap.add_argument("--write-models", metavar="DIR", help="write the models to DIR instead of training")
    ap.add_argument("-v", "--verbose", action="store_true", help="print each failing case's model")
    args = ap.parse_args()
    cgc = os.path.abspath(args.cgc)
    indices = args.only if args.only else range(args.cases)
    cases = [draw_case(args.seed, i) for i in indices]
    if args.write_models:
        write_models(cases, args.write_models)
        return 0
    torch.set_num_threads(1)
    failed = 0
    with tempfile.TemporaryDirectory() as work:
        for case in cases:
            problems, detail = check_case(cgc, case, work)
            print(f"{'FAIL' if problems else 'ok  '} case {case['index']:2d}: {describe(case)}: "
                  + ("; ".join(problems) if problems else detail), flush=True)
            if problems and args.verbose:
                print(model_text(case, "synthetic(samples = 64)"))
            failed += bool(problems)
        refused = sum(not check_refusal(cgc, work, name, call) for name, call in REFUSED)
    print(f"{len(cases) - failed} of {len(cases)} cases agree with PyTorch {torch.__version__} "
          f"(seed {args.seed}); {len(REFUSED) - refused} of {len(REFUSED)} malformed layers refused")
    return 1 if failed or refused else 0


if __name__ == "__main__":
    sys.exit(main())
