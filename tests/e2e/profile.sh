#!/usr/bin/env bash
# profile.sh CGC ROOT: --profile FILE on the CPU. The trace is Trace Event JSON with one
# complete event per recorded step enclosing one per op it ran (matmuls and the loss
# among them, with the op's .net line, shape and dtype), as many steps as cgc says; runs
# too short for the usual steps 2 to 4 record what there is; strings that need escaping
# (the model file's path) come back intact; a file that cannot be created fails before
# training with the path and the reason; --profile with --check is a usage error.
# Structure only: nothing here depends on how long anything took.
set -euo pipefail
cgc=$1 root=$2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
export LC_ALL=C

# check_trace FILE OUTPUT STEPS FIRST MODEL_PATH: the trace against what cgc printed.
check_trace() {
    python3 - "$@" <<'PY'
import json, re, sys
from decimal import Decimal
path, output, want_steps, want_first, net_file = sys.argv[1:6]
with open(path, encoding="utf-8") as f:
    trace = json.load(f, parse_float=Decimal)   # exact: enclosure is compared exactly
def check(cond, what):
    if not cond:
        sys.exit(f"{path}: {what}")
check(set(trace) == {"traceEvents", "displayTimeUnit", "otherData"}, f"top-level keys {sorted(trace)}")
check(trace["displayTimeUnit"] == "ms", "displayTimeUnit")
events = trace["traceEvents"]
for e in events:
    check(e.get("ph") == "X", f"not a complete event: {e}")
    for k in ("ts", "dur"):
        check(isinstance(e.get(k), (int, Decimal)) and e[k] >= 0, f"{k} of {e}")
    check(isinstance(e.get("name"), str) and isinstance(e.get("cat"), str), f"name/cat of {e}")
    check(isinstance(e.get("pid"), int) and isinstance(e.get("tid"), int), f"pid/tid of {e}")
    check(isinstance(e.get("args"), dict), f"args of {e}")
steps = [e for e in events if e["cat"] == "step"]
ops = [e for e in events if e["cat"] != "step"]
# cgc's own count: "profiled 3 steps (steps 2 to 4, 984 ops)" or "profiled 1 step (step 1, ...)"
m = re.search(r"profiled (\d+) steps? \(steps? (\d+)(?: to (\d+))?, (\d+) ops\) to ", output)
check(m, f"no 'profiled' line in the output:\n{output}")
printed, first, nops = int(m.group(1)), int(m.group(2)), int(m.group(4))
check(printed == len(steps) == int(want_steps), f"{len(steps)} step events, printed {printed}, want {want_steps}")
check(first == int(want_first), f"first step {first}, want {want_first}")
check(nops == len(ops) == trace["otherData"]["ops_recorded"], f"{len(ops)} op events, printed {nops}")
check(trace["otherData"]["steps_recorded"] == len(steps), "otherData steps_recorded")
check(trace["otherData"]["net_file"] == net_file, f"net_file {trace['otherData']['net_file']!r} != {net_file!r}")
check([s["name"] for s in steps] == [f"step {first + k}" for k in range(len(steps))], "step names")
for s in steps:
    inside = [o for o in ops if s["ts"] <= o["ts"] and o["ts"] + o["dur"] <= s["ts"] + s["dur"]]
    check(len(inside) == s["args"]["ops"] > 0, f"{s['name']} encloses {len(inside)} ops, says {s['args']['ops']}")
    check({o["args"]["op"] for o in inside} >= {"matmul", "assign"}, f"{s['name']}: ops {sorted({o['args']['op'] for o in inside})}")
for o in ops:
    a = o["args"]
    check(sum(s["ts"] <= o["ts"] and o["ts"] + o["dur"] <= s["ts"] + s["dur"] for s in steps) == 1,
          f"{o['name']} is not inside exactly one step")
    check(isinstance(a.get("op"), str) and o["name"].startswith(a["op"] + " "), f"name {o['name']!r}, op {a.get('op')!r}")
    check(a.get("graph") in ("train", "train_micro"), f"graph of {o}")
    check(isinstance(a.get("node"), int) and isinstance(a.get("dtype"), str), f"node/dtype of {o}")
    check(isinstance(a.get("shape"), list) and all(isinstance(d, int) and d >= 0 for d in a["shape"]), f"shape of {o}")
def with_line(op):
    return [o for o in ops if o["args"]["op"] == op and isinstance(o["args"].get("line"), int) and o["args"]["line"] > 0]
loss = "cross_entropy" if trace["otherData"]["model"] == "mlp" else "mean"
check(with_line("matmul") and with_line(loss), f"no matmul or {loss} event with a .net line")
PY
}

