#!/usr/bin/env python3
"""cgc against PyTorch on models/gpt.net (the GPU machine's benchmark).

The model: 4 pre-norm blocks of causal multi-head attention (4 heads, width 128) and a
GELU MLP, token and learned positional embeddings, an untied output projection to the
256 byte values; batch 12, context 64, AdamW (lr 1e-3, weight decay 0.1); fp32, and bf16
(cgc: a copy of the file with precision = bf16; PyTorch: autocast bf16).

Runners (every run with its data already on the GPU):

  cgc eager, default, reduce-overhead, max-autotune
      bench_default.bench_cgc: `cgc NET --device cuda --mode MODE --steps S -v` on a copy
      of gpt.net in OUT whose text(...) names --text; the median, p10 and p90 of the
      device time of a step between CUDA events
  torch eager
      the same network written as a PyTorch user writes a GPT: nn.Embedding, nn.LayerNorm,
      nn.Linear, F.scaled_dot_product_attention(is_causal=True) (PyTorch's fastest
      attention for the shape: FlashAttention or memory-efficient), F.gelu,
      F.cross_entropy over every position, torch.optim.AdamW; TF32 off in fp32
  torch.compile default, torch.compile max-autotune
      the same run with its model wrapped by torch.compile(model, mode=...); the optimizer
      step stays eager, as in bench_default.py
  PyTorch: warm-up, then each step timed with CUDA events (bench_default.timed_steps_ms);
  its batches are random windows of the same corpus.

    python3 bench/bench_gpt.py --cgc build-gpu/cgc --text CORPUS --out OUT
Writes OUT/bench_gpt.json and OUT/bench_gpt.md after each runner, so that a run cut off
leaves what it measured. `--dry-run` runs every path on the CPU with a few steps (cgc
--device cpu, which reports no step time); its numbers mean nothing.
"""
import argparse
import json
import os
import re
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_default as bd  # noqa: E402
import bench_eager as be  # noqa: E402

LAYERS, HEADS, WIDTH, CONTEXT, BATCH, VOCAB = 4, 4, 128, 64, 12, 256


