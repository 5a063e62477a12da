#!/usr/bin/env bash
# bench.sh CGC ROOT: --bench on the CPU. Its launches, GEMMs and planned bytes per mode
# are --stats' numbers; cold and warm compile times are printed (the warm one from the
# kernel cache, or said not to be when the cache is off); it says why it prints no step
# times; warnings come once per mode; it does not go with the flags that do something else.
set -euo pipefail
cgc=$1 root=$2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
fail() { echo "bench.sh: $*"; exit 1; }

# mlp.net without NVRTC: the figures against --stats
"$cgc" "$root/models/mlp.net" --bench --device cpu --arch none > "$dir/mlp.txt"
for mode in eager default; do
    "$cgc" "$root/models/mlp.net" --check --arch none --mode "$mode" --stats "$dir/$mode.json" -q
done
python3 - "$dir" <<'PY'
import json, re, sys
d = sys.argv[1]
text = open(f"{d}/mlp.txt").read()
e, m = (json.load(open(f"{d}/{mode}.json")) for mode in ("eager", "default"))
def row(label):
    line = next((l for l in text.splitlines() if l.startswith(label)), None)
    if line is None:
        sys.exit(f"bench.sh: no '{label}' row in:\n{text}")
    return line[len(label):].split()
def mb(n):
    return f"{n / 2**20:.2f}"
checks = [
    ("launches per step", [str(e["kernels_per_step"]), str(m["kernels_per_step"])]),
    ("  of which GEMMs", [str(e["gemms_per_step"]), str(m["gemms_per_step"])]),
    ("planned peak memory", [mb(e["peak_bytes"]), "MB", mb(m["peak_bytes"]), "MB"]),
    ("  activations, temporaries", [mb(e["activation_bytes"]), "MB", mb(m["activation_bytes"]), "MB"]),
]
for label, want in checks:
    got = row(label)[:len(want)]
    if got != want:
        sys.exit(f"bench.sh: '{label}' is {got}, --stats says {want}")
if "eager against default" not in text or "compile times: not measured (--arch none)" not in text:
    sys.exit(f"bench.sh: header or --arch none line missing:\n{text}")
if "step times: not measured: on the CPU" not in text:
    sys.exit(f"bench.sh: no word on step times:\n{text}")
PY

# regression.net with NVRTC: cold, then warm from the cache (the tests' own cache dir)
"$cgc" "$root/models/regression.net" --bench --device cpu --arch sm_80 > "$dir/reg.txt"
grep -Eq '^compile, cold +[0-9.]+ (ms|s) +[0-9.]+ (ms|s) +front end, passes, NVRTC for sm_80$' "$dir/reg.txt" ||
    { cat "$dir/reg.txt"; fail "no cold compile times"; }
grep -Eq '^compile, warm +[0-9.]+ (ms|s) +[0-9.]+ (ms|s) +the module from the kernel cache$' "$dir/reg.txt" ||
    { cat "$dir/reg.txt"; fail "no warm compile times from the cache"; }
CGC_NO_CACHE=1 "$cgc" "$root/models/regression.net" --bench --device cpu --arch sm_80 > "$dir/nocache.txt"
grep -q 'not from the cache' "$dir/nocache.txt" || { cat "$dir/nocache.txt"; fail "cache off not said"; }

# NVRTC refusing the target is an error, said once, not a table of dashes
if "$cgc" "$root/models/regression.net" --bench --device cpu --arch sm_52 > "$dir/old.txt" 2>&1; then
    cat "$dir/old.txt"; fail "--bench for sm_52 succeeded"
fi
[ "$(grep -c 'cannot compile for compute capability 5.2' "$dir/old.txt")" = 1 ] ||
    { cat "$dir/old.txt"; fail "--bench for sm_52: not one clear error"; }

# A warning of the passes comes once per mode, not again from the warm compile
"$cgc" "$root/models/mlp.net" --bench --device cpu --arch sm_80 --checkpoint auto --memory 1KB \
    > "$dir/warn.txt" 2> "$dir/warn.err"
[ "$(grep -c 'warning: checkpoint = auto' "$dir/warn.err")" = 2 ] ||
    { cat "$dir/warn.err"; fail "checkpoint = auto's warning not once per mode"; }

# --mode eager (the default) compares with default; other actions refuse --bench
"$cgc" "$root/models/regression.net" --bench --mode eager --device cpu --arch none > "$dir/eager.txt"
grep -q "eager against default" "$dir/eager.txt" ||
    fail "--mode eager --bench is not eager against default"
# reduce-overhead: default's launches, and a word on graphs
"$cgc" "$root/models/mlp.net" --bench --mode reduce-overhead --device cpu --arch none > "$dir/ro.txt"
grep -q "eager against reduce-overhead" "$dir/ro.txt" && grep -q "one CUDA graph launch" "$dir/ro.txt" ||
    { cat "$dir/ro.txt"; fail "--mode reduce-overhead --bench"; }
[ "$(grep '^launches per step ' "$dir/ro.txt" | awk '{print $5}')" = \
  "$(grep '^launches per step ' "$dir/mlp.txt" | awk '{print $5}')" ] ||
    { cat "$dir/ro.txt" "$dir/mlp.txt"; fail "reduce-overhead's launches are not default's"; }
for other in "--check" "--explain" "--emit $dir/e" "--stats $dir/s.json" "--profile $dir/p.json"; do
    # shellcheck disable=SC2086  # the flag and its value
    if "$cgc" "$root/models/mlp.net" --bench $other > "$dir/out" 2>&1; then fail "--bench $other ran"; fi
    grep -q "does not go with" "$dir/out" || { cat "$dir/out"; fail "--bench $other: no reason"; }
done
echo "bench.sh: ok"
