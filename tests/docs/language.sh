#!/bin/bash
# language.sh CGC ROOT: docs/language.md documents the language that cgc accepts.
#
# (a) Nothing the compiler accepts is missing from it. The lists come from the compiler's
#     own tables, read here with a pattern for each table's exact form; a table line that
#     the pattern cannot read fails the test, so a change of form is noticed here rather
#     than skipped:
#   - every built-in of `builtins[]` in compiler/builtins.c has a signature in backquotes,
#     `NAME(p1, p2 = DEFAULT, ...)`, whose parameter names are the table's, in its order;
#   - every key of `train_keys[]` in compiler/train_config.c names a heading: ### `KEY`;
#   - every call form of a train value (each name that train_config.c passes to
#     entry_form: idx, sgd, cosine, ...) has a signature as built-ins do, from its
#     Signature literal in train_config.c;
#   - every name of every `static const char *const NAME[] = {...}` list of
#     train_config.c (precisions, checkpoint modes, memory units, ...) and of sema.c's
#     dtype_names and reserved_names appears in backquotes.
# (b) Its examples compile. Every fenced block whose tag starts with `net` is written to
#     example.net and checked with `CGC example.net --check --arch none`, by its tag:
#     net        a whole .net file, as it is: must pass (exit 0);
#     net-body   the statements of a model block: must pass inside
#                  model example {
#                      input x: f32[N, 784]
#                      input y: i32[N]
#                      ...the block...
#                  }
#     net-train  the entries of a train block: must pass as `train { ...the block... }`
#                after the model that net-train's paragraph of the doc shows (TRAIN_MODEL);
#     net-error  a whole file that must be refused: exit 1, and what cgc prints on
#                standard error must equal the next fenced block of the doc, exactly.
#     Any other tag that starts with `net` fails (a misspelt tag would skip its block);
#     blocks of other tags (text, ebnf, sh) are not compiled. The doc states these
#     wrappers where it uses them, so a reader sees what the test compiles.
set -u
CGC=$(realpath "${1:?usage: language.sh CGC ROOT}")
ROOT=$(realpath "${2:?usage: language.sh CGC ROOT}")
DOC=$ROOT/docs/language.md
SEMA=$ROOT/compiler/sema.c
BUILTINS=$ROOT/compiler/builtins.c
TRAIN=$ROOT/compiler/train_config.c
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

TRAIN_MODEL='model example {
    input x: f32[N, 784]
    input y: i32[N]
    logits = linear(x, 10)
    output logits
    loss cross_entropy(logits, y)
}'

[ -f "$DOC" ] || { echo "FAIL: no $DOC"; exit 1; }

# ---- (a) the compiler's tables -------------------------------------------------------

# '"x", "out", "bias"' -> 'x out bias'
names_of() { sed -e 's/"//g' -e 's/,/ /g' -e 's/  */ /g' -e 's/^ //' -e 's/ $//' <<<"$1"; }

