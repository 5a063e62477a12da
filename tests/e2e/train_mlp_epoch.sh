#!/usr/bin/env bash
# train_mlp_epoch.sh CGC ROOT PRECISION MIN: one CPU epoch of models/mlp.net at PRECISION
# (fp16 and bf16 rounding emulated exactly) must reach test accuracy >= MIN on
# Fashion-MNIST, and --metrics must hold one well-formed line for it.
set -euo pipefail
cgc=$1 root=$2 precision=$3 min=$4
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
"$cgc" "$root/models/mlp.net" --device cpu --epochs 1 --precision "$precision" \
    --metrics "$dir/m.jsonl" -q
lines=$(wc -l < "$dir/m.jsonl")
[ "$lines" -eq 1 ] || { echo "want 1 metrics line, got $lines"; cat "$dir/m.jsonl"; exit 1; }
line=$(cat "$dir/m.jsonl")
echo "$line"
for key in epoch step train_loss test_loss test_accuracy samples_per_s seconds; do
  grep -q "\"$key\":" <<<"$line" || { echo "metrics line lacks $key"; exit 1; }
done
grep -q '^{"epoch":1,"step":937,' <<<"$line" || { echo "want epoch 1 after 937 steps"; exit 1; }
acc=$(sed -E 's/.*"test_accuracy":([0-9.eE+-]+).*/\1/' <<<"$line")
awk -v a="$acc" -v m="$min" 'BEGIN { exit !(a >= m) }' || { echo "$precision: test_accuracy $acc < $min"; exit 1; }
echo "$precision: test_accuracy $acc >= $min"
