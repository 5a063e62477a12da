#!/bin/sh
# repro.sh CGC ROOT [CUDA_INCLUDE]: --emit's standalone reproducer (DIR/repro/) builds with nvcc alone.
# For each case, `cgc --check --arch none --emit DIR`, then:
#   - DIR/repro holds module.cu (the same as DIR/module.cu), repro.c and a Makefile;
#   - repro.c names every kernel of the plan (one DIR/NAME.cu each) and states the case;
#   - gcc -fsyntax-only -Wall -Wextra -Werror accepts repro.c;
#   - `make -C DIR/repro -j1` (nvcc) builds module.cubin and repro without a warning;
#   - no text of the .net file but its names reaches DIR: the model copy's comment and
#     file name carry a marker that must appear nowhere under DIR, and repro.c holds no
#     tensor name.
# Cases: a copy of models/mlp.net (default, fp16, accumulate 2), models/resmlp.net
# (default, bf16: layernorm row groups, dropout), models/regression.net (eager), and a
# small f32 model whose GELU layer is a cuBLASLt GEMM with the aux output. Running
# ./repro needs a GPU; this checks the build only. Exit 77 (skipped) without nvcc.
set -u
CGC=$1
ROOT=$2
. "$ROOT/tests/codegen/find_nvcc.sh"
# The toolkit is where nvcc lives (find_nvcc.sh resolved any link to it); its headers are
# where CMake found them (argument 3), else beside it.
CUDA_HOME=$(cd "$(dirname "$NVCC")/.." && pwd)
CUDA_INCLUDE=${3:-}
[ -n "$CUDA_INCLUDE" ] && [ -f "$CUDA_INCLUDE/cuda.h" ] || CUDA_INCLUDE=$CUDA_HOME/include
OUT=$(mktemp -d "${TMPDIR:-/tmp}/cgc_repro.XXXXXX") || exit 1
trap 'rm -rf "$OUT"' EXIT
MARKER='@@MARKER@@'
status=0
fail() { echo "FAILED: $*"; status=1; }

# The mlp copy: a marker in a comment and in the file name (sanitised away).
MLP="$OUT/mlp-$MARKER.net"
{ echo "# $MARKER: a comment the generated code must not carry"; cat "$ROOT/models/mlp.net"; } > "$MLP"
cat > "$OUT/gelu.net" <<EOF
# $MARKER
model gelu_aux {
    input x: f32[N, 32]
    input y: i32[N]

    h      = gelu(linear(x, 64), approximate = "tanh")
    logits = linear(h, 10)

    output logits
    loss   cross_entropy(logits, y)
}

train {
    data      = synthetic(samples = 256)
    batch     = 32
    optimizer = adamw(lr = 1e-3)
    seed      = 3
}
EOF

