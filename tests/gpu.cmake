# GPU tests: label gpu; each exits 77 (skipped) where no CUDA device is usable.
add_test(NAME gpu_train_mlp COMMAND ${TESTS_DIR}/gpu/train_mlp.sh ${CGC_BIN} ${CMAKE_SOURCE_DIR}/models)
add_test(NAME gpu_sanitizer COMMAND ${TESTS_DIR}/gpu/sanitizer.sh ${CGC_BIN} ${CMAKE_SOURCE_DIR}/models)
set_tests_properties(gpu_train_mlp gpu_sanitizer PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 1200)
