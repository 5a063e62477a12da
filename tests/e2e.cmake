# End-to-end: the cgc binary on the models of models/ and on Fashion-MNIST.
function(cgc_e2e name script)
  add_test(NAME ${name} COMMAND bash ${TESTS_DIR}/e2e/${script} ${CGC_BIN} ${CMAKE_SOURCE_DIR} ${ARGN})
  # One BLAS thread: `make test` runs two tests at once on two cores, and two trainings
  # of two spinning OpenBLAS threads each ran 5x slower than alone (250 s against 45 s).
  set_tests_properties(${name} PROPERTIES LABELS "cpu;e2e" TIMEOUT 600
                       ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=2")
endfunction()

cgc_e2e(e2e_train_mlp_epoch train_mlp_epoch.sh fp16 0.84)
cgc_e2e(e2e_train_mlp_epoch_bf16 train_mlp_epoch.sh bf16 0.83)
cgc_e2e(e2e_stats stats.sh)
cgc_e2e(e2e_resume_bitexact resume_bitexact.sh)
cgc_e2e(e2e_train_models train_models.sh)
cgc_e2e(e2e_cli cli.sh)
cgc_e2e(e2e_files files.sh)
cgc_e2e(e2e_outputs outputs.sh)
cgc_e2e(e2e_profile profile.sh)
cgc_e2e(e2e_bench bench.sh)
cgc_e2e(e2e_ranks ranks.sh)
set_tests_properties(e2e_ranks PROPERTIES SKIP_RETURN_CODE 77)

# Whole-binary mutation test: every byte-level mutation of each model ends in exit 0
# or exit 1 with a diagnostic, within seconds.
add_executable(mutate_cli mutate_cli.c)
add_test(NAME e2e_mutate COMMAND mutate_cli ${CGC_BIN} ${CMAKE_SOURCE_DIR}/models/mlp.net
         ${CMAKE_SOURCE_DIR}/models/resmlp.net ${CMAKE_SOURCE_DIR}/models/regression.net
         ${TESTS_DIR}/diag/ok/limits_inputs_symbols.net)
set_tests_properties(e2e_mutate PROPERTIES LABELS "cpu;e2e" TIMEOUT 600)

# The benchmark scripts' parsers (bench/) read the lines runtime/train_device.c prints.
if(CGC_PYTHON3)
  add_test(NAME bench_parsers COMMAND ${CGC_PYTHON3} ${TESTS_DIR}/bench_parsers.py ${CMAKE_SOURCE_DIR})
else()
  add_test(NAME bench_parsers COMMAND sh -c "echo 'python3 not found: skipped'; exit 77")
endif()
set_tests_properties(bench_parsers PROPERTIES LABELS cpu TIMEOUT 60 SKIP_RETURN_CODE 77)

# Training against PyTorch (scripts/crosscheck_torch.py): cgc's fp32 CPU runs and
# torch.optim's from the same initial weights on the same batches, every parameter and
# optimizer moment compared. Debian's python3-torch; skipped where it is missing.
add_test(NAME crosscheck_torch
         COMMAND sh -c "/usr/bin/python3 -c 'import torch, numpy' 2>/dev/null || { echo 'python3-torch not installed: skipped'; exit 77; }; exec /usr/bin/python3 \"$0\" \"$1\""
                 ${CMAKE_SOURCE_DIR}/scripts/crosscheck_torch.py ${CGC_BIN})
set_tests_properties(crosscheck_torch PROPERTIES LABELS "cpu;e2e" TIMEOUT 600 SKIP_RETURN_CODE 77)

# models/gpt.net against a GPT written in PyTorch (scripts/crosscheck_gpt.py): step 0's
# gradients, each of 50 AdamW steps' losses and the weights after them, from the same
# seeded weights on the same text windows; skipped without python3-torch or Debian's
# fortunes.
add_test(NAME crosscheck_gpt COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/scripts/crosscheck_gpt.py ${CGC_BIN} 50)
set_tests_properties(crosscheck_gpt PROPERTIES LABELS "cpu;e2e" TIMEOUT 600 SKIP_RETURN_CODE 77)

# The image layers against PyTorch (tests/torch_image_oracle.py): randomly drawn
# convolutions, pools and batch norms (per-axis windows, "same", dilation, groups), each
# trained a step or two by cgc on the CPU and by torch.nn.functional from the same weights.
add_test(NAME torch_image_oracle
         COMMAND sh -c "/usr/bin/python3 -c 'import torch, numpy' 2>/dev/null || { echo 'python3-torch not installed: skipped'; exit 77; }; exec /usr/bin/python3 \"$0\" \"$1\""
                 ${TESTS_DIR}/torch_image_oracle.py ${CGC_BIN})
set_tests_properties(torch_image_oracle PROPERTIES LABELS "cpu;e2e" TIMEOUT 600 SKIP_RETURN_CODE 77)

# README.md and docs/usage.md mention every flag of cgc --help, and no other.
add_test(NAME docs_readme_flags COMMAND bash ${TESTS_DIR}/docs/readme_flags.sh ${CGC_BIN} ${CMAKE_SOURCE_DIR})
set_tests_properties(docs_readme_flags PROPERTIES LABELS cpu TIMEOUT 60)

# Coverage-guided fuzzing (scripts/fuzz.sh), briefly and repeatably: each libFuzzer target
# 4,000 inputs from a fixed seed and the repository's models, diagnostics and the inputs
# that found faults, in a clang build of its own under the build tree.
add_test(NAME fuzz_short COMMAND ${CMAKE_COMMAND} -E env FUZZ_BUILD=${CMAKE_BINARY_DIR}/fuzz
         FUZZ_RUNS=4000 FUZZ_SEED=1 bash ${CMAKE_SOURCE_DIR}/scripts/fuzz.sh 20)
set_tests_properties(fuzz_short PROPERTIES LABELS cpu TIMEOUT 600 SKIP_RETURN_CODE 77)

# tensors("TRAIN", test = "TEST", scale = S) (tests/e2e/tensors_data.py): the same run from
# IDX and from NumPy and safetensors files, bit for bit; hostile files refused. numpy.
add_test(NAME e2e_tensors_data
         COMMAND sh -c "/usr/bin/python3 -c 'import numpy' 2>/dev/null || { echo 'numpy not installed: skipped'; exit 77; }; exec /usr/bin/python3 \"$0\" \"$1\""
                 ${TESTS_DIR}/e2e/tensors_data.py ${CGC_BIN})
set_tests_properties(e2e_tensors_data PROPERTIES LABELS "cpu;e2e" TIMEOUT 600 SKIP_RETURN_CODE 77)

# The performance model against closed formulas, and in --explain for every model.
if(CGC_PYTHON3)
  add_test(NAME e2e_roofline COMMAND ${CGC_PYTHON3} ${TESTS_DIR}/e2e/roofline.py ${CGC_BIN} ${CMAKE_SOURCE_DIR})
  set_tests_properties(e2e_roofline PROPERTIES LABELS "cpu;e2e" TIMEOUT 600)
endif()
