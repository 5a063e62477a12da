#!/bin/bash
# gpu_session.sh: everything a lent GPU machine is for, in one call (see docs/testing.md
# and bench/README.md). Run from the repository root on the GPU machine, with the
# Release build carried in build-gpu/ (scripts/pack_gpu.sh) and Fashion-MNIST in
# data/fashion-mnist/. Logs go to $OUT (default ./gpu-out); a summary is printed last.
# PARTS picks what runs after the machine check (default all: "families tests eager
# default modes table"; one device call is limited to 10 minutes and all of them do not
# fit in one, so give a call a few parts, or one):
#   families the kernels of the emulation's own test models (tests/emu/models: sequences,
#            embeddings, attention, convolutions, odd widths) on the GPU against the CPU
#            executor in every precision and mode, a process a model side by side; sums
#            split across blocks (4099 rows: over the batch, a loss's mean); cnn.net's
#            convolutions by cuDNN and by cgc's kernels (CGC_CUDNN=none); memcheck on a
#            short run of each
#   tests    compile times, the GPU tests, a training run, compute-sanitizer
#   eager    cgc eager against PyTorch (bench/bench_eager.py)
#   default  --mode default against eager, PyTorch eager and torch.compile, and
#            the wide MLP against the bf16 matrix peak (bench/bench_default.py)
#   modes    a reduce-overhead run (its CUDA graph captures, accuracy, step
#            time), a max-autotune run that tunes and one that reads the choices back,
#            the same with --tune-file (a lockfile) and the reproducer --emit writes from
#            it, built and run beside the default mode's, --bench of default,
#            reduce-overhead and max-autotune against eager, a device trace
#   table    the table of cgc's four modes against PyTorch eager and torch.compile
#            default and max-autotune on mlp.net (batch 64, 256), the narrow and the wide
#            MLP, compile times included (bench/bench_modes.py); BENCH_MODELS=mlp64,wide
#            runs a subset (its --models); BENCH_MODES_ARGS adds options (e.g.
#            --no-torch-warm)
#   cnn      the image models (models/cnn.net, bench/models/resnet.net) in bf16: cgc
#            default and max-autotune against PyTorch eager (cudnn.benchmark,
#            channels_last) and torch.compile max-autotune (bench/bench_cnn.py); not in
#            the default PARTS: give it a call of its own
#   gpt      models/gpt.net: its kernels against the CPU executor in every precision and
#            mode (test_emu_models --cuda gpt), image_windows.net again (tf32), chars.net's
#            text windows gathered on the GPU against the CPU's (40 steps, default and
#            reduce-overhead), memcheck of both, the whole training run in reduce-overhead,
#            a profile of 3 steps (the costliest launches), and bench/bench_gpt.py (cgc's
#            modes against PyTorch eager and torch.compile: on an H200 its fp32 half alone
#            took over 250 s, torch.compile max-autotune tuning each GEMM; give it a call);
#            the corpus is fortunes' cookie (data/fortunes/cookie where the machine lacks
#            Debian's); not in the default PARTS
#   attention bench/bench_attention.py: attention's training step (T 512 to 4096, head
#            widths 64 and 128, bf16, causal) in cgc's default and max-autotune modes
#            against PyTorch's scaled_dot_product_attention, in attention TFLOP/s;
#            ATTENTION_ARGS adds options (--contexts 512,1024); not in the default PARTS
#   stream   the data set streamed from the host (stream = always: rows read ahead on a
#            host thread into pinned memory, copied on a copy stream beside the steps)
#            against resident on the GPU (never), mlp.net and the wide MLP in the default
#            mode: the same weights bit for bit, the median step times side by side, and
#            how long the steps waited for rows; and (-v) each model's step 50 launch by
#            launch against the performance model's predictions (codegen/perf.h); not in
#            the default PARTS
#   ranks    a job of one rank (--nproc 1: its gradients summed over it through NCCL)
#            against no job, in reduce-overhead: mlp.net's weights after 300 steps
#            (fp32, the sums change nothing) and both models' step times, the wide MLP's
#            NCCL overhead; not in the default PARTS
# BENCH_DRY_RUN=1 runs bench_default.py, bench_modes.py and bench_cnn.py on the CPU (a
# check of the scripts, on a machine without a GPU).
# STEP_TIMEOUT (seconds, default 600) ends any one step that runs longer, so that a hang
# costs one step and not the whole call.
set -u
PARTS=${PARTS:-families tests eager default modes table}
STEP_TIMEOUT=${STEP_TIMEOUT:-600}
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
[ -f build-gpu/libs.tar.xz ] && [ ! -d build-gpu/lib ] && tar -xJf build-gpu/libs.tar.xz -C build-gpu
export LD_LIBRARY_PATH="$PWD/build-gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# cuDNN (convolutions): the system's libcudnn.so.9 when the loader finds one, else the one
# PyTorch's wheel brings (nvidia-cudnn); without either, convolutions run as the plan's steps
if ! ldconfig -p 2>/dev/null | grep -q "libcudnn.so.9"; then
    CUDNN_DIR=$(python3 -c 'import nvidia.cudnn, os; print(os.path.join(nvidia.cudnn.__path__[0], "lib"))' 2>/dev/null)
    [ -n "$CUDNN_DIR" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$CUDNN_DIR"
fi
export CGC_DATA_PATH="$PWD/data"
export CGC_MODELS_DIR="$PWD/models"   # the test programs were built at another path
export XDG_CACHE_HOME="$OUT/cache"
CGC=$PWD/build-gpu/cgc
part() { [[ " $PARTS " == *" $1 "* ]]; }
run_bg() { run "$@" & }   # the same, beside the others (correctness runs only, never timings)
step() { echo "== $*" | tee -a "$OUT/summary.txt"; }
run() {   # run NAME CMD...: logs to $OUT/NAME.log, records the exit status (124: timed out)
    local name=$1; shift
    local t0=$(date +%s)
    timeout "$STEP_TIMEOUT" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    echo "$name: exit $rc ($(( $(date +%s) - t0 )) s)" | tee -a "$OUT/summary.txt"
    return $rc
}
step "machine"
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1; head -15 "$OUT/nvidia-smi.txt"
ldd "$CGC" | grep -i "not found" && echo "missing libraries: see above"
run devices "$CGC" --devices; cat "$OUT/devices.log"
echo "cuDNN: ${CUDNN_DIR:-the system path, if it has one}" | tee -a "$OUT/summary.txt"
if part families; then
    step "kernel families: the emulation's test models on the GPU, side by side"
    # a process a model (its four precisions; the CPU reference is most of the time), the
    # rest beside them: the machine's cores, not one, set the call's length
    for net in tests/emu/models/*.net; do
        m=$(basename "$net" .net)
        CGC_MODELS_DIR="$PWD/tests/emu/models" run_bg "families_$m" build-gpu/tests/test_emu_models --cuda \
            "$m:fp32" "$m:bf16" "$m:tf32" "$m:fp16"
    done
    run_bg families_split build-gpu/tests/test_emu_models --cuda --splits --batches 4099,1001 \
        ../tests/emu/models/split_sums:fp32 ../tests/emu/models/split_sums:bf16:0:default \
        ../tests/emu/models/split_rows:fp32 ../tests/emu/models/split_rows:bf16:0:default
    run_bg families_cnn_cudnn build-gpu/tests/test_emu_models --cuda cnn
    CGC_CUDNN=none run_bg families_cnn_kernels build-gpu/tests/test_emu_models --cuda cnn
    SANITIZER_TOOLS=memcheck run_bg families_memcheck tests/gpu/sanitizer.sh "$CGC" tests/emu/models \
        attention attention_scale tokens sequence conv_chain split_sums
    SANITIZER_TOOLS=memcheck run_bg families_memcheck_cnn tests/gpu/sanitizer.sh "$CGC" models cnn
    wait
    for log in "$OUT"/families_*.log; do
        [[ $log == *memcheck* ]] || echo "$(basename "$log" .log): $(tail -n 1 "$log")"
    done | tee -a "$OUT/summary.txt"
    grep -h "cuDNN\|cudnn" "$OUT/devices.log" | head -2 | tee -a "$OUT/summary.txt"
    grep -h memcheck "$OUT"/families_memcheck*.log | tee -a "$OUT/summary.txt"
fi
if part tests; then
    step "compile times (cold, then warm from the cache)"
    run compile_cold "$CGC" models/mlp.net --check -v
    run compile_warm "$CGC" models/mlp.net --check -v
    grep -h "cgc: module" "$OUT/compile_cold.log" "$OUT/compile_warm.log" | tee -a "$OUT/summary.txt"
    step "gpu tests"
    run test_cuda_device build-gpu/tests/test_cuda_device
    run test_gpu_models build-gpu/tests/test_emu_models --cuda
    run test_gpu_gemm build-gpu/tests/test_emu_gemm --cuda
    tail -n 2 "$OUT/test_cuda_device.log" "$OUT/test_gpu_models.log" "$OUT/test_gpu_gemm.log" |
        tee -a "$OUT/summary.txt"
    run gpu_train_mlp tests/gpu/train_mlp.sh "$CGC" models
    tail -3 "$OUT/gpu_train_mlp.log" | tee -a "$OUT/summary.txt"
    run gpu_sanitizer tests/gpu/sanitizer.sh "$CGC" models
    cat "$OUT/gpu_sanitizer.log" | grep -E "memcheck|racecheck" | tee -a "$OUT/summary.txt"
fi
if part eager; then
    step "benchmark against PyTorch"
    run bench_eager python3 bench/bench_eager.py --cgc "$CGC" --data data/fashion-mnist --out "$OUT"
    cat "$OUT/bench_eager.md" 2>/dev/null | tee -a "$OUT/summary.txt"
fi
if part default; then
    step "default mode against eager, PyTorch eager and torch.compile; the wide MLP"
    run bench_default python3 bench/bench_default.py --cgc "$CGC" --data data/fashion-mnist \
        --out "$OUT" ${BENCH_DRY_RUN:+--dry-run}
    cat "$OUT/bench_default.md" 2>/dev/null | tee -a "$OUT/summary.txt"
fi
if part modes; then
    step "reduce-overhead, --bench and --profile on the GPU"
    run ro_train "$CGC" models/mlp.net --mode reduce-overhead --epochs 1 -v
    grep -E "captured|could not be captured|median step|test_accuracy" "$OUT/ro_train.log" |
        tee -a "$OUT/summary.txt"
    # max-autotune: tuned once (the choices file kept under $OUT), then read back
    export XDG_CACHE_HOME="$OUT/cache"
    run ma_train "$CGC" models/mlp.net --mode max-autotune --epochs 1 -v
    run ma_again "$CGC" models/mlp.net --mode max-autotune --steps 200 -v
    grep -hE "autotune|captured|median step|test_accuracy" "$OUT/ma_train.log" "$OUT/ma_again.log" |
        tee -a "$OUT/summary.txt"
    cp "$OUT"/cache/cgc/tune/*.tune "$OUT/" 2>/dev/null
    # --tune-file: tuned into the lockfile, read back; --emit replays it in the reproducer
    # (its generated kernels from gemm_module.cubin), whose step time is set beside the
    # run's median and the default mode's reproducer
    LOCK="$OUT/mlp.lock.tune"
    rm -f "$LOCK"
    run ma_lock "$CGC" models/mlp.net --mode max-autotune --steps 200 -v --tune-file "$LOCK"
    run ma_lock_again "$CGC" models/mlp.net --mode max-autotune --steps 200 -v --tune-file "$LOCK"
    grep -hE "autotune|median step" "$OUT/ma_lock.log" "$OUT/ma_lock_again.log" | tee -a "$OUT/summary.txt"
    run ma_emit "$CGC" models/mlp.net --mode max-autotune --check --emit "$OUT/emit_ma" --tune-file "$LOCK"
    run df_emit "$CGC" models/mlp.net --mode default --check --emit "$OUT/emit_default"
    for e in ma default; do
        run "repro_make_$e" make -C "$OUT/emit_$e/repro" -j8
        run "repro_run_$e" "$OUT/emit_$e/repro/repro" 500
        grep -hE "per training step|ms per step|graph of" "$OUT/repro_run_$e.log" | sed "s/^/repro $e: /" |
            tee -a "$OUT/summary.txt"
    done
    for mode in default reduce-overhead max-autotune; do
        run "bench_$mode" "$CGC" models/mlp.net --bench --mode "$mode"
        grep -E "^(launches per step|compile, |step, )" "$OUT/bench_$mode.log" | tee -a "$OUT/summary.txt"
    done
    run profile_gpu "$CGC" models/mlp.net --mode default --steps 5 --profile "$OUT/mlp_trace.json"
    python3 -c 'import json, sys; t = json.load(open(sys.argv[1])); e = t["traceEvents"]
print("trace:", sum(x["cat"] == "step" for x in e), "steps,", sum(x["cat"] in ("kernel", "gemm") for x in e),
      "kernel and GEMM events on", t["otherData"]["device"])' "$OUT/mlp_trace.json" | tee -a "$OUT/summary.txt"
fi
if part table; then
    step "cgc's modes against PyTorch eager and torch.compile: the table"
    run bench_modes python3 bench/bench_modes.py --cgc "$CGC" --data data/fashion-mnist \
        --out "$OUT" ${BENCH_MODELS:+--models "$BENCH_MODELS"} ${BENCH_DRY_RUN:+--dry-run} ${BENCH_MODES_ARGS:-}
    cat "$OUT/bench_modes.md" 2>/dev/null | tee -a "$OUT/summary.txt"
fi
if part cnn; then
    step "the image models: cgc against PyTorch eager and torch.compile (bf16)"
    run bench_cnn python3 bench/bench_cnn.py --cgc "$CGC" --data data/fashion-mnist \
        --out "$OUT" ${BENCH_DRY_RUN:+--dry-run}
    cat "$OUT/bench_cnn.md" 2>/dev/null | tee -a "$OUT/summary.txt"
fi
if part gpt; then
    step "the transformer: models/gpt.net's kernels and text windows on the GPU, its training, timings"
    # gpt.net names the corpus by its Debian path; a copy in $OUT names the carried one
    TEXT=/usr/share/games/fortunes/cookie
    [ -f "$TEXT" ] || TEXT=$PWD/data/fortunes/cookie
    mkdir -p "$OUT/gpt-models"
    sed "s|text(\"[^\"]*\"|text(\"$TEXT\"|" models/gpt.net >"$OUT/gpt-models/gpt.net"
    # a model named alone runs in fp32 only: each precision is named
    CGC_MODELS_DIR="$OUT/gpt-models" run gpt_kernels build-gpu/tests/test_emu_models --cuda \
        gpt:fp32 gpt:bf16 gpt:tf32 gpt:fp16
    CGC_MODELS_DIR="$PWD/tests/emu/models" run gpt_image_windows build-gpu/tests/test_emu_models --cuda \
        image_windows:tf32
    tail -qn 1 "$OUT/gpt_kernels.log" "$OUT/gpt_image_windows.log" | tee -a "$OUT/summary.txt"
    # the device's windows, gathered from the mapped file at each epoch's phase (40 steps
    # cross two epochs), train chars.net as the CPU's do
    for how in "cpu default" "cuda default" "cuda reduce-overhead"; do
        set -- $how
        run "chars_$1_$2" "$CGC" tests/emu/text/chars.net --device "$1" --mode "$2" --steps 40 \
            --save "$OUT/chars_$1_$2.st"
    done
    for mode in default reduce-overhead; do
        run "chars_same_$mode" python3 tests/e2e/st_close.py --meta "$OUT/chars_cuda_$mode.st" \
            "$OUT/chars_cpu_default.st" 1e-3
        sed "s/^/chars $mode against the CPU: /" "$OUT/chars_same_$mode.log" | tee -a "$OUT/summary.txt"
    done
    SANITIZER_TOOLS=memcheck run gpt_memcheck_chars tests/gpu/sanitizer.sh "$CGC" tests/emu/text chars
    SANITIZER_TOOLS=memcheck run gpt_memcheck tests/gpu/sanitizer.sh "$CGC" "$OUT/gpt-models" gpt
    grep -h memcheck "$OUT"/gpt_memcheck*.log | tee -a "$OUT/summary.txt"
    # the whole training run (7 epochs, a new phase and a new capture each)
    run gpt_train "$CGC" "$OUT/gpt-models/gpt.net" --device cuda --mode reduce-overhead -v
    grep -E "captured|median step|test_loss|epoch 7|error" "$OUT/gpt_train.log" | tail -6 |
        tee -a "$OUT/summary.txt"
    # where a step's device time goes: the launches of 3 profiled steps, the costliest first
    run gpt_profile "$CGC" "$OUT/gpt-models/gpt.net" --device cuda --mode default --steps 20 \
        --profile "$OUT/gpt_trace.json"
    python3 - "$OUT/gpt_trace.json" <<'PY' | tee -a "$OUT/summary.txt"
import collections, json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
steps = sum(e.get("cat") == "step" for e in events)
us = collections.Counter()
for e in events:
    if e.get("cat") in ("kernel", "gemm"):
        us[e["name"]] += e.get("dur", 0) / max(steps, 1)
print(f"gpt.net, default mode: {sum(us.values()):.0f} us of launches per step ({steps} steps profiled)")
for name, t in us.most_common(12):
    print(f"  {t:8.1f} us  {name}")
PY
    run bench_gpt python3 bench/bench_gpt.py --cgc "$CGC" --text "$TEXT" --out "$OUT" \
        ${BENCH_DRY_RUN:+--dry-run}
    cat "$OUT/bench_gpt.md" 2>/dev/null | tee -a "$OUT/summary.txt"
fi
if part attention; then
    step "attention's training step against PyTorch's scaled_dot_product_attention"
    run bench_attention python3 bench/bench_attention.py --cgc "$CGC" --out "$OUT" \
        ${BENCH_DRY_RUN:+--dry-run} ${ATTENTION_ARGS:-}
    cat "$OUT/bench_attention.md" 2>/dev/null | tee -a "$OUT/summary.txt"
fi
if part stream; then
    step "a data set streamed from the host against one resident on the GPU"
    for model in models/mlp.net bench/models/wide_mlp.net; do
        name=$(basename "$model" .net)
        for how in never always; do
            run "stream_${name}_$how" "$CGC" "$model" --device cuda --stream "$how" --steps 300 -v \
                --save "$OUT/stream_${name}_$how.st"
            grep -hE "median step|steps waited|stream from the host|launch by launch|^cgc:   |error" \
                "$OUT/stream_${name}_$how.log" |
                sed "s/^/$name, stream = $how: /" | tee -a "$OUT/summary.txt"
        done
        run "stream_${name}_same" python3 tests/e2e/st_close.py --meta "$OUT/stream_${name}_always.st" \
            "$OUT/stream_${name}_never.st" 0
        sed "s/^/$name streamed against resident: /" "$OUT/stream_${name}_same.log" | tee -a "$OUT/summary.txt"
    done
fi
if part ranks; then
    step "a job of one rank: NCCL's sums over one GPU, against no job"
    # NCCL: the system's libnccl.so.2 when the loader finds one, else PyTorch's wheel's
    if ! ldconfig -p 2>/dev/null | grep -q "libnccl.so.2"; then
        NCCL_DIR=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib"))' 2>/dev/null)
        [ -n "$NCCL_DIR" ] && export CGC_NCCL="$NCCL_DIR/libnccl.so.2"
    fi
    echo "NCCL: ${CGC_NCCL:-libnccl.so.2 on the system path, if it has one}" | tee -a "$OUT/summary.txt"
    for job in none one; do
        flags=(); [ "$job" = one ] && flags=(--nproc 1)
        run "ranks_mlp_$job" "$CGC" models/mlp.net --mode reduce-overhead --steps 300 -v "${flags[@]}" \
            --save "$OUT/ranks_mlp_$job.st"
        run "ranks_wide_$job" "$CGC" bench/models/wide_mlp.net --mode reduce-overhead --steps 200 -v "${flags[@]}"
    done
    grep -HE "a job of one rank|captured|median step|error" "$OUT"/ranks_*.log | tee -a "$OUT/summary.txt"
    run ranks_same python3 tests/e2e/st_close.py "$OUT/ranks_mlp_one.st" "$OUT/ranks_mlp_none.st" 1e-6
    cat "$OUT/ranks_same.log" | tee -a "$OUT/summary.txt"
fi
step "done"
cat "$OUT/summary.txt"
