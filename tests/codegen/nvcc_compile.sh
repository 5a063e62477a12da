#!/bin/sh
# nvcc_compile.sh CGC ROOT: the Done-when check of the eager code generator.
#   - models/mlp.net: every emitted .cu compiled on its own, nvcc -cubin -arch=sm_90,
#     two at a time; then its whole module (module.cu) for sm_80;
#   - models/resmlp.net, models/regression.net and models/cnn.net: the whole module for
#     sm_80 and sm_90.
# Exit 77 (skipped) when nvcc is absent. Needs no GPU.
set -u
CGC=$1
ROOT=$2
. "$ROOT/tests/codegen/find_nvcc.sh"
OUT=$(mktemp -d "${TMPDIR:-/tmp}/cgc_nvcc.XXXXXX") || exit 1
trap 'rm -rf "$OUT"' EXIT

for m in mlp resmlp regression cnn; do
    "$CGC" "$ROOT/models/$m.net" --check --emit "$OUT/$m" -q || { echo "emit of $m.net failed"; exit 1; }
done

# Each kernel alone: one nvcc per file, two at a time; a failure prints nvcc's output.
ls "$OUT/mlp" | grep '\.cu$' | grep -v '^module\.cu$' > "$OUT/list"
n=$(wc -l < "$OUT/list")
(cd "$OUT/mlp" && xargs -P 2 -I {} sh -c \
    '"$0" -cubin -arch=sm_90 -o /dev/null {} > {}.log 2>&1 || { echo "FAILED: nvcc -cubin -arch=sm_90 {}"; cat {}.log; }' \
    "$NVCC" < "$OUT/list") > "$OUT/failures" 2>&1
if [ -s "$OUT/failures" ]; then cat "$OUT/failures"; exit 1; fi
echo "mlp.net: $n kernels compiled alone for sm_90"

module() {   # module MODEL ARCH
    if ! "$NVCC" -cubin -arch=sm_$2 -o /dev/null "$OUT/$1/module.cu" > "$OUT/$1.$2.log" 2>&1; then
        echo "FAILED: nvcc -cubin -arch=sm_$2 $1/module.cu"; cat "$OUT/$1.$2.log"; return 1
    fi
    echo "$1.net: whole module compiled for sm_$2"
}
status=0
module mlp 80 || status=1
for m in resmlp regression cnn; do
    module $m 80 & p1=$!
    module $m 90 || status=1
    wait $p1 || status=1
done
exit $status
