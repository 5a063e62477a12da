# codegen: IR -> kernel plan (CUDA C kernels + host plan). Pure C; needs no CUDA Toolkit.
# The code cgc writes out as it stands is real files in the tree, embedded as strings at
# build time (embed.cmake), so that editing one rebuilds the library: the device prelude
# (codegen/cgc_device.h as plan_device_prelude) and the reproducer's fixed host code
# (codegen/repro/ and codegen/gemm_map.h as repro_*).
set(CGC_EMBEDDED "")
# cgc_embed(FILE NAME [HEADER...]): FILE, relative to the source tree, as `const char
# NAME[]`, each HEADER beside it that it includes inlined (embed.cmake).
function(cgc_embed file name)
  set(out ${CMAKE_BINARY_DIR}/codegen/${name}.c)
  get_filename_component(dir ${CMAKE_SOURCE_DIR}/${file} DIRECTORY)
  set(headers "")
  foreach(h ${ARGN})
    list(APPEND headers ${dir}/${h})
  endforeach()
  string(JOIN "," inline ${ARGN})
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/codegen
    COMMAND ${CMAKE_COMMAND} -DIN=${CMAKE_SOURCE_DIR}/${file} -DOUT=${out} -DNAME=${name}
            -DINLINE=${inline} -P ${CMAKE_SOURCE_DIR}/codegen/embed.cmake
    DEPENDS ${CMAKE_SOURCE_DIR}/${file} ${headers} ${CMAKE_SOURCE_DIR}/codegen/embed.cmake
    COMMENT "Embedding ${file} as ${name}"
    VERBATIM)
  set(CGC_EMBEDDED ${CGC_EMBEDDED} ${out} PARENT_SCOPE)
endfunction()
cgc_embed(codegen/cgc_device.h plan_device_prelude cgc_math.h)
cgc_embed(codegen/repro/types.h repro_types)
cgc_embed(codegen/gemm_map.h repro_gemm_map)
cgc_embed(codegen/repro/replay.h repro_replay)
cgc_embed(codegen/repro/main.h repro_main)
add_library(cgc_codegen STATIC codegen/plan.c codegen/draft.c codegen/cuda.c codegen/fused.c codegen/fused_row.c codegen/attention.c codegen/gemm_tc.c codegen/mlp_fused.c codegen/emit.c
            codegen/memplan.c codegen/collective.c codegen/repro.c codegen/perf.c ${CGC_EMBEDDED})
target_link_libraries(cgc_codegen PUBLIC cgc_ir)

