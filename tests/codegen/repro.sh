#!/bin/sh
# repro.sh CGC ROOT [CUDA_INCLUDE]: --emit's standalone reproducer (DIR/repro/) builds with nvcc alone.
# For each case, `cgc --check --arch none --emit DIR`, then:
#   - DIR/repro holds module.cu (the same as DIR/module.cu), repro.c and a Makefile;
#   - repro.c names every kernel of the plan (one DIR/NAME.cu each) and states the case;
#   - every DIR/NAME.cu names the .net lines its kernel comes from, or says it is one of
#     the data pipeline's (which come from no line), in all four modes;
#   - gcc -fsyntax-only -Wall -Wextra -Werror accepts repro.c;
#   - `make -C DIR/repro -j1` (nvcc) builds module.cubin and repro without a warning;
#   - no text of the .net file but its names reaches DIR: the model copy's comment and
#     file name carry a marker that must appear nowhere under DIR, and repro.c holds no
#     tensor name.
# Cases: a copy of models/mlp.net (default, fp16, accumulate 2), models/resmlp.net
# (default, bf16: layernorm row groups, dropout), models/regression.net (eager), and a
# small f32 model whose GELU layer is a cuBLASLt GEMM with the aux output; in
# max-autotune, regression.net with the heuristics' choices, mlp.net with tuned ones
# (--tune-file: a grid, a generated GEMM, cuBLASLt algorithms, the fused MLP) and
# narrow_mlp.net with both fused MLP kernels (forward, input gradients), cnn.net (bf16)
# with both convolutions' implicit GEMMs (the UNFOLD steps skipped), conv_chain.net
# (bf16) with its implicit GEMMs computing each bias-and-relu group (epilogues), the
# Makefile's ARCH, what --check and a CPU training run say of --tune-file, and the
# --tune-file files that are refused. Running ./repro needs a GPU; this checks the build
# only. Exit 77 (skipped) without nvcc.
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
        grep -qE '\.net lines? [0-9]|^/\* data pipeline: ' "$cu" ||
            fail "$name: $k.cu names no .net line"
        case $k in gemm_tc_*|mlp_fused_*) continue ;; esac    # named when chosen (below)
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

# max-autotune with tuned choices (--tune-file): the file a GPU run would have written,
# made here from the heuristics' one by choosing, as the tuner may, a grid and a block
# of 128 threads for cast_x, a generated kernel for the first layer, cuBLASLt's 3rd and
# 2nd algorithms for two plain GEMMs, and the fused MLP kernel of 32 rows for layers 2-3
# (in both graphs).
TUNED_FLAGS="--mode max-autotune --precision fp16 --accumulate 2"
# shellcheck disable=SC2086
if "$CGC" "$ROOT/models/mlp.net" $TUNED_FLAGS --check --arch none --emit "$OUT/heur" -q > "$OUT/heur.log" 2>&1; then
    sed -e 's/^device sm_90 .*/device sm_90 NVIDIA H100 80GB HBM3/' -e 's/^tuning none$/tuning 1834.2 ms/' \
        -e 's/^kernel cast_x items:2048 -$/kernel cast_x items:4096,block:128 0.0031/' \
        -e 's/^\(gemm m64\.n512\.k784\.[^ ]*\) default -$/\1 tile:64x64x32 0.0121/' \
        -e 's/^\(gemm m128\.n512\.k64\.[^ ]*\) default -$/\1 lt_algo:3 0.0042/' \
        -e 's/^\(gemm m64\.n128\.k10\.[^ ]*\) default -$/\1 lt_algo:2 0.0041/' \
        -e 's/^mlp \([^ ]*\) steps -$/mlp \1 fused:rows32 0.0093/' "$OUT/heur/autotune.tune" > "$OUT/tuned.tune"
    [ "$(diff "$OUT/heur/autotune.tune" "$OUT/tuned.tune" | grep -c '^>')" = 7 ] ||
        fail "mlp_tuned: the tuned file's fixture did not change 7 lines"
