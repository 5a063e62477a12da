#!/usr/bin/env bash
# fuzz.sh [SECONDS]: coverage-guided fuzzing of what cgc reads, with clang's libFuzzer.
#
# Builds the fuzz targets with clang, libFuzzer's coverage, ASan and UBSan (CMake option
# CGC_FUZZ, in $FUZZ_BUILD, default build-fuzz/), then runs each target for SECONDS
# (default 600) from its seed corpus (the repository's models and diagnostics tests) and
# the corpus it has grown in earlier runs ($FUZZ_BUILD/corpus/TARGET). Any crash, abort,
# internal error, leak, undefined behaviour or input slower than 10 s stops the target
# with the input saved in $FUZZ_BUILD/artifacts/ (make it a regression test), and the
# script exits 1. Prints each target's executions and coverage last.
#
#   fuzz_net          a .net file through the lexer, parser, sema, every pass, the plan
#                     and the kernel source, in one of the four modes (by its length)
#   fuzz_idx          an IDX dataset file, gzip'd or not
#   fuzz_safetensors  a checkpoint, every tensor's bytes read
#   fuzz_tune         an autotune choices file (--tune-file, the cache's tune/), parsed,
#                     formatted and parsed again, its choices checked against a plan
#   fuzz_kcache       a kernel cache entry, loaded for a fixed key (built with the CUDA
#                     Toolkit only)
#
# `make test` runs each target for a fixed 4,000 inputs from a fixed seed, so that it is
# repeatable (the fuzz_short test: FUZZ_RUNS=4000 FUZZ_SEED=1); an hour a target is the
# run that counts (scripts/fuzz.sh 3600). Needs clang and libFuzzer (Debian: clang,
# libclang-rt-dev); exits 77 (skipped) without them.
set -uo pipefail
seconds=${1:-600}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FUZZ_BUILD:-$root/build-fuzz}
targets=(fuzz_net fuzz_idx fuzz_safetensors fuzz_arrays fuzz_csv fuzz_tune fuzz_kcache)

command -v clang > /dev/null || { echo "fuzz.sh: clang not found (apt-get install clang libclang-rt-dev): skipped"; exit 77; }
probe=$(mktemp -d)
trap 'rm -rf -- "$probe"' EXIT
echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }' > "$probe/p.c"
clang -fsanitize=fuzzer "$probe/p.c" -o "$probe/p" 2> /dev/null ||
  { echo "fuzz.sh: clang has no libFuzzer (apt-get install libclang-rt-dev): skipped"; exit 77; }

cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang -DCGC_FUZZ=ON -DCGC_WERROR=OFF \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; exit 1; }
# fuzz_kcache exists where the CUDA Toolkit does (the kernel cache is built with it); the
# list is read whole, as grep -q would close the pipe early and fail it under pipefail
help=$(cmake --build "$build" --target help 2> /dev/null)
grep -qw fuzz_kcache <<< "$help" || targets=(fuzz_net fuzz_idx fuzz_safetensors fuzz_arrays fuzz_csv fuzz_tune)
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" > "$build.build.log" 2>&1 ||
  { tail -30 "$build.build.log"; exit 1; }

