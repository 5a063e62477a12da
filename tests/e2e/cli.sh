#!/usr/bin/env bash
# The command line: --help lists every flag it accepts, usage errors exit 2, file errors
# exit 1 with a message, --device says where it runs, a train flag means what its key
# means in the file, and a failed flag is reported once, at the flag. Checks use
# --arch none (no NVRTC: every change of a constant is a new module) except where the
# compile itself is the point.
set -uo pipefail
cgc=$1 root=$2
fails=0 passes=0
tmp=$(mktemp -d)
trap 'rm -rf -- "$tmp"' EXIT
fail() {  # fail DESCRIPTION OUTPUT
  echo "FAIL: $1, output:"; echo "$2" | head -20
  fails=$((fails + 1))
}
expect() {  # expect DESCRIPTION STATUS PATTERN -- ARGS...   (pattern searched in stdout+stderr)
  local what=$1 want=$2 pattern=$3; shift 4
  local out status
  out=$(timeout "${limit:-300}" "$cgc" "$@" 2>&1); status=$?
  if [ "$status" -ne "$want" ] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL: $what: status $status (want $want), output:"; echo "$out" | head -20
    fails=$((fails + 1))
  else
    passes=$((passes + 1))
  fi
}
expect "help" 0 "usage: cgc FILE.net" -- --help
for flag in --check --dump-ir --device --save --resume --stop-after --detect-anomaly --metrics --metrics-every --quiet --version \
            --data --batch --epochs --steps --shuffle --drop-last --optimizer --lr --schedule \
            --precision --accumulate --clip-norm --checkpoint --memory --seed \
            --arch --devices --emit --mode --verbose --dump-ir-after --explain --stats \
            --profile --bench --tune-budget --nproc --generate --tokens --temperature --top-k; do
  expect "help mentions $flag" 0 "$flag" -- --help
done
expect "version" 0 "^cgc [0-9]+\.[0-9]+\.[0-9]+" -- --version
expect "no file" 2 "no model file given" --
expect "unknown option" 2 "unknown option '--bogus'" -- --bogus "$root/models/mlp.net"
expect "missing value" 2 "needs a value" -- "$root/models/mlp.net" --batch
expect "two files" 2 "unexpected argument" -- "$root/models/mlp.net" "$root/models/mlp.net"
expect "missing file" 1 "cannot read /nonexistent.net" -- /nonexistent.net
expect "check ok" 0 "ok: model mlp, 468874 parameters" -- "$root/models/mlp.net" --check
expect "bad batch flag" 1 "^--batch:1:1: error: " -- "$root/models/mlp.net" --check --arch none --batch 0
expect "bad precision flag" 1 "^--precision:1:1: error: " -- "$root/models/mlp.net" --check --arch none --precision fp8
expect "bad lr" 1 "^--lr:1:1: error: adamw: lr must be a number > 0, not -1" -- "$root/models/mlp.net" --check --arch none --lr -1
# --lr is a .net expression like every other flag's value: folded, and no C-only forms.
expect "lr folded" 0 "ok: model mlp" -- "$root/models/mlp.net" --check --arch none --lr 1/1000
expect "lr hex refused" 1 "^--lr:1:1: error: unexpected unit 'x10'" -- "$root/models/mlp.net" --check --arch none --lr 0x10
expect "lr caret" 1 "^--lr:1:2: error: division by zero" -- "$root/models/mlp.net" --check --arch none --lr 1/0
# The GPU side of the command line; a machine with a GPU runs the gpu-labelled tests instead.
expect "devices" 0 "^(no CUDA device: |cuda:0 )" -- --devices
if ! "$cgc" --devices | grep -q '^cuda:0'; then
    expect "cuda device" 1 "--device cuda: no usable CUDA device: .*; use --device cpu" -- \
        "$root/models/regression.net" --device cuda
    expect "cuda device number" 2 "--device takes auto, cpu, cuda or cuda:N .*not 'cuda:x'" -- \
        "$root/models/regression.net" --device cuda:x
    expect "generate on a GPU" 1 "--device cuda: no usable CUDA device: .*; use --device cpu" -- \
        "$root/models/gpt.net" --generate hi --resume "$tmp/none.st" --device cuda
