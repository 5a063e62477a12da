#!/usr/bin/env python3
"""cgc against PyTorch on the image models (the GPU machine's benchmark).

Models, bf16 on both sides (cgc: the file with precision = bf16; PyTorch: torch.autocast
bf16), the file's batch and optimizer:

  cnn      models/cnn.net: two 3x3 convolutions with batch norm, ReLU and max pooling,
           two linear layers (dropout 0.3), AdamW, batch 64
  resnet   bench/models/resnet.net: a stem and three stages of two residual blocks
           (batch norm, stride-2 1x1 shortcuts), global average pooling, AdamW, batch 128

Runners (every run with the dataset already on the GPU):

  cgc default, cgc max-autotune
      bench_default.bench_cgc: `cgc NET --device cuda --mode MODE --steps S -v` on a copy of
      the file whose train block says precision = bf16 (in OUT); the median, p10 and p90
      of the device time of a step between CUDA events
  torch eager
      the same network with torch.nn (the parameter and state names the .net gives, so
      cgc's checkpoints load), torch.backends.cudnn.benchmark = True, the model and the
      batches in channels_last memory format, autocast bf16 (no loss scaler: bf16)
  torch.compile max-autotune
      the same run with torch.compile(model, mode="max-autotune"); the optimizer step stays
      eager, as in bench_default.py
  PyTorch: warm-up, then each step timed with CUDA events (bench_default.timed_steps_ms).

    python3 bench/bench_cnn.py --cgc build-gpu/cgc --data data/fashion-mnist --out OUT
Writes OUT/bench_cnn.json and OUT/bench_cnn.md. `--dry-run` runs every path on the CPU
with a few steps (cgc --device cpu, which reports no step time); its numbers mean nothing.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_default as bd  # noqa: E402
import bench_eager as be  # noqa: E402


def conv_bn(cin, cout, stride=1):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout))


class Cnn(nn.Module):
    """models/cnn.net."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(conv_bn(1, 32), nn.ReLU(), nn.MaxPool2d(2),
                                      conv_bn(32, 64), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten())
        self.head = nn.Sequential(nn.Linear(3136, 128), nn.ReLU(), nn.Dropout(0.3), nn.Linear(128, 10))

    def forward(self, x):
        return self.head(self.features(x))


class Block(nn.Module):
    """bench/models/resnet.net's basic block: two 3x3 convolutions with batch norm, the
    input added back (through a stride-2 1x1 convolution where the stage changes)."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.a, self.b = conv_bn(cin, cout, stride), conv_bn(cout, cout)
        self.short = None if stride == 1 else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.b(torch.relu(self.a(x)))
        return torch.relu(y + (x if self.short is None else self.short(x)))


class ResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(conv_bn(1, 32), nn.ReLU())
        self.blocks = nn.Sequential(Block(32, 32, 1), Block(32, 32, 1), Block(32, 64, 2),
                                    Block(64, 64, 1), Block(64, 128, 2), Block(128, 128, 1))
        self.head = nn.Linear(128, 10)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)).mean((2, 3)))


MODELS = {
    "cnn": ("models/cnn.net", 64, Cnn, 1e-3, 1e-4),
    "resnet": ("bench/models/resnet.net", 128, ResNet, 2e-3, 5e-4),
}


class Run:
    """One PyTorch training run: AdamW, bf16 autocast, channels_last, cudnn.benchmark."""

    def __init__(self, make, lr, wd, device):
        torch.manual_seed(42)
        self.device = device
        self.model = make().to(device).to(memory_format=torch.channels_last)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=lr, weight_decay=wd)
        self.loss_fn = nn.CrossEntropyLoss()

    def step(self, x, y):
        x = x.view(-1, 1, 28, 28).contiguous(memory_format=torch.channels_last)
        with torch.autocast(self.device, dtype=torch.bfloat16):
            loss = self.loss_fn(self.model(x), y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss


def bench_torch(key, compiled, train, sizes, device):
    """bench_default.bench_torch with this model's Run, torch.compile in max-autotune."""
    _, batch, make, lr, wd = MODELS[key]
    return bd.bench_torch(batch, compiled, train, sizes, device,
                          make_run=lambda batch, steps, device: Run(make, lr, wd, device),
                          compile_mode="max-autotune" if compiled else None)


