# codegen: IR -> kernel plan (CUDA C kernels + host plan). Pure C; needs no CUDA Toolkit.
# The device prelude is a real header (codegen/cgc_device.h) embedded as the string
# plan_device_prelude at build time; editing the header rebuilds the library.
set(CGC_PRELUDE_C ${CMAKE_BINARY_DIR}/codegen/cgc_device_prelude.c)
add_custom_command(
  OUTPUT ${CGC_PRELUDE_C}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/codegen
  COMMAND ${CMAKE_COMMAND} -DIN=${CMAKE_SOURCE_DIR}/codegen/cgc_device.h -DOUT=${CGC_PRELUDE_C}
          -DNAME=plan_device_prelude -P ${CMAKE_SOURCE_DIR}/codegen/embed.cmake
  DEPENDS ${CMAKE_SOURCE_DIR}/codegen/cgc_device.h ${CMAKE_SOURCE_DIR}/codegen/embed.cmake
  COMMENT "Embedding codegen/cgc_device.h as plan_device_prelude"
  VERBATIM)
add_library(cgc_codegen STATIC codegen/plan.c codegen/cuda.c codegen/fused.c codegen/fused_row.c codegen/gemm_tc.c codegen/mlp_fused.c codegen/emit.c
            codegen/memplan.c codegen/repro.c ${CGC_PRELUDE_C})
target_link_libraries(cgc_codegen PUBLIC cgc_base)
