# tests of the fusion pass: every fused graph obeys the IrGroup contract (ir.h), and fused
# programs train bit for bit as unfused ones on the CPU reference executor.
cgc_c_test(test_fusion cgc_driver)
target_compile_definitions(test_fusion PRIVATE CGC_MODELS_DIR="${CMAKE_SOURCE_DIR}/models")
# GEMM groups on hand-built graphs: where they form, their plan step, and the executor's
# rounding rule for their members (ir.h, IR_GROUP_GEMM), exact in f16/bf16.
cgc_c_test(test_gemm_group cgc_driver ${OPENBLAS_LIBRARY})
