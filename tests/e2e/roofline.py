#!/usr/bin/env python3
"""The performance model (codegen/perf.h) against closed formulas (ctest e2e_roofline).

1. A two-layer model in eager mode at a batch of 65,536 rows, fp32: --stats' predicted
   launches hold the five GEMMs autodiff makes, each 2mnk FLOPs, the first reading its
   operands and writing its product once (4 bytes an element), the first weight's
   gradient (8 tiles of C) split along K to fill the SMs, its partials read and written
   once more; relu's launch reads and
   writes [N, 512] once, its gradient reads two and writes one, the bias gradient sums
   [N, 512] into parts enough to fill the largest part's SMs, then those into [512]. Every launch's time on every part is the roofline's, computed
   here from the datasheets' figures typed again (bandwidth, f32 peak, SMs), the threads
   or tiles against the SMs, and the 2 us floor; the step is their sum.
2. Attention at T = 256, 4 heads of width 32, batch 2, in default mode: the fused
   forward launch's FLOPs are its two products' 4 N H T^2 D (and a few an element of the
   scores for the scale, mask and softmax, under 5% more), the backward's four products'
   8 N H T^2 D; a causal kernel's only the unmasked share, (T + 1) / (2T) of them; in bf16
   at the tensor cores' peak (989.4 TFLOP/s on an H200), in fp32 at the CUDA cores' (67).
3. A loss that is one mean over 4M elements (mse of [N, 64] at N = 65,536): its single
   row shared among enough blocks to fill the largest part (132 SMs of 1024 threads: 528
   blocks of 256), each writing its part in double, then a launch adding the parts.
4. --explain shows the model (its parts, the shares, the costliest launches) for every
   model of models/ and bench/models/, and the wide MLP's split sums.

    python3 tests/e2e/roofline.py build/cgc ROOT
"""
import json
import os
import subprocess
import sys
import tempfile

failures = 0
N = 65536
MODEL = f"""model r {{
    input x: f32[N, 256]
    input y: i32[N]
    h = relu(linear(x, 512))
    logits = linear(h, 10)
    output logits
    loss cross_entropy(logits, y)
}}
train {{
    batch = {N}
}}
"""
# name: (SMs, bytes/s, f32 FLOP/s): NVIDIA's datasheets, dense
PARTS = {"A100 SXM 40GB": (108, 1555e9, 19.5e12), "A100 SXM 80GB": (108, 2039e9, 19.5e12),
         "H100 SXM": (132, 3350e9, 67e12), "H200 SXM": (132, 4800e9, 67e12)}
HALF_PEAK = {"A100 SXM 40GB": 312e12, "A100 SXM 80GB": 312e12, "H100 SXM": 989.4e12, "H200 SXM": 989.4e12}


def check(ok, what):
    global failures
    print(("ok   " if ok else "FAIL ") + what)
    failures += not ok


def close(a, b):
    return abs(a - b) <= 1e-6 * max(abs(a), abs(b), 1e-12)


def roofline(launch, part, peak=None):
    sms, bandwidth, f32 = PARTS[part]
    peak = peak or f32
    ideal = max((launch["bytes_read"] + launch["bytes_written"]) / bandwidth, launch["flops"] / peak)
    share = launch["blocks"] / sms if launch["kernel"] == "GEMM" else launch["threads"] / (sms * 1024)
    return max(ideal / min(share, 1), 2e-6)


