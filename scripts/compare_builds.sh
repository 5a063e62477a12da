#!/usr/bin/env bash
# compare_builds.sh [-j N] [--keep] [--synthetic] [--root DIR] OLD NEW
#
# Checks that two builds of cgc give the same output, byte for byte: the rule of a refactor
# that must change nothing. OLD and NEW are cgc binaries, or build folders holding `cgc`.
# For every .net file under ROOT/models/ and ROOT/bench/models/ (ROOT: this repository, or
# --root DIR; the list is read at run time), both builds run
#
#   check       every mode (eager default reduce-overhead max-autotune) x every precision
#               (fp32 tf32 bf16 fp16): `--check --arch none --emit emit --stats stats.json`;
#               compared: the --emit tree (kernels, module.cu, cgc_device.h, host_plan.txt,
#               ir/ after each pass, repro/, max-autotune's autotune.tune), the --stats JSON
#   explain     the same combinations: `--explain`; compared: its text
#   train       every precision, in eager and default mode (TRAIN_MODES: the CPU runs the
#               unfused and the fused graphs; the other two modes run default's): a short
#               CPU run (TRAIN_ARGS below) with `--save`; compared: the checkpoint, with cmp
#
# and for every run its stdout, stderr and exit status ("messages"). A combination that
# cgc refuses (exit 1 with a diagnostic) is skipped only when both builds refuse it with the
# same diagnostic; any other exit status is reported as a failure.
#
# Why `--arch none`: --emit writes the same tree as with `--arch sm_90` (the sources are
# rendered before NVRTC; checked for every model and mode), but cgc stops before NVRTC,
# which would take many minutes (resnet.net in max-autotune: 2 minutes alone). Without a
# GPU, max-autotune's --check, --explain and --emit give the heuristics' choices, untimed.
# Every run sees no GPU (CUDA_VISIBLE_DEVICES empty, --device cpu) and an empty cache of its
# own (CGC_NO_CACHE, XDG_CACHE_HOME), so that a GPU, its free memory or choices tuned on it
# cannot change what is compared, on any machine. What is normalised: see normalise().
#
# Output: one line per artefact that differs (model, mode, precision, artefact) with the first
# lines of its diff, then `N compared, M differ`. Exit status 0 when nothing differs, 1 when
# something does (the scratch folder is then kept and named), 2 on bad arguments, 3 when
# the comparison itself failed. -j N: jobs at a time (default 2; each job runs OLD, then NEW,
# one thread each). --keep: keep every run's files, even where nothing differs.
# --synthetic: train on synthetic data (SYNTHETIC_DATA below), for a machine that lacks a
# model's data set: cgc refuses such a run on both builds, and the output notes it.
# A full run takes 3 to 7 minutes on 2 cores (idle or busy), most of it the training runs.
set -euo pipefail

MODES=(eager default reduce-overhead max-autotune)
PRECISIONS=(fp32 tf32 bf16 fp16)
TRAIN_MODES=(eager default)
# Short enough for every model (wide_mlp.net's checkpoint is 643 MB): batch 16, and stopped
# after step 2 of 3 so that the test set is not evaluated (resnet.net's evaluation alone
# takes 2.5 minutes on the CPU). deep_mlp.net's own batch (8192) is more than its synthetic
# data set holds, which cgc refuses; the smaller batch lets it train.
TRAIN_ARGS=(--device cpu -q --batch 16 --steps 3 --stop-after 2)
SYNTHETIC_DATA='synthetic(samples = 64)'   # --synthetic: the training runs' data
CHECK_ARGS=(--check --arch none --device cpu)
RUN_TIMEOUT=600   # seconds; a run that takes longer is reported as a failure

usage() {
    cat >&2 <<'EOF'
usage: scripts/compare_builds.sh [-j N] [--keep] [--synthetic] [--root DIR] OLD NEW
  OLD, NEW     cgc binaries, or build folders holding cgc
  -j N         jobs at a time (default 2)
  --keep       keep every run's files, even where nothing differs
  --synthetic  train on synthetic data instead of the models' own (a data set missing)
  --root DIR   the tree whose models/ and bench/models/ are compared (default: this one)
Compares --emit, --explain, --stats and short CPU training checkpoints of every model,
mode and precision; exit 0: the same, 1: something differs, 2: bad arguments.
EOF
    exit 2
}

# is_cgc PATH: whether PATH is an executable file, or a folder holding cgc.
is_cgc() { [ -f "$1" ] && [ -x "$1" ] || { [ -f "$1/cgc" ] && [ -x "$1/cgc" ]; }; }

