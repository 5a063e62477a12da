#!/usr/bin/env bash
# Every file cgc writes, against every kind of place a careless user could point it at:
# each output flag (--save, --stats, --metrics, --profile, --tune-file, --emit's files,
# the standard output) onto the model's own source, a checkpoint, the checkpoint being
# resumed, a FIFO, a device, a directory, a full disk, a read-only directory, a symbolic
# link to each, and another output's file. Each is refused before any work with a message
# that names the file (or, for a full disk, fails naming it), exits 1, never waits, and
# leaves every file as it was, with no temporary file behind; what may be replaced (JSON
# over JSON, a checkpoint over a checkpoint, through a link) is.
set -uo pipefail
cgc=$1 root=$2
fails=0 passes=0
tmp=$(mktemp -d)
chmod 755 "$tmp"   # the read-only case runs as another user
trap 'chmod -R u+w -- "$tmp"; rm -rf -- "$tmp"' EXIT
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { passes=$((passes + 1)); }

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
    data      = synthetic(samples = 256)
    batch     = 64
    epochs    = 2
    optimizer = adam(lr = 0.01)
    seed      = 3
}
EOF
m=$tmp/m.net
train=(--device cpu -q)
"$cgc" "$m" "${train[@]}" --save "$tmp/ckpt.st" || { echo "the first save failed"; exit 1; }
mkfifo "$tmp/fifo"
mkdir "$tmp/dir"
ln -s m.net "$tmp/link-model"
ln -s ckpt.st "$tmp/link-ckpt"
ln -s fifo "$tmp/link-fifo"
ln -s dir "$tmp/link-dir"
ln -s /dev/null "$tmp/link-null"
ln -s nothing "$tmp/link-dangling"

# The state of every file here and of the model, to show that a refusal changes nothing.
snapshot() { (cd "$tmp" && find . -path ./ro -prune -o -type f -print0 | sort -z | xargs -0 md5sum; ls -A); }

# refuse DESCRIPTION PATTERN -- ARGS...: exit 1 within seconds, PATTERN in the output,
# no training line, nothing changed.
refuse() {
    local what=$1 pattern=$2; shift 3
    local before after out status
    before=$(snapshot)
    out=$(cd "$tmp" && timeout 20 "$cgc" "$@" 2>&1); status=$?
    after=$(snapshot)
    if [ "$status" -ne 1 ]; then fail "$what: status $status (want 1): $out"
    elif ! grep -qE -- "$pattern" <<<"$out"; then fail "$what: no '$pattern' in: $out"
    elif grep -q "train_loss" <<<"$out"; then fail "$what: it trained before refusing: $out"
    elif [ "$before" != "$after" ]; then fail "$what: files changed: $(diff <(echo "$before") <(echo "$after"))"
    else ok; fi
}

# Each output, with the arguments that make a run write it.
declare -A run=(
    [--save]="$m ${train[*]} --steps 1 --save"
    [--stats]="$m --check --arch none -q --stats"
    [--metrics]="$m ${train[*]} --steps 1 --metrics"
    [--profile]="$m ${train[*]} --steps 1 --profile"
    [--tune-file]="$m ${train[*]} --steps 1 --mode max-autotune --tune-file"
    [--logits]="$root/models/gpt.net ${train[*]} --resume ckpt.st --generate hi --logits"
)
declare -A role=(
    [--save]="save to" [--stats]="write --stats to" [--metrics]="write the metrics to"
    [--profile]="write the trace to" [--tune-file]="write the choices to"
    [--logits]="write the logits to"
)
declare -A kind=(
    [--save]="a checkpoint" [--stats]="a JSON file" [--metrics]="a JSON file"
    [--profile]="a JSON file" [--tune-file]="a choices file" [--logits]="a NumPy file"
)
for flag in --save --stats --metrics --profile --tune-file --logits; do
    read -ra args <<<"${run[$flag]}"
    r=${role[$flag]}
    refuse "$flag onto the model" "$r $m: (it is the model's source|the file exists and is not)" -- "${args[@]}" "$m"
    refuse "$flag onto a link to the model" "$r link-model: " -- "${args[@]}" link-model
    refuse "$flag onto a FIFO" "$r fifo: it is a FIFO" -- "${args[@]}" fifo
    refuse "$flag onto a link to a FIFO" "$r link-fifo: it is a FIFO" -- "${args[@]}" link-fifo
    refuse "$flag onto a device" "$r /dev/null: it is a character device" -- "${args[@]}" /dev/null
    refuse "$flag onto /dev/full" "$r /dev/full: it is a character device" -- "${args[@]}" /dev/full
    refuse "$flag onto a link to a device" "$r link-null: it is a character device" -- "${args[@]}" link-null
    refuse "$flag onto a directory" "$r dir: it is a directory" -- "${args[@]}" dir
    refuse "$flag onto a link to a directory" "$r link-dir: it is a directory" -- "${args[@]}" link-dir
    refuse "$flag onto a path ending in /" "$r new/: the path ends in '/'" -- "${args[@]}" new/
    refuse "$flag through a dangling link" "$r link-dangling: it is a symbolic link to nothing" -- "${args[@]}" link-dangling
    refuse "$flag into a missing directory" "$r no/such/f: directory no/such is missing" -- "${args[@]}" no/such/f
    if [ "$flag" != --save ]; then
        refuse "$flag onto a checkpoint" "$r ckpt.st: the file exists and is not ${kind[$flag]}" -- "${args[@]}" ckpt.st
        refuse "$flag onto a link to a checkpoint" "$r link-ckpt: the file exists and is not" -- "${args[@]}" link-ckpt
        refuse "$flag onto the checkpoint resumed" "$r ckpt.st: " -- "${args[@]}" ckpt.st --resume ckpt.st
    fi