def closed_forms(cgc, work):
    with open(f"{work}/r.net", "w") as f:
        f.write(MODEL)
    r = subprocess.run([cgc, "r.net", "--check", "--arch", "none", "--mode", "eager", "--stats", "r.json", "-q"],
                       cwd=work, capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, f"--stats of the two-layer model {r.stderr[-300:]}")
    if r.returncode:
        return
    pred = json.load(open(f"{work}/r.json"))["predicted"]
    launches, parts = pred["launches"], [p["name"] for p in pred["parts"]]
    check(pred["graph"] == "train" and pred["batch"] == N and parts == list(PARTS),
          f"the train graph at batch {N}, on {parts}")
    gemms = sorted(l["flops"] for l in launches if l["kernel"] == "GEMM")
    want = sorted([2 * N * 256 * 512] * 2 + [2 * N * 512 * 10] * 3)
    check(gemms == want, f"five GEMMs of 2mnk FLOPs: {gemms}")
    first = [l for l in launches if l["kernel"] == "GEMM" and l["flops"] == 2 * N * 256 * 512 and l["line"] == 4]
    check(any(l["bytes_read"] == 4 * (N * 256 + 512 * 256) and l["bytes_written"] == 4 * N * 512
              and l["blocks"] == (N // 128) * (512 // 128) for l in first),
          f"x @ W1^T reads x and W1 once, writes [N, 512] once, in 128 x 128 tiles: "
          f"{[(l['bytes_read'], l['bytes_written'], l['blocks']) for l in first]}")
    # W1's gradient, [512, 256] summed over the batch: 8 tiles of C cannot fill 132 SMs,
    # so K (65,536) is split as cuBLAS would, into 17 parts (8 x 17 tiles >= 132; each at
    # least 512 long), the partial products written and read back once in f32
    splits = min(N // 512, -(-132 // 8))
    wgrad = [l for l in launches if l["kernel"] == "GEMM" and l["flops"] == 2 * N * 256 * 512 and l["line"] == 4
             and l["bytes_written"] != 4 * N * 512]
    partials = 4 * splits * 512 * 256
    check(len(wgrad) == 1 and splits == 17 and wgrad[0]["blocks"] == 8 * splits
          and wgrad[0]["bytes_read"] == 4 * (N * 512 + N * 256) + partials
          and wgrad[0]["bytes_written"] == 4 * 512 * 256 + partials,
          f"W1's gradient split along K in {splits} parts, {8 * splits} tiles, its partials once each way: "
          f"{[(l['bytes_read'], l['bytes_written'], l['blocks']) for l in wgrad]}")
    relu = [l for l in launches if l["what"] == "relu h"]
    check(len(relu) == 1 and relu[0]["bytes_read"] == 4 * N * 512 and relu[0]["bytes_written"] == 4 * N * 512
          and relu[0]["flops"] == N * 512, f"relu reads and writes [N, 512] once, a FLOP an element: {relu}")
    grad = [l for l in launches if l["kernel"].startswith("relu_grad")]
    check(len(grad) == 1 and (grad[0]["bytes_read"], grad[0]["bytes_written"]) == (8 * N * 512, 4 * N * 512),
          f"relu's gradient reads two [N, 512] and writes one: "
          f"{[(l['bytes_read'], l['bytes_written']) for l in grad]}")
    # The bias gradient's 16 tiles of 32 columns (too few columns for tiles of four a
    # lane) would fill 16 of the largest part's 132 SMs: each tile's rows are split 33
    # ways (528 blocks of 256 threads, 1024 an SM), whose sums in double a second launch
    # adds up.
    tiles = 512 // 32
    split = -(-132 * 1024 // 256 // tiles)
    bias = [l for l in launches if l["kernel"].startswith("reduce_to") and l["line"] == 4]
    sums = [l for l in launches if l["kernel"].startswith("sum_parts") and l["line"] == 4]
    check(len(bias) == 1 and (bias[0]["bytes_read"], bias[0]["bytes_written"], bias[0]["blocks"]) ==
          (4 * N * 512, 8 * split * 512, tiles * split) and bias[0]["bound"][-1] == "memory" and len(sums) == 1
          and (sums[0]["bytes_read"], sums[0]["bytes_written"]) == (8 * split * 512, 4 * 512),
          f"the bias gradient sums [N, 512] into {split} parts of [512] doubles in {tiles * split} blocks, "
          f"bound by memory on the H200, then the parts into [512]: "
          f"{[(l['bytes_read'], l['bytes_written'], l['blocks'], l['bound'][-1]) for l in bias + sums]}")
    bad = [(l["kernel"], k, l["seconds"][k], roofline(l, part)) for l in launches
           for k, part in enumerate(parts) if not close(l["seconds"][k], roofline(l, part))]
    check(not bad, f"{len(launches)} launches' times on {len(parts)} parts, the roofline's: {bad[:3]}")
    totals = [sum(l["seconds"][k] for l in launches) for k in range(len(parts))]
    check(all(close(p["step_s"], t) for p, t in zip(pred["parts"], totals)),
          f"each part's step, the sum of its launches: {[p['step_s'] for p in pred['parts']]}")


ATTENTION = """model a {{
    input x: f32[N, {t}, 128]
    q = linear(x, 128, bias = false)
    a = attention(q, q, q, heads = 4, causal = {causal})
    output a
    loss   mean(a)
}}
train {{
    data      = synthetic(samples = 4)
    batch     = 2
    precision = {precision}
}}
"""


def attention_forms(cgc, work):
    n, t, heads, d = 2, 256, 4, 32
    products = n * heads * t * t * d
    for causal, precision in (("true", "bf16"), ("false", "bf16"), ("true", "fp32")):
        with open(f"{work}/a.net", "w") as f:
            f.write(ATTENTION.format(t=t, causal=causal, precision=precision))
        r = subprocess.run([cgc, "a.net", "--check", "--arch", "none", "--mode", "default", "--stats", "a.json",
                            "-q"], cwd=work, capture_output=True, text=True, timeout=120)
        check(r.returncode == 0, f"--stats of attention, causal = {causal}, {precision} {r.stderr[-300:]}")
        if r.returncode:
            continue
        pred = json.load(open(f"{work}/a.json"))["predicted"]
        share = (t + 1) / (2 * t) if causal == "true" else 1
        for way, times in (("fwd", 4), ("bwd", 8)):
            got = [l for l in pred["launches"] if l["kernel"].startswith(f"attention_{way}")]
            want = share * times * products
            check(len(got) == 1 and want <= got[0]["flops"] <= 1.05 * want,
                  f"causal = {causal}, {precision}: the {way} launch's FLOPs {[l['flops'] for l in got]}, "
                  f"{share:.4f} of {times} N H T^2 D = {want:.0f} and under 5% more")
            peak = [HALF_PEAK[p["name"]] if precision == "bf16" else None for p in pred["parts"]]
            bad = [(l["kernel"], k) for l in got for k, p in enumerate(pred["parts"])
                   if not close(l["seconds"][k], roofline(l, p["name"], peak[k]))]
            check(not bad, f"causal = {causal}, {precision}: the {way} launch's times at the "
                           f"{'tensor' if precision == 'bf16' else 'CUDA'} cores' peak: {bad}")


MEAN = """model m {{
    input x: f32[N, 64]
    input t: f32[N, 64]
    pred = linear(x, 64)
    output pred
    loss   mse(pred, t)
}}
train {{
    batch = {n}
}}
"""


def mean_forms(cgc, work):
    with open(f"{work}/m.net", "w") as f:
        f.write(MEAN.format(n=N))
    r = subprocess.run([cgc, "m.net", "--check", "--arch", "none", "--mode", "default", "--stats", "m.json",
                        "-q"], cwd=work, capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, f"--stats of the mean over 4M elements {r.stderr[-300:]}")
    if r.returncode:
        return
    launches = json.load(open(f"{work}/m.json"))["predicted"]["launches"]
    parts = min(132 * 1024 // 256, N * 64 // (16 * 256))
    # the loss's launch (line 6) adds pred's bias to the product, reads t, stores pred and
    # the difference (its gradient's), and its parts
    loss = [l for l in launches if l["line"] == 6 and l["bytes_read"] > N]
    sums = [l for l in launches if l["kernel"].startswith("sum_parts") and l["line"] == 6]
    check(len(loss) == 1 and (loss[0]["bytes_read"], loss[0]["bytes_written"], loss[0]["blocks"]) ==
          (2 * 4 * N * 64 + 4 * 64, 2 * 4 * N * 64 + 8 * parts, parts) and len(sums) == 1
          and (sums[0]["bytes_read"], sums[0]["bytes_written"]) == (8 * parts, 4),
          f"the mean's row shared by {parts} blocks, each writing its part, then the parts added into one value: "
          f"{[(l['kernel'], l['bytes_read'], l['bytes_written'], l['blocks']) for l in loss + sums]}")


def explained(cgc, root):
    models = [os.path.join(d, m) for d in (f"{root}/models", f"{root}/bench/models")
              for m in sorted(os.listdir(d)) if m.endswith(".net")]
    missing, splits = [], {}
    for model in models:
        r = subprocess.run([cgc, model, "--explain"], capture_output=True, text=True, timeout=300)
        text = r.stdout
        if r.returncode or "Performance model: graph train" not in text or "H200 SXM" not in text \
                or "by kind: " not in text or "the costliest" not in text:
            missing.append(f"{os.path.basename(model)}: {r.stderr[-200:]}")
        splits[os.path.basename(model)] = [l for l in text.splitlines() if l.startswith("  sum the parts of ")]
    check(not missing, f"--explain's performance model for {len(models)} models: {missing}")
    # the wide MLP's four bias gradients ([4096, 4096] at batch 4096) each in 32 tiles of
    # 128 columns, split 16 ways (4096 rows, 256 a block at least)
    wide = splits.get("wide_mlp.net", [])
    check(len(wide) == 4 and all(l.endswith(": 16 parts") for l in wide) and not splits.get("mlp.net"),
          f"--explain names the wide MLP's four split sums, mlp.net's none: {wide}")


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    cgc = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory() as work:
        closed_forms(cgc, work)
        attention_forms(cgc, work)
        mean_forms(cgc, work)
    explained(cgc, sys.argv[2])
    print(f"{failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
