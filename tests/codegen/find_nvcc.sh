# find_nvcc.sh, sourced by the codegen tests that run nvcc: sets NVCC to nvcc on the PATH,
# else the toolkit's under /usr/local/cuda, as a path with no links; or exits 77 (the
# test is skipped) without one.
NVCC=${NVCC:-nvcc}
command -v "$NVCC" >/dev/null 2>&1 || NVCC=/usr/local/cuda/bin/nvcc
[ -x "$NVCC" ] || command -v "$NVCC" >/dev/null 2>&1 || { echo "nvcc not found: skipped"; exit 77; }
# Through any link to the real program: nvcc finds its headers from where it lives.
NVCC=$(readlink -f "$(command -v "$NVCC")")