# cgc_of PATH: the cgc binary PATH names (itself, or PATH/cgc), as an absolute path.
cgc_of() {
    local path=$1
    [ -d "$path" ] && path=$path/cgc
    echo "$(cd "$(dirname "$path")" && pwd)/$(basename "$path")"
}

# ---- Normalisation: the one place where output that may legitimately differ between two
# builds is made equal before comparing. Applied to every text file a run writes (not to
# checkpoints). Only paths: each build runs in its own scratch folder, as its own binary.
# Runs are given relative paths, so today neither rule fires; they keep an absolute path
# that cgc might print from counting as a difference. cgc writes no timestamp, version or
# commit into any artefact (checked); add a rule here, with its reason, if it ever does.
normalise() {  # normalise DIR SIDE_DIR BIN: rewrite DIR's text files in place
    local dir=$1 side_dir bin
    side_dir=$(sed_literal "$2") bin=$(sed_literal "$3")
    grep -rlIF --exclude='*.safetensors' -e "$2" -e "$3" "$dir" | while IFS= read -r f; do
        sed -i -e "s|$bin|<cgc>|g" -e "s|$side_dir|<scratch>|g" "$f"
    done || true
}

sed_literal() { printf '%s' "$1" | sed 's/[][\\.*^$|]/\\&/g'; }

# run_cgc SIDE KIND MODEL MODE PRECISION: one build's run of one combination, in its own
# folder $scratch/SIDE/ID (ID names the combination); writes stdout, stderr, status there.
run_cgc() {
    local side=$1 kind=$2 model=$3 mode=$4 precision=$5 bin=$NEW dir args
    [ "$side" = old ] && bin=$OLD
    dir=$scratch/$side/$(job_id "$kind" "$model" "$mode" "$precision")
    mkdir -p "$dir"
    case $kind in
        check)   args=("${CHECK_ARGS[@]}" --emit emit --stats stats.json) ;;
        explain) args=(--explain --device cpu) ;;
        train)   args=("${TRAIN_ARGS[@]}" --save checkpoint.safetensors)
                 [ "$synthetic" = false ] || args+=(--data "$SYNTHETIC_DATA") ;;
    esac
    local status=0
    (cd "$dir" && XDG_CACHE_HOME=$scratch/$side/cache timeout "$RUN_TIMEOUT" \
        "$bin" "$root/$model" "${args[@]}" --mode "$mode" --precision "$precision" \
        >stdout 2>stderr) || status=$?
    echo "$status" > "$dir/status"
    normalise "$dir" "$scratch/$side" "$bin"
}

job_id() { echo "$1.${2//\//_}.$3.$4"; }

# messages DIR KIND: a run's exit status, stderr and (unless it is the artefact) stdout.
messages() {
    echo "exit status $(cat "$1/status")"
    [ "$2" = explain ] || { echo "-- stdout"; cat "$1/stdout"; }
    echo "-- stderr"
    cat "$1/stderr"
}

# artefacts KIND: the artefacts of a run of KIND, as NAME:FILE (FILE in its folder).
artefacts() {
    case $1 in
        check)   echo "emit:emit stats:stats.json" ;;
        explain) echo "explain:stdout" ;;
        train)   echo "checkpoint:checkpoint.safetensors" ;;
    esac
}

# differences OLD NEW: the first lines of what differs between two files or folders, or
# nothing. A checkpoint is compared with cmp and the first differing tensor named.
differences() {
    local old=$1 new=$2
    if [ ! -e "$old" ] && [ ! -e "$new" ]; then return 0; fi
    [ -e "$old" ] || { echo "only NEW wrote $(basename "$new")"; return 0; }
    [ -e "$new" ] || { echo "only OLD wrote $(basename "$old")"; return 0; }
    case $old in
        *.safetensors) checkpoint_differences "$old" "$new" ;;
        *) diff -r "$old" "$new" | head -n 12 || true ;;
    esac | sed "s|$(sed_literal "$scratch/")||g"   # diff -r's headers: old/ID/..., new/ID/...
}

# checkpoint_differences OLD NEW: cmp's first difference, and where it is; nothing when
# the files are the same.
checkpoint_differences() {
    local first byte
    first=$(cmp "$1" "$2" 2>&1) && return 0
    byte=$(sed -n 's/.* differ: [a-z]* \([0-9]*\),.*/\1/p' <<<"$first")   # "byte N" or "char N"
    [ -n "$byte" ] || { echo "$first"; return 0; }                       # cmp: EOF on one
    echo "cmp: first difference at byte $byte"
    ! command -v python3 >/dev/null || checkpoint_where "$1" "$2" "$byte" || true
}

