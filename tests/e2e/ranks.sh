#!/usr/bin/env bash
# Training on several ranks (MPI, on the CPU): R ranks taking batch / R rows each train to
# the weights one rank reaches with the whole batch (within f32 rounding: the sums run in
# another order), in every mode, with dropout, accumulation, clipping, fp16 and uneven
# shares, with the optimizer state sharded or not; a checkpoint made with one world size
# resumes with another; rank 0 alone
# writes; ranks that compiled different programs, a killed rank and a hung one end the
# job with a message; a launch that cannot work is refused. The oracle is the one-rank
# run, which the other tests check against PyTorch and the gradient checks.
set -uo pipefail
cgc=$1 root=$2
source "$root/tests/e2e/ranks_lib.sh"

cat >"$tmp/mlp.net" <<'NET'
model mlp {
    input x: f32[N, 32]
    input y: i32[N]
    h      = dropout(relu(linear(x, 64)), 0.2)
    logits = linear(h, 10)
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

# --- the same weights, whatever the number of ranks ---
run "one rank" 0 "done at step 16" -- "$cgc" "$m" --device cpu --save "$tmp/one.st"
run "two ranks" 0 "2 ranks, each taking its 32" -- "${mpi[@]}" -n 2 "$cgc" "$m" --device cpu --save "$tmp/two.st"
same "two ranks against one (sgd, dropout, a last batch of 40 rows)" "$tmp/one.st" "$tmp/two.st" 1e-5
run "three ranks, uneven shares" 0 "done at step 16" -- "${mpi[@]}" -n 3 "$cgc" "$m" --device cpu --save "$tmp/three.st"
same "three ranks against one" "$tmp/one.st" "$tmp/three.st" 1e-5
for mode in eager default reduce-overhead max-autotune; do
  run "two ranks, --mode $mode" 0 "done at step 16" -- "${mpi[@]}" -n 2 "$cgc" "$m" --device cpu --mode "$mode" \
      --save "$tmp/mode.st"
  same "two ranks in --mode $mode against one" "$tmp/one.st" "$tmp/mode.st" 1e-5
done
# text: each rank gathers its rows' windows from the mapped file, at the epoch's phase
txt="$root/tests/emu/text/chars.net"
run "text, one rank" 0 "done at step 40" -- "$cgc" "$txt" --device cpu --steps 40 --save "$tmp/t1.st" \
    --metrics "$tmp/t1.jsonl" --metrics-every 4
run "text, two ranks" 0 "done at step 40" -- "${mpi[@]}" -n 2 "$cgc" "$txt" --device cpu --steps 40 --save "$tmp/t2.st" \
    --metrics "$tmp/t2.jsonl" --metrics-every 4
same "text: two ranks against one" "$tmp/t1.st" "$tmp/t2.st" 1e-5
# models/gpt.net: step 0's gradients (Adam's first moment after one step) of two ranks
# against one; a key's bias has a zero gradient (the softmax drops a shift shared by all
# keys), rounding noise on both sides, so it is held to 1e-8 absolute instead
if [ -f /usr/share/games/fortunes/cookie ]; then
  for n in 1 2; do
    launch=(); [ $n = 2 ] && launch=("${mpi[@]}" -n 2)
    run "gpt.net, $n rank(s)" 0 "done at step 1" -- "${launch[@]}" "$cgc" "$root/models/gpt.net" --device cpu \
        --steps 1 --save "$tmp/gpt$n.st"
  done
  grads=$(python3 - "$tmp/gpt1.st" "$tmp/gpt2.st" "$root/tests/e2e" <<'PY'
import math, sys
sys.path.insert(0, sys.argv[3])
from st_close import load
a, b = load(sys.argv[1]), load(sys.argv[2])
pre, worst, noise = "cgc.adam.exp_avg.", 0.0, 0.0
for k in a:
    if not k.startswith(pre):
        continue
    va, vb, name = a[k][1], b[k][1], k[len(pre):]
    if name.startswith("k") and name.endswith(".bias"):
        noise = max(noise, max(abs(x) for x in va + vb))
        continue
    norm = math.sqrt(sum(x * x for x in va)) or 1.0
    worst = max(worst, math.sqrt(sum((x - y) ** 2 for x, y in zip(va, vb))) / norm)
print(f"{worst:.1e} {noise:.1e} {worst < 1e-5 and noise < 1e-8}")
PY
)
  [ "${grads##* }" = True ] && ok || bad "gpt.net: step 0's gradients of two ranks against one: $grads" ""
fi
# --metrics-every: each record the mean loss of its 4 steps over both ranks, as one rank's
steps=$(python3 - "$tmp/t1.jsonl" "$tmp/t2.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p) if '"epoch"' not in l] for p in sys.argv[1:])
worst = max(abs(x["train_loss"] - y["train_loss"]) / abs(x["train_loss"]) for x, y in zip(a, b))
print(f"{len(a)} {len(b)} {[r['step'] for r in a] == list(range(4, 41, 4))} {worst:.1e} {worst < 1e-5}")
PY
)
[ "$steps" != "${steps%True * True}" ] && ok || bad "text: step records of two ranks against one: $steps" "$(cat "$tmp/t2.jsonl")"
run "--nproc 2" 0 "done at step 16" -- "$cgc" "$m" --device cpu --nproc 2 --save "$tmp/nproc.st"
same "--nproc 2 against mpirun -n 2 (bit for bit)" "$tmp/two.st" "$tmp/nproc.st" 0
# a job of one rank sums over it: a sum over one rank is the value, so bit for bit
for how in "--nproc 1" "mpirun -n 1"; do
  launch=("$cgc"); [ "$how" = "--nproc 1" ] || launch=("${mpi[@]}" -n 1 "$cgc")
  extra=(); [ "$how" = "--nproc 1" ] && extra=(--nproc 1)
  run "a job of one rank ($how)" 0 "a job of one rank: its gradients are summed over it every step" -- \
      "${launch[@]}" "$m" --device cpu "${extra[@]}" --save "$tmp/job1.st"
  same "a job of one rank ($how) against no job (bit for bit)" "$tmp/one.st" "$tmp/job1.st" 0
done
out=$("$cgc" "$m" --dump-ir --nproc 1 2>&1)
grep -q "allreduce" <<<"$out" && ok || bad "--nproc 1 compiles the sums over the ranks" "$out"
out=$("$cgc" "$m" --dump-ir 2>&1)
grep -q "allreduce" <<<"$out" && bad "a plain run compiles sums over ranks" "$out" || ok

mixed=(--accumulate 2 --clip-norm 0.5 --optimizer "adamw(lr = 0.01)")
run "one rank, accumulation, clipping, adamw" 0 "done at step 8" -- "$cgc" "$m" --device cpu "${mixed[@]}" \
    --save "$tmp/one_acc.st"
run "two ranks, accumulation, clipping, adamw" 0 "done at step 8" -- "${mpi[@]}" -n 2 "$cgc" "$m" --device cpu \
    "${mixed[@]}" --save "$tmp/two_acc.st"
# Adam divides by the root of the squared gradients' average, which magnifies the
# rounding of the smallest gradients: 1e-4
same "accumulation, clipping, adamw: two ranks against one" "$tmp/one_acc.st" "$tmp/two_acc.st" 1e-4
# In fp16 each rank rounds its weight-gradient products to fp16 before the sum (as DDP
# under autocast does), so a step differs by one fp16 rounding (2^-11) of the gradients,
# and an epoch of steps by what such noise grows to; the loss scaler, skipping steps
# where the summed gradients overflow, must agree exactly.
half=(--precision fp16 --accumulate 2 --clip-norm 0.5)
for steps in 1 8; do
  run "one rank, fp16, $steps steps" 0 "done at step $steps" -- "$cgc" "$m" --device cpu "${half[@]}" \
      --steps "$steps" --save "$tmp/one16.st"
  run "two ranks, fp16, $steps steps" 0 "done at step $steps" -- "${mpi[@]}" -n 2 "$cgc" "$m" --device cpu \
      "${half[@]}" --steps "$steps" --save "$tmp/two16.st"
  same "fp16, $steps steps: the loss scaler of two ranks against one's" "$tmp/one16.st" "$tmp/two16.st" 0 cgc.scaler
  same "fp16, $steps steps: two ranks against one" "$tmp/one16.st" "$tmp/two16.st" "$([ "$steps" = 1 ] && echo 1e-3 || echo 0.1)"
done

# --- checkpoints move between world sizes ---
run "one rank, 3 epochs" 0 "done at step 48" -- "$cgc" "$m" --device cpu --epochs 3 --save "$tmp/full.st"
run "two ranks stop at step 20" 0 "stopped at step 20" -- "${mpi[@]}" -n 2 "$cgc" "$m" --device cpu --epochs 3 \
    --stop-after 20 --save "$tmp/half.st"
run "one rank resumes it" 0 "resuming at step 20" -- "$cgc" "$m" --device cpu --epochs 3 --resume "$tmp/half.st" \
    --save "$tmp/resumed1.st"
same "two ranks, then one, against one throughout" "$tmp/full.st" "$tmp/resumed1.st" 1e-5
run "one rank stops at step 20" 0 "stopped at step 20" -- "$cgc" "$m" --device cpu --epochs 3 --stop-after 20 \
    --save "$tmp/half1.st"
run "three ranks resume it" 0 "resuming at step 20" -- "${mpi[@]}" -n 3 "$cgc" "$m" --device cpu --epochs 3 \
    --resume "$tmp/half1.st" --save "$tmp/resumed3.st"
same "one rank, then three, against one throughout" "$tmp/full.st" "$tmp/resumed3.st" 1e-5

# --- shard = optimizer: each rank updates slices, the same weights ---
# With two ranks a reduce-scatter adds the same two numbers as an all-reduce, so without
# clipping (whose norm adds per-rank parts) sharding changes no bit.
sh=(--shard optimizer)
run "two ranks, sharded" 0 "done at step 16" -- "${mpi[@]}" -n 2 "$cgc" "$m" --device cpu "${sh[@]}" --save "$tmp/two_sh.st"
same "sharded against not, two ranks (sgd, bit for bit)" "$tmp/two.st" "$tmp/two_sh.st" 0
adamw=(--optimizer "adamw(lr = 0.01)")
run "two ranks, adamw" 0 "done at step 16" -- "${mpi[@]}" -n 2 "$cgc" "$m" --device cpu "${adamw[@]}" --save "$tmp/two_aw.st"
run "two ranks, adamw, sharded" 0 "done at step 16" -- "${mpi[@]}" -n 2 "$cgc" "$m" --device cpu "${adamw[@]}" "${sh[@]}" \
    --save "$tmp/two_aw_sh.st"
same "sharded against not, two ranks (adamw, bit for bit)" "$tmp/two_aw.st" "$tmp/two_aw_sh.st" 0
# three ranks cut 64 x 32 weights into uneven slices, the last padded
sed 's/^    seed      = 3$/&\n    shard     = optimizer/' "$m" >"$tmp/mlp_sh.net"
run "three ranks, sharded by the file" 0 "done at step 16" -- "${mpi[@]}" -n 3 "$cgc" "$tmp/mlp_sh.net" --device cpu \
    --save "$tmp/three_sh.st"
same "three ranks, sharded, against one" "$tmp/one.st" "$tmp/three_sh.st" 1e-5
run "one rank, sharded (nothing to shard)" 0 "done at step 16" -- "$cgc" "$tmp/mlp_sh.net" --device cpu --save "$tmp/one_sh.st"
same "one rank, sharded, against not (bit for bit)" "$tmp/one.st" "$tmp/one_sh.st" 0
for mode in eager max-autotune; do
  run "three ranks, sharded, --mode $mode" 0 "done at step 16" -- "${mpi[@]}" -n 3 "$cgc" "$tmp/mlp_sh.net" --device cpu \
      --mode "$mode" --save "$tmp/mode_sh.st"
  same "three ranks, sharded, in --mode $mode against one" "$tmp/one.st" "$tmp/mode_sh.st" 1e-5
done
run "three ranks, sharded, accumulation, clipping, adamw" 0 "done at step 8" -- "${mpi[@]}" -n 3 "$cgc" "$m" --device cpu \
    "${mixed[@]}" "${sh[@]}" --save "$tmp/three_acc_sh.st"
same "accumulation, clipping, adamw: three ranks, sharded, against one" "$tmp/one_acc.st" "$tmp/three_acc_sh.st" 1e-4
run "one rank, fp16, 1 step" 0 "done at step 1" -- "$cgc" "$m" --device cpu "${half[@]}" --steps 1 --save "$tmp/one16.st"
run "two ranks, fp16, sharded" 0 "done at step 1" -- "${mpi[@]}" -n 2 "$cgc" "$m" --device cpu "${half[@]}" "${sh[@]}" \
    --steps 1 --save "$tmp/two16_sh.st"
same "fp16, sharded: the loss scaler of two ranks against one's" "$tmp/one16.st" "$tmp/two16_sh.st" 0 cgc.scaler
same "fp16, sharded: two ranks against one" "$tmp/one16.st" "$tmp/two16_sh.st" 1e-3
# An fp16 overflow on one rank skips the step on all: rank 1's rows (the second half of
# each batch, unshuffled) alone overflow the gradient of the weight's second element, the
# element rank 1's slice holds when sharded, until the loss scale has halved twice.
mkdir -p "$tmp/ovf/data"
python3 - "$tmp/ovf/data" <<'PY'
import struct, sys
d, n = sys.argv[1], 256
img, lab = bytearray(), bytearray()
for i in range(n):
    rank1 = i % 64 >= 32
    img += bytes([0, 3] if rank1 else [1, 0])
    lab.append(0 if rank1 else 1)
open(f"{d}/train-images-idx3-ubyte", "wb").write(struct.pack(">IIII", 0x803, n, 1, 2) + img)
open(f"{d}/train-labels-idx1-ubyte", "wb").write(struct.pack(">II", 0x801, n) + lab)
PY
cat >"$tmp/ovf/ovf.net" <<'NET'
model ovf {
    input x: f32[N, 2]
    input t: f32[N, 1]
    pred = linear(x, 1, bias = false)
    output pred
    loss   mse(pred, t)
}
train {
    data      = idx("data", scale = 1)
    batch     = 64
    shuffle   = false
    precision = fp16
    optimizer = sgd(lr = 0.01)
}
NET
run "fp16 overflow, one rank" 0 "2 fp16 steps skipped so far" -- "$cgc" "$tmp/ovf/ovf.net" --device cpu --steps 8 --save "$tmp/ovf1.st"
for s in none optimizer; do
  run "fp16 overflow on rank 1, shard $s" 0 "2 fp16 steps skipped so far" -- "${mpi[@]}" -n 2 "$cgc" "$tmp/ovf/ovf.net" \
      --device cpu --steps 8 --shard "$s" --save "$tmp/ovf2.st"
  same "fp16 overflow on rank 1, shard $s: the loss scaler against one rank's" "$tmp/ovf1.st" "$tmp/ovf2.st" 0 cgc.scaler
  same "fp16 overflow on rank 1, shard $s: the weights against one rank's" "$tmp/ovf1.st" "$tmp/ovf2.st" 1e-3
done
# a checkpoint holds the whole state, whatever the shards: it resumes on any world size
run "one rank, 3 epochs, adamw" 0 "done at step 48" -- "$cgc" "$m" --device cpu --epochs 3 "${adamw[@]}" --save "$tmp/full_aw.st"
run "two ranks, sharded, stop at step 20" 0 "stopped at step 20" -- "${mpi[@]}" -n 2 "$cgc" "$m" --device cpu --epochs 3 \
    "${adamw[@]}" "${sh[@]}" --stop-after 20 --save "$tmp/half_sh.st"
run "one rank resumes the sharded run" 0 "resuming at step 20" -- "$cgc" "$m" --device cpu --epochs 3 "${adamw[@]}" \
    --resume "$tmp/half_sh.st" --save "$tmp/resumed_sh1.st"
same "two sharded ranks, then one, against one throughout" "$tmp/full_aw.st" "$tmp/resumed_sh1.st" 1e-4
run "three sharded ranks resume it" 0 "resuming at step 20" -- "${mpi[@]}" -n 3 "$cgc" "$m" --device cpu --epochs 3 \
    "${adamw[@]}" "${sh[@]}" --resume "$tmp/half_sh.st" --save "$tmp/resumed_sh3.st"
same "two sharded ranks, then three, against one throughout" "$tmp/full_aw.st" "$tmp/resumed_sh3.st" 1e-4
explain=("$cgc" "$m" --explain --nproc 3 "${adamw[@]}" "${sh[@]}")
run "--explain: the gradients reduce-scattered" 0 "bucket 0: reduce-scatter of 4 values, 10.8 KB" -- "${explain[@]}"
run "--explain: the parameters gathered" 0 "bucket 1: all-gather of 4 values, 10.8 KB" -- "${explain[@]}"
# AdamW's two moments of 2762 parameters, 921 each of the 2763 after padding on a rank
run "--explain: the state a rank keeps" 0 "each rank keeps 7.2 KB of optimizer state, a slice of every tensor of it \(21.6 KB unsharded\)" -- \
    "${explain[@]}"
# the memory plan of a rank: its rows of the batch, and the state it keeps
for s in none optimizer; do
  "$cgc" "$m" --check --arch none --nproc 3 "${adamw[@]}" --shard "$s" --stats "$tmp/stats_$s.json" -q
done
if out=$(python3 - "$tmp/stats_none.json" "$tmp/stats_optimizer.json" <<'PY' 2>&1
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
saved = a["persistent_bytes"] - b["persistent_bytes"]
# AdamW's moments of 2762 parameters: 22096 bytes on every rank, 7384 sharded over 3
assert a["ranks"] == b["ranks"] == 3 and a["batch"] == b["batch"] == 22, (a["ranks"], a["batch"])
assert 13000 <= saved <= 15000, saved
PY
); then ok; else bad "--stats of a sharded rank" "$out"; fi

# --- rank 0 alone writes ---
run "metrics of two ranks" 0 "done at step 48" -- "${mpi[@]}" -n 2 "$cgc" "$m" --device cpu --epochs 3 \
    --metrics "$tmp/metrics.jsonl"
lines=$(wc -l <"$tmp/metrics.jsonl")
[ "$lines" -eq 3 ] && ok || bad "metrics: $lines lines for 3 epochs of two ranks" "$(cat "$tmp/metrics.jsonl")"
out=$("${mpi[@]}" -n 2 "$cgc" "$m" --device cpu 2>&1)
n=$(grep -c "^epoch 1/1" <<<"$out")
[ "$n" -eq 1 ] && ok || bad "two ranks print the epoch $n times" "$out"

# --- batch norm: its running statistics averaged, the same on every rank ---
cat >"$tmp/bn.net" <<'NET'
model bn {
    input x: f32[N, 32]
    input y: i32[N]
    z      = linear(x, 64)
    h      = relu(batchnorm(z))
    logits = linear(h, 10)
    output logits
    loss   cross_entropy(logits, y)
}
train {
    data      = synthetic(samples = 1024)
    batch     = 64
}
NET
run "batch norm on two ranks" 0 "done at step 16" -- "${mpi[@]}" -n 2 "$cgc" "$tmp/bn.net" --device cpu --save "$tmp/bn2.st"
run "batch norm on one rank" 0 "done at step 16" -- "$cgc" "$tmp/bn.net" --device cpu --save "$tmp/bn1.st"
# every rank's statistics come from 32 rows instead of 64: close to one rank's, not equal
same "batch norm's running mean, two ranks against one" "$tmp/bn1.st" "$tmp/bn2.st" 0.2 "h.running_mean"

cat >"$tmp/huge.net" <<'NET'
model huge {
    input x: f32[N, 32768]
    input y: i32[N]
    h      = linear(x, 65536)
    logits = linear(h, 10)
    output logits
    loss   cross_entropy(logits, y)
}
train {
    data  = synthetic(samples = 64)
    batch = 32
}
NET

# --- jobs that must end, with a message ---
run "ranks that compiled different programs" 1 "cgc: error: rank 0: the compiled programs differ between ranks: 1 of the 2 ranks \(rank 1 the first\)" -- \
    "${mpi[@]}" -n 1 "$cgc" "$m" --device cpu --lr 0.05 : -n 1 "$cgc" "$m" --device cpu --lr 0.06
# the same .net file and data path on two machines, with other files there
for d in a b; do
  mkdir -p "$tmp/$d/data"
  sed 's|synthetic(samples = 1000)|idx("data")|; s|f32\[N, 32\]|f32[N, 4]|' "$m" >"$tmp/$d/m.net"
  python3 - "$tmp/$d/data" "$([ $d = a ] && echo 1 || echo 2)" <<'PY'
import struct, sys
d, seed = sys.argv[1], int(sys.argv[2])
n = 100
with open(f"{d}/train-images-idx3-ubyte", "wb") as f:
    f.write(struct.pack(">IIII", 0x803, n, 2, 2) + bytes((i * 7 * seed) % 256 for i in range(4 * n)))
with open(f"{d}/train-labels-idx1-ubyte", "wb") as f:
    f.write(struct.pack(">II", 0x801, n) + bytes(i % 10 for i in range(n)))
PY
done
run "ranks that read other data" 1 "cgc: error: rank 0: the data the ranks read differ between ranks: 1 of the 2 ranks \(rank 1 the first\)" -- \
    "${mpi[@]}" -n 1 "$cgc" "$tmp/a/m.net" --device cpu : -n 1 "$cgc" "$tmp/b/m.net" --device cpu
run "ranks that read the same data" 0 "done at step" -- "${mpi[@]}" -n 2 "$cgc" "$tmp/a/m.net" --device cpu
long=(--device cpu --epochs 100000)
cat >"$tmp/kill1.sh" <<SH
#!/bin/sh
# rank 1 is killed (SIGKILL) after 2 seconds of training
if [ "\$OMPI_COMM_WORLD_RANK" = 1 ]; then exec timeout -s KILL 2 "$cgc" "$m" ${long[*]}; fi
exec "$cgc" "$m" ${long[*]}
SH
chmod +x "$tmp/kill1.sh"
start=$SECONDS
limit=120 run "a killed rank ends the job" nonzero "process rank 1 .* exited on signal 9" -- "${mpi[@]}" -n 2 "$tmp/kill1.sh"
[ $((SECONDS - start)) -lt 60 ] && ok || bad "a killed rank ended the job after $((SECONDS - start)) s" ""
sed 's/-s KILL/-s STOP/; s/is killed (SIGKILL)/stops (SIGSTOP)/' "$tmp/kill1.sh" >"$tmp/stop1.sh"
chmod +x "$tmp/stop1.sh"
start=$SECONDS
# rank 0 waits in whichever collective rank 1 stopped before: a bucket's, the epoch's
# loss, the epoch's check that the ranks agree
limit=120 run "a hung rank ends the job at the timeout" 1 "cgc: error: rank 0: (the collective of bucket [0-9]+|the epoch's loss|the trained tensors) did not complete in 5 s: another rank has stopped or hangs" -- \
    env CGC_COMM_TIMEOUT=5 "${mpi[@]}" -x CGC_COMM_TIMEOUT -n 2 "$tmp/stop1.sh"
[ $((SECONDS - start)) -lt 60 ] && ok || bad "a hung rank ended the job after $((SECONDS - start)) s" ""

# --- launches refused ---
run "WORLD_SIZE without a launcher" 1 "WORLD_SIZE is 2, but this process was not started by a launcher that MPI can join" -- \
    env WORLD_SIZE=2 RANK=0 "$cgc" "$m" --device cpu
run "RANK against mpirun's rank" nonzero "cgc: error: mpirun says rank 1 of 2, but RANK and WORLD_SIZE say 0 of 2" -- \
    "${mpi[@]}" -n 2 -x RANK=0 -x WORLD_SIZE=2 "$cgc" "$m" --device cpu
run "RANK out of range" 1 "RANK is '5', not a number from 0 to 1" -- env WORLD_SIZE=2 RANK=5 "$cgc" "$m" --device cpu
run "a parameter too large for one MPI call" 1 "parameter 'h.weight' has 2147483648 elements, more than one MPI call carries" -- \
    "${mpi[@]}" -n 2 "$cgc" "$tmp/huge.net" --device cpu
run "--nproc against the launcher" 2 "--nproc 3, but the launcher started this job with 2 ranks" -- \
    "${mpi[@]}" -n 2 "$cgc" "$m" --device cpu --nproc 3
run "--nproc with --bench" 2 "does not go with --nproc" -- "$cgc" "$m" --bench --nproc 2
run "--emit with --nproc" 2 "--emit writes the kernels and reproducer of one device's training step, not a job's \(--nproc\)" -- \
    "$cgc" "$m" --check --nproc 2 --emit "$tmp/emit"
run "--emit under mpirun" 2 "not a job's \(this job\)" -- "${mpi[@]}" -n 2 "$cgc" "$m" --device cpu --emit "$tmp/emit"
[ ! -e "$tmp/emit" ] && ok || bad "a refused --emit wrote $tmp/emit" "$(ls "$tmp/emit")"
# each rank takes cuda:LOCAL_RANK: on a machine with fewer than two GPUs, rank 1 has none
# (without a GPU rank 0 has none either, and whichever rank says so first ends the job)
run "several ranks on cuda" 1 "rank ([01]: --device cuda:[01]: no usable CUDA device|1: --device cuda:1: there is only 1)" -- "${mpi[@]}" -n 2 "$cgc" "$m" --device cuda
run "several ranks on one named GPU" 1 "with several ranks each takes the GPU of its local rank" -- \
    "${mpi[@]}" -n 2 "$cgc" "$m" --device cuda:0
run "several ranks, --device auto without GPUs" 0 "[01] of the 2 ranks found a GPU of their own; every rank trains on the CPU" -- "${mpi[@]}" -n 2 "$cgc" "$m" --device auto
run "a batch too small for the ranks" 1 "batch = 2 split over 3 ranks gives a rank no rows of its own" -- \
    "${mpi[@]}" -n 3 "$cgc" "$m" --device cpu --batch 2
run "--explain --nproc 2" 0 "bucket 0: sum of 4 values" -- "$cgc" "$m" --explain --nproc 2
# on GPUs, NCCL's ring: 2762 f32 gradients, 11048 B x 2 (2 - 1) / 2 at 450 GB/s (0.02 us)
# plus 10 us for the call: 0.010 ms
run "--explain --nproc 2 on GPUs: NCCL's model" 0 "\(NCCL, one GPU a rank\)" -- "$cgc" "$m" --explain --nproc 2 --device cuda
run "--explain --nproc 2 on GPUs: the bucket's time" 0 "bucket 0: sum of 4 values, 10.8 KB, .*predicted 0.010 ms" -- \
    "$cgc" "$m" --explain --nproc 2 --device cuda

# --- a launch checked before its ranks start, and stopped whole ---
cores=$(getconf _NPROCESSORS_ONLN)   # nproc would heed OMP_NUM_THREADS
start=$SECONDS
run "--nproc far past the cores" 1 "--nproc $((cores * 8 + 1)): this machine has $cores cores" -- \
    "$cgc" "$m" --device cpu --nproc $((cores * 8 + 1))
# once, by the launcher: not "rank N:", as each rank's own report would say
run "a batch too small for --nproc, before launching" 1 "^cgc: error: batch = 2 split over 3 ranks gives a rank no rows of its own" -- \
    "$cgc" "$m" --device cpu --batch 2 --nproc 3
run "missing data, before launching" 1 "^cgc: error: data directory \"nowhere\" not found" -- \
    "$cgc" "$m" --device cpu --data 'idx("nowhere")' --nproc 3
[ $((SECONDS - start)) -lt 20 ] && ok || bad "refused launches took $((SECONDS - start)) s" ""
# The memory the ranks would hold, against a machine of 100 MB available (a /proc/meminfo
# of its own, where a private mount namespace can be had).
printf 'MemTotal: 102400 kB\nMemAvailable: 102400 kB\n' >"$tmp/meminfo"
sed 's/samples = 1000/samples = 500000/' "$m" >"$tmp/big.net"   # 63 MB of data a rank
if unshare -m true 2>/dev/null; then
  run "ranks that would not fit in memory" 1 "3 ranks on this machine would each hold the data set \(62\.9[0-9]* MB\).* more than the 100(\.0*)? MB it has available; at most 1 fit" -- \
      unshare -m sh -c 'mount --bind "$1" /proc/meminfo && shift && exec "$@"' sh "$tmp/meminfo" \
      "$cgc" "$tmp/big.net" --device cpu --nproc 3
else
  echo "note: no private mount namespace here: the memory check is not exercised"
fi
# SIGTERM, SIGINT to the launcher: the job ends within seconds, nothing of it left behind;
# a job that cannot act on it (mpirun and its ranks stopped) is killed after the grace
# period.
for sig in TERM INT STOPPED; do
  "$cgc" "$m" --device cpu --epochs 100000 --nproc 2 >"$tmp/sig.out" 2>&1 &
  launcher=$!
  for _ in $(seq 100); do grep -q "^epoch" "$tmp/sig.out" && break; sleep 0.2; done
  if [ "$sig" = STOPPED ]; then
    for p in $(pgrep -f "$m" | grep -vx "$launcher"); do kill -STOP "$p"; done   # mpirun too
  fi
  start=$SECONDS
  kill -"${sig/STOPPED/TERM}" "$launcher"
  for _ in $(seq 300); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$launcher" 2>/dev/null   # still there after 30 s: the check below fails
  wait "$launcher"; status=$?
  sleep 0.5
  left=$(pgrep -f "$m" || true)
  want=$([ "$sig" = INT ] && echo 130 || echo 143)
  if [ "$status" -eq "$want" ] && [ -z "$left" ] && [ $((SECONDS - start)) -lt 15 ] &&
     grep -q "cgc: SIG${sig/STOPPED/TERM}: stopping the job's 2 ranks" "$tmp/sig.out"; then ok
  else bad "SIG$sig to the launcher: status $status (want $want) after $((SECONDS - start)) s, left: $left" "$(grep -v '^epoch' "$tmp/sig.out")"; pkill -KILL -f "$m"; fi
  if [ "$sig" = STOPPED ]; then
    grep -q "the job did not end within 5 s; its processes were killed" "$tmp/sig.out" && ok ||
      bad "a stopped job was not killed after the grace period" "$(cat "$tmp/sig.out")"
  fi
done

summary