# Seeds: the repository's models and diagnostics, and the inputs that found faults
# (tests/fuzz/seeds/: each must stay fixed); slices of Fashion-MNIST's files, plain
# and gzip'd (where the data is installed); checkpoints the e2e test writes (a small one
# is made here).
for t in "${targets[@]}"; do mkdir -p "$build/seeds/$t"; done
mkdir -p "$build/artifacts"
cp "$root"/tests/fuzz/seeds/tune/*.tune "$build/seeds/fuzz_tune/"
cp "$root"/tests/fuzz/seeds/arrays/* "$build/seeds/fuzz_arrays/"
printf '\xef\xbb\xbf"a, b",c\r\n1,"x""y"\r\n\n2,3\n' > "$build/seeds/fuzz_csv/quoted.csv"
printf 'a,b,label\n1.5,-2e3,0\n,nan,1' > "$build/seeds/fuzz_csv/plain.csv"
find "$root/models" "$root/tests/emu/models" "$root/tests/diag" "$root/tests/fuzz/seeds" -name '*.net' |
  while read -r f; do cp "$f" "$build/seeds/fuzz_net/$(echo "${f#$root/}" | tr '/' '_')"; done
for f in /usr/share/datasets/fashion-mnist/*-ubyte.gz "$root"/data/fashion-mnist/*-ubyte.gz; do
  [ -f "$f" ] || continue
  name=$(basename "$f" .gz)
  gzip -dc "$f" | head -c 2000 > "$build/seeds/fuzz_idx/$name"
  gzip -c "$build/seeds/fuzz_idx/$name" > "$build/seeds/fuzz_idx/$name.gz"
done
printf '\x00\x00\x08\x01\x00\x00\x00\x03\x01\x02\x03' > "$build/seeds/fuzz_idx/tiny1"
python3 - "$build/seeds/fuzz_safetensors/tiny.safetensors" <<'EOF' 2> /dev/null || true
import json, struct, sys
h = json.dumps({"__metadata__": {"format": "cgc-checkpoint-1"},
                "a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
                "b": {"dtype": "I64", "shape": [1], "data_offsets": [16, 24]}}).encode()
h += b" " * ((8 - len(h) % 8) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + bytes(range(24)))
EOF

python3 - "$build/seeds/fuzz_arrays" "$build/seeds/fuzz_safetensors/tiny.safetensors" <<'EOF' 2> /dev/null || true
import shutil, struct, sys, zipfile
def npy(descr, shape, data):
    d = "{'descr': '%s', 'fortran_order': False, 'shape': %r, }" % (descr, shape)
    d += " " * (-(10 + len(d) + 1) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(d)) + d.encode() + data
x, y = npy("<f4", (3, 2), bytes(range(24))), npy("<i8", (3,), bytes(24))
for name, method in (("stored.npz", zipfile.ZIP_STORED), ("deflated.npz", zipfile.ZIP_DEFLATED)):
    with zipfile.ZipFile(f"{sys.argv[1]}/{name}", "w", method) as z:
        z.writestr("x.npy", x)
        z.writestr("y.npy", y)
open(f"{sys.argv[1]}/x.npy", "wb").write(x)
shutil.copy(sys.argv[2], f"{sys.argv[1]}/tiny.safetensors")
EOF

[ -d "$build/seeds/fuzz_kcache" ] && python3 - "$build/seeds/fuzz_kcache" <<'EOF' 2> /dev/null || true
import struct, sys, zlib
key = b'nvrtc 13.0|sm_90|-default-device|extern "C" __global__ void k() {}'   # fuzz_kcache.c's
for name, payload in (("hit", b"\x7fELF" + bytes(range(60))), ("empty", b"")):
    head = b"CGCKC01\n" + struct.pack("<QQII", len(key), len(payload), zlib.crc32(payload), zlib.crc32(key))
    open(f"{sys.argv[1]}/{name}", "wb").write(head + key + payload)
EOF

# The file targets write each input to a file ($TMPDIR): in memory where there is a
# tmpfs, so that the disk does not set the pace.
[ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ] && export TMPDIR=/dev/shm

status=0
summary=""
for t in "${targets[@]}"; do
  corpus=$build/corpus/$t
  mkdir -p "$corpus"
  log=$build/$t.log
  # -close_fd_mask=2: the diagnostics of refused inputs are not findings
  # FUZZ_RUNS (with FUZZ_SEED) makes a run repeatable: that many inputs from that seed
  limit=(-max_total_time="$seconds")
  [ -n "${FUZZ_RUNS:-}" ] && limit=(-runs="$FUZZ_RUNS" -seed="${FUZZ_SEED:-1}")
  "$build/$t" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 -close_fd_mask=2 -error_exitcode=1 -timeout_exitcode=1 \
      -print_final_stats=1 -artifact_prefix="$build/artifacts/$t-" "$corpus" "$build/seeds/$t" \
      > "$log" 2>&1
  rc=$?
  done_line=$(grep -E '^#[0-9]+' "$log" | tail -1)
  if [ "$rc" -ne 0 ]; then
    status=1
    echo "$t: FAILED (exit $rc); the input is in $build/artifacts/, the report:"
    grep -E -A25 'ERROR|runtime error|deadly signal|timeout' "$log" | head -40
  fi
  summary+="$t: $done_line"$'\n'
done
printf '%s' "$summary"
exit "$status"
