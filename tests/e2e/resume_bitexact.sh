#!/usr/bin/env bash
# 40 steps straight, and 20 steps (--stop-after) then --resume to 40, must write
# bit-identical checkpoints: parameters, optimizer state, loss scale and position.
# Run for every model so that dropout, accumulation and each optimizer are covered.
set -euo pipefail
cgc=$1 root=$2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
check() {  # check NAME MODEL ARGS...
  local name=$1 model=$2; shift 2
  "$cgc" "$model" --device cpu -q --steps 40 --save "$dir/$name-straight.st" "$@"
  "$cgc" "$model" --device cpu -q --steps 40 --stop-after 20 --save "$dir/$name-half.st" "$@"
  cmp -s "$dir/$name-straight.st" "$dir/$name-half.st" && { echo "$name: stopping at 20 changed nothing?"; exit 1; }
  "$cgc" "$model" --device cpu -q --steps 40 --resume "$dir/$name-half.st" --save "$dir/$name-resumed.st" "$@"
  cmp "$dir/$name-straight.st" "$dir/$name-resumed.st" || { echo "$name: resumed run differs"; exit 1; }
  echo "$name: bit-identical after resume"
}
check mlp "$root/models/mlp.net"
check resmlp "$root/models/resmlp.net" --batch 32
check regression "$root/models/regression.net" --accumulate 3 --clip-norm 0.5
check adam "$root/models/regression.net" --optimizer "adam(lr = 1e-3, weight_decay = 1e-4)" --schedule "cosine(warmup = 5)"