# checkpoint_where OLD NEW BYTE: the tensor that holds BYTE (counted from 1, as cmp does)
# of safetensors file OLD; when BYTE is in the header, the metadata that differ and the
# first tensor whose bytes differ.
checkpoint_where() {
    python3 - "$@" <<'PY'
import json, struct, sys
def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return n, json.loads(f.read(n))
def first_tensor_difference(path_a, path_b, n_a, a, b):
    """The first byte (in A's data) of a tensor that B, by name, holds otherwise; -1: none."""
    import mmap
    with open(path_a, "rb") as fa, open(path_b, "rb") as fb:
        ma, mb = (mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) for f in (fa, fb))
        n_b = struct.unpack("<Q", mb[:8])[0]
        for name, t in sorted(a.items(), key=lambda kv: kv[1]["data_offsets"][0]):
            (s, e), u = t["data_offsets"], b.get(name, {}).get("data_offsets", (0, -1))
            x, y = ma[8 + n_a + s:8 + n_a + e], mb[8 + n_b + u[0]:8 + n_b + u[1]]
            if x != y:
                c = next(c for c in range(0, len(x) + 1, 65536) if x[c:c + 65536] != y[c:c + 65536])
                return s + c + next((i for i, (p, q) in enumerate(zip(x[c:c + 65536], y[c:c + 65536]))
                                     if p != q), min(len(x), len(y)) - c)
    return -1
(n, old), (_, new) = header(sys.argv[1]), header(sys.argv[2])
meta = old.pop("__metadata__", {}), new.pop("__metadata__", {})
at = int(sys.argv[3]) - 1 - 8 - n   # cmp counts bytes from 1; the data follows the header
if at < 0:
    keys = sorted(k for k in set(meta[0]) | set(meta[1]) if meta[0].get(k) != meta[1].get(k))
    keys += sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    print("in the header:", ", ".join(f"{k} {meta[0].get(k, old.get(k))} -> {meta[1].get(k, new.get(k))}"
                                      for k in keys[:3]) or "its layout")
    at = first_tensor_difference(sys.argv[1], sys.argv[2], n, old, new)
for name, t in old.items():
    if t["data_offsets"][0] <= at < t["data_offsets"][1]:
        print(f"first in tensor {name} ({t['dtype']} {t['shape']}, byte {at - t['data_offsets'][0]})")
PY
}

# compare_job KIND MODEL MODE PRECISION: both builds' runs of one combination compared;
# writes to $scratch/results/ID.{count,diff,note,fail} and removes the runs when they
# agree (unless --keep).
compare_job() {
    local kind=$1 model=$2 mode=$3 precision=$4 id old new out count=1 what
    id=$(job_id "$@")
    old=$scratch/old/$id new=$scratch/new/$id out=$scratch/results/$id
    what="$model $mode $precision"
    report "$what" messages "$(diff <(messages "$old" "$kind") <(messages "$new" "$kind") | head -n 12)" "$out"
    for pair in $(artefacts "$kind"); do
        [ -e "$old/${pair#*:}" ] || [ -e "$new/${pair#*:}" ] || continue
        count=$((count + 1))
        report "$what" "${pair%%:*}" "$(differences "$old/${pair#*:}" "$new/${pair#*:}")" "$out"
    done
    echo "$count" > "$out.count"
    check_status "$what" "$kind" "$old" "$new" "$out"
    [ -e "$out.diff" ] || [ -e "$out.fail" ] || [ "$keep" = true ] || rm -rf "$old" "$new"
}

# report WHAT ARTEFACT DIFF OUT: appends a difference (when DIFF is not empty) to OUT.diff.
report() {
    [ -n "$3" ] || return 0
    { echo "differs: $1 $2"; sed 's/^/    /' <<<"$3"; } >> "$4.diff"
}

# check_status WHAT KIND OLD_DIR NEW_DIR OUT: a refusal by both builds (exit 1) is noted
# with OLD's first error; any exit status but 0 and 1 is a failure (a crash, a timeout),
# even when both builds fail alike.
check_status() {
    local what=$1 kind=$2 old new out=$5 s
    old=$(cat "$3/status") new=$(cat "$4/status")
    [ "$old" = 1 ] && [ "$new" = 1 ] &&
        echo "refused by both: $what $kind: $(grep -m1 'error' "$3/stderr" || head -1 "$3/stderr")" > "$out.note"
    for s in "$old" "$new"; do
        case $s in 0|1) ;; *) echo "failed: $what $kind: exit status OLD $old, NEW $new" > "$out.fail" ;; esac
    done
}

# run_job KIND MODEL MODE PRECISION: one combination, run by OLD then NEW, then compared;
# its seconds in $scratch/results/ID.seconds.
run_job() {
    local start=$SECONDS
    run_cgc old "$@"
    run_cgc new "$@"
    compare_job "$@"
    echo "$1 $((SECONDS - start))" > "$scratch/results/$(job_id "$@").seconds"
}

