#!/usr/bin/env bash
# The files cgc reads and writes, handed over by a hostile user: a save never lands on
# anything but a new file or a checkpoint (not a device, a FIFO, a directory or the model's
# own source), goes through a symbolic link, and cleans what an interrupted save left; a
# FIFO or a directory in place of a checkpoint or a dataset file is named as such and never
# waited on; a checkpoint of another model, or one whose progress no run could have
# reached, is refused before anything trains; an fp16 run whose loss scale collapses stops
# and keeps the last checkpoint; --detect-anomaly names the first op whose value is not
# finite; a run killed between writing a save and renaming it keeps the save before; and
# a run killed at random moments, again and again, always resumes from a complete
# checkpoint and ends where an uninterrupted run does.
set -uo pipefail
cgc=$1 root=$2
fails=0 passes=0
tmp=$(mktemp -d)
trap 'rm -rf -- "$tmp"' EXIT
expect() {  # expect DESCRIPTION STATUS PATTERN -- ARGS...   (pattern searched in stdout+stderr)
  local what=$1 want=$2 pattern=$3; shift 4
  local out status
  out=$(timeout 60 "$cgc" "$@" 2>&1); status=$?
  if [ "$status" -ne "$want" ] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL: $what: status $status (want $want), output:"; echo "$out" | head -20
    fails=$((fails + 1))
  else
    passes=$((passes + 1))
  fi
}
check() {  # check DESCRIPTION CONDITION...
  local what=$1; shift
  if "$@"; then passes=$((passes + 1)); else echo "FAIL: $what"; fails=$((fails + 1)); fi
}

# A small model of many short epochs (each ends in a save), on synthetic data.
cat > "$tmp/m.net" <<'EOF'
model small {
    input x: f32[N, 16]
    input t: f32[N, 2]
    h    = tanh(linear(x, 32))
    pred = linear(h, 2)
    output pred
    loss   mse(pred, t)
}
train {
    data      = synthetic(samples = 512)
    batch     = 64
    epochs    = 40
    optimizer = adam(lr = 0.01)
    seed      = 3
}
EOF
m=$tmp/m.net
run=(--device cpu -q)

# ---- --save: only a new file or a checkpoint ----
expect "save over a device" 1 "cannot save to /dev/null: it is a character device" -- "$m" "${run[@]}" --steps 2 --save /dev/null
check "/dev/null still a device" test -c /dev/null
mkfifo "$tmp/fifo"
expect "save over a FIFO" 1 "cannot save to $tmp/fifo: it is a FIFO" -- "$m" "${run[@]}" --steps 2 --save "$tmp/fifo"
mkdir "$tmp/dir"
expect "save over a directory, before training" 1 "cannot save to $tmp/dir: it is a directory" -- "$m" "${run[@]}" --epochs 40 --save "$tmp/dir"
cp "$m" "$tmp/own.net"
expect "save over the model" 1 "cannot save to $tmp/own.net: the file exists and is not a checkpoint" -- "$tmp/own.net" "${run[@]}" --steps 2 --save "$tmp/own.net"
check "the model is untouched" cmp -s "$m" "$tmp/own.net"
expect "save to a new file" 0 "" -- "$m" "${run[@]}" --steps 2 --save "$tmp/a.st"
expect "save over a checkpoint" 0 "" -- "$m" "${run[@]}" --steps 4 --resume "$tmp/a.st" --save "$tmp/a.st"
ln -s a.st "$tmp/link.st"
touch "$tmp/a.st.tmp.Xy12Zq"
expect "save through a link" 0 "" -- "$m" "${run[@]}" --steps 6 --resume "$tmp/a.st" --save "$tmp/link.st"
check "the link stays a link" test -L "$tmp/link.st"
check "a save removes its target's stale temporary files" test ! -e "$tmp/a.st.tmp.Xy12Zq"
ln -s nowhere.st "$tmp/dangling.st"
expect "save through a dangling link" 1 "cannot save to $tmp/dangling.st: it is a symbolic link to nothing" -- "$m" "${run[@]}" --steps 2 --save "$tmp/dangling.st"