else
    fail "mlp_tuned: cgc --emit for the heuristics' choices"; cat "$OUT/heur.log"
fi
# shellcheck disable=SC2086
case_ mlp_tuned "$ROOT/models/mlp.net" $TUNED_FLAGS --tune-file "$OUT/tuned.tune"

# implicit_case NAME NET: NET in bf16 and max-autotune with its training convolutions'
# implicit GEMMs chosen in place of the heuristics' choices (cuDNN's, whose calls the
# reproducer runs as the steps), through a --tune-file made from those: each reader its
# smallest tile shape, 32x64x32, which every reader has.
CNN_FLAGS="--mode max-autotune --precision bf16"
implicit_case() {
    heur="$OUT/$1_heur"
    # shellcheck disable=SC2086
    if "$CGC" "$2" $CNN_FLAGS --check --arch none --emit "$heur" -q > "$heur.log" 2>&1; then
        # a tile shape per reader: host_plan.txt names each run's readers, the training
        # graph's first, in the order the tune file lists the runs
        readers=$(grep -o 'or skipped, with steps [0-9, and]* in an implicit-GEMM run' "$heur/host_plan.txt" |
                  awk '{ print gsub(/[0-9]+/, "") }' | tr '\n' ' ')
        sed -e 's/^device sm_90 .*/device sm_90 NVIDIA H100 80GB HBM3/' -e 's/^tuning none$/tuning 2210.0 ms/' \
            "$heur/autotune.tune" |
            awk -v readers="$readers" 'BEGIN { split(readers, n, " ") }
                 $1 == "window" && ($3 == "patches" || $3 ~ /^cudnn:/) { c = "implicit:32x64x32"; k = n[++r]
                     for (j = 2; j <= k; j++) c = c "+32x64x32"
                     $3 = c; $4 = "0.0105" } { print }' > "$OUT/$1.tune"
        [ "$(diff "$heur/autotune.tune" "$OUT/$1.tune" | grep -c '^>')" = 4 ] ||
            fail "$1: the tuned file's fixture did not change 4 lines"
    else
        fail "$1: cgc --emit for the heuristics' choices"; cat "$heur.log"
    fi
    # shellcheck disable=SC2086
    case_ "$1" "$2" $CNN_FLAGS --tune-file "$OUT/$1.tune"
}
# cnn.net: each UNFOLD skipped, its readers launched with the image for the patches
# (conv1 two: the product and the weight gradient; conv2 three: the data gradient too),
# each product stored NCHW and each gradient read NCHW, their TRANSPOSEs skipped.
implicit_case cnn_implicit "$ROOT/models/cnn.net"
# conv_chain.net: each product's kernel computes the group after it (its bias and relu)
# on the product, so that group's step is skipped and its buffers and scalars are the
# kernel's arguments after the ABI's.
implicit_case chain_implicit "$ROOT/tests/emu/models/conv_chain.net"

# What each case's repro.c says and does.
want() {   # want CASE TEXT: repro.c of CASE contains the fixed string TEXT
    grep -qF -- "$2" "$OUT/$1/repro/repro.c" || fail "$1: repro.c lacks: $2"
}
want mlp '#define SOURCE_NAME "mlp-__MARKER__.net"'
want cnn_implicit ': the patches, not written: their readers gather them from the image */'
want cnn_implicit 'by the generated implicit-GEMM kernel (the autotune choice)'
want cnn_implicit ': the transpose to NCHW, not run: the implicit GEMM stores its product so */'
want cnn_implicit ': the gradient'"'"'s transpose to channels last, not run: its GEMMs read it as NCHW */'
want cnn_implicit '"gemm_tc_nt_bf16_to_bf16_patches_a_c32h14w14_k3s1p1d1_c_nchw196_32x64x32",'
want cnn_implicit '"gemm_tc_nn_bf16_to_bf16_a_nchw196_32x64x32",'
want cnn_implicit '"gemm_tc_tn_bf16_to_bf16_patches_b_c32h14w14_k3s1p1d1_a_nchw196_32x64x32",'
want chain_implicit ': a pointwise group, not run: the implicit GEMM computes it as its epilogue */'
want chain_implicit ': the transpose to NCHW, not run: the implicit GEMM computes its reader on the product */'
want chain_implicit '"gemm_tc_nt_bf16_to_bf16_patches_a_c5h5w9_k3s1p1d1_c_nchw45_then_add_relu_c2_32x64x32",'
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
# max-autotune's --emit: the choices before tuning, beside the kernels; they name no
# generated kernel, so the reproducer has no second module
grep -q '^tuning none$' "$OUT/regression_ma/autotune.tune" ||
    fail "regression_ma: no autotune.tune with the heuristics' choices"
