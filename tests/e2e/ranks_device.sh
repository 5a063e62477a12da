#!/usr/bin/env bash
# Several ranks on devices: ranks training on the CUDA emulation (tests/emu/emu_rank: the
# plan's kernels, with each bucket of gradients summed in place between the plan's steps
# through the device's collectives, MPI underneath) reach the weights the same ranks
# reach on the CPU executor, in every mode that runs ranks on a device, with
# accumulation, clipping, adamw, bf16 and uneven shares. The oracle is cgc's CPU ranks,
# which tests/e2e/ranks.sh checks against one rank. What devices cannot do with ranks
# yet is refused with a message.
set -uo pipefail
cgc=$1 root=$2 rank=$3
command -v mpirun >/dev/null || { echo "mpirun not found (apt-get install openmpi-bin): skipped"; exit 77; }
fails=0 passes=0
tmp=$(mktemp -d)
trap 'rm -rf -- "$tmp"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export LSAN_OPTIONS="suppressions=$root/tests/e2e/lsan_mpi.supp:fast_unwind_on_malloc=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
mpi=(mpirun --oversubscribe --allow-run-as-root -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS -x LSAN_OPTIONS)
close=(/usr/bin/env python3 "$root/tests/e2e/st_close.py")

ok() { passes=$((passes + 1)); }
bad() {  # bad DESCRIPTION OUTPUT
  echo "FAIL: $1"; echo "$2" | tail -15
  fails=$((fails + 1))
}
# run DESCRIPTION STATUS PATTERN -- COMMAND...
run() {
  local what=$1 want=$2 pattern=$3; shift 4
  local out status
  out=$(timeout 300 "$@" 2>&1); status=$?
  local good=$([ "$want" = nonzero ] && [ "$status" -ne 0 ] || [ "$status" = "$want" ] && echo 1)
  if [ -z "$good" ] || ! grep -qE -- "$pattern" <<<"$out"; then
    bad "$what: status $status (want $want)" "$out"
  else
    ok
  fi
}
same() {
  local out
  if out=$("${close[@]}" "$2" "$3" "$4" 2>&1); then ok; else bad "$1: $out" ""; fi
}

cat >"$tmp/mlp.net" <<'NET'
model mlp {
    input x: f32[N, 32]
    input y: i32[N]
    h      = relu(linear(x, 64))
    g      = gelu(linear(h, 48))
    logits = linear(g, 10)
    output logits
    loss   cross_entropy(logits, y)
}
train {
    data      = synthetic(samples = 1000)
    batch     = 64
    drop_last = false
    optimizer = sgd(lr = 0.05, momentum = 0.9)
    seed      = 3
}
NET
m="$tmp/mlp.net"

# --- the same weights as the CPU's ranks (a last batch of 40 rows: 20 on each) ---
run "two ranks on the CPU" 0 "done at step 16" -- "${mpi[@]}" -n 2 "$cgc" "$m" --device cpu --save "$tmp/cpu.st"
for mode in eager default reduce-overhead; do
  run "two ranks on the emulation, $mode" 0 "done at step 16" -- "${mpi[@]}" -n 2 "$rank" "$m" "$mode" \
      "$tmp/dev.st"
  same "two ranks on the emulation ($mode) against two on the CPU" "$tmp/dev.st" "$tmp/cpu.st" 1e-6
done
run "reduce-overhead: a micro-batch of ranks is not captured" 0 "rank 0 ran 17 collectives" -- \
    "${mpi[@]}" -n 2 "$rank" "$m" reduce-overhead "$tmp/dev.st"

run "three ranks on the CPU, uneven shares" 0 "done at step 16" -- "${mpi[@]}" -n 3 "$cgc" "$m" --device cpu \
    --save "$tmp/cpu3.st"
run "three ranks on the emulation" 0 "done at step 16" -- "${mpi[@]}" -n 3 "$rank" "$m" default "$tmp/dev3.st"
same "three ranks: the emulation against the CPU" "$tmp/dev3.st" "$tmp/cpu3.st" 1e-6

run "two ranks on the CPU: accumulation, clipping, adamw" 0 "done at step 8" -- "${mpi[@]}" -n 2 "$cgc" "$m" \
    --device cpu --accumulate 2 --clip-norm 0.5 --optimizer "adamw(lr = 0.01)" --save "$tmp/cpu_acc.st"
run "two ranks on the emulation: accumulation, clipping, adamw" 0 "done at step 8" -- "${mpi[@]}" -n 2 "$rank" \
    "$m" default "$tmp/dev_acc.st" accumulate=2 clip_norm=0.5 "optimizer=adamw(lr = 0.01)"
same "accumulation, clipping, adamw: the emulation against the CPU" "$tmp/dev_acc.st" "$tmp/cpu_acc.st" 1e-5

run "two ranks on the CPU, bf16" 0 "done at step 16" -- "${mpi[@]}" -n 2 "$cgc" "$m" --device cpu \
    --precision bf16 --save "$tmp/cpu16.st"
run "two ranks on the emulation, bf16" 0 "done at step 16" -- "${mpi[@]}" -n 2 "$rank" "$m" default \
    "$tmp/dev16.st" precision=bf16
same "bf16: the emulation against the CPU" "$tmp/dev16.st" "$tmp/cpu16.st" 1e-2

# --- what devices do not do with several ranks yet ---
sed 's/h      = relu(linear(x, 64))/h      = dropout(relu(linear(x, 64)), 0.2)/' "$m" >"$tmp/drop.net"
run "dropout is refused" 1 "drop.net:4: dropout trains on one rank of a device only for now" -- \
    "${mpi[@]}" -n 2 "$rank" "$tmp/drop.net" default "$tmp/x.st"
run "max-autotune is refused" 1 "max-autotune trains one rank only for now" -- \
    "${mpi[@]}" -n 2 "$rank" "$m" max-autotune "$tmp/x.st"
run "shard = optimizer is refused" 1 "shard = optimizer trains on the CPU only for now" -- \
    "${mpi[@]}" -n 2 "$rank" "$m" default "$tmp/x.st" shard=optimizer

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
