#!/usr/bin/env bash
# run_golden.sh DIR CGC: runs `CGC --check NAME.net` for every DIR/*.net and compares
# what it prints with the golden files beside it:
#   NAME.err  the exact standard error (missing: nothing on standard error); the exit
#             status must be 1 when it is not empty, 0 when it is
#   NAME.out  the exact standard output, when the file exists (IR dumps and the like)
# A first line `# args: FLAGS...` adds FLAGS to the command (e.g. --dump-ir=forward).
# Runs inside DIR, so messages name files as just NAME.net. Prints a unified diff for each
# mismatch and "N passed, M failed" last; exits 1 if anything failed. CGC_UPDATE_GOLDEN=1
# rewrites the NAME.out files instead (review the diff before committing); NAME.err files
# are written by hand.
set -u

if [ $# -ne 2 ]; then
    echo "usage: $0 DIR CGC" >&2
    exit 2
fi
dir=$1
cgc=$(realpath -- "$2") || exit 2
cd -- "$dir" || exit 2

tmp=$(mktemp -d)
trap 'rm -rf -- "$tmp"' EXIT

passed=0
failed=0

# The flags a golden asks for on its first line, if any.
extra_args() {
    local first
    IFS= read -r first < "$1" || true
    case $first in
        "# args:"*) printf '%s\n' "${first#"# args:"}" ;;
    esac
}

# compare WHAT EXPECTED_NAME EXPECTED_FILE ACTUAL_FILE: true if they match, else prints
# a diff.
compare() {
    if ! cmp -s -- "$3" "$4"; then
        echo "--- $1 differs:"
        diff -u --label "expected $2" --label "actual $1" -- "$3" "$4"
        return 1
    fi
}

run_one() {
    local net=$1 name=${1%.net} ok=0 status want_status
    local -a args
    read -r -a args <<< "$(extra_args "$net")"
    timeout 60 "$cgc" --check "${args[@]}" "$net" > "$tmp/out" 2> "$tmp/err"
    status=$?

    local want_err="$name.err" err_label="$name.err"
    if [ ! -f "$want_err" ]; then
        want_err=$tmp/empty err_label="(nothing, no $name.err)"
        : > "$want_err"
    fi
    if [ -s "$want_err" ]; then want_status=1; else want_status=0; fi

    compare "$name (stderr)" "$err_label" "$want_err" "$tmp/err" || ok=1
    if [ -f "$name.out" ] && [ "${CGC_UPDATE_GOLDEN:-}" = 1 ]; then
        cp -- "$tmp/out" "$name.out"
    elif [ -f "$name.out" ]; then
        compare "$name (stdout)" "$name.out" "$name.out" "$tmp/out" || ok=1
    fi
    if [ "$status" -ne "$want_status" ]; then
        echo "--- $name: exit status $status, expected $want_status"
        ok=1
    fi
    return $ok
}

shopt -s nullglob
nets=(*.net)
if [ ${#nets[@]} -eq 0 ]; then
    echo "no .net files in $dir" >&2
    exit 1
fi
for net in "${nets[@]}"; do
    if run_one "$net"; then
        passed=$((passed + 1))
    else
        echo "FAIL: $net"
        failed=$((failed + 1))
    fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