def bf16_net(path, out):
    """A copy of the .net file PATH in OUT whose train block says precision = bf16."""
    import re
    with open(path) as f:
        text = f.read()
    if re.search(r"^\s*precision\s*=", text, re.M):
        text = re.sub(r"^(\s*precision\s*=\s*)\w+", r"\1bf16", text, flags=re.M)
    else:
        text = re.sub(r"(train\s*\{)", r"\1\n    precision = bf16", text, count=1)
    copy = os.path.join(out, os.path.basename(path).replace(".net", "_bf16.net"))
    with open(copy, "w") as f:
        f.write(text)
    return copy


def window_choices(out, name):
    """What max-autotune chose for each convolution's patches (the tune file's `window`
    lines: `patches`, `implicit:TILE+TILE` or `cudnn:ALGO+ALGO` and its time), from the
    run's log OUT/NAME.log,
    which names the tune file."""
    import re
    try:
        with open(os.path.join(out, f"{name}.log")) as f:
            m = re.search(r"the choices are in (\S+\.tune)", f.read())
        with open(m.group(1)) as f:
            return [" ".join(line.split()[2:]) for line in f if line.startswith("window ")]
    except (OSError, AttributeError):
        return []


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cgc", required=True)
    ap.add_argument("--data", required=True, help="directory with the Fashion-MNIST IDX files")
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default="cnn,resnet")
    ap.add_argument("--dry-run", action="store_true",
                    help="every path on the CPU with a few steps: checks this script, measures nothing")
    a = ap.parse_args()
    device = bd.bench_device(a, "bench_cnn")
    torch.backends.cudnn.benchmark = True
    sizes = bd.Sizes(a.dry_run)
    train = be.load_split(a.data, "train")
    res = {"device": torch.cuda.get_device_name() if device == "cuda" else "CPU (dry run)",
           "torch": torch.__version__, "dry_run": a.dry_run}
    rows, notes = [], []
    for key in a.models.split(","):
        path, batch = bf16_net(os.path.join(be.ROOT, MODELS[key][0]), a.out), MODELS[key][1]
        r = {}
        for mode in ("default", "max-autotune"):
            r[f"cgc {mode}"] = bd.bench_cgc(a.cgc, path, mode, batch, sizes.cgc_steps, device,
                                            a.data, a.out, f"cnn_{key}_{mode}")
        windows = window_choices(a.out, f"cnn_{key}_max-autotune")
        if "error" not in r["cgc max-autotune"]:
            r["cgc max-autotune"]["window_choices"] = windows
        notes.extend(f"{key}: convolution {i + 1}'s patches: {w}" for i, w in enumerate(windows))
        r["torch eager"] = bench_torch(key, False, train, sizes, device)
        r["torch.compile max-autotune"] = bench_torch(key, True, train, sizes, device)
        res[key] = r
        for runner, v in r.items():
            ms = bd.ms(v.get("step_ms")) if "error" not in v else v["error"]
            rows.append(f"| {key} | {batch} | {runner} | {ms} | {v.get('kernels_per_step', '-')} |")
    with open(os.path.join(a.out, "bench_cnn.json"), "w") as f:
        json.dump(res, f, indent=1)
    note = "DRY RUN on the CPU: these numbers check the script and mean nothing\n\n" if a.dry_run else ""
    text = (f"{note}device: {res['device']}, torch {res['torch']}, bf16\n\n"
            "| model | batch | runner | median ms/step | kernels per step |\n|---|---|---|---|---|\n"
            + "\n".join(rows)
            + ("\n\nmax-autotune's choices for the convolutions (the tune file's window lines):\n"
               + "\n".join(f"- {n}" for n in notes) if notes else ""))
    with open(os.path.join(a.out, "bench_cnn.md"), "w") as f:
        f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