done
refuse "--save and --metrics to one file" "that is the file cgc is told to save to" -- \
    "$m" "${train[@]}" --steps 1 --save same.st --metrics same.st
refuse "--stats and --profile to one new file, through a link" "that is the file cgc is told to" -- \
    "$m" "${train[@]}" --steps 1 --profile one.json --stats ./one.json
# A checkpoint whose header is 123 bytes long begins with '{', as JSON does.
python3 - "$tmp/brace.st" <<'PY'
import json, struct, sys
header = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
header += b" " * (123 - len(header))
open(sys.argv[1], "wb").write(struct.pack("<Q", 123) + header + struct.pack("<f", 1.0))
PY
refuse "--stats onto a checkpoint that begins with '{'" "the file exists and is not a JSON file" -- \
    "$m" --check --arch none -q --stats brace.st
# --emit's files are anything, but never the model's source.
mkdir "$tmp/e" && cp "$m" "$tmp/e/cgc_device.h"   # the first file --emit writes
refuse "--emit over the model's source" "write the generated file e/cgc_device.h: it is the model.s source" -- \
    e/cgc_device.h --check --arch none -q --emit e
refuse "--emit onto a file" "cannot write --emit's files to m.net: it is a regular file" -- \
    "$m" --check --arch none -q --emit m.net
refuse "--emit onto a FIFO" "cannot write --emit's files to fifo: it is a FIFO" -- \
    "$m" --check --arch none -q --emit fifo

# A read-only directory (as another user: root may write anywhere).
mkdir "$tmp/ro" && chmod 555 "$tmp/ro"
as_other=()
[ "$(id -u)" -eq 0 ] && as_other=(setpriv --reuid=65534 --regid=65534 --clear-groups)
if [ "${#as_other[@]}" -gt 0 ] && ! "${as_other[@]}" "$cgc" --version > /dev/null 2>&1; then
    echo "note: cgc cannot run as another user here (setpriv, or a build in a private directory): the read-only case is skipped"
else
    for flag in --save --stats --metrics --profile; do
        read -ra args <<<"${run[$flag]}"
        out=$(cd "$tmp" && timeout 20 "${as_other[@]}" "$cgc" "${args[@]}" ro/f 2>&1); status=$?
        if [ "$status" -eq 1 ] && grep -qE "${role[$flag]} ro/f: directory ro is missing or not writable" <<<"$out" &&
           [ -z "$(ls -A "$tmp/ro")" ]; then ok; else fail "$flag into a read-only directory: status $status: $out"; fi
    done
fi

# A full disk, as a file-size limit makes one: the write fails, the error names the file,
# the old file is kept and no temporary file is left.
echo '{"old": true}' > "$tmp/full.json"
cp "$tmp/ckpt.st" "$tmp/full.st"
for case in "--stats full.json|$m --check --arch none -q" \
            "--save full.st|$m ${train[*]} --steps 1" \
            "--profile full.json|$m ${train[*]} --steps 1"; do
    out_args=${case%%|*} cmd=${case#*|}
    read -ra o <<<"$out_args"
    read -ra c <<<"$cmd"
    before=$(md5sum "$tmp/${o[1]}")
    out=$(cd "$tmp" && ulimit -f 1 && timeout 20 "$cgc" "${c[@]}" "${o[@]}" 2>&1); status=$?
    if [ "$status" -eq 1 ] && grep -qE "cannot ${role[${o[0]}]} ${o[1]}: File too large" <<<"$out" &&
       [ "$before" = "$(md5sum "$tmp/${o[1]}")" ] && ! ls "$tmp" | grep -q '\.tmp\.'; then ok
    else fail "${o[0]} onto a full disk: status $status: $out"; ls "$tmp"; fi
done
out=$(cd "$tmp" && "$cgc" "$m" --dump-ir 2>&1 > /dev/full); status=$?
if [ "$status" -eq 1 ] && grep -q "cannot write the standard output: No space left on device" <<<"$out"; then ok
else fail "--dump-ir > /dev/full: status $status: $out"; fi
out=$(cd "$tmp" && "$cgc" "$m" --explain 2>&1 > /dev/full); status=$?
if [ "$status" -eq 1 ] && grep -q "cannot write the standard output" <<<"$out"; then ok
else fail "--explain > /dev/full: status $status: $out"; fi

# What may be replaced is: JSON over JSON (through a link, which stays), a checkpoint over
# the one resumed, metrics appended to.
echo '{"old": true}' > "$tmp/s.json"
ln -s s.json "$tmp/link-s"
(cd "$tmp" && "$cgc" "$m" --check --arch none -q --stats link-s) && [ -L "$tmp/link-s" ] &&
    python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); sys.exit("old" in d)' "$tmp/s.json" &&
    ok || fail "--stats over JSON, through a link"
(cd "$tmp" && "$cgc" "$m" "${train[@]}" --resume ckpt.st --epochs 3 --save ckpt.st) && ok ||
    fail "--save over the checkpoint resumed"
(cd "$tmp" && "$cgc" "$m" "${train[@]}" --metrics log.jsonl && "$cgc" "$m" "${train[@]}" --metrics log.jsonl) &&
    [ "$(wc -l < "$tmp/log.jsonl")" -eq 4 ] && ok || fail "--metrics appends"
ls "$tmp" | grep -q '\.tmp\.' && fail "a temporary file was left: $(ls "$tmp")" || ok

echo "outputs: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
