#!/usr/bin/env bash
# One CPU epoch of models/mlp.net as written (fp16 emulated) must reach test accuracy
# >= 0.84 on Fashion-MNIST, and --metrics must hold one well-formed line for it.
set -euo pipefail
cgc=$1 root=$2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
"$cgc" "$root/models/mlp.net" --device cpu --epochs 1 --metrics "$dir/m.jsonl" -q
lines=$(wc -l < "$dir/m.jsonl")
[ "$lines" -eq 1 ] || { echo "want 1 metrics line, got $lines"; cat "$dir/m.jsonl"; exit 1; }
line=$(cat "$dir/m.jsonl")
echo "$line"
for key in epoch step train_loss test_loss test_accuracy samples_per_s seconds; do
  grep -q "\"$key\":" <<<"$line" || { echo "metrics line lacks $key"; exit 1; }
done
grep -q '^{"epoch":1,"step":937,' <<<"$line" || { echo "want epoch 1 after 937 steps"; exit 1; }
acc=$(sed -E 's/.*"test_accuracy":([0-9.eE+-]+).*/\1/' <<<"$line")
awk -v a="$acc" 'BEGIN { exit !(a >= 0.84) }' || { echo "test_accuracy $acc < 0.84"; exit 1; }
echo "test_accuracy $acc >= 0.84"
