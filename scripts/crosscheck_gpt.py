#!/usr/bin/env python3
"""Cross-check of models/gpt.net's training against PyTorch (ctest crosscheck_gpt).

cgc trains models/gpt.net in fp32 on the CPU for 50 AdamW steps and saves it; PyTorch
trains the same architecture, written here as a PyTorch user writes a GPT (embeddings,
F.layer_norm, scaled dot-product attention with a causal mask, F.gelu, F.cross_entropy
over every position), from the same initial weights on the same text windows, with
torch.optim.AdamW. Checked: every parameter's gradient at step 0 within 1e-4 of PyTorch's
relative to its norm (cgc's from a run of one step: Adam's first moment is then (1 -
beta1) times the gradient); the loss of each step within 1e-5 relative (cgc's from
--metrics-every 1); after the 50 steps, every parameter and both Adam moments within 1e-4;
and --generate from the trained weights (cgc's decode graph and KV cache, one position at
a time) against PyTorch's forward over the whole context: each logit row within 1e-4
relative to its norm (cgc's from --logits), the same bytes drawn.

Both sides are reproduced from the seed: the initial weights (Philox, base/rng.c: uniform
for linear layers, Box-Muller normals for embeddings) and the data (data.c: the epoch's
Fisher-Yates order, the text windows' phase), so nothing of cgc's is read but its
checkpoints and step losses.

    /usr/bin/python3 scripts/crosscheck_gpt.py build/cgc [STEPS]   (default 50)
    /usr/bin/python3 scripts/crosscheck_gpt.py build/cgc --full   (PyTorch's own whole run:
        its test loss and time, for BENCHMARKS.md; nothing compared)
Needs numpy, torch (python3-torch) and Debian's fortunes. Exits 77 when one is missing.
"""
import json
import math
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from crosscheck_torch import ROOT, compare, init_tensor, params_of, philox, rel_error, run_cgc  # noqa: E402

RNG_INIT, RNG_SHUFFLE, RNG_TEXT, RNG_SAMPLE = 1, 2, 4, 5
NET = os.path.join(ROOT, "models", "gpt.net")
TEXT = "/usr/share/games/fortunes/cookie"
SEED, CONTEXT, BATCH, LAYERS, HEADS, BETA1 = 1, 64, 12, 4, 4, 0.9
PROMPT, GENERATED, SAMPLINGS = "Q: What is", 80, ((0, 0), (0.8, 40))   # (temperature, top-k)


def below(seed, stream, counters, n):
    """base/rng.c's rng_below for each counter: the top 64 bits of words 0:1 times N."""
    w0, w1 = philox(seed, stream, counters, words=2)
    x = (w0 << np.uint64(32)) | w1
    return [(int(v) * int(m)) >> 64 for v, m in zip(x, np.broadcast_to(n, x.shape))]


def normal_tensor(seed, index, shape, std):
    """runtime/cpu/exec.c's IR_INIT_NORMAL: Box-Muller on words 0 and 1, in double."""
    n = int(np.prod(shape))
    counters = (np.uint64(index) << np.uint64(40)) + np.arange(n, dtype=np.uint64)
    w0, w1 = philox(seed, RNG_INIT, counters, words=2)
    u1 = ((w0 >> np.uint64(8)).astype(np.float64) + 1.0) / 16777216.0
    u2 = (w1 >> np.uint64(8)).astype(np.float64) / 16777216.0
    return (np.sqrt(-2.0 * np.log(u1)) * np.cos(6.283185307179586 * u2) * std).astype(np.float32).reshape(shape)


def initial_weights():
    weights = {}
    for index, name, shape, kind, value in params_of(os.environ["CGC"], NET, []):
        if kind == "normal":
            weights[name] = normal_tensor(SEED, index, shape, value or 1.0)
        else:
            weights[name] = init_tensor(SEED, index, shape, kind, value)
    return weights


