#!/bin/sh
# golden.sh CGC ROOT: the host plan and a few representative kernels of models/mlp.net
# (fp16, as written) must match tests/codegen/mlp/ exactly.
# After an intended change to the generated code, regenerate and review the diff:
#   CGC_UPDATE_GOLDEN=1 sh tests/codegen/golden.sh BUILD/cgc .
set -u
CGC=$1
ROOT=$2
GOLDEN=$ROOT/tests/codegen/mlp
FILES="host_plan.txt relu_h1.cu add_train_8.cu cross_entropy_train_24.cu ce_grad_train_26.cu
       reduce_to_train_28.cu sum_axis1_train_48.cu sum_all_train_49.cu runtime_train_108.cu
       assign_f32_512x784.cu
       cgc_order_shuffle.cu"
OUT=$(mktemp -d "${TMPDIR:-/tmp}/cgc_golden.XXXXXX") || exit 1
trap 'rm -rf "$OUT"' EXIT
# Run from ROOT so that the plan names the model as mlp.net, whatever the build dir.
(cd "$ROOT" && "$CGC" models/mlp.net --mode eager --check --emit "$OUT/emit" -q) || {
    echo "golden.sh: cgc --check --emit failed"; exit 1; }
if [ "${CGC_UPDATE_GOLDEN:-}" = 1 ]; then
    mkdir -p "$GOLDEN"
    for f in $FILES; do cp "$OUT/emit/$f" "$GOLDEN/$f" || exit 1; done
    echo "golden.sh: updated $GOLDEN; review with git diff"
    exit 0
fi
status=0
for f in $FILES; do
    if ! diff -u "$GOLDEN/$f" "$OUT/emit/$f"; then
        echo "golden.sh: $f differs from $GOLDEN/$f (regenerate with CGC_UPDATE_GOLDEN=1 if intended)"
        status=1
    fi
done
# --emit's IR after each pass is what --dump-ir-after prints for the same flags (flags
# under which checkpoint and fusion both act).
FLAGS="--mode default --checkpoint all"
# shellcheck disable=SC2086  # FLAGS are words
(cd "$ROOT" && "$CGC" models/mlp.net $FLAGS --check --arch none --emit "$OUT/fused" -q) || {
    echo "golden.sh: cgc $FLAGS --check --emit failed"; exit 1; }
n=1
for pass in sema precision training checkpoint fusion; do
    # shellcheck disable=SC2086
    (cd "$ROOT" && "$CGC" models/mlp.net $FLAGS --dump-ir-after $pass) > "$OUT/$pass.ir" 2>/dev/null
    if ! cmp -s "$OUT/$pass.ir" "$OUT/fused/ir/${n}_$pass.ir"; then
        echo "golden.sh: --emit's ir/${n}_$pass.ir is not what --dump-ir-after $pass prints"
        status=1
    fi
    n=$((n + 1))
done
[ $status = 0 ] && echo "golden.sh: $(echo $FILES | wc -w) files match; ir/ holds each pass's IR"
exit $status