# case NAME NET FLAGS... : emit, check, build
case_() {
    name=$1 net=$2
    shift 2
    dir="$OUT/$name"
    if ! "$CGC" "$net" "$@" --check --arch none --emit "$dir" -q > "$OUT/$name.emit.log" 2>&1; then
        fail "$name: cgc --emit"; cat "$OUT/$name.emit.log"; return
    fi
    r="$dir/repro"
    for f in module.cu repro.c Makefile; do [ -s "$r/$f" ] || fail "$name: no repro/$f"; done
    cmp -s "$dir/module.cu" "$r/module.cu" || fail "$name: repro/module.cu is not the module"
    n=0
    for cu in "$dir"/*.cu; do
        k=$(basename "$cu" .cu)
        [ "$k" = module ] && continue
        n=$((n + 1))
        grep -q "^    \"$k\",\$" "$r/repro.c" || fail "$name: repro.c does not name kernel $k"
    done
    if grep -q -e 'h1\.weight' -e 'exp_avg' -e 'logits\.bias' "$r/repro.c"; then
        fail "$name: repro.c holds a tensor name"
    fi
    if command -v gcc >/dev/null 2>&1 &&
       ! gcc -fsyntax-only -Wall -Wextra -Werror -I"$CUDA_INCLUDE" "$r/repro.c" > "$OUT/$name.gcc.log" 2>&1; then
        fail "$name: gcc -Wall -Wextra"; cat "$OUT/$name.gcc.log"
    fi
    if ! make -C "$r" -j1 NVCC="$NVCC" CUDA_HOME="$CUDA_HOME" > "$OUT/$name.make.log" 2>&1; then
        fail "$name: make -C DIR/repro"; cat "$OUT/$name.make.log"; return
    fi
    if grep -i 'warning' "$OUT/$name.make.log"; then fail "$name: warnings from make"; fi
    [ -s "$r/module.cubin" ] || fail "$name: no module.cubin"
    [ -x "$r/repro" ] || fail "$name: no repro program"
    echo "$name: repro/ built ($n kernels named, $(grep -c '^    run_gemm(&gemms' "$r/repro.c") GEMM calls)"
}

case_ mlp "$MLP" --mode default --precision fp16 --accumulate 2
case_ resmlp "$ROOT/models/resmlp.net" --mode default --precision bf16
case_ regression "$ROOT/models/regression.net" --mode eager
case_ gelu "$OUT/gelu.net" --mode default
case_ resmlp_ro "$ROOT/models/resmlp.net" --mode reduce-overhead --precision bf16 --accumulate 2
case_ regression_ma "$ROOT/models/regression.net" --mode max-autotune

# What each case's repro.c says and does.
want() {   # want CASE TEXT: repro.c of CASE contains the fixed string TEXT
    grep -qF -- "$2" "$OUT/$1/repro/repro.c" || fail "$1: repro.c lacks: $2"
}
want mlp '#define SOURCE_NAME "mlp-__MARKER__.net"'
want mlp 'mode default, precision fp16, batch 64, accumulate 2, seed 42;'
want mlp 'if (k < ACCUMULATE - 1) run_train_micro(micro_step);'
want mlp '.epilogue = CUBLASLT_EPILOGUE_RELU_BIAS'
want resmlp 'mode default, precision bf16, batch 128, accumulate 1, seed 7;'
want resmlp 'F32((float)micro_step)'
want regression 'mode eager, precision fp32, batch 128, accumulate 1, seed 1;'
want gelu '.epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS'
want gelu 'FILL_LABELS, 10.0f'
want resmlp_ro 'mode reduce-overhead, precision bf16, batch 128, accumulate 2, seed 7;'
want resmlp_ro '#define CAPTURE 1'
want resmlp_ro 'CU("the step'"'"'s CUDA graph", cuGraphLaunch, graph_exec, stream);'
want regression_ma '#define CAPTURE 1'
want mlp '#define CAPTURE 0'
want regression_ma 'mode max-autotune, precision fp32, batch 128, accumulate 1, seed 1;'
# max-autotune's --emit: the choices before tuning, beside the kernels
grep -q '^tuning none$' "$OUT/regression_ma/autotune.tune" ||
    fail "regression_ma: no autotune.tune with the heuristics' choices"
# reduce-overhead: both train graphs move the step counter their kernels read, on the
# device as training does (so that a step can be captured); none passes the micro-step as
# a float
[ "$(grep -c 'K_cgc_step_advance, 1, a, 2);' "$OUT/resmlp_ro/repro/repro.c")" = 2 ] ||
    fail "resmlp_ro: the step counter is not moved by run_train and run_train_micro"
if grep -q 'F32((float)micro_step)' "$OUT/resmlp_ro/repro/repro.c"; then
    fail "resmlp_ro: a kernel takes the micro-step as a float"
fi
if grep -q 'run_train_micro' "$OUT/resmlp/repro/repro.c"; then
    fail "resmlp: a train_micro replay without accumulation"
fi

# Every GEMM call uses a row of its own graph: in run_GRAPH, run_gemm(&gemms[N]) with row
# N's .graph = "GRAPH" (rows and calls once disagreed with accumulation).
for c in mlp resmlp regression gelu; do
    awk -v name="$c" '
        /^    \{ \.graph = "/ { split($0, q, "\""); graph_of[rows++] = q[2] }
        /^static void run_train(_micro)?\(/ { fn = $3; sub(/^run_/, "", fn); sub(/\(.*/, "", fn) }
        /run_gemm\(&gemms\[/ {
            n = $0; sub(/.*gemms\[/, "", n); sub(/\].*/, "", n); calls++
            if (graph_of[n + 0] != fn) { printf "%s: run_%s calls gemms[%d], a row of %s\n", name, fn, n, graph_of[n + 0]; bad = 1 }
        }
        END { if (calls == 0 && rows > 1) { printf "%s: no GEMM call found\n", name; bad = 1 } exit bad }
    ' "$OUT/$c/repro/repro.c" || fail "$c: GEMM calls and rows disagree"
done

# The marker: nowhere under any emit directory (names, comments, binaries).
if grep -rl -- "$MARKER" "$OUT/mlp" "$OUT/gelu"; then fail "text of the .net file reached the emitted files"; fi

# The Makefile: cgc's NVRTC options, ARCH overridable, libcuda from the stubs.
mk="$OUT/mlp/repro/Makefile"
for opt in '--ftz=false' '--prec-div=true' '--prec-sqrt=true' '--fmad=false' 'lib64/stubs -lcuda'; do
    grep -qF -- "$opt" "$mk" || fail "Makefile lacks $opt"
done
rm -f "$OUT/mlp/repro/module.cubin"
make -n -C "$OUT/mlp/repro" ARCH=sm_80 NVCC="$NVCC" CUDA_HOME="$CUDA_HOME" 2>&1 | grep -q -- '-arch=sm_80' ||
    fail "make ARCH=sm_80 does not compile the module for sm_80"

[ $status = 0 ] && echo "repro.sh: 5 reproducers built with nvcc"
exit $status
