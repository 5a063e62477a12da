# ranks_lib.sh: what the several-ranks scripts share, sourced once $cgc and $root are set:
# a scratch folder ($tmp), mpirun's command line ($mpi: one BLAS and OpenMP thread a rank),
# st_close.py ($close), and the checks, counted in $passes and $fails.
command -v mpirun >/dev/null || { echo "mpirun not found (apt-get install openmpi-bin): skipped"; exit 77; }
fails=0 passes=0
tmp=$(mktemp -d)
trap 'rm -rf -- "$tmp"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# In the sanitizer build, LeakSanitizer would report what Open MPI keeps until exit; its
# suppressions need whole stacks (the components are unloaded before the report).
export LSAN_OPTIONS="suppressions=$root/tests/e2e/lsan_mpi.supp:fast_unwind_on_malloc=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
mpi=(mpirun --oversubscribe --allow-run-as-root -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS -x LSAN_OPTIONS)
close=(/usr/bin/env python3 "$root/tests/e2e/st_close.py")

ok() { passes=$((passes + 1)); }
bad() {  # bad DESCRIPTION OUTPUT
  echo "FAIL: $1"; echo "$2" | tail -15
  fails=$((fails + 1))
}
# LeakSanitizer's exit-time tracer now and then dies of SIGSEGV while Open MPI's threads wind
# down (google/sanitizers#1353; with log_threads=1 it shows reading a dynamic TLS block of a
# component Open MPI has unloaded, "DTLS 8 at 0x000000004cd0-0x000400005dd2"): a failure of
# the tool, not a finding, so such a run is run again; where it dies three times (on a
# 2-core machine, in one three-rank job of some runs of this script) the job runs once more
# without the leak check, AddressSanitizer's other checks still on, and says so. A leak it
# finds ("detected memory leaks") is never retried.
tracer_died='LeakSanitizer has encountered a fatal error'
# run DESCRIPTION STATUS PATTERN -- COMMAND...: the command's status (nonzero: any but 0)
# and output (stdout and stderr) as expected.
run() {
  local what=$1 want=$2 pattern=$3; shift 4
  local out status
  out=$(timeout "${limit:-300}" "$@" 2>&1); status=$?
  for again in 1 2 3; do
    [ "$status" -ne 0 ] && grep -qF -- "$tracer_died" <<<"$out" || break
    local lsan=$LSAN_OPTIONS say="run again"
    [ "$again" = 3 ] && lsan="$lsan:detect_leaks=0" say="run again without the leak check"
    echo "note: $what: LeakSanitizer's tracer died; $say"
    out=$(LSAN_OPTIONS=$lsan timeout "${limit:-300}" "$@" 2>&1); status=$?
  done
  local good=$([ "$want" = nonzero ] && [ "$status" -ne 0 ] || [ "$status" = "$want" ] && echo 1)
  if [ -z "$good" ] || ! grep -qE -- "$pattern" <<<"$out"; then
    bad "$what: status $status (want $want)" "$out"
  else
    ok
  fi
}
# same DESCRIPTION A B REL [PREFIX]: checkpoints A and B hold the same tensors (those
# whose names start with PREFIX) within REL.
same() {
  local out
  if out=$("${close[@]}" "$2" "$3" "$4" ${5:-} 2>&1); then ok; else bad "$1: $out" ""; fi
}
# The verdict, as the script's status.
summary() {
  echo "$passes passed, $fails failed"
  [ "$fails" -eq 0 ]
}