[ -e "$OUT/regression_ma/repro/gemm_module.cu" ] && fail "regression_ma: a gemm_module.cu without a generated kernel"
want regression_ma 'The autotune choices are the plan'"'"'s own, as without a GPU'
want regression_ma 'enum { NUM_MODULES = 1 };'

# The tuned choices, replayed: DIR/autotune.tune holds them, and the reproducer runs
# each as the runtime would (runtime/devexec.c), its generated kernels from
# gemm_module.cubin, which make built.
t="$OUT/mlp_tuned"
grep -v '^#' "$OUT/tuned.tune" > "$OUT/tuned.want"
grep -v '^#' "$t/autotune.tune" | cmp -s - "$OUT/tuned.want" || fail "mlp_tuned: autotune.tune is not the file given"
[ -s "$t/repro/gemm_module.cubin" ] || fail "mlp_tuned: no gemm_module.cubin"
want mlp_tuned 'The autotune choices are those tuned on sm_90 (../autotune.tune), some of'
want mlp_tuned 'enum { NUM_MODULES = 2 };'
want mlp_tuned ': cast_x, 13 blocks: ceil(50176 / 4096) in [1, 65535] (items per block: the autotune choice), of 128 threads (the autotune choice) */'
want mlp_tuned 'K_gemm_tc_nt_f16_to_f16_bias_relu_64x64x32, 8, a, 8);'
want mlp_tuned 'of its fused kernel (the autotune choice): 2 blocks of 32 rows */'
want mlp_tuned 'K_mlp_fused_f16_512_128r_10_rows32, 2, a, 8);'
want mlp_tuned '.lt = 1, .epilogue = CUBLASLT_EPILOGUE_DEFAULT, .bias = -1, .aux = -1, .lt_algo = 2 },'
want mlp_tuned '.lt = 1, .epilogue = CUBLASLT_EPILOGUE_DEFAULT, .bias = -1, .aux = -1, .lt_algo = 3 },'
# per step by the plan: 22 launches, 16 GEMMs, 4 of them cuBLASLt (the two epilogues of
# each of the 2 micro-batches). By the choices, in each micro-batch the first layer and
# the fused run are launches (3 GEMMs fewer, both epilogues among them, 2 launches
# more) and 2 plain GEMMs go through cuBLASLt.
want mlp_tuned 'enum { LAUNCHES_PER_STEP = 26, GEMMS_PER_STEP = 10, LT_GEMMS_PER_STEP = 4 };'
[ "$(grep -c '^    run_gemm(&gemms' "$t/repro/repro.c")" = 10 ] ||
    fail "mlp_tuned: not 10 library GEMM calls (5 in each train graph)"