def splits():
    """The corpus as data.c splits it: the training bytes, the test bytes."""
    data = np.frombuffer(open(TEXT, "rb").read(), np.uint8)
    return data[:len(data) - len(data) // 10], data[len(data) - len(data) // 10:]


def training_windows(steps):
    """The first STEPS batches, epoch after epoch, as data.c cuts and orders them: (tokens,
    next)."""
    train, w = splits()[0], CONTEXT + 1
    n = len(train) // w
    if n > 1 and len(train) - n * w < w - 1:
        n -= 1
    span, per_epoch = min(len(train) - n * w, w - 1), n // BATCH
    for epoch in range(-(-steps // per_epoch)):
        order = list(range(n))
        draws = below(SEED, RNG_SHUFFLE, (np.uint64(epoch) << np.uint64(40)) + np.arange(n - 1, dtype=np.uint64),
                      np.arange(n, 1, -1, dtype=np.uint64))
        for k, j in enumerate(draws):      # Fisher-Yates from the back, as data_order
            i = n - 1 - k
            order[i], order[j] = order[j], order[i]
        phase = below(SEED, RNG_TEXT, np.full(1, epoch, dtype=np.uint64), np.uint64(span + 1))[0] if span > 0 else 0
        for s in range(min(per_epoch, steps - epoch * per_epoch)):
            rows = [phase + r * w for r in order[s * BATCH:(s + 1) * BATCH]]
            win = torch.tensor(np.stack([train[r:r + w] for r in rows]).astype(np.int64))
            yield win[:, :-1], win[:, 1:]


def test_loss(params):
    """The mean loss over every position of the test split's windows, in order."""
    test, w = splits()[1], CONTEXT + 1
    win = torch.tensor(np.stack([test[r * w:(r + 1) * w] for r in range(len(test) // w)]).astype(np.int64))
    with torch.no_grad():
        return F.cross_entropy(gpt_forward(params, win[:, :-1]).reshape(-1, 256), win[:, 1:].reshape(-1)).item()


def full_run(steps):
    """--full: PyTorch's own run of STEPS steps (models/gpt.net's 1,974 by default) from
    the same start on the same windows: its test loss and time; compares nothing."""
    import time
    torch.set_num_threads(2)
    params = {k: torch.tensor(v.copy(), requires_grad=True) for k, v in initial_weights().items()}
    opt = torch.optim.AdamW(list(params.values()), lr=1e-3, weight_decay=0.1, betas=(BETA1, 0.999))
    start, losses = time.perf_counter(), []
    for i, (tokens, nxt) in enumerate(training_windows(steps)):
        opt.zero_grad()
        loss = F.cross_entropy(gpt_forward(params, tokens).reshape(-1, 256), nxt.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    seconds = time.perf_counter() - start
    print(f"PyTorch {torch.__version__}, {steps} steps in {seconds:.1f} s ({torch.get_num_threads()} threads): last 282 steps' "
          f"train loss {np.mean(losses[-282:]):.4f}, test loss {test_loss(params):.4f}")
    return 0


def gpt_forward(p, tokens):
    def ln(name, v):
        return F.layer_norm(v, v.shape[-1:], p[name + ".weight"], p[name + ".bias"], 1e-5)

    def lin(name, v):
        return F.linear(v, p[name + ".weight"], p.get(name + ".bias"))

    n, t = tokens.shape
    h = p["tok.weight"][tokens] + p["pos.weight"][torch.arange(t)]
    mask = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
    for i in range(1, LAYERS + 1):
        a = ln(f"a{i}n", h)
        q, k, v = (lin(f"{x}{i}", a).view(n, t, HEADS, -1).transpose(1, 2) for x in "qkv")
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        att = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v
        h = h + lin(f"o{i}", att.transpose(1, 2).reshape(n, t, -1))
        h = h + lin(f"g{i}", F.gelu(lin(f"f{i}", ln(f"m{i}n", h))))
    return lin("logits", ln("hf", h))


def cgc_runs(cgc, steps):
    """cgc's gradients at step 0 (Adam's first moment after one step is (1 - beta1) times
    the gradient), and after STEPS steps its tensors, final record, each step's loss, and
    what --generate writes from them for each of SAMPLINGS."""
    with tempfile.TemporaryDirectory() as work:
        first, _ = run_cgc(cgc, NET, ["--steps", "1", "--shuffle", "true"], work, "gpt1")
        got, last = run_cgc(cgc, NET, ["--steps", str(steps), "--shuffle", "true", "--metrics-every", "1"],
                            work, "gpt")
        with open(os.path.join(work, "gpt.jsonl")) as f:
            records = [json.loads(line) for line in f]
        texts = []
        for i, (t, k) in enumerate(SAMPLINGS):
            logits = os.path.join(work, f"logits{i}.npy")
            out = subprocess.run([cgc, NET, "--resume", os.path.join(work, "gpt.st"), "--generate", PROMPT,
                                  "--tokens", str(GENERATED), "--temperature", str(t), "--top-k", str(k),
                                  "--logits", logits], check=True, capture_output=True).stdout
            texts.append((out, np.load(logits)))
    grads = {k[len("cgc.adam.exp_avg."):]: v / (1 - BETA1) for k, v in first.items()
             if k.startswith("cgc.adam.exp_avg.")}
    losses = [r["train_loss"] for r in records if "epoch" not in r]
    return grads, got, last, losses, texts


def generate_torch(weights, temperature, top_k):
    """runtime/generate.c's sampling, with PyTorch's logits of cgc's WEIGHTS: the context
    (the prompt's last CONTEXT bytes; when full, its last CONTEXT / 2 before a byte is
    added) from position 0, the byte drawn by rng_uniform(SEED, RNG_SAMPLE, i) from the K
    likeliest (the lower byte first among equals), exp((logit - max) / temperature) each;
    temperature 0 takes the likeliest. The bytes written, and each draw's logits."""
    p = {k: torch.tensor(v) for k, v in weights.items() if not k.startswith("cgc.")}
    ctx, out, rows = list(PROMPT.encode())[-CONTEXT:], bytearray(PROMPT.encode()), []
    for i in range(GENERATED):
        tokens = torch.tensor([ctx + [0] * (CONTEXT - len(ctx))])
        with torch.no_grad():
            logits = gpt_forward(p, tokens)[0, len(ctx) - 1].double().numpy()
        rows.append(logits)
        order = sorted(range(256), key=lambda b: (-logits[b], b))
        if temperature == 0:
            b = order[0]
        else:
            top = order[:top_k or 256]
            w = np.exp((logits[top] - logits[top[0]]) / temperature)
            u = float((philox(SEED, RNG_SAMPLE, [i]) >> np.uint64(8)).astype(np.float32)[0]
                      * np.float32(1 / 16777216)) * w.sum()
            b = top[-1]
            for j, weight in enumerate(w[:-1]):
                u -= weight
                if u < 0:
                    b = top[j]
                    break
        if len(ctx) == CONTEXT:
            ctx = ctx[-(CONTEXT // 2):]
        ctx.append(b)
        out.append(b)
    return bytes(out) + b"\n", np.array(rows)


def compare_generated(texts, weights):
    """What --generate wrote, byte for byte, and the logits it drew from (each row relative
    to its norm, within 1e-4), against the same sampling of PyTorch's logits."""
    ok = True
    for (t, k), (got, logits) in zip(SAMPLINGS, texts):
        want, rows = generate_torch(weights, t, k)
        same = got == want
        err = max(float(np.linalg.norm(a - b) / np.linalg.norm(b)) for a, b in zip(logits, rows)) \
            if logits.shape == rows.shape else math.inf
        ok &= same and err <= 1e-4
        at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        print(f"{'ok  ' if same and err <= 1e-4 else 'FAIL'} gpt.net, --generate {GENERATED} bytes at "
              f"temperature {t}, top-k {k}: {'the same bytes as PyTorch' if same else f'first differs at byte {at}'}, "
              f"logits within {err:.2g} of PyTorch's (at most 1e-4): {got[:60]!r}...")
    return ok


def compare_grads(cgc_grads, torch_grads, shift_free):
    """Every parameter's step-0 gradient within 1e-4 of PyTorch's, relative to its norm;
    the key biases' (zero but for rounding) within 1e-8 of zero on both sides."""
    worst = max(((k, rel_error(cgc_grads[k], g)) for k, g in torch_grads.items() if k not in shift_free),
                key=lambda kv: kv[1])
    noise = max(max(float(np.abs(cgc_grads[k]).max()), float(np.abs(torch_grads[k]).max())) for k in shift_free)
    ok = worst[1] <= 1e-4 and len(shift_free) == LAYERS and noise < 1e-8
    print(f"{'ok  ' if ok else 'FAIL'} gpt.net, gradients at step 0: worst {worst[0]} rel {worst[1]:.1e} "
          f"(limit 1e-04) of {len(torch_grads) - len(shift_free)}; the {len(shift_free)} key biases' "
          f"largest {noise:.1e} (limit 1e-08)")
    return ok


def compare_losses(cgc_losses, torch_losses):
    """Each step's loss within 1e-5 relative."""
    if len(cgc_losses) != len(torch_losses):
        print(f"FAIL gpt.net: cgc recorded {len(cgc_losses)} step losses, PyTorch took {len(torch_losses)} steps")
        return False
    errs = [abs(a - b) / abs(b) for a, b in zip(cgc_losses, torch_losses)]
    at = int(np.argmax(errs))
    ok = errs[at] <= 1e-5
    print(f"{'ok  ' if ok else 'FAIL'} gpt.net, the loss of each of {len(errs)} steps: worst at step {at + 1}, "
          f"cgc {cgc_losses[at]:.7f} torch {torch_losses[at]:.7f} (rel {errs[at]:.1e}, limit 1e-05); "
          f"step 1 {torch_losses[0]:.5f}, step {len(errs)} {torch_losses[-1]:.5f}")
    return ok


def main():
    full = "--full" in sys.argv
    args = [a for a in sys.argv[1:] if a != "--full"]
    cgc = os.path.abspath(args[0] if args else os.path.join(ROOT, "build", "cgc"))
    steps = int(args[1]) if len(args) > 1 else 1974 if full else 50
    if not os.path.exists(TEXT):
        print(f"skipped: {TEXT} not installed (apt-get install fortunes)")
        return 77
    os.environ["CGC"] = cgc
    if full:
        return full_run(steps)
    torch.set_num_threads(2)
    params = {k: torch.tensor(v.copy(), requires_grad=True) for k, v in initial_weights().items()}
    opt = torch.optim.AdamW(list(params.values()), lr=1e-3, weight_decay=0.1, betas=(BETA1, 0.999))
    losses, grads = [], None
    for tokens, nxt in training_windows(steps):
        opt.zero_grad()
        loss = F.cross_entropy(gpt_forward(params, tokens).reshape(-1, 256), nxt.reshape(-1))
        loss.backward()
        if grads is None:
            grads = {k: v.grad.detach().numpy().copy() for k, v in params.items()}
        opt.step()
        losses.append(loss.item())
    state = {f"{name}/{key}": opt.state[t][key].detach().numpy()
             for name, t in params.items() for key in ("exp_avg", "exp_avg_sq")}
    cgc_grads, got, last, cgc_losses, texts = cgc_runs(cgc, steps)
    final = {k: v.detach().numpy() for k, v in params.items()}
    # A key's bias adds the same q . b to every score of a query, which the softmax
    # takes away: its gradient is zero, both sides compute rounding noise (about 1e-11),
    # and Adam, dividing noise by noise, moves it by steps of lr in directions of its own.
    # Its gradient must be that noise on both sides; it is not compared otherwise.
    shift_free = [k for k in final if k.startswith("k") and k.endswith(".bias")]
    ok = compare_grads(cgc_grads, grads, shift_free)
    ok &= compare_losses(cgc_losses, losses)
    ok &= compare_generated(texts, got)
    for k in shift_free:
        del final[k], state[k + "/exp_avg"], state[k + "/exp_avg_sq"]
    ok &= compare(f"gpt.net, {steps} AdamW steps", got, last["train_loss"], final, state,
                  float(np.mean(losses)), 1e-4)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
