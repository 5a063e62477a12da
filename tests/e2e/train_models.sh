#!/usr/bin/env bash
# Every model in models/ trains a little and its loss goes down; so does a character model
# written from the language contract alone (tests/emu/text/contract.net).
set -euo pipefail
cgc=$1 root=$2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
first_last() {  # prints the train_loss of the first and the last metrics line
  sed -E 's/.*"train_loss":([0-9.eE+-]+).*/\1/' "$1" | sed -n '1p;$p' | tr '\n' ' '
}
run() {  # run NAME MODEL ARGS...
  local name=$1 model=$2; shift 2
  "$cgc" "$model" --device cpu -q --metrics "$dir/$name.jsonl" "$@"
  read -r a b <<<"$(first_last "$dir/$name.jsonl")"
  echo "$name: train_loss $a -> $b"
  awk -v a="$a" -v b="$b" 'BEGIN { exit !(b < a) }' || { echo "$name: loss did not go down"; exit 1; }
}
run regression "$root/models/regression.net" --epochs 4
run resmlp "$root/models/resmlp.net" --epochs 3 --batch 64 --data 'synthetic(samples = 2048)'
run cnn "$root/models/cnn.net" --epochs 3 --batch 32 --data 'synthetic(samples = 512)'
run contract "$root/tests/emu/text/contract.net"
if [ -f /usr/share/games/fortunes/cookie ]; then   # models/gpt.net's corpus (fortunes)
  run gpt "$root/models/gpt.net" --steps 60 --metrics-every 20
fi
