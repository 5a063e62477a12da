#!/bin/bash
# readme_flags.sh CGC ROOT: README.md and docs/usage.md speak of the flags cgc has, and of
# all of them. Fails when either file mentions a `--flag` that `CGC --help` does not list
# (a renamed or removed flag, a misspelling), or when `--help` lists a flag that neither
# file mentions (a flag a user cannot read about).
#
# A flag is `--` then a lower-case letter, then letters, digits and dashes, where the
# character before the `--` is not a letter, digit or dash: `--dump-ir=train` is
# --dump-ir, and a table rule (`|---|`) or an arrow (`-->`) is no flag. The same pattern
# reads the `--help` text, which names every flag cgc accepts (e2e_cli checks that).
# Short flags (-h, -q, -v) are not compared.
set -u
CGC=${1:?usage: readme_flags.sh CGC ROOT}
ROOT=${2:?usage: readme_flags.sh CGC ROOT}
DOCS="README.md docs/usage.md"
FLAG='(^|[^A-Za-z0-9-])--[a-z][a-z0-9-]*'
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

help=$("$CGC" --help) || { echo "FAIL: $CGC --help exited $?"; exit 1; }
listed=$(grep -o -E -- "$FLAG" <<<"$help" | sed 's/^[^-]*//' | sort -u)
count=$(grep -c . <<<"$listed")
[ "$count" -ge 10 ] || fail "cgc --help lists only $count flags: is this its usage text?"

# FILE:LINE:--flag for every mention in the two files.
mentions=$(cd "$ROOT" && for f in $DOCS; do
    [ -f "$f" ] || { echo "MISSING $f"; continue; }
    grep -n -o -E -- "$FLAG" "$f" | sed -e "s|^|$f:|" -e 's/:[^:-]*--/:--/'
done)
grep -q '^MISSING' <<<"$mentions" && fail "$(grep '^MISSING' <<<"$mentions" | sed 's/MISSING/no file/')"

while IFS= read -r m; do
    [ -z "$m" ] || [[ $m == MISSING* ]] && continue
    flag=${m##*:}
    grep -q -x -F -- "$flag" <<<"$listed" || fail "${m%:*}: $flag is not a flag of cgc --help"
done <<<"$mentions"

mentioned=$(sed 's/.*://' <<<"$mentions" | sort -u)
while IFS= read -r flag; do
    grep -q -x -F -- "$flag" <<<"$mentioned" || fail "cgc --help lists $flag, but neither README.md nor docs/usage.md mentions it"
done <<<"$listed"

echo "$count flags in cgc --help, $(grep -c . <<<"$mentioned") mentioned in README.md and docs/usage.md; $failures failed"
[ "$failures" -eq 0 ]
