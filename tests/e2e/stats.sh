#!/usr/bin/env bash
# stats.sh CGC ROOT: --stats and --explain for every model of models/ in both modes.
# The JSON must hold issue 4's keys with sane values; default mode must fuse (every
# group named, with ops and .net lines) and launch at most 40% of eager's kernels per
# training step for mlp.net; --explain must report every section; a --stats file that
# cannot be written is an error that names it.
set -euo pipefail
cgc=$1 root=$2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
for model in "$root"/models/*.net; do
    name=$(basename "$model" .net)
    for mode in eager default; do
        "$cgc" "$model" --check --arch none --mode "$mode" --stats "$dir/$name.$mode.json" -q
        "$cgc" "$model" --mode "$mode" --explain > "$dir/$name.$mode.txt"
        for section in "Precision (" "Activation checkpointing:" "Memory plan (batch" \
                       "Kernels per training step:"; do
            grep -q "^$section" "$dir/$name.$mode.txt" ||
                { echo "$name $mode: --explain lacks '$section'"; cat "$dir/$name.$mode.txt"; exit 1; }
        done
    done
done
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
grep -q "cgc: error: --stats .*no/such/dir.json.*: cannot create the file" "$dir/err" ||
    { echo "unexpected message:"; cat "$dir/err"; exit 1; }
echo "ok"
