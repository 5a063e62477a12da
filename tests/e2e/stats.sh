#!/usr/bin/env bash
# stats.sh CGC ROOT: --stats and --explain for every model of models/ in every mode.
# The JSON must hold every key it promises with sane values; default mode must fuse (every
# group named, with ops and .net lines) and launch at most 40% of eager's kernels per
# training step for mlp.net; --explain must report every section, and in the fused modes a
# reason for every kernel boundary, none of them the fallback; a --stats file that cannot
# be written is an error that names it; a group lists all its lines, however many.
set -euo pipefail
cgc=$1 root=$2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
for model in "$root"/models/*.net; do
    name=$(basename "$model" .net)
    for mode in eager default reduce-overhead max-autotune; do
        "$cgc" "$model" --check --arch none --mode "$mode" --stats "$dir/$name.$mode.json" -q
        "$cgc" "$model" --mode "$mode" --explain > "$dir/$name.$mode.txt"
        sections=("Precision (" "Activation checkpointing:" "Memory plan (batch" "Kernels per training step:"
                  "Performance model: graph train")
        [ "$mode" = eager ] || sections+=("Kernel boundaries of the train graph (")
        [ "$mode" != max-autotune ] || sections+=("Autotune: ")
        for section in "${sections[@]}"; do
            grep -q "^$section" "$dir/$name.$mode.txt" ||
                { echo "$name $mode: --explain lacks '$section'"; cat "$dir/$name.$mode.txt"; exit 1; }
        done
    done
    "$cgc" "$model" --mode default --checkpoint all --explain > "$dir/$name.all.txt"
    [ "$name" = gpt ] && "$cgc" "$model" --precision bf16 --explain > "$dir/gpt.bf16.txt"   # casts in between
    mkdir -p "$dir/ck"
    for ck in none all; do
        "$cgc" "$model" --check --arch none --checkpoint $ck --stats "$dir/ck/$name.$ck.json" -q
    done
done
# checkpoint = all recomputes at most one forward pass (the contract), counted against the
# forward's FLOPs as `none` plans them
python3 - "$dir/ck" <<'PY'
import json, os, sys
d = sys.argv[1]
for f in sorted(os.listdir(d)):
    if f.endswith(".all.json"):
        ck, none = (json.load(open(os.path.join(d, f.replace(".all.", x)))) for x in (".all.", ".none."))
        fwd = none["forward_flops"]
        assert fwd > 0 and ck["forward_flops"] == fwd, f"{f}: forward FLOPs {ck['forward_flops']} against {fwd}"
        assert 0 <= ck["recomputed_flops"] <= fwd, f"{f}: recomputes {ck['recomputed_flops']} of {fwd}"
PY
python3 - "$dir" <<'PY'
import os, re, sys
d = sys.argv[1]
for f in sorted(os.listdir(d)):
    if not f.endswith(".txt") or ".eager." in f:
        continue
    text = open(os.path.join(d, f)).read()
    part = text.split("Kernel boundaries of the train graph (", 1)[1].split("\n\n", 1)[0]
    lines = part.splitlines()[2:]
    entries = [(lines[i], lines[i + 1]) for i in range(len(lines) - 1)
               if lines[i].startswith("  ") and "<-" in lines[i]]
    assert entries, f"{f}: no kernel boundaries"
    for head, why in entries:
        assert why.startswith("        ") and why.strip(), f"{f}: no reason for {head!r}"
        assert "no rule above forbids it" not in why, f"{f}: {head.strip()}: the fallback reason"
mlp = open(os.path.join(d, "mlp.default.txt")).read()
want = [
    ("  g2 gemm_bias_relu_h1 <- g1 cast_x", "a GEMM (cuBLAS) reads its operands"),
    ("  g5 classifier <- g4 add_logits", "the fused classifier reads the logits from memory"),
    ("  g21 add_sqrt_grad_norm <- g18, g11, g19, g10, g20, g9",
     "a reduction is whole only when its kernel ends"),
]
for head, why in want:
    at = mlp.find(head + "\n")
    assert at >= 0 and mlp[at + len(head) + 1:].lstrip().startswith(why), \
        f"mlp default: no '{head}' for '{why}':\n{mlp}"
fused = ("fused, attention_fwd_d32_causal_{t} and attention_bwd_d32_causal_{t}; the probabilities "
         "never stored, the rows' log-sum-exp [N, 4, 64]")
how = {"eager": "the composition (eager runs each op alone): scores and probabilities [N, 4, 64, 64]",
       "default": fused.format(t="f32"), "bf16": fused.format(t="bf16"), "all": fused.format(t="f32")}
for run, what in how.items():
    gpt = open(os.path.join(d, f"gpt.{run}.txt")).read()
    for line in (18, 29, 40, 51):   # models/gpt.net's attention(q, k, v, heads = 4, causal = true) of [N, 64, 128]
        want = f"  line {line:<4d} 4 heads of width 32 over 64 positions, causal: {what}"
        assert want in gpt, f"gpt {run}: no attention line {want!r}"
res = open(os.path.join(d, "resmlp.all.txt")).read()
assert "checkpointing: recomputed values have kernels of their own" in res, "resmlp all: no phase reason"
assert "a row group runs one block per row" in res, "resmlp all: no row-group reason"
PY
python3 - "$dir" <<'PY'
import json, os, sys
d = sys.argv[1]
keys = {"mode": str, "kernels_per_step": int, "gemms_per_step": int, "peak_bytes": int,
        "activation_bytes": int, "fusion_groups": list}
stats = {}
for f in sorted(os.listdir(d)):
    if not f.endswith(".json"):
        continue
    name, mode, _ = f.split(".")
    s = json.load(open(os.path.join(d, f)))
    for k, t in keys.items():
        assert isinstance(s.get(k), t), f"{f}: {k} missing or not {t.__name__}: {s.get(k)!r}"
    assert s["mode"] == mode, f"{f}: mode {s['mode']}"
    assert 0 < s["gemms_per_step"] < s["kernels_per_step"], f"{f}: step counts {s}"
    assert s["peak_bytes"] >= s["activation_bytes"] > 0, f"{f}: bytes {s}"
    if mode == "eager":
        assert s["fusion_groups"] == [], f"{f}: eager fuses"
    else:
        assert s["fusion_groups"], f"{f}: default mode has no fusion groups"
        for g in s["fusion_groups"]:
            assert g["name"].isidentifier() and g["ops"], f"{f}: group {g}"
            assert all(isinstance(l, int) and l > 0 for l in g["lines"]), f"{f}: lines {g}"
    stats[name, mode] = s
e, f = stats["mlp", "eager"]["kernels_per_step"], stats["mlp", "default"]["kernels_per_step"]
print(f"mlp.net kernels per step: eager {e}, default {f} ({100 * f / e:.0f}%)")
assert f <= 0.4 * e, "default must launch at most 40% of eager's kernels per step"
PY
if "$cgc" "$root/models/mlp.net" --check --arch none --stats "$dir/no/such/dir.json" 2> "$dir/err"; then
    echo "an unwritable --stats file was accepted"; exit 1
fi
grep -q "cgc: error: cannot write --stats to .*no/such/dir.json: directory .*no/such is missing" "$dir/err" ||
    { echo "unexpected message:"; cat "$dir/err"; exit 1; }
# A group lists every .net line it fuses, however many: a chain of 100 statements is one.
awk 'BEGIN { print "model chain {"; print "    input x: f32[N, 4]"; print "    h0 = x * 2"
             for (i = 1; i < 100; i++) printf "    h%d = h%d * 2\n", i, i - 1
             print "    output h99"; print "    loss mean(h99)"; print "}" }' > "$dir/chain.net"
"$cgc" "$dir/chain.net" --check --arch none --mode default --stats "$dir/chain.json" -q
python3 - "$dir/chain.json" <<'PY'
import json, sys
lines = max((g["lines"] for g in json.load(open(sys.argv[1]))["fusion_groups"]), key=len)
assert set(range(3, 103)) <= set(lines), f"chain: the group lists lines {lines}"
PY
echo "ok"
