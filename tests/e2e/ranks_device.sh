#!/usr/bin/env bash
# Several ranks on devices: ranks training on the CUDA emulation (tests/emu/emu_rank: the
# plan's kernels, with each bucket of gradients summed in place between the plan's steps
# through the device's collectives, MPI underneath) reach the weights the same ranks
# reach on the CPU executor, in every mode that runs ranks on a device, with dropout,
# accumulation, clipping, adamw, bf16, uneven shares, shard = optimizer and a sum split
# across blocks. The oracle is cgc's CPU ranks, which tests/e2e/ranks.sh checks against
# one rank.
set -uo pipefail
cgc=$1 root=$2 rank=$3
source "$root/tests/e2e/ranks_lib.sh"

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
# the device's sums go through the job's Comm: 16 steps and the evaluation's totals
run "the sums of the emulated device are the job's collectives" 0 "rank 0 ran 17 collectives" -- \
    "${mpi[@]}" -n 2 "$rank" "$m" reduce-overhead "$tmp/dev.st"
# reduce-overhead captures the micro-batch, its sums included, and replays it
run "reduce-overhead captures the ranks' micro-batch" 0 "graph train captured at step 2" -- \
    "${mpi[@]}" -n 2 "$rank" "$m" reduce-overhead "$tmp/dev.st"

# a job of one rank on a device sums over it too (NCCL with one rank on a GPU: what the
# sums cost); between a sum's start and its wait the gradients hold NaN in the emulation,
# so the plan must still wait for each before it is read
run "one rank on the CPU, no job" 0 "done at step 16" -- "$cgc" "$m" --device cpu --save "$tmp/cpu1.st"
run "a job of one rank on the emulation" 0 "a job of one rank: its gradients are summed over it every step \(the device's collectives\)" -- \
    "${mpi[@]}" -n 1 "$rank" "$m" reduce-overhead "$tmp/dev1.st"
same "a job of one rank on the emulation against one rank on the CPU" "$tmp/dev1.st" "$tmp/cpu1.st" 1e-6

# Ten of the epoch's 16 steps, so that the checkpoint keeps the epoch's loss so far
run "three ranks on the CPU, uneven shares" 0 "done at step 10" -- "${mpi[@]}" -n 3 "$cgc" "$m" --device cpu \
    --steps 10 --save "$tmp/cpu3.st"
run "three ranks on the emulation" 0 "done at step 10" -- "${mpi[@]}" -n 3 "$rank" "$m" default "$tmp/dev3.st" \
    steps=10
# the shares are uneven (21, 21 and 22 rows): the epoch's loss weighs each rank's by its share
out=$("${close[@]}" --meta "$tmp/dev3.st" "$tmp/cpu3.st" 1e-6 2>&1) && ok ||
  bad "three ranks: the emulation against the CPU, and the epoch's loss: $out" ""

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

# dropout: each rank's masks are those of its rows of the micro-batch, in the dropout's
# own kernel (eager) and fused into its neighbours (default)
sed 's/h      = relu(linear(x, 64))/h      = dropout(relu(linear(x, 64)), 0.2)/' "$m" >"$tmp/drop.net"
run "two ranks on the CPU, dropout" 0 "done at step 16" -- "${mpi[@]}" -n 2 "$cgc" "$tmp/drop.net" \
    --device cpu --save "$tmp/cpu_drop.st"
for mode in eager default; do
  run "two ranks on the emulation, dropout, $mode" 0 "done at step 16" -- "${mpi[@]}" -n 2 "$rank" \
      "$tmp/drop.net" "$mode" "$tmp/dev_drop.st"
  same "dropout ($mode): the emulation against the CPU" "$tmp/dev_drop.st" "$tmp/cpu_drop.st" 1e-6
done

# max-autotune: rank 0 chooses, and every rank runs its choices. On the modeled clock rank
# 1 alone would choose algorithm 3 for every GEMM; it runs rank 0's algorithm 1 instead
# (rank 0 times all three when it tunes; it runs only algorithm 1 once it reads them back).
for how in tuned "read back"; do
  want="rank 1: GEMMs of algorithms 1, 2, 3: [1-9][0-9]*, 0, 0"
  [ "$how" = tuned ] || want="rank 0: GEMMs of algorithms 1, 2, 3: [1-9][0-9]*, 0, 0"
  out=$(timeout 300 "${mpi[@]}" -n 2 "$rank" "$m" max-autotune "$tmp/dev_tuned.st" "tune=$tmp/choices.tune" 2>&1)
  if grep -q "done at step 16" <<<"$out" && grep -qE "$want" <<<"$out" &&
     grep -qE "rank 1: GEMMs of algorithms 1, 2, 3: [1-9][0-9]*, 0, 0" <<<"$out"; then ok
  else bad "max-autotune ($how): every rank runs rank 0's choices" "$out"; fi
  same "max-autotune ($how): the emulation against the CPU" "$tmp/dev_tuned.st" "$tmp/cpu.st" 1e-6