# The parameter names of the doc's signatures of NAME, one signature a line.
doc_signatures() {
    grep -o "\`$1([^\`]*)\`" "$DOC" | while IFS= read -r sig; do
        local inside=${sig#*\(}
        inside=${inside%)\`}
        local params="" item
        IFS=',' read -ra items <<<"$inside"
        for item in "${items[@]}"; do
            item=${item%%=*}
            item=$(sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' <<<"$item")
            [ -n "$item" ] && params="$params $item"
        done
        echo "${params# }"
    done
    if [ -z "$2" ] && grep -q "\`$1\`" "$DOC"; then echo ""; fi
}

# check_signature WHAT NAME "p1 p2 ...": the doc writes NAME's signature with these params.
check_signature() {
    local found
    found=$(doc_signatures "$2" "$3" | grep -c -x -F -- "$3")
    if [ "$found" -eq 0 ]; then
        local shown=$(sed 's/ /, /g' <<<"$3")
        fail "$1 '$2' has no signature \`$2($shown)\` in docs/language.md (parameters in the compiler's order, defaults as 'name = value')"
    fi
}

# Built-ins: builtins.c's table, one entry a line, either spelled out or through UNARY().
unary_def=$(grep -E '^#define UNARY\(name, op\) ' "$BUILTINS")
re_unary_def='^#define UNARY\(name, op\) \{\{name, \{("[a-z0-9_]+"(, "[a-z0-9_]+")*)\}, [0-9]+\}, lower_unary, op, false\}$'
if [[ $unary_def =~ $re_unary_def ]]; then
    unary_params=$(names_of "${BASH_REMATCH[1]}")
else
    fail "compiler/builtins.c: the UNARY macro is not '#define UNARY(name, op) {{name, {\"x\"}, 1}, lower_unary, op, false}' any more; update this test"
    unary_params=x
fi
table=$(sed -n '/^static const Builtin builtins\[\] = {$/,/^};$/p' "$BUILTINS")
[ -n "$table" ] || fail "compiler/builtins.c: no table 'static const Builtin builtins[] = {' ... '};'; update this test to its new form"
re_full='^[[:space:]]*\{\{"([a-z0-9_]+)", \{("[a-z0-9_]+"(, "[a-z0-9_]+")*)\}, [0-9]+\}, lower_[a-z0-9_]+, IR_[A-Z0-9_]+, (true|false)\},$'
re_unary='^[[:space:]]*UNARY\("([a-z0-9_]+)", IR_[A-Z0-9_]+\),$'
nbuiltins=0
while IFS= read -r line; do
    case $line in 'static const Builtin builtins[] = {' | '};') continue ;; esac
    if [[ $line =~ $re_full ]]; then
        name=${BASH_REMATCH[1]}
        params=$(names_of "${BASH_REMATCH[2]}")
    elif [[ $line =~ $re_unary ]]; then
        name=${BASH_REMATCH[1]}
        params=$unary_params
    else
        fail "compiler/builtins.c: cannot read this line of builtins[]: '$line'; update this test to the table's form"
        continue
    fi
    nbuiltins=$((nbuiltins + 1))
    check_signature "built-in" "$name" "$params"
done <<<"$table"

# Train keys: train_config.c's table, pairs {"KEY", entry_KEY}, several a line.
table=$(sed -n '/^} train_keys\[\] = {$/,/^};$/p' "$TRAIN")
[ -n "$table" ] || fail "compiler/train_config.c: no table '} train_keys[] = {' ... '};'; update this test to its new form"
re_keys='^[[:space:]]*(\{"[a-z_]+", entry_[a-z_]+\},[[:space:]]*)+$'
nkeys=0
while IFS= read -r line; do
    case $line in '} train_keys[] = {' | '};') continue ;; esac
    if ! [[ $line =~ $re_keys ]]; then
        fail "compiler/train_config.c: cannot read this line of train_keys[]: '$line'; update this test"
        continue
    fi
    for pair in $(grep -o -E '\{"[a-z_]+", entry_[a-z_]+\}' <<<"$line" | tr -d ' {}"'); do
        key=${pair%%,*}
        [ "${pair#*,}" = "entry_$key" ] || fail "compiler/train_config.c: key '$key' is read by ${pair#*,}, not entry_$key; update this test"
        nkeys=$((nkeys + 1))
        grep -q -E "^#+ .*\`$key\`" "$DOC" || fail "train key '$key' has no heading (### \`$key\`) in docs/language.md"
    done
done <<<"$table"

# Call forms of train values: the names each entry_form call chooses among (a list
# defined above the call), each with its Signature literal {"NAME", {"p", ...}, N}.
forms=$(awk '
    match($0, /static const char \*const [a-z_]+\[\] = \{[^}]*\};/) {
        def = substr($0, RSTART, RLENGTH)
        var = def; sub(/^static const char \*const /, "", var); sub(/\[\].*/, "", var)
        body = def; sub(/^[^{]*\{/, "", body); sub(/\};$/, "", body)
        lists[var] = body
    }
    match($0, /entry_form\(src, v, "[a-z_]+", [a-z_]+,/) {
        call = substr($0, RSTART, RLENGTH)
        n = split(call, f, ", ")
        var = f[4]; sub(/,$/, "", var)
        if (!(var in lists)) { print "MISSING " var; next }
        print lists[var]
    }' "$TRAIN" | sed -e 's/NULL//g' -e 's/[",]/ /g')
grep -q MISSING <<<"$forms" && fail "compiler/train_config.c: entry_form is given a list this test cannot find ($(grep MISSING <<<"$forms")); update this test"
[ -n "$forms" ] || fail "compiler/train_config.c: no entry_form(src, v, \"KEY\", LIST, ...) calls found; update this test to the new form"
nforms=0
for form in $forms; do
    [ "$form" = MISSING ] && continue
    sig=$(grep -o -E "\{\"$form\", \{(NULL|\"[a-z0-9_]+\"(, \"[a-z0-9_]+\")*)\}, [0-9]+\}" "$TRAIN")
    if [ "$(grep -c . <<<"$sig")" -ne 1 ]; then
        fail "compiler/train_config.c: no single Signature literal {\"$form\", {...}, N} for the form '$form'; update this test"
        continue
    fi
    params=$(sed -e 's/^{"[a-z_]*", {//' -e 's/}, [0-9]*}$//' -e 's/NULL//' <<<"$sig")
    check_signature "train form" "$form" "$(names_of "$params")"
    nforms=$((nforms + 1))
done

# Names from fixed lists: every string must appear in backquotes, alone or as a call.
lists=$(grep -o -E 'static const char \*const [a-z_]+\[\] = \{[^}]*\};' "$TRAIN" |
        sed -e 's/^[^{]*{//' -e 's/};$//' -e 's/NULL//g' -e 's/[",]/ /g')
[ -n "$lists" ] || fail "compiler/train_config.c: no 'static const char *const NAME[] = {...};' lists found; update this test"
dtypes=$(grep -E '^static const char \*const dtype_names\[\] = \{[^}]*\};$' "$SEMA" |
         sed -e 's/^[^{]*{//' -e 's/};$//' -e 's/NULL//g' -e 's/[",]/ /g')
[ -n "$dtypes" ] || fail "compiler/sema.c: no one-line 'static const char *const dtype_names[] = {...};'; update this test"
reserved=$(sed -n '/^static const char \*const reserved_names\[\] = {$/,/^};$/p' "$SEMA" | sed '1d;$d')
[[ $reserved =~ ^[[:space:]]*(\"[a-z_]+\",[[:space:]]*)+NULL,$ ]] ||
    fail "compiler/sema.c: reserved_names[] is not one line of names ending in NULL; update this test"
reserved=$(sed -e 's/NULL//g' -e 's/[",]/ /g' <<<"$reserved")
nnames=0
for name in $lists $dtypes $reserved; do
    nnames=$((nnames + 1))
    grep -q -e "\`$name\`" -e "\`$name(" "$DOC" ||
        fail "'$name' (from the compiler's lists of names) does not appear as \`$name\` in docs/language.md"
done

# ---- (b) the examples ----------------------------------------------------------------

# Each fenced block to $WORK/blocks/NNN, and its tag and first line to the index.
mkdir -p "$WORK/blocks" "$WORK/run"
awk -v dir="$WORK/blocks" '
    /^```/ {
        if (!open) {
            open = 1; n++; tag = substr($0, 4); gsub(/[ \t]+$/, "", tag)
            file = sprintf("%s/%03d", dir, n); printf "" > file
            printf "%03d %d %s\n", n, NR + 1, (tag == "" ? "-" : tag) > (dir "/index")
        } else { open = 0; close(file) }
        next
    }
    open { print > file }
    END { if (open) print "UNCLOSED" > (dir "/index") }' "$DOC"
grep -q UNCLOSED "$WORK/blocks/index" && fail "docs/language.md: a fenced block is never closed"

# check_block N LINE TAG: compiles block N (from doc line LINE) as TAG says.
check_block() {
    local n=$1 line=$2 tag=$3 block=$WORK/blocks/$1 src=$WORK/run/example.net want=0
    case $tag in
        net | net-error) cp "$block" "$src" ;;
        net-body) { printf 'model example {\n    input x: f32[N, 784]\n    input y: i32[N]\n'
                    cat "$block"; printf '}\n'; } >"$src" ;;
        net-train) { printf '%s\n\ntrain {\n' "$TRAIN_MODEL"; cat "$block"; printf '}\n'; } >"$src" ;;
        *) fail "docs/language.md:$line: unknown block tag '$tag' (net, net-body, net-train or net-error)"; return ;;
    esac
    [ "$tag" = net-error ] && want=1
    (cd "$WORK/run" && "$CGC" example.net --check --arch none >out 2>err)
    local rc=$?
    if [ "$rc" -ne "$want" ]; then
        fail "docs/language.md:$line: the $tag block exits $rc, not $want; cgc said:"
        sed 's/^/    /' "$WORK/run/err"
        return
    fi
    [ "$tag" = net-error ] || return 0
    local next=$WORK/blocks/$(printf '%03d' $((10#$n + 1)))
    if [ ! -f "$next" ]; then
        fail "docs/language.md:$line: the net-error block has no block after it with cgc's output"
    elif ! diff -u "$next" "$WORK/run/err" >"$WORK/run/diff"; then
        fail "docs/language.md:$line: cgc's messages differ from the block after this net-error block (- doc, + cgc):"
        sed 's/^/    /' "$WORK/run/diff"
    fi
}

nblocks=0
while read -r n line tag; do
    case $tag in net*) ;; *) continue ;; esac
    nblocks=$((nblocks + 1))
    check_block "$n" "$line" "$tag"
done <"$WORK/blocks/index"
[ "$nblocks" -gt 0 ] || fail "docs/language.md: no \`\`\`net blocks found"

echo "docs/language.md: $nbuiltins built-ins, $nkeys train keys, $nforms train forms, $nnames names, $nblocks examples checked; $failures failed"
[ "$failures" -eq 0 ]