# ---- --resume: never waits, names what it was given ----
expect "resume from a FIFO" 1 "$tmp/fifo: is a FIFO \(named pipe\), not a file cgc can read" -- "$m" "${run[@]}" --steps 2 --resume "$tmp/fifo"
expect "resume from a directory" 1 "$tmp/dir: is a directory, not a file cgc can read" -- "$m" "${run[@]}" --steps 2 --resume "$tmp/dir"
sed 's/model small/model other/' "$m" > "$tmp/other.net"
expect "another model's checkpoint" 1 "a.st was saved from model 'small', this is model 'other'" -- "$tmp/other.net" "${run[@]}" --steps 8 --resume "$tmp/a.st"
sed 's/linear(x, 32)/linear(x, 8)/' "$m" > "$tmp/narrow.net"
expect "a checkpoint of other shapes, before its settings" 1 "tensor 'h.weight' is F32\[32, 16\], the model's is F32\[8, 16\]" -- "$tmp/narrow.net" "${run[@]}" --steps 8 --seed 9 --resume "$tmp/a.st"
# Metadata no run could have written: edited copies of a.st (saved at step 6, mid-epoch 1).
edit() {  # edit OUT KEY=VALUE...: a.st with metadata changed
  local out=$1; shift
  python3 - "$tmp/a.st" "$out" "$@" <<'EOF'
import json, struct, sys
src, out, changes = sys.argv[1], sys.argv[2], sys.argv[3:]
b = open(src, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
for kv in changes:
    k, v = kv.split("=", 1)
    h["__metadata__"][k] = v
t = json.dumps(h).encode()
t += b" " * ((8 - len(t) % 8) % 8)
open(out, "wb").write(struct.pack("<Q", len(t)) + t + b[8 + n:])
EOF
}
if python3 -c 'import json, struct' 2>/dev/null; then
  edit "$tmp/bie.st" cgc.batch_in_epoch=99
  expect "a place past the epoch" 1 "bie.st: its place in the epoch .* is not a step of this run's epochs" -- "$m" "${run[@]}" --resume "$tmp/bie.st"
  edit "$tmp/epoch.st" cgc.epoch=99
  expect "an epoch its step contradicts" 1 "epoch.st: its step .* does not follow from its epoch" -- "$m" "${run[@]}" --resume "$tmp/epoch.st"
  edit "$tmp/skip.st" cgc.skipped=2
  expect "skipped steps in fp32" 1 "skip.st: it counts skipped steps" -- "$m" "${run[@]}" --resume "$tmp/skip.st"
  edit "$tmp/nan.st" cgc.loss_sum=nan
  expect "a NaN loss sum" 1 "nan.st: its loss so far .* is not one a run records" -- "$m" "${run[@]}" --resume "$tmp/nan.st"
  edit "$tmp/model.st" cgc.model=
  expect "no model name" 1 "model.st was saved from model '', this is model 'small'" -- "$m" "${run[@]}" --resume "$tmp/model.st"
fi
# Values no run could have saved: element INDEX of TENSOR in a copy of a.st set to VALUE.
poke() {  # poke OUT TENSOR INDEX VALUE
  python3 - "$tmp/a.st" "$@" <<'EOF'
import json, struct, sys
src, out, name, index, value = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
b = bytearray(open(src, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
at = 8 + n + json.loads(b[8:8 + n])[name]["data_offsets"][0] + 4 * index
b[at:at + 4] = struct.pack("<f", value)
open(out, "wb").write(b)
EOF
}
if python3 -c 'import json, struct' 2>/dev/null; then
  poke "$tmp/w.st" h.weight 5 nan
  expect "a NaN weight" 1 "w.st: tensor 'h.weight' holds nan at element 5, where a run saves only a finite number: the file was changed" -- "$m" "${run[@]}" --resume "$tmp/w.st"
  poke "$tmp/v.st" cgc.adam.exp_avg_sq.pred.bias 1 -1
  expect "a negative second moment" 1 "tensor 'cgc.adam.exp_avg_sq.pred.bias' holds -1 at element 1, where a run saves only a finite number >= 0" -- "$m" "${run[@]}" --resume "$tmp/v.st"
  poke "$tmp/s.st" cgc.train.step 0 nan
  expect "a NaN step counter" 1 "tensor 'cgc.train.step' holds nan at element 0, where a run saves only a whole number >= 0" -- "$m" "${run[@]}" --resume "$tmp/s.st"
  poke "$tmp/s2.st" cgc.optim.step 0 2.5
  expect "a fractional step counter" 1 "tensor 'cgc.optim.step' holds 2.5 at element 0" -- "$m" "${run[@]}" --resume "$tmp/s2.st"
  poke "$tmp/s3.st" cgc.train.step 0 1e9
  expect "a step counter its metadata contradicts" 1 "tensor 'cgc.train.step' is 1e\\+09, but its metadata says the run had taken 6 steps" -- "$m" "${run[@]}" --resume "$tmp/s3.st"
fi
expect "an fp32 checkpoint resumed in fp16" 1 "a.st was saved with precision fp32, this run has fp16; .* set precision to 'fp32'" -- "$m" "${run[@]}" --precision fp16 --resume "$tmp/a.st"

# ---- dataset files ----
mkdir -p "$tmp/data/train-images-idx3-ubyte"
touch "$tmp/data/train-labels-idx1-ubyte"
sed 's|synthetic(samples = 512)|idx("'"$tmp"'/data")|; s|f32\[N, 16\]|f32[N, 784]|; s|input t: f32\[N, 2\]|input t: i32[N]|; s|mse(pred, t)|cross_entropy(pred, t)|' "$m" > "$tmp/idx.net"
expect "a directory in place of an IDX file" 1 "train-images-idx3-ubyte: is a directory, not an IDX file" -- "$tmp/idx.net" "${run[@]}" --steps 1
rmdir "$tmp/data/train-images-idx3-ubyte"
mkfifo "$tmp/data/train-images-idx3-ubyte"
expect "a FIFO in place of an IDX file" 1 "train-images-idx3-ubyte: is a FIFO" -- "$tmp/idx.net" "${run[@]}" --steps 1
touch "$tmp/a_file"
mkfifo "$tmp/a_fifo"
expect "a plain file as the data directory" 1 "data directory \"$tmp/a_file\" not found .*; $tmp/a_file is a regular file, not a directory" -- "$tmp/idx.net" "${run[@]}" --steps 1 --data "idx(\"$tmp/a_file\")"
expect "a FIFO as the data directory" 1 "; $tmp/a_fifo is a FIFO \\(named pipe\\), not a directory" -- "$tmp/idx.net" "${run[@]}" --steps 1 --data "idx(\"$tmp/a_fifo\")"
expect "a --data flag's error is not the file's line 1" 1 "^cgc: error: data directory \"nowhere\" not found" -- "$tmp/idx.net" "${run[@]}" --steps 1 --data 'idx("nowhere")'

# ---- fp16: a collapsed loss scale stops the run, the last checkpoint stays ----
# (8 steps an epoch, a save after each; the scale collapses after some 33 skipped steps)
expect "fp16 scale collapse" 1 "fp16: the loss scale has collapsed to .* steps so far were skipped" -- "$m" "${run[@]}" --precision fp16 --lr 1e30 --save "$tmp/fp.st"
expect "the checkpoint before the collapse stays, complete" 0 "nothing to do: the run is at step (8|16|24|32) already" -- "$m" --device cpu --precision fp16 --lr 1e30 --resume "$tmp/fp.st" --stop-after 1

# ---- --detect-anomaly: the first op that is not finite, its line, the step ----
sed 's/^    h    = tanh(linear(x, 32))$/    z    = linear(x, 32)\n    h    = tanh(exp(z * 100))/' "$m" > "$tmp/overflow.net"
line=$(grep -n 'exp(z' "$tmp/overflow.net" | cut -d: -f1)
expect "without --detect-anomaly, the loss" 1 "the loss became (NaN|infinite) at step" -- "$tmp/overflow.net" "${run[@]}" --lr 100 --steps 20
expect "--detect-anomaly names the first op" 1 "anomaly in step [0-9]+: exp at $tmp/overflow.net:$line \(train graph, node %[0-9]+[^)]*\) computed \+inf at element [0-9]+ of \[N, 32\], from values that were all finite" -- "$tmp/overflow.net" "${run[@]}" --lr 100 --steps 20 --detect-anomaly
expect "--detect-anomaly on a finite run" 0 "" -- "$m" "${run[@]}" --steps 3 --detect-anomaly

# ---- killed between writing a save and renaming it over the last one (strace injects
# the SIGKILL at the second save's rename): the first save stays whole, the next save
# removes the orphaned temporary file, and the run ends where an uninterrupted one does ----
if strace -o /dev/null true 2> /dev/null; then
  status=$( (strace -f -o /dev/null -e trace=rename -e inject=rename:signal=KILL:when=2 \
               "$cgc" "$m" "${run[@]}" --steps 24 --save "$tmp/r.st" > /dev/null 2>&1); echo $?) 2> /dev/null
  check "killed at the second save's rename" test "$status" -eq 137
  check "its temporary file was written" test -n "$(ls "$tmp" | grep '^r\.st\.tmp\.')"
  expect "the first save stays, whole" 0 "resuming at step 8 \(epoch 2, batch 0\)" -- "$m" --device cpu --steps 24 --resume "$tmp/r.st" --stop-after 1
  expect "resumed to the end" 0 "" -- "$m" "${run[@]}" --steps 24 --resume "$tmp/r.st" --save "$tmp/r.st"
  check "the next save removed the orphan" test -z "$(ls "$tmp" | grep '^r\.st\.tmp\.')"
  "$cgc" "$m" "${run[@]}" --steps 24 --save "$tmp/r24.st" || { echo "FAIL: the straight 24 steps"; exit 1; }
  check "ends where the uninterrupted run does" cmp -s "$tmp/r24.st" "$tmp/r.st"
else
  echo "strace missing or not allowed to trace here: the kill at a rename not tried"
fi

# ---- killed at random moments: every resume from a complete checkpoint ----
"$cgc" "$m" "${run[@]}" --save "$tmp/straight.st" || { echo "FAIL: the straight run"; exit 1; }
RANDOM=7
kills=0 resumes=0 bad=0
rm -f "$tmp/k.st"
while [ "$kills" -lt 50 ]; do
  resume=()
  [ -e "$tmp/k.st" ] && resume=(--resume "$tmp/k.st") && resumes=$((resumes + 1))
  "$cgc" "$m" "${run[@]}" --save "$tmp/k.st" "${resume[@]}" > "$tmp/k.out" 2>&1 &
  pid=$!
  sleep "0.$(printf '%03d' $((RANDOM % 400)))"
  if kill -9 "$pid" 2>/dev/null; then kills=$((kills + 1)); fi
  wait "$pid" 2>/dev/null
  status=$?
  # killed (137), or finished (0) before the kill: anything else is a failure to resume
  if [ "$status" -ne 137 ] && [ "$status" -ne 0 ]; then
    bad=$((bad + 1)); echo "run after $kills kills: status $status"; head -5 "$tmp/k.out"
  fi
  [ "$status" -eq 0 ] && rm -f "$tmp/k.st"   # finished: start the run over
done
"$cgc" "$m" "${run[@]}" --save "$tmp/k.st" $([ -e "$tmp/k.st" ] && echo --resume "$tmp/k.st") > "$tmp/k.out" 2>&1 ||
  { bad=$((bad + 1)); echo "the last resume failed"; head -5 "$tmp/k.out"; }
echo "$kills kills, $resumes resumes, $bad failed"
check "every resume after a kill succeeded" test "$bad" -eq 0
check "the killed and resumed run ends where the straight one does" cmp -s "$tmp/straight.st" "$tmp/k.st"
check "no temporary file left behind" test -z "$(ls "$tmp" | grep '\.tmp\.')"

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
