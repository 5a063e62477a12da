# The CUDA device: driver API (dlopen'ed), NVRTC with the kernel cache, cuBLAS and
# cuBLASLt (GEMM epilogues; dlopen'ed when a device opens), cuDNN's convolutions and
# NCCL's sums over ranks (each dlopen'ed where it is installed; their headers from the
# toolkit's).
# Without the CUDA Toolkit, none.c stands in and says so; the CPU build is unchanged.

# cgc_toolkit_part(HEADER SOURCE NAME WITHOUT): a library loaded at run time, built in
# (SOURCE, with CGC_HAVE_NAME) where the toolkit's headers have HEADER; WITHOUT says what
# a build without it does.
function(cgc_toolkit_part header source name without)
  find_file(CGC_${name}_HEADER ${header} PATHS ${CUDAToolkit_INCLUDE_DIRS} NO_DEFAULT_PATH)
  if(CGC_${name}_HEADER)
    target_sources(cgc_device PRIVATE ${source})
    target_compile_definitions(cgc_device PRIVATE CGC_HAVE_${name}=1)
  else()
    message(STATUS "${header} not in the CUDA Toolkit: ${without}")
  endif()
endfunction()

if(CUDAToolkit_FOUND)
  target_sources(cgc_device PRIVATE
    runtime/cuda/driver.c runtime/cuda/device.c runtime/cuda/gemm.c
    runtime/cuda/nvrtc.c runtime/cuda/kcache.c)
  cgc_toolkit_part(cudnn.h runtime/cuda/conv.c CUDNN "convolutions run as the plan's steps")
  cgc_toolkit_part(nccl.h runtime/cuda/nccl.c NCCL "several ranks train on the CPU only")
  # cuda.h for the driver's types and prototypes only: libcuda is never linked.
  target_include_directories(cgc_device PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  # cuBLAS and cuBLASLt are loaded when a device opens (gemm.c), from here where the
  # loader does not find them.
  target_compile_definitions(cgc_device PRIVATE CGC_CUDA_LIBRARY_DIR="${CUDAToolkit_LIBRARY_DIR}")
  target_link_libraries(cgc_device PUBLIC CUDA::nvrtc ZLIB::ZLIB cgc_comm ${CMAKE_DL_LIBS})
else()
  target_sources(cgc_device PRIVATE runtime/cuda/none.c)
endif()
