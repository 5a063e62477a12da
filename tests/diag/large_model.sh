#!/usr/bin/env bash
# large_model.sh CGC [N]: a model of N (default 20000) chained statements, `h0 = x * 1`,
# `h1 = h0 * 1`, ..., must pass --check. The guard is the test's TIMEOUT (tests/sema.cmake):
# finding a line or a name must not cost time in proportion to the file, or checking a
# file this size takes quadratic time. No timing is asserted here.
set -uo pipefail
cgc=$1 n=${2:-20000}
tmp=$(mktemp -d)
trap 'rm -rf -- "$tmp"' EXIT

awk -v n="$n" 'BEGIN {
    print "model chain {"
    print "    input x: f32[N, 4]"
    print "    h0 = x * 1"
    for (i = 1; i < n; i++) printf "    h%d = h%d * 1\n", i, i - 1
    printf "    output h%d\n    loss mean(h%d)\n}\n", n - 1, n - 1
}' > "$tmp/chain.net"

out=$("$cgc" --check --arch none "$tmp/chain.net" 2>&1)
status=$?
if [ "$status" -ne 0 ] || ! grep -q "ok: model chain" <<<"$out"; then
    echo "FAIL: a model of $n statements: status $status, output:"
    echo "$out" | head -20
    exit 1
fi
echo "a model of $n statements checks"

# A file of errors: sema stops after 50 of them, with a note, rather than spending time
# in proportion to errors times names on suggestions nobody reads.
awk -v n="$n" 'BEGIN {
    print "model errors {"
    print "    input x: f32[N, 4]"
    for (i = 0; i < n; i++) printf "    h%d = unknown%d * 1\n", i, i
    print "}"
}' > "$tmp/errors.net"
out=$("$cgc" --check "$tmp/errors.net" 2>&1)
status=$?
errors=$(grep -c ": error: " <<<"$out")
if [ "$status" -ne 1 ] || [ "$errors" -ne 50 ] || ! grep -q "errors.net: note: too many errors; stopped after 50" <<<"$out"; then
    echo "FAIL: a file of $n errors: status $status, $errors errors, last lines:"
    echo "$out" | tail -5
    exit 1
fi
echo "a file of $n errors stops after 50"
