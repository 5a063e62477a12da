#!/bin/bash
# sanitizer.sh CGC MODELS_DIR [MODEL...]: compute-sanitizer memcheck and racecheck on a
# 12-step GPU run of each model (default mlp resmlp regression, found in MODELS_DIR); each
# run must finish its 12 steps and every report must be 0 errors. SANITIZER_TOOLS picks
# the tools (default "memcheck racecheck").
# Skips without compute-sanitizer. The data is found as cgc finds it (CGC_DATA_PATH).
# SANITIZER_TIMEOUT (seconds, default 300) ends one run that takes longer (racecheck is
# slow), which counts as a failure, so that one slow run does not cost the whole call.
set -u
. "$(dirname "$0")/common.sh"
MODELS=${2:?models dir}
shift 2
LIST=${*:-mlp resmlp regression}
CS=$(command -v compute-sanitizer || true)
[ -z "$CS" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ] && CS=/usr/local/cuda/bin/compute-sanitizer
if [ -z "$CS" ]; then echo "skipped: compute-sanitizer not found"; exit 77; fi
fail=0
for model in $LIST; do
    for tool in ${SANITIZER_TOOLS:-memcheck racecheck}; do
        log="$WORK/$model.$tool.log"
        # cgc must run (a sanitizer prints "0 errors" for a program that fails at once too)
        timeout "${SANITIZER_TIMEOUT:-300}" "$CS" --tool "$tool" --error-exitcode 99 \
            "$CGC" "$MODELS/$model.net" --device cuda --steps 12 --epochs 12 --batch 32 \
            --metrics "$WORK/$model.$tool.jsonl" >"$log" 2>&1
        status=$?   # 124: timed out
        summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1)
        echo "$model $tool: exit $status, ${summary:-no summary}"
        if [ "$status" -ne 0 ] || ! grep -q '"step":12' "$WORK/$model.$tool.jsonl" 2>/dev/null ||
           ! echo "$summary" | grep -qE "SUMMARY: 0 (errors|hazards)"; then
            fail=1
            tail -30 "$log"
        fi
    done
done
exit $fail
