#!/usr/bin/env bash
# Ranks benchmark (not a test): one epoch of models/mlp.net (fp32, Fashion-MNIST) on one
# rank with every core, on one rank of one core, then on 2 ranks of one core each
# (mpirun), with the optimizer state sharded (shard = optimizer) and not, RUNS times each,
# interleaved; prints samples/s (training steps only), test accuracy, and, for 2 ranks,
# rank 0's time waiting for the collectives beside comm.h's prediction; then the MPI
# all-reduce itself (build/bench_allreduce) on 2 ranks, the measurements behind comm.h's
# bandwidth and latency.
#   scripts/bench_ranks.sh [RUNS]     (build first: make build)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
cgc=build/cgc
[ -x "$cgc" ] && [ -x build/bench_allreduce ] || { echo "build/cgc or build/bench_allreduce not found: run 'make build' first" >&2; exit 1; }
mpi=(mpirun --allow-run-as-root -n 2 -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1)
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $(mpirun --version | head -1)"
report() {  # report LABEL OUTPUT
  local rate acc wait
  rate=$(grep -oE '[0-9]+ samples/s' <<<"$2" | head -1)
  acc=$(grep -oE 'test_accuracy [0-9.]+' <<<"$2")
  wait=$(grep -oE 'waited [0-9.]+ s for them; comm.h.s model predicts [0-9.]+ s' <<<"$2" || true)
  echo "$1: $rate, $acc${wait:+, $wait}"
}
flags=(models/mlp.net --device cpu --epochs 1 --precision fp32 -v)
for i in $(seq "$runs"); do
  report "1 rank, $(nproc) threads, run $i" "$(OPENBLAS_NUM_THREADS=1 "$cgc" "${flags[@]}" 2>&1)"
  report "1 rank, 1 thread, run $i" "$(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$cgc" "${flags[@]}" 2>&1)"
  report "2 ranks, 1 thread each, run $i" "$("${mpi[@]}" "$cgc" "${flags[@]}" 2>&1)"
  report "2 ranks, 1 thread each, sharded, run $i" "$("${mpi[@]}" "$cgc" "${flags[@]}" --shard optimizer 2>&1)"
done
"${mpi[@]}" build/bench_allreduce
