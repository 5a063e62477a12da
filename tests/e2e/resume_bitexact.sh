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
check mlp_bf16 "$root/models/mlp.net" --precision bf16 --accumulate 2   # the half copies remade
check resmlp "$root/models/resmlp.net" --batch 32
check regression "$root/models/regression.net" --accumulate 3 --clip-norm 0.5
check adam "$root/models/regression.net" --optimizer "adam(lr = 1e-3, weight_decay = 1e-4)" --schedule "cosine(warmup = 5)"
check cnn "$root/models/cnn.net" --batch 16   # batch norm's running statistics resume too
check text "$root/tests/emu/text/chars.net"     # 16 steps an epoch: the phases resume too
if [ -f /usr/share/games/fortunes/cookie ]; then   # models/gpt.net's corpus (fortunes)
  check gpt "$root/models/gpt.net" --batch 4
  # activation checkpointing recomputes the blocks' values as they were: the same bits
  "$cgc" "$root/models/gpt.net" --device cpu -q --steps 40 --batch 4 --checkpoint all --save "$dir/gpt-all.st"
  cmp "$dir/gpt-straight.st" "$dir/gpt-all.st" || { echo "gpt: checkpoint = all differs from none"; exit 1; }
  echo "gpt: checkpoint = all bit-identical to none"
fi

# A small real dataset (1200 train, 300 test images of Fashion-MNIST) so that epochs are
# short: 12 steps of batch 100.
src=/usr/share/datasets/fashion-mnist small=$dir/small
mkdir -p "$small"
be32() { printf "\\x$(printf %02x $(($1 >> 24 & 255)))\\x$(printf %02x $(($1 >> 16 & 255)))\\x$(printf %02x $(($1 >> 8 & 255)))\\x$(printf %02x $(($1 & 255)))"; }
cut_idx() {  # cut_idx FILE COUNT: the first COUNT items of an IDX file, header rewritten
  local f=$1 n=$2 full=$dir/full rest per
  gunzip -c "$src/$f.gz" > "$full"
  if [ "$(od -An -tx1 -N4 "$full" | tr -d ' \n')" = 00000803 ]; then rest=8 per=784; else rest=0 per=1; fi
  { head -c 4 "$full"; be32 "$n"; head -c $((8 + rest + n * per)) "$full" | tail -c +9; } > "$small/$f"
}
cut_idx train-images-idx3-ubyte 1200; cut_idx train-labels-idx1-ubyte 1200
cut_idx t10k-images-idx3-ubyte 300;   cut_idx t10k-labels-idx1-ubyte 300
small_args=(--data "idx(\"$small\", scale = 1/255)" --batch 100 --epochs 3 --precision fp32)
untimed() { sed -E 's/,"samples_per_s":[^,}]*//; s/,"seconds":[^,}]*//' "$1"; }

# Stopped on an epoch's last step, the epoch is still evaluated, and resuming gives the
# same metrics (less timings) and the same final file as the straight run.
"$cgc" "$root/models/mlp.net" -q "${small_args[@]}" --metrics "$dir/s.jsonl" --save "$dir/s.st"
"$cgc" "$root/models/mlp.net" -q "${small_args[@]}" --metrics "$dir/r.jsonl" --save "$dir/r.st" --stop-after 12
"$cgc" "$root/models/mlp.net" -q "${small_args[@]}" --metrics "$dir/r.jsonl" --save "$dir/r2.st" --resume "$dir/r.st"
grep -q '"test_accuracy"' <(head -1 "$dir/r.jsonl") || { echo "epoch 1 ended by --stop-after was not evaluated"; cat "$dir/r.jsonl"; exit 1; }
diff <(untimed "$dir/s.jsonl") <(untimed "$dir/r.jsonl") || { echo "metrics of the resumed run differ"; exit 1; }
cmp "$dir/s.st" "$dir/r2.st" || { echo "epoch-boundary resume: final files differ"; exit 1; }
echo "epoch boundary: evaluated, same metrics, bit-identical after resume"

# Stopped in the middle of an epoch (which records the epoch so far), the resumed run
# finishes that epoch with the straight run's metrics: its mean training loss counts the
# steps before the stop too.
"$cgc" "$root/models/mlp.net" -q "${small_args[@]}" --metrics "$dir/m.jsonl" --save "$dir/m.st" --stop-after 18
partial='^\{"epoch":2,"step":18,"train_loss":[0-9.e+-]+\}$'
grep -Eq "$partial" <(untimed "$dir/m.jsonl" | tail -1) || { echo "no record of the stopped epoch"; cat "$dir/m.jsonl"; exit 1; }
"$cgc" "$root/models/mlp.net" -q "${small_args[@]}" --metrics "$dir/m.jsonl" --save "$dir/m2.st" --resume "$dir/m.st"
diff <(untimed "$dir/s.jsonl") <(untimed "$dir/m.jsonl" | grep -Ev "$partial") ||
    { echo "metrics of the run resumed mid-epoch differ"; exit 1; }
cmp "$dir/s.st" "$dir/m2.st" || { echo "mid-epoch resume: final files differ"; exit 1; }
echo "mid-epoch: same metrics, bit-identical after resume"

# A resumed run continues the same training: another optimizer or data order is refused;
# a --stop-after at or below the saved step does nothing.
expect_refusal() {  # expect_refusal PATTERN ARGS...
  local pattern=$1; shift
  if out=$("$cgc" "$root/models/mlp.net" -q "${small_args[@]}" --resume "$dir/r.st" "$@" 2>&1); then
    echo "resume with $* was accepted"; exit 1
  fi
  grep -q -- "$pattern" <<<"$out" || { echo "resume with $*: unexpected message: $out"; exit 1; }
}
expect_refusal "saved with optimizer adamw(lr = 0.001, beta1 = 0.9, beta2 = 0.999, eps = 1e-08, weight_decay = 0.0001), this run has adam(" --optimizer "adam(lr = 1e-3, weight_decay = 1e-4)"
expect_refusal "saved with shuffle true, this run has false" --shuffle false
expect_refusal "saved with schedule cosine(warmup = 200, min_lr = 0), this run has constant" --schedule constant
expect_refusal "saved with seed 42, this run has 1; a resumed run continues the same training, so set seed to '42'" --seed 1
out=$("$cgc" "$root/models/mlp.net" "${small_args[@]}" --resume "$dir/r.st" --stop-after 5 2>&1)
grep -q "nothing to do: the run is at step 12 already (asked to stop after 5)" <<<"$out" || { echo "stop-after below the saved step: $out"; exit 1; }
echo "mismatched resumes refused; --stop-after below the saved step does nothing"
