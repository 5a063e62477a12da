#!/bin/bash
# pack_gpu.sh: prepares what a GPU-machine session carries (see docs/testing.md):
#   build-gpu/   a Release build (that machine has no flex/bison), its test programs, and
#                build-gpu/libs.tar.xz: the Debian libraries cgc links that a stock
#                machine lacks (OpenBLAS and its Fortran runtime, cJSON, libgomp, Open
#                MPI's, which a job of one rank loads but never starts), compressed
#                because carries are limited to 64 MiB in all
#   data/fashion-mnist/   the dataset; data/fortunes/cookie, models/gpt.net's corpus
# On the GPU machine: `tar -xJf build-gpu/libs.tar.xz -C build-gpu` then
# bench/gpu_session.sh (which sets LD_LIBRARY_PATH to build-gpu/lib).
set -eu
cd "$(dirname "$0")/.."
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-gpu -j"$(nproc)"
mkdir -p build-gpu/lib data
rm -f build-gpu/lib/*
# OpenBLAS is loaded with dlopen, so ldd of cgc does not name it: its own ldd names its needs
blas=$(ldconfig -p | awk '$1 == "libopenblas.so.0" && /x86-64/ { print $NF; exit }')
needs() { ldd build-gpu/cgc; [ -n "$blas" ] && echo "libopenblas.so.0 => $blas (0)" && ldd "$blas"; }
for lib in libopenblas.so.0 libgfortran.so.5 libquadmath.so.0 libcjson.so.1 libgomp.so.1 \
           libmpi.so.40 libopen-rte.so.40 libopen-pal.so.40 libhwloc.so.15 \
           libevent_core-2.1.so.7 libevent_pthreads-2.1.so.7 libudev.so.1; do
    path=$(needs | awk -v l="$lib" '$1 == l { print $3; exit }')
    [ -n "$path" ] && cp -L "$path" build-gpu/lib/
done
tar -cJf build-gpu/libs.tar.xz -C build-gpu lib
rm -rf build-gpu/lib
cp -r /usr/share/datasets/fashion-mnist data/ 2>/dev/null || echo "note: no /usr/share/datasets/fashion-mnist to copy"
mkdir -p data/fortunes
cp /usr/share/games/fortunes/cookie data/fortunes/ 2>/dev/null || echo "note: no fortunes' cookie to copy (apt-get install fortunes)"
# what the GPU machine does not run: objects, static libraries (linked in already), the
# ThreadSanitizer and mutation programs; the carry and the tree must fit 64 MiB together
find build-gpu -name '*.o' -delete
rm -f build-gpu/*.a build-gpu/tests/*.a build-gpu/tests/*_tsan build-gpu/tests/fuzz_mutate \
      build-gpu/tests/mutate_cli
tree=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
total=$(( $(du -sb build-gpu | cut -f1) + $(du -sb data | cut -f1) + tree ))
du -sh build-gpu data
echo "carry: build-gpu data ($(( total >> 20 )) MiB with the tree's $(( tree >> 20 )); the limit is 64)"
[ "$total" -le $(( 64 << 20 )) ] || echo "pack_gpu.sh: over 64 MiB: carry less (data/fashion-mnist only where a part needs it)" >&2
