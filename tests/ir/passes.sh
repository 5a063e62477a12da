#!/usr/bin/env bash
# passes.sh CGC ROOT: the IR after each pass, for every model of models/, against the
# golden files tests/ir/passes/MODEL.PASS.ir. Each pass is dumped with the flags that make
# it act (checkpoint = all, --mode default for fusion), so every golden shows the pass's
# work. CGC_UPDATE_GOLDEN=1 rewrites the goldens instead (review the diff before committing).
set -u
cgc=$1 root=$2
golden=$root/tests/ir/passes
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
passes=(
    "sema:--dump-ir=forward"
    "precision:--dump-ir=forward"
    "training:"
    "checkpoint:--checkpoint all --dump-ir=train"
    "fusion:--mode default"
)
failed=0 passed=0
for model in "$root"/models/*.net; do
    name=$(basename "$model" .net)
    for entry in "${passes[@]}"; do
        pass=${entry%%:*} flags=${entry#*:}
        out=$tmp/$name.$pass.ir
        # shellcheck disable=SC2086  # flags are words
        if ! (cd "$root/models" && "$cgc" "$name.net" --dump-ir-after "$pass" $flags > "$out"); then
            echo "--- $name $pass: cgc failed"; failed=$((failed + 1)); continue
        fi
        if [ "${CGC_UPDATE_GOLDEN:-}" = 1 ]; then
            cp "$out" "$golden/$name.$pass.ir"
        elif ! cmp -s "$out" "$golden/$name.$pass.ir"; then
            echo "--- $name $pass differs:"
            diff -u --label "expected $name.$pass.ir" --label "actual" "$golden/$name.$pass.ir" "$out" | head -60
            failed=$((failed + 1)); continue
        fi
        passed=$((passed + 1))
    done
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