fi
expect "metrics-every needs metrics" 2 "--metrics-every N adds objects to the --metrics file; give --metrics FILE too" -- \
    "$root/models/mlp.net" --metrics-every 10
expect "metrics-every zero" 2 "--metrics-every takes a positive number of steps, not '0'" -- \
    "$root/models/mlp.net" --metrics-every 0 --metrics "$tmp/never.jsonl"
expect "tokens needs generate" 2 "--tokens, --temperature, --top-k and --logits are about what --generate samples" -- \
    "$root/models/mlp.net" --tokens 10
expect "logits needs generate" 2 "give --generate PROMPT too" -- "$root/models/mlp.net" --logits l.npy
expect "generate needs resume" 2 "--generate samples from trained weights: give --resume FILE" -- \
    "$root/models/gpt.net" --generate hi
expect "generate does not save" 2 "--generate samples and exits; it does not go with --check" -- \
    "$root/models/gpt.net" --generate hi --resume "$tmp/none.st" --save "$tmp/never.st"
expect "temperature range" 2 "--temperature takes a number from 0 .* to 100, not '-1'" -- \
    "$root/models/gpt.net" --generate hi --resume "$tmp/none.st" --temperature -1
expect "top-k range" 2 "--top-k takes a number of bytes from 0 \(all\) to 256, not '300'" -- \
    "$root/models/gpt.net" --generate hi --resume "$tmp/none.st" --top-k 300
expect "generate needs a text model" 1 "--generate continues text with a byte model" -- \
    "$root/models/mlp.net" --generate hi --resume "$tmp/none.st"
expect "generate reads a checkpoint" 1 "none.st" -- \
    "$root/tests/emu/text/chars.net" --generate hi --resume "$tmp/none.st"
expect "arch needs check" 2 "--arch goes with --check" -- "$root/models/mlp.net" --arch sm_90
expect "emit with explain" 2 "--emit writes its files .* not go with --explain or --dump-ir" -- \
    "$root/models/mlp.net" --check --emit "$tmp/never" --explain
expect "emit with dump-ir" 2 "not go with --explain or --dump-ir" -- \
    "$root/models/mlp.net" --emit "$tmp/never" --dump-ir-after=fusion