for k in K_gemm_tc_nt_f16_to_f16_bias_relu_64x64x32 K_mlp_fused_f16_512_128r_10_rows32; do
    [ "$(grep -c "launch(\"train\(_micro\)\?\", [0-9]*, [0-9]*, $k," "$t/repro/repro.c")" = 2 ] ||
        fail "mlp_tuned: $k is not launched once in each train graph"
done
[ "$(grep -c '^    K_\(gemm_tc\|mlp_fused\)_' "$t/repro/repro.c")" = 2 ] ||
    fail "mlp_tuned: the kernel table holds generated kernels no choice names"

# The narrow MLP with both fused kernels chosen: the forward pass's (steps 2-5) and the
# backward pass's input gradients (steps 9, 12 and 15, launched at 9: the relu_grad
# steps and the weight gradients' GEMMs between them still run).
if "$CGC" "$ROOT/models/narrow_mlp.net" --mode max-autotune --check --arch none --emit "$OUT/nheur" -q \
        > "$OUT/nheur.log" 2>&1; then
    sed -e 's/^mlp \([^ ]*\) steps -$/mlp \1 fused:rows16 0.0051/' "$OUT/nheur/autotune.tune" > "$OUT/narrow.tune"
    [ "$(diff "$OUT/nheur/autotune.tune" "$OUT/narrow.tune" | grep -c '^>')" = 2 ] ||
        fail "narrow_tuned: the tuned file's fixture did not change 2 lines"
else
    fail "narrow_tuned: cgc --emit for the heuristics' choices"; cat "$OUT/nheur.log"
fi
case_ narrow_tuned "$ROOT/models/narrow_mlp.net" --mode max-autotune --tune-file "$OUT/narrow.tune"
t="$OUT/narrow_tuned"
want narrow_tuned '/* 9, 12, 15/19, lines 12, 11, 10: 3 GEMM layers of a narrow MLP'"'"'s input gradients, m 256, in one'
want narrow_tuned 'K_mlp_fused_bwd_bf16_10_128_128_128_rows16, 16, a, 11);'
want narrow_tuned 'K_mlp_fused_bf16_784_128r_128r_128r_10_rows16, 16, a, 14);'
for s in 12 15; do want narrow_tuned "/* $s/19: computed by the fused kernel launched at step 9 */"; done
for s in 3 4 5; do want narrow_tuned "/* $s/19: computed by the fused kernel launched at step 2 */"; done
want narrow_tuned "launch(\"train\", 11, 11, K_relu_grad_reduce_to_h3_bias,"
[ "$(grep -c '^    run_gemm(&gemms' "$t/repro/repro.c")" = 4 ] ||
    fail "narrow_tuned: not 4 library GEMM calls (the weight gradients)"

# --check says whose choices --emit wrote: the tuned ones here, not the heuristics'
# shellcheck disable=SC2086
"$CGC" "$ROOT/models/mlp.net" $TUNED_FLAGS --check --arch none --emit "$OUT/tf_say" \
    --tune-file "$OUT/tuned.tune" > "$OUT/tf_say.log" 2>&1 || fail "tf_say: cgc --check --emit"
grep -qF 'the choices --emit wrote are the tuned ones' "$OUT/tf_say.log" ||
    fail "tf_say: --check does not say the choices are tuned"
grep -qF 'heuristics' "$OUT/tf_say.log" && fail "tf_say: --check calls tuned choices heuristics"
# The Makefile builds for the architecture the choices were made for: sm_90 for the
# tuned file, sm_80 for one tuned there, and --check's --arch for the heuristics' (and
# in any mode without choices).
grep -qx 'ARCH ?= sm_90' "$OUT/mlp_tuned/repro/Makefile" || fail "mlp_tuned: the Makefile's ARCH is not sm_90"
sed 's/^device sm_90 /device sm_80 /' "$OUT/tuned.tune" > "$OUT/sm80.tune"
# shellcheck disable=SC2086
"$CGC" "$ROOT/models/mlp.net" $TUNED_FLAGS --check --arch none --emit "$OUT/tf_sm80" -q \
    --tune-file "$OUT/sm80.tune" || fail "tf_sm80: cgc --check --emit"
grep -qx 'ARCH ?= sm_80' "$OUT/tf_sm80/repro/Makefile" || fail "tf_sm80: the Makefile's ARCH is not sm_80"
for m in max-autotune default; do
    "$CGC" "$ROOT/models/regression.net" --mode $m --check --arch sm_80 --emit "$OUT/arch80_$m" -q ||
        fail "arch80_$m: cgc --check --arch sm_80 --emit"
    grep -qx 'ARCH ?= sm_80' "$OUT/arch80_$m/repro/Makefile" || fail "arch80_$m: the Makefile's ARCH is not sm_80"
done

# A training run whose --tune-file is not there yet (a GPU run would tune and write it)
# emits the heuristics' choices and says so; on the CPU the file is neither read nor
# written, and the run says that too.
"$CGC" "$ROOT/models/regression.net" --mode max-autotune --steps 1 --device cpu --emit "$OUT/tf_train" \
    --tune-file "$OUT/later.tune" > "$OUT/tf_train.log" 2>&1 || fail "tf_train: the run failed"
grep -qF -- "--tune-file $OUT/later.tune is not there yet" "$OUT/tf_train.log" ||
    fail "tf_train: --emit does not say the file is not there yet"
grep -qF -- "it neither reads nor writes --tune-file $OUT/later.tune" "$OUT/tf_train.log" ||
    fail "tf_train: the CPU run does not say it ignores --tune-file"
grep -qx 'tuning none' "$OUT/tf_train/autotune.tune" || fail "tf_train: autotune.tune is not the heuristics'"
[ -e "$OUT/later.tune" ] && fail "tf_train: the CPU run wrote the --tune-file"

# --tune-file refused, with nothing written and the file given left as it was: a file
# for another batch, one that is not a choices file, a missing one, a FIFO, a generated
# kernel below sm_80, and the flag without --emit.
refused() {   # refused NAME STATUS TEXT FLAGS...
    name=$1 st=$2 text=$3
    shift 3
    before=$(cksum < "$OUT/tuned.tune")
    "$CGC" "$ROOT/models/mlp.net" "$@" > "$OUT/$name.log" 2>&1
    got=$?
    [ $got = "$st" ] || fail "$name: exit status $got, not $st"
    grep -qF -- "$text" "$OUT/$name.log" || { fail "$name: the error lacks: $text"; cat "$OUT/$name.log"; }
    [ -e "$OUT/$name" ] && fail "$name: a refused --tune-file left $OUT/$name"
    [ "$(cksum < "$OUT/tuned.tune")" = "$before" ] || fail "$name: tuned.tune was changed"
    return 0
}
# shellcheck disable=SC2086
refused tf_batch 1 'the choices were made for another plan of mlp' $TUNED_FLAGS --batch 32 --check --arch none \
    --emit "$OUT/tf_batch" --tune-file "$OUT/tuned.tune"
sed 's/^end .*/end 99/' "$OUT/tuned.tune" > "$OUT/corrupt.tune"
# shellcheck disable=SC2086
refused tf_corrupt 1 "corrupt.tune: line" $TUNED_FLAGS --check --arch none --emit "$OUT/tf_corrupt" \
    --tune-file "$OUT/corrupt.tune"
# shellcheck disable=SC2086
refused tf_missing 1 'cannot be opened: No such file or directory (--emit --check replays' $TUNED_FLAGS --check --arch none --emit "$OUT/tf_missing" \
    --tune-file "$OUT/no-such.tune"
if mkfifo "$OUT/fifo.tune" 2>/dev/null; then    # must not block the open
    # shellcheck disable=SC2086
    refused tf_fifo 1 'is not a regular file' $TUNED_FLAGS --check --arch none --emit "$OUT/tf_fifo" \
        --tune-file "$OUT/fifo.tune"
fi
sed 's/^device sm_90 /device sm_75 /' "$OUT/tuned.tune" > "$OUT/sm75.tune"
# shellcheck disable=SC2086
refused tf_sm75 1 'a generated GEMM needs sm_80 or later: tile:64x64x32' $TUNED_FLAGS --check --arch none \
    --emit "$OUT/tf_sm75" --tune-file "$OUT/sm75.tune"
# shellcheck disable=SC2086
refused tf_no_emit 2 '--tune-file goes with --mode max-autotune, in a training run' $TUNED_FLAGS --check --arch none \
    --tune-file "$OUT/tuned.tune"
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

[ $status = 0 ] && echo "repro.sh: 8 reproducers built with nvcc"
exit $status
