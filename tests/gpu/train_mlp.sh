#!/bin/bash
# train_mlp.sh CGC MODELS_DIR: trains models/mlp.net as written (10 epochs, fp16) on the
# GPU and requires a test accuracy of at least 0.88 after the last epoch.
set -eu
. "$(dirname "$0")/common.sh"
MODELS=${2:?models dir}
"$CGC" "$MODELS/mlp.net" --device cuda --metrics "$WORK/m.jsonl" -v
acc=$(tail -1 "$WORK/m.jsonl" | sed -n 's/.*"test_accuracy":\([0-9.]*\).*/\1/p')
echo "final test accuracy: $acc"
awk -v a="$acc" 'BEGIN { exit !(a != "" && a >= 0.88) }' || { echo "FAIL: below 0.88"; exit 1; }
