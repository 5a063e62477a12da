# codegen: IR -> kernel plan (CUDA C kernels + host plan). Pure C; needs no CUDA Toolkit.
add_library(cgc_codegen STATIC codegen/plan.c)
target_link_libraries(cgc_codegen PUBLIC cgc_base)