run() {  # run NAME ARGS...: cgc's output into $dir/NAME.out; fails the test on an error
    local name=$1; shift
    "$cgc" "$@" > "$dir/$name.out" 2>&1 || { echo "cgc $* failed:"; cat "$dir/$name.out"; exit 1; }
}

# The usual case: steps 2 to 4 of mlp.net (fp16: casts, matmuls, cross_entropy, AdamW).
run mlp "$root/models/mlp.net" --device cpu --steps 4 --data 'synthetic(samples = 256)' \
    --profile "$dir/mlp.json"
check_trace "$dir/mlp.json" "$(cat "$dir/mlp.out")" 3 2 "$root/models/mlp.net"
python3 - "$dir/mlp.json" <<'PY'
import json, sys
ops = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["cat"] != "step"]
ce = [o for o in ops if o["args"]["op"] == "cross_entropy"]
assert len(ce) == 3 and all(o["args"]["shape"] == [] and o["args"]["dtype"] == "f32" for o in ce), ce
h1 = [o for o in ops if o["args"]["op"] == "matmul" and o["args"]["line"] == 6 and o["args"]["shape"] == [64, 512]]
assert len(h1) == 3 and all(o["args"]["dtype"] == "f16" for o in h1), h1   # x @ W1^T, per step
PY

# Short runs record what there is: one step of one, the second of two. Accumulation puts
# train_micro and train graphs inside one step. Fused graphs (--mode default) name their
# kernel.
run one "$root/models/regression.net" --device cpu --steps 1 --profile "$dir/one.json"
check_trace "$dir/one.json" "$(cat "$dir/one.out")" 1 1 "$root/models/regression.net"
run two "$root/models/regression.net" --device cpu --steps 2 --profile "$dir/two.json"
check_trace "$dir/two.json" "$(cat "$dir/two.out")" 1 2 "$root/models/regression.net"
run accum "$root/models/regression.net" --device cpu --steps 3 --accumulate 2 --mode default \
    --profile "$dir/accum.json"
check_trace "$dir/accum.json" "$(cat "$dir/accum.out")" 2 2 "$root/models/regression.net"
python3 - "$dir/accum.json" <<'PY'
import json, sys
ops = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["cat"] != "step"]
assert {o["args"]["graph"] for o in ops} == {"train", "train_micro"}, "graphs"
assert any("kernel" in o["args"] for o in ops), "no fused kernel named"
PY

# A path full of what JSON must escape (quote, backslash, tab, a control character,
# UTF-8, and a byte that is not UTF-8, which comes back as U+FFFD).
odd="$dir/q\"b\\s"$'\t'$'\x01'"é"$'\xff'"/m.net"
mkdir -p "$(dirname "$odd")"
cp "$root/models/regression.net" "$odd"
run odd "$odd" --device cpu --steps 2 --profile "$dir/odd.json"
check_trace "$dir/odd.json" "$(cat "$dir/odd.out")" 1 2 \
    "$(python3 -c 'import sys; print(sys.argv[1].encode("utf-8", "surrogateescape").decode("utf-8", "replace"))' "$odd")"

# A file that cannot be created: an error naming it and why, before any training.
status=0
out=$("$cgc" "$root/models/regression.net" --device cpu --steps 2 --profile "$dir/missing/t.json" 2>&1) || status=$?
if [ "$status" -ne 1 ] ||
   ! grep -q "^cgc: error: cannot write the trace to $dir/missing/t.json: directory $dir/missing is missing" <<<"$out" ||
   grep -q "train_loss" <<<"$out"; then
    echo "unwritable --profile: status $status, output:"; echo "$out"; exit 1
fi

# A run that fails before training (no such dataset) leaves no trace file and no
# "profiled" line.
status=0
out=$("$cgc" "$root/models/regression.net" --device cpu --data 'idx("no-such-dir")' \
      --profile "$dir/never.json" 2>&1) || status=$?
if [ "$status" -ne 1 ] || [ -e "$dir/never.json" ] || grep -q "profiled" <<<"$out"; then
    echo "--profile of a run that never trained: status $status, output:"; echo "$out"; exit 1
fi

# --profile needs a run; --help says so.
status=0
out=$("$cgc" "$root/models/regression.net" --check --arch none --profile "$dir/c.json" 2>&1) || status=$?
[ "$status" -eq 2 ] && grep -q "^cgc: --profile records a training run" <<<"$out" && [ ! -e "$dir/c.json" ] ||
    { echo "--profile with --check: status $status, output:"; echo "$out"; exit 1; }
# (the whole text first: grep -q stops reading at a match, and a longer --help then dies of
# SIGPIPE, which pipefail would report)
"$cgc" --help > "$dir/help.txt"
grep -q -- "--profile FILE" "$dir/help.txt" || { echo "--help does not mention --profile"; exit 1; }
echo "profile: all checks passed"
