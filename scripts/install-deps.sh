#!/usr/bin/env bash
# Installs what building and testing cgc needs from Debian's packages, when missing.
# As root: apt-get update, then apt-get install. Otherwise: prints the command to run.
set -euo pipefail

# python3-torch: PyTorch on the CPU, the independent oracle of the crosscheck_torch test.
# clang and libclang-rt-dev: libFuzzer, for the fuzz targets (scripts/fuzz.sh).
# strace: kills a run at a chosen system call (a save's rename) in tests/e2e/files.sh.
# Open MPI (libopenmpi-dev, openmpi-bin): training on several ranks, mpirun for the tests.
# fortunes: English text (/usr/share/games/fortunes/) for text(...) data.
packages=(cmake make gcc flex bison zlib1g-dev libopenblas-dev libcjson-dev dataset-fashion-mnist
          python3-torch clang libclang-rt-dev strace libopenmpi-dev openmpi-bin fortunes)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

cmd="apt-get update && apt-get install -y ${missing[*]}"
if [[ $(id -u) -eq 0 ]]; then
  echo "cgc: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
else
  echo "cgc: missing packages: ${missing[*]}" >&2
  echo "cgc: run as root:  $cmd" >&2
  exit 1
fi
