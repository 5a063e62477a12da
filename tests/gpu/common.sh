# common.sh: sourced by the GPU tests. Skips (exit 77) unless `cgc --devices` lists a
# usable CUDA device; sets CGC and a scratch directory WORK that is removed on exit.
CGC=${1:?usage: $0 path/to/cgc}
if ! "$CGC" --devices 2>&1 | grep -q '^cuda:0'; then
    echo "skipped: no usable CUDA device ($("$CGC" --devices 2>&1 | head -1))"
    exit 77
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
