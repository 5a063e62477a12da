# Generated kernels: the plan's structure, golden text, and every kernel compiled by nvcc.
# Regenerate the goldens after an intended change to the generated code:
#   CGC_UPDATE_GOLDEN=1 tests/codegen/golden.sh BUILD/cgc .   (then review the diff)
cgc_c_test(test_codegen cgc_driver)
# The row-major GEMM as cuBLAS takes it (codegen/gemm_map.h), on a column-major CPU GEMM.
cgc_c_test(test_gemm_map cgc_base)

add_test(NAME codegen_golden_mlp
         COMMAND sh ${TESTS_DIR}/codegen/golden.sh ${CGC_BIN} ${CMAKE_SOURCE_DIR})
set_tests_properties(codegen_golden_mlp PROPERTIES LABELS cpu TIMEOUT 120)

# The Done-when check: every kernel of mlp.net compiled alone by nvcc for sm_90, the
# whole modules of all three models for sm_80 and sm_90. Skipped (77) without nvcc.
add_test(NAME codegen_nvcc_compile
         COMMAND sh ${TESTS_DIR}/codegen/nvcc_compile.sh ${CGC_BIN} ${CMAKE_SOURCE_DIR})
set_tests_properties(codegen_nvcc_compile PROPERTIES LABELS cpu TIMEOUT 420 SKIP_RETURN_CODE 77)

# The reproducer's fixed host code (codegen/repro/, codegen/gemm_map.h) compiled at build
# time with the toolkit's headers, around stand-ins for what cgc generates, so that an
# error in it fails the build (never linked): warnings are errors whatever CGC_WERROR
# says, and unused parameters count, as under the -Wall -Wextra of the reproducer's
# Makefile. Once for each value of CAPTURE (the mode's): the code differs. Without the
# CUDA Toolkit there are no headers to compile it with.
if(CUDAToolkit_FOUND)
  foreach(capture 0 1)
    add_library(cgc_repro_host_${capture} OBJECT codegen/repro_host.c)
    target_include_directories(cgc_repro_host_${capture} PRIVATE ${CMAKE_SOURCE_DIR}
                               ${CUDAToolkit_INCLUDE_DIRS})
    target_compile_definitions(cgc_repro_host_${capture} PRIVATE CAPTURE=${capture})
    target_compile_options(cgc_repro_host_${capture} PRIVATE -Wunused-parameter -Werror)
  endforeach()
endif()

# --emit's standalone reproducer (DIR/repro: module.cu, repro.c, Makefile) built with nvcc
# alone for mlp (fp16, accumulate 2), resmlp (bf16), regression (eager) and a GELU-epilogue
# model; no .net text in what is emitted. Running it needs a GPU. Skipped (77) without nvcc.
# The toolkit's include directory (cuda.h) comes from CMake: nvcc's own directory need not
# hold it (nvcc may be a link from elsewhere).
set(CGC_CUDA_INCLUDE "")
if(CUDAToolkit_INCLUDE_DIRS)
  list(GET CUDAToolkit_INCLUDE_DIRS 0 CGC_CUDA_INCLUDE)
endif()
add_test(NAME codegen_repro
         COMMAND sh ${TESTS_DIR}/codegen/repro.sh ${CGC_BIN} ${CMAKE_SOURCE_DIR} "${CGC_CUDA_INCLUDE}")
set_tests_properties(codegen_repro PROPERTIES LABELS cpu TIMEOUT 600 SKIP_RETURN_CODE 77)
