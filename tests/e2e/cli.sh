#!/usr/bin/env bash
# The command line: --help lists every flag it accepts, usage errors exit 2, file errors
# exit 1 with a message, --device says where it runs.
set -uo pipefail
cgc=$1 root=$2
fails=0 passes=0
expect() {  # expect DESCRIPTION STATUS PATTERN -- ARGS...   (pattern searched in stdout+stderr)
  local what=$1 want=$2 pattern=$3; shift 4
  local out status
  out=$("$cgc" "$@" 2>&1); status=$?
  if [ "$status" -ne "$want" ] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL: $what: status $status (want $want), output:"; echo "$out" | head -20
    fails=$((fails + 1))
  else
    passes=$((passes + 1))
  fi
}
expect "help" 0 "usage: cgc FILE.net" -- --help
for flag in --check --dump-ir --device --save --resume --stop-after --metrics --quiet --version \
            --data --batch --epochs --steps --shuffle --drop-last --optimizer --lr --schedule \
            --precision --accumulate --clip-norm --checkpoint --memory --seed; do
  expect "help mentions $flag" 0 "$flag" -- --help
done
expect "version" 0 "^cgc [0-9]+\.[0-9]+\.[0-9]+" -- --version
expect "no file" 2 "no model file given" --
expect "unknown option" 2 "unknown option '--bogus'" -- --bogus "$root/models/mlp.net"
expect "missing value" 2 "needs a value" -- "$root/models/mlp.net" --batch
expect "two files" 2 "unexpected argument" -- "$root/models/mlp.net" "$root/models/mlp.net"
expect "missing file" 1 "cannot read /nonexistent.net" -- /nonexistent.net
expect "check ok" 0 "ok: model mlp, 468874 parameters" -- "$root/models/mlp.net" --check
expect "bad batch flag" 1 "^--batch:1:1: error: " -- "$root/models/mlp.net" --check --batch 0
expect "bad precision flag" 1 "^--precision:1:1: error: " -- "$root/models/mlp.net" --check --precision fp8
expect "bad lr" 1 "--lr: expected a positive learning rate" -- "$root/models/mlp.net" --check --lr -1
expect "cuda device" 1 "no CUDA backend" -- "$root/models/regression.net" --device cuda
expect "bad device" 1 "unknown device 'tpu'" -- "$root/models/regression.net" --device tpu
expect "auto device" 0 "running on the CPU" -- "$root/models/regression.net" --device auto --steps 2
expect "unknown graph" 1 "unknown graph 'nope'" -- "$root/models/mlp.net" --dump-ir=nope
expect "resume garbage" 1 "error: .*cli.sh" -- "$root/models/regression.net" --resume "$0" --steps 2
expect "save dir missing" 1 "cannot save to /nonexistent/m.st: directory /nonexistent is missing" -- "$root/models/regression.net" --steps 2 --save /nonexistent/m.st
expect "stop-after zero" 2 "--stop-after takes a positive step number" -- "$root/models/mlp.net" --stop-after 0
echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