def attend(q, k, v):
    """Causal attention: PyTorch's fused kernel, or (torch 1.x, a dry run's Debian torch)
    the composition."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    t = q.shape[-2]
    s = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    mask = torch.triu(torch.ones(t, t, dtype=torch.bool, device=q.device), 1)
    return torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1) @ v


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.q, self.k, self.v, self.o = (nn.Linear(WIDTH, WIDTH) for _ in range(4))
        self.f, self.g = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, h):
        n, t, c = h.shape
        a = self.ln1(h)
        q, k, v = (lin(a).view(n, t, HEADS, c // HEADS).transpose(1, 2) for lin in (self.q, self.k, self.v))
        att = attend(q, k, v)
        h = h + self.o(att.transpose(1, 2).reshape(n, t, c))
        return h + self.g(F.gelu(self.f(self.ln2(h))))


class Gpt(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, WIDTH), nn.Embedding(CONTEXT, WIDTH)
        self.blocks = nn.Sequential(*(Block() for _ in range(LAYERS)))
        self.ln, self.head = nn.LayerNorm(WIDTH), nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, tokens):
        h = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        return self.head(self.ln(self.blocks(h)))


class Run:
    """One PyTorch training run of Gpt: AdamW, autocast bf16 when asked."""

    def __init__(self, bf16, device):
        torch.manual_seed(42)
        self.device, self.bf16 = device, bf16
        self.model = Gpt().to(device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3, weight_decay=0.1)

    def step(self, x, y):
        with torch.autocast(self.device, dtype=torch.bfloat16, enabled=self.bf16):
            logits = self.model(x)
        loss = F.cross_entropy(logits.float().view(-1, VOCAB), y.reshape(-1))
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss


def windows(path, count):
    """COUNT windows of CONTEXT + 1 bytes from the first nine tenths of the corpus, at
    positions drawn from a fixed seed: (tokens, next), int64."""
    data = torch.frombuffer(bytearray(open(path, "rb").read()), dtype=torch.uint8)
    train = data[:len(data) - len(data) // 10].long()
    g = torch.Generator().manual_seed(7)
    start = torch.randint(0, len(train) - CONTEXT - 1, (count,), generator=g)
    win = train[start[:, None] + torch.arange(CONTEXT + 1)]
    return win[:, :-1].contiguous(), win[:, 1:].contiguous()


def net_copy(text_path, bf16, out):
    """models/gpt.net with its text(...) naming TEXT_PATH (and precision = bf16 when asked),
    written to OUT."""
    with open(os.path.join(be.ROOT, "models", "gpt.net")) as f:
        text = f.read()
    text = re.sub(r'text\("[^"]*"', 'text("%s"' % os.path.abspath(text_path), text)
    if bf16:
        text = re.sub(r"(train\s*\{)", r"\1\n    precision = bf16", text, count=1)
    path = os.path.join(out, "gpt_bf16.net" if bf16 else "gpt.net")
    with open(path, "w") as f:
        f.write(text)
    return path


def write(a, res, rows):
    with open(os.path.join(a.out, "bench_gpt.json"), "w") as f:
        json.dump(res, f, indent=1)
    note = "DRY RUN on the CPU: these numbers check the script and mean nothing\n\n" if a.dry_run else ""
    text = (f"{note}device: {res['device']}, torch {res['torch']}; models/gpt.net, batch {BATCH}, "
            f"context {CONTEXT}\n\n| precision | runner | median ms/step | p10 | p90 | kernels per step |\n"
            "|---|---|---|---|---|---|\n" + "\n".join(rows))
    with open(os.path.join(a.out, "bench_gpt.md"), "w") as f:
        f.write(text + "\n")
    return text


def row(prec, runner, v):
    if "error" in v:
        return f"| {prec} | {runner} | {v['error']} | | | |"
    return (f"| {prec} | {runner} | {bd.ms(v.get('step_ms'))} | {bd.ms(v.get('p10_ms'))} | "
            f"{bd.ms(v.get('p90_ms'))} | {v.get('kernels_per_step', '-')} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cgc", required=True)
    ap.add_argument("--text", required=True, help="the corpus (Debian's fortunes' cookie)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--dry-run", action="store_true",
                    help="every path on the CPU with a few steps: checks this script, measures nothing")
    a = ap.parse_args()
    device = bd.bench_device(a, "bench_gpt")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    sizes = bd.Sizes(a.dry_run)
    train = windows(a.text, 4096)
    res = {"device": torch.cuda.get_device_name() if device == "cuda" else "CPU (dry run)",
           "torch": torch.__version__, "dry_run": a.dry_run}
    rows = []
    for prec in a.precisions.split(","):
        net, bf16, r = net_copy(a.text, prec == "bf16", a.out), prec == "bf16", {}
        res[prec] = r
        for mode in ("eager", "default", "reduce-overhead", "max-autotune"):
            r[f"cgc {mode}"] = bd.bench_cgc(a.cgc, net, mode, BATCH, sizes.cgc_steps, device,
                                            os.path.join(a.out, "none"), a.out, f"gpt_{prec}_{mode}")
            rows.append(row(prec, f"cgc {mode}", r[f"cgc {mode}"]))
            print(write(a, res, rows).splitlines()[-1], flush=True)
        for runner, compiled, cmode in (("torch eager", False, None),
                                        ("torch.compile default", True, None),
                                        ("torch.compile max-autotune", True, "max-autotune")):
            r[runner] = bd.bench_torch(BATCH, compiled, train, sizes, device,
                                       make_run=lambda batch, steps, dev: Run(bf16, dev),
                                       compile_mode=cmode)
            rows.append(row(prec, runner, r[runner]))
            print(write(a, res, rows).splitlines()[-1], flush=True)
    print(write(a, res, rows))


if __name__ == "__main__":
    main()