# jobs: every combination, NUL-separated (KIND MODEL MODE PRECISION), training first
# (the longest runs, so that the parallel jobs end together).
jobs() {
    local model mode precision kind
    for model in "${models[@]}"; do
        for precision in "${PRECISIONS[@]}"; do
            for mode in "${TRAIN_MODES[@]}"; do printf '%s\0' train "$model" "$mode" "$precision"; done
        done
    done
    for model in "${models[@]}"; do
        for mode in "${MODES[@]}"; do
            for precision in "${PRECISIONS[@]}"; do
                for kind in check explain; do printf '%s\0' "$kind" "$model" "$mode" "$precision"; done
            done
        done
    done
}

# summarise: every difference and failure (by kind, model, mode, precision), the notes,
# the counts; returns 0 when nothing differs or failed.
summarise() {
    local results=$scratch/results compared differ failed refused
    compared=$(cat "$results"/*.count | awk '{ n += $1 } END { print n + 0 }')
    differ=$(cat "$results"/*.diff 2>/dev/null | grep -c '^differs: ' || true)
    failed=$(cat "$results"/*.fail 2>/dev/null | wc -l)
    refused=$(cat "$results"/*.note 2>/dev/null | wc -l)
    cat "$results"/*.diff "$results"/*.fail 2>/dev/null || true
    cat "$results"/*.note 2>/dev/null || true
    echo "$compared compared, $differ differ$([ "$failed" = 0 ] || echo ", $failed failed")" \
         "($refused runs refused by both builds)"
    [ "$differ" = 0 ] && [ "$failed" = 0 ]
}

main() {
    local parallel=2 script bin
    keep=false synthetic=false
    script=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
    root=$(cd "$(dirname "$0")/.." && pwd)
    while [ $# -gt 0 ]; do
        case $1 in
            -j) [ $# -ge 2 ] && [[ $2 =~ ^[1-9][0-9]*$ ]] || usage; parallel=$2; shift 2 ;;
            --keep) keep=true; shift ;;
            --synthetic) synthetic=true; shift ;;
            --root) [ $# -ge 2 ] && [ -d "$2" ] || usage; root=$(cd "$2" && pwd); shift 2 ;;
            -h|--help) usage ;;
            -*) echo "compare_builds: unknown option $1" >&2; usage ;;
            *) break ;;
        esac
    done
    [ $# = 2 ] || usage
    for bin in "$1" "$2"; do
        is_cgc "$bin" || { echo "compare_builds: $bin: not a cgc binary or a build folder holding one" >&2; usage; }
    done
    OLD=$(cgc_of "$1") NEW=$(cgc_of "$2")
    models=()
    while IFS= read -r m; do models+=("${m#"$root"/}"); done \
        < <(find "$root/models" "$root/bench/models" -maxdepth 1 -name '*.net' -type f 2>/dev/null | LC_ALL=C sort)
    [ ${#models[@]} -gt 0 ] || { echo "compare_builds: no .net files under $root/models or $root/bench/models" >&2; exit 2; }

    scratch=$(mktemp -d "${TMPDIR:-/tmp}/compare_builds.XXXXXX")
    mkdir -p "$scratch/results" "$scratch/old/cache" "$scratch/new/cache"
    # The same environment for both builds, and none that a GPU or the locale could change.
    export LC_ALL=C TZ=UTC OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 CUDA_VISIBLE_DEVICES='' CGC_NO_CACHE=1
    export OLD NEW root scratch keep synthetic
    echo "compare_builds: ${#models[@]} models, OLD $OLD, NEW $NEW, in $scratch" >&2
    local start=$SECONDS status=0
    jobs | xargs -0 -n 4 -P "$parallel" "$script" --run-job ||
        { echo "compare_builds: a job failed; see $scratch" >&2; exit 3; }
    summarise || status=1
    echo "compare_builds: $((SECONDS - start)) s; $(awk '{ t[$1] += $2 } END { for (k in t) print k " jobs " t[k] " s" }' \
        "$scratch"/results/*.seconds | sort | paste -sd ';' | sed 's/;/, /g') (summed over parallel jobs)" >&2
    if [ $status = 0 ] && ! $keep; then rm -rf "$scratch"; else echo "compare_builds: runs kept in $scratch" >&2; fi
    exit $status
}

# xargs runs each job as `compare_builds.sh --run-job KIND MODEL MODE PRECISION`, with
# OLD, NEW, root, scratch, keep and synthetic in the environment.
if [ "${1-}" = --run-job ]; then
    shift
    run_job "$@"
else
    main "$@"
fi
