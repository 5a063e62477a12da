# The device runtime: the plan runner (devexec) and the CUDA device (runtime/cuda/).
add_library(cgc_device STATIC runtime/devexec.c runtime/autotune.c runtime/cachedir.c runtime/tune.c)
target_link_libraries(cgc_device PUBLIC cgc_codegen cgc_cpu cgc_ir ${CMAKE_DL_LIBS})
include(runtime/cuda/cuda.cmake)