[ ! -e "$tmp/never" ] || { echo "FAIL: a refused --emit wrote $tmp/never"; fails=$((fails + 1)); }
expect "bad arch" 2 "--arch takes sm_XX" -- "$root/models/mlp.net" --check --arch 90
expect "check eager" 0 "171 kernels compiled for sm_80 by NVRTC" -- "$root/models/mlp.net" --check --arch sm_80 --mode eager
# the default mode is the fused one: 20 kernels for mlp.net, not eager's 165
expect "check default" 0 " 21 kernels compiled for sm_80 by NVRTC" -- "$root/models/mlp.net" --check --arch sm_80
expect "check reduce-overhead" 0 "kernels compiled for sm_80 by NVRTC" -- "$root/models/resmlp.net" --check --arch sm_80 --mode reduce-overhead
expect "reduce-overhead on the CPU" 0 "captures CUDA graphs on a GPU; on the CPU" -- "$root/models/regression.net" --mode reduce-overhead --device cpu --steps 2
expect "check max-autotune" 0 "max-autotune: --check times nothing, so its choices are heuristics" -- "$root/models/mlp.net" --check --arch none --mode max-autotune
expect "max-autotune on the CPU" 0 "tunes kernels and captures CUDA graphs on a GPU; on the CPU" -- "$root/models/regression.net" --mode max-autotune --device cpu --steps 2
expect "tune budget mode" 2 "--tune-budget goes with --mode max-autotune" -- "$root/models/mlp.net" --tune-budget 5
expect "tune budget zero" 2 "--tune-budget takes seconds \(a number above 0, at most 86400\), not '0'" -- "$root/models/mlp.net" --mode max-autotune --tune-budget 0
expect "tune budget hex" 2 "--tune-budget takes seconds .*not '0x10'" -- "$root/models/mlp.net" --mode max-autotune --tune-budget 0x10
expect "tune budget ok" 0 "ok: model mlp" -- "$root/models/mlp.net" --mode max-autotune --tune-budget 2.5 --check --arch none
# Precision reasons, as torch.autocast treats F.linear: under bf16 x, W and b are cast to
# the half type and the product runs on tensor cores; cross_entropy reads f32 (its input
# cast up); the loss is f32; fp32 casts nothing. The patterns name each value's shape.
expect "explain operand cast" 0 "^  %[0-9]+ cast +bf16 +\[512, 784\] +line 6 +autocast: an operand of a matrix product$" -- "$root/models/mlp.net" --precision bf16 --explain
expect "explain bias cast" 0 "^  %[0-9]+ cast +bf16 +\[512\] +line 6 +autocast: the bias of a linear layer joins its product's type$" -- "$root/models/mlp.net" --precision bf16 --explain
expect "explain product" 0 "^  %[0-9]+ matmul +bf16 +\[N, 512\] +line 6 +matrix product on tensor cores, half inputs, f32 accumulation$" -- "$root/models/mlp.net" --precision bf16 --explain
expect "explain f32 reader" 0 "^  %[0-9]+ cast +f32 +\[N, 10\] +line 11 +autocast: read by an op that runs in f32$" -- "$root/models/mlp.net" --precision bf16 --explain
expect "explain loss" 0 "^  %[0-9]+ cross_entropy +f32 +\[\] +line 11 +the loss is always f32$" -- "$root/models/mlp.net" --precision bf16 --explain
expect "explain half follows" 0 "^  h1 \(relu\) +bf16 +\[N, 512\] +line 6 +follows its inputs \(half stays half\)$" -- "$root/models/mlp.net" --precision bf16 --explain
expect "explain f32 list" 0 "^  %[0-9]+ rsqrt +f32 +\\[N, 1\\] +line 9 +autocast's f32 list \\(reductions, softmax, losses\\)$" -- "$root/models/resmlp.net" --precision fp16 --explain
expect "explain fp32" 0 "^  %[0-9]+ matmul +f32 +\[N, 512\] +line 6 +matrix product in f32$" -- "$root/models/mlp.net" --precision fp32 --explain
expect "explain tf32" 0 "^  %[0-9]+ matmul +f32 +\[N, 512\] +line 6 +matrix product: f32 storage, tf32 tensor-core math$" -- "$root/models/mlp.net" --precision tf32 --explain
expect "explain max-autotune" 0 "^  gemm    m64\.n512\.k784\.b1\.nt\.f16\.f16\.f16\.f32acc\.relu_bias +default" -- "$root/models/mlp.net" --mode max-autotune --explain
expect "explain fused MLP" 0 "^  mlp     m64\.f16_512_128r_10 +steps$" -- "$root/models/mlp.net" --mode max-autotune --explain
expect "explain fused MLP runs" 0 "^From sm_80 too, 2 runs of GEMMs that are a narrow MLP's pass \(1 forward, 1 backward: the$" -- "$root/models/narrow_mlp.net" --mode max-autotune --explain
# Two convolutions of one image into different widths: two implicit-GEMM choices, not
# one key for both (their GEMMs differ in n), and --explain's Images section names both.
cat > "$tmp/twin.net" <<'EOF'
model twin {
    input x: f32[N, 2, 8, 8]
    input y: i32[N]
    a = conv2d(x, 8, 3, padding = 1, bias = false)
    b = conv2d(x, 16, 3, padding = 1, bias = false)
    la = linear(flatten(a), 4)
    lb = linear(flatten(b), 4)
    logits = la + lb
    output logits
    loss cross_entropy(logits, y)
}
train {
    data = synthetic(samples = 64)
    batch = 16
    precision = bf16
}
EOF
twin=$("$cgc" "$tmp/twin.net" --mode max-autotune --explain 2>&1)
if [ "$(grep -c '^  window  window\.b16\.' <<<"$twin")" -ne 2 ] ||
   [ "$(grep -c "^            max-autotune's candidate: implicit GEMMs" <<<"$twin")" -ne 2 ] ||
   ! grep -q "^From sm_80 too, 2 convolutions' patches" <<<"$twin"; then
  fail "twin convolutions: two implicit-GEMM choices" "$twin"
else
  passes=$((passes + 1))
fi
# a convolution's bias and relu computed by its implicit GEMMs, in training and evaluation
chain=$("$cgc" "$root/tests/emu/models/conv_chain.net" --mode max-autotune --precision bf16 --explain 2>&1)
if [ "$(grep -c "the product never stored: its kernel computes the group add_relu_c[12] (add, relu" <<<"$chain")" -ne 2 ] ||
   [ "$(grep -c "the evaluation's product the same, as training chooses, its kernel computing" <<<"$chain")" -ne 2 ]; then
  fail "conv_chain: epilogues computed by the implicit GEMMs" "$chain"
else
  passes=$((passes + 1))
fi
# --emit in max-autotune: the choices before tuning, in the cache's format
if "$cgc" "$root/models/mlp.net" --mode max-autotune --check --arch none --emit "$tmp/ma" -q &&
   head -1 "$tmp/ma/autotune.tune" | grep -q "^# cgc autotune choices: model mlp on none (heuristics: nothing timed) (sm_90)\.$" &&
   grep -q "^tuning none$" "$tmp/ma/autotune.tune" &&
   grep -q "^kernel cast_x items:2048 -$" "$tmp/ma/autotune.tune" &&
   [ "$(grep -c '^gemm ' "$tmp/ma/autotune.tune")" = 8 ] &&
   grep -q "^mlp m64\.f16_512_128r_10 steps -$" "$tmp/ma/autotune.tune" &&
   grep -q "^       steps 3 and 4 or one fused MLP forward kernel (max-autotune's candidates): mlp_fused_f16_512_128r_10_rows16, mlp_fused_f16_512_128r_10_rows32, mlp_fused_f16_512_128r_10_rows64$" "$tmp/ma/host_plan.txt" &&
   grep -q "^ \* A fully fused MLP forward pass of 2 layers" "$tmp/ma/mlp_fused_f16_512_128r_10_rows32.cu" &&
   grep -q "^end $(grep -c '^\(gemm\|kernel\|mlp\) ' "$tmp/ma/autotune.tune")$" "$tmp/ma/autotune.tune"; then
    passes=$((passes + 1))
else
    fail "--emit with max-autotune: autotune.tune" "$(cat "$tmp/ma/autotune.tune" 2>&1)"
fi
expect "mode unknown" 2 "--mode fast: unknown mode" -- "$root/models/mlp.net" --mode fast
expect "bad pass" 2 "--dump-ir-after takes sema, precision" -- "$root/models/mlp.net" --dump-ir-after lexer
expect "check no nvrtc" 0 "ok: model regression" -- "$root/models/regression.net" --check --arch none
expect "bad device" 2 "--device takes auto, cpu, cuda or cuda:N .*not 'tpu'" -- "$root/models/regression.net" --device tpu
expect "gpu is no device name" 2 "--device takes auto, cpu, cuda or cuda:N .*not 'gpu'" -- "$root/models/regression.net" --device gpu
expect "auto device" 0 "running on the CPU" -- "$root/models/regression.net" --device auto --steps 2
expect "unknown graph" 2 "--dump-ir=GRAPH takes forward, train, train_micro, eval or decode, not 'nope'" -- "$root/models/mlp.net" --dump-ir=nope
expect "decode graph" 0 "^tensor [0-9]+ cgc.cache.values.3: f32\[1, 4, 64, 32\] state" -- "$root/models/gpt.net" --dump-ir=decode
expect "no decode graph" 1 "mlp.net: --dump-ir=decode: the model has no decode graph: it trains on no text" -- "$root/models/mlp.net" --dump-ir=decode
expect "resume garbage" 1 "error: .*cli.sh" -- "$root/models/regression.net" --resume "$0" --steps 2
expect "save dir missing" 1 "cannot save to /nonexistent/m.st: directory /nonexistent is missing" -- "$root/models/regression.net" --steps 2 --save /nonexistent/m.st
expect "save to an empty path" 1 "cannot save to '': an empty path names no file" -- "$root/models/regression.net" --steps 2 --save ""
expect "stop-after zero" 2 "--stop-after takes a positive step number" -- "$root/models/mlp.net" --stop-after 0
expect "stop-after past int64" 2 "--stop-after takes a positive step number \\(at most 9223372036854775807\\), not '18446744073709551616'" -- "$root/models/mlp.net" --stop-after 18446744073709551616
many=(); for i in $(seq 100); do many+=(--batch 8); done
expect "train flags past the limit" 2 "training flags \\(--batch, --epochs, ...\\) at most; --batch is one more" -- "$root/models/mlp.net" --check --arch none "${many[@]}"

# A failed flag is one error, at the flag, and no "compilation failed" besides.
out=$("$cgc" "$root/models/mlp.net" --check --batch 0 2>&1)
if [ "$(grep -c "error:" <<<"$out")" -ne 1 ] || grep -q "compilation failed" <<<"$out"; then
  fail "--batch 0 reported once" "$out"
else
  passes=$((passes + 1))
fi

# Only regular files of at most 16 MiB are read, so that cgc never reads until memory
# runs out (/dev/zero) or waits forever (a FIFO). A few seconds bound how much a cgc that
# does read them may take before it counts as a failure.
limit=5 expect "dev zero" 1 "^cgc: error: /dev/zero: not a regular file" -- /dev/zero
expect "directory" 1 "^cgc: error: $tmp: not a regular file" -- "$tmp"
mkfifo "$tmp/fifo"
limit=5 expect "fifo" 1 "^cgc: error: $tmp/fifo: not a regular file" -- "$tmp/fifo"
truncate -s $((16 * 1024 * 1024 + 1)) "$tmp/huge.net"
expect "too large" 1 "^cgc: error: $tmp/huge.net is 16777217 bytes; a .net file may be at most 16 MiB" -- "$tmp/huge.net"

# `--steps N` means what `steps = N` means: without epochs, steps alone limit the run
# (here 10 steps, 4 per epoch: the run must not stop at the end of the first epoch).
cat > "$tmp/steps.net" <<'EOF'
model m {
    input x: f32[N, 8]
    input y: i32[N]
    logits = linear(x, 4)
    output logits
    loss cross_entropy(logits, y)
}
train {
    data  = synthetic(samples = 256)
    batch = 64
}
EOF
sed 's/^    batch = 64$/    batch = 64\n    steps = 10/' "$tmp/steps.net" > "$tmp/steps_in_file.net"
for run in "steps.net --steps 10" "steps_in_file.net"; do
  read -r -a args <<<"$run"
  rm -f "$tmp/metrics"
  out=$("$cgc" "$tmp/${args[0]}" "${args[@]:1}" -q --metrics "$tmp/metrics" 2>&1)
  status=$?
  last=$(tail -n 1 "$tmp/metrics" 2>/dev/null)
  if [ "$status" -ne 0 ] || ! grep -q '"step":10,' <<<"$last"; then
    fail "$run: status $status, must end at step 10; last metrics line: $last" "$out"
  else
    passes=$((passes + 1))
  fi
done

# A batch norm over [N, C] (one value per channel a row) refuses micro-batches of one row
# at its line, before training: a batch of 1, or (drop_last = false) 65 samples in 8s.
cat > "$tmp/bn.net" <<'EOF'
model m {
    input x: f32[N, 8]
    input y: i32[N]
    h = linear(x, 6)
    b = batchnorm(h)
    logits = linear(b, 4)
    output logits
    loss cross_entropy(logits, y)
}
train {
    data  = synthetic(samples = 65)
    batch = 8
    drop_last = false
}
EOF
bn_err="^cgc: error: $tmp/bn.net:5: batchnorm over one value per channel needs at least 2 rows per batch"
expect "batchnorm, last batch of one" 1 "$bn_err \(the last micro-batch of each epoch holds 1 row: 65 training samples in batches of 8\)" -- "$tmp/bn.net" --device cpu
expect "batchnorm, batch 1" 1 "$bn_err \(batch = 1\)" -- "$tmp/bn.net" --device cpu --batch 1
expect "batchnorm, drop_last" 0 "done at step 8" -- "$tmp/bn.net" --device cpu --drop-last true
expect "batchnorm, 66 samples" 0 "done at step 9" -- "$tmp/bn.net" --device cpu --data "synthetic(samples = 66)"

# A loss that grows by orders of magnitude but stays finite: a warning, and the run ends.
cat > "$tmp/div.net" <<'EOF'
model div {
    input x: f32[N, 16]
    input y: i32[N]
    h    = relu(linear(x, 32))
    pred = linear(h, 4)
    output pred
    loss   cross_entropy(pred, y)
}
train {
    data      = synthetic(samples = 512)
    batch     = 64
    epochs    = 2
    optimizer = sgd(lr = 30)
    seed      = 3
}
EOF
expect "a diverging loss" 0 "^cgc: warning: the training loss grew from 1\.4[0-9]* at step 1 to [0-9.]+e\+[0-9]+, the mean of epoch 1: the run is diverging" -- "$tmp/div.net" --device cpu
expect "a huge loss in four digits" 0 "^epoch 2/2  step 16  train_loss [0-9]\.[0-9]{4}e\+[0-9]+  " -- "$tmp/div.net" --device cpu
out=$("$cgc" "$tmp/div.net" --device cpu --lr 0.1 2>&1)
if grep -q "diverging" <<<"$out"; then echo "FAIL: a converging run warned: $out"; fails=$((fails + 1)); else passes=$((passes + 1)); fi

# On one core the CPU executor reads its rows in the steps, unless prefetch is given
# (the file's or the flag's); on two it reads them ahead by default.
if command -v taskset >/dev/null && taskset -c 0 true 2>/dev/null; then
  cgc_cmd=$cgc cgc="taskset"
  expect "one core, the default" 0 "reading them took [0-9.]+ ms, in the steps \(prefetch = 0: this process may run on one core only\)" -- -c 0 "$cgc_cmd" "$tmp/div.net" --device cpu --lr 0.1 -v
  expect "one core, --prefetch 2" 0 "2 micro-batches ahead on 2 host threads" -- -c 0 "$cgc_cmd" "$tmp/div.net" --device cpu --lr 0.1 -v --prefetch 2
  [ "$(nproc)" -gt 1 ] &&
    expect "two cores, the default" 0 "2 micro-batches ahead on 2 host threads" -- -c 0,1 "$cgc_cmd" "$tmp/div.net" --device cpu --lr 0.1 -v
  cgc=$cgc_cmd
else
  echo "note: no taskset here: the read-ahead on one core is not checked"
fi

# Under a limit on allocation (ulimit -d), the matrix products take as many threads as
# OpenBLAS's buffers (128 MB each) fit, and a limit that fits none, or the data, is an
# error, never a hang: 200 MB fits one buffer, not the two of two threads; 60 MB none.
cat > "$tmp/gemm.net" <<'EOF'
model gemm {
    input x: f32[N, 784]
    input y: i32[N]
    h      = relu(linear(x, 512))
    logits = linear(h, 10)
    output logits
    loss   cross_entropy(logits, y)
}
train {
    data  = synthetic(samples = 512)
    batch = 256
}
EOF
cgc_cmd=$cgc cgc="bash"
limited='ulimit -d "$1" && shift && exec "$@"'
if grep -q "AddressSanitizer failed to allocate" <<<"$(bash -c "$limited" sh 204800 "$cgc_cmd" --version 2>&1)"; then
  echo "note: a sanitizer build cannot run under a data limit (its shadow memory): not checked"
else
  limit=60 expect "ulimit -d 204800, two threads' products" 0 "done at step 2" -- -c "$limited" sh 204800 "$cgc_cmd" "$tmp/gemm.net" --device cpu
  limit=60 expect "ulimit -d 61440" 1 "^cgc: error: the CPU's matrix products need 128 MB for OpenBLAS's buffer, more than this process may still allocate \\(ulimit -d, ulimit -v\\): raise the limit" -- -c "$limited" sh 61440 "$cgc_cmd" "$tmp/gemm.net" --device cpu
  sed 's/samples = 512/samples = 200000/' "$tmp/gemm.net" >"$tmp/big.net"   # 627 MB of rows
  limit=60 expect "ulimit -d 307200, a data set of 627 MB" 1 "^cgc: error: out of memory: 627 MB more were refused; free memory, or raise this process's limit \\(ulimit -d, ulimit -v\\)" -- -c "$limited" sh 307200 "$cgc_cmd" "$tmp/big.net" --device cpu
fi
cgc=$cgc_cmd

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
