#!/usr/bin/env bash
# CPU benchmark (not a test): one epoch of models/mlp.net on Fashion-MNIST, in fp32 and
# in the file's fp16 (emulated), RUNS times each; prints each run's samples/s (training
# steps only, evaluation excluded) and the share of the run's wall time in GEMM calls.
#   scripts/bench_cpu.sh [RUNS]     (build first: make build)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
cgc=build/cgc
[ -x "$cgc" ] || { echo "build/cgc not found: run 'make build' first" >&2; exit 1; }
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
for precision in fp32 fp16; do
  for i in $(seq "$runs"); do
    out=$("$cgc" models/mlp.net --device cpu --epochs 1 --precision "$precision" 2>&1)
    rate=$(grep -oE '[0-9]+ samples/s' <<<"$out" | head -1)
    gemm=$(grep -oE '[0-9]+% of it in GEMMs' <<<"$out")
    acc=$(grep -oE 'test_accuracy [0-9.]+' <<<"$out")
    echo "$precision run $i: $rate, $gemm, $acc"
  done
done