done
grep -q "choices from" <<<"$out" && ok || bad "max-autotune read the choices file back" "$out"

# shard = optimizer: the gradients reduce-scattered, each rank's slices updated, the
# parameters all-gathered, by the device's collectives; 3 ranks cut some values unevenly
# (a short last slice, padded with zeros), and clipping sums the slices' norms
adamw="optimizer=adamw(lr = 0.01)"
run "two ranks on the CPU, sharded" 0 "done at step 16" -- "${mpi[@]}" -n 2 "$cgc" "$m" --device cpu \
    --shard optimizer --optimizer "adamw(lr = 0.01)" --save "$tmp/cpu_sh.st"
for mode in eager default reduce-overhead; do
  run "two ranks on the emulation, sharded, $mode" 0 "done at step 16" -- "${mpi[@]}" -n 2 "$rank" "$m" "$mode" \
      "$tmp/dev_sh.st" shard=optimizer "$adamw"
  same "sharded ($mode): the emulation against the CPU" "$tmp/dev_sh.st" "$tmp/cpu_sh.st" 1e-6
done
run "three ranks on the CPU, sharded, accumulation, clipping" 0 "done at step 8" -- "${mpi[@]}" -n 3 "$cgc" "$m" \
    --device cpu --shard optimizer --optimizer "adamw(lr = 0.01)" --accumulate 2 --clip-norm 0.5 \
    --save "$tmp/cpu_sh3.st"
run "three ranks on the emulation, sharded, accumulation, clipping" 0 "done at step 8" -- "${mpi[@]}" -n 3 \
    "$rank" "$m" default "$tmp/dev_sh3.st" shard=optimizer "$adamw" accumulate=2 clip_norm=0.5
same "three ranks, sharded: the emulation against the CPU" "$tmp/dev_sh3.st" "$tmp/cpu_sh3.st" 1e-6
# a sharded checkpoint of the emulation's ranks holds every rank's slices: one rank of
# the CPU resumes it and ends where a run that never stopped ends
run "two ranks on the emulation, sharded, 10 steps" 0 "done at step 10" -- "${mpi[@]}" -n 2 "$rank" "$m" \
    default "$tmp/dev_sh10.st" shard=optimizer "$adamw" steps=10
run "one rank on the CPU resumes it" 0 "resuming at step 10" -- "$cgc" "$m" --device cpu \
    --optimizer "adamw(lr = 0.01)" --resume "$tmp/dev_sh10.st" --save "$tmp/res_sh.st"
run "one rank on the CPU, not stopped" 0 "done at step 16" -- "$cgc" "$m" --device cpu \
    --optimizer "adamw(lr = 0.01)" --save "$tmp/cpu_adamw1.st"
same "the sharded checkpoint resumed against a run that never stopped" "$tmp/res_sh.st" "$tmp/cpu_adamw1.st" 1e-5

# A bias gradient over [2048, 1024] a rank, summed across blocks in parts and the parts by
# a second launch (cuda_reduce_to_split): the sum across the ranks starts after that one
cat >"$tmp/split.net" <<'NET'
model split {
    input x: f32[N, 16]
    input y: i32[N]
    h      = relu(linear(x, 1024))
    logits = linear(h, 10)
    output logits
    loss   cross_entropy(logits, y)
}
train {
    data      = synthetic(samples = 8192)
    batch     = 4096
    optimizer = sgd(lr = 0.05, momentum = 0.9)
    seed      = 3
}
NET
run "a rank's share of the batch splits the bias gradient's sum" 0 "sum the parts of reduce_to" -- \
    "$cgc" "$tmp/split.net" --explain --batch 2048
run "two ranks on the CPU, the split model" 0 "done at step 2" -- "${mpi[@]}" -n 2 "$cgc" "$tmp/split.net" \
    --device cpu --save "$tmp/cpu_split.st"
run "two ranks on the emulation, the split model" 0 "done at step 2" -- "${mpi[@]}" -n 2 "$rank" \
    "$tmp/split.net" default "$tmp/dev_split.st"
same "split sums: the emulation's ranks against the CPU's" "$tmp/dev_split.st" "$tmp/cpu_split.st" 1e-6

summary
