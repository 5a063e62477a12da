# The CUDA device: driver API (dlopen'ed), NVRTC with the kernel cache, cuBLAS and
# cuBLASLt (GEMM epilogues), cuDNN's convolutions (dlopen'ed where it is installed;
# cudnn.h from the toolkit's headers).
# Without the CUDA Toolkit, none.c stands in and says so; the CPU build is unchanged.
if(CUDAToolkit_FOUND)
  target_sources(cgc_device PRIVATE
    runtime/cuda/driver.c runtime/cuda/device.c runtime/cuda/gemm.c
    runtime/cuda/nvrtc.c runtime/cuda/kcache.c)
  find_file(CGC_CUDNN_HEADER cudnn.h PATHS ${CUDAToolkit_INCLUDE_DIRS} NO_DEFAULT_PATH)
  if(CGC_CUDNN_HEADER)
    target_sources(cgc_device PRIVATE runtime/cuda/conv.c)
    target_compile_definitions(cgc_device PRIVATE CGC_HAVE_CUDNN=1)
  else()
    message(STATUS "cudnn.h not in the CUDA Toolkit: convolutions run as the plan's steps")
  endif()
  find_file(CGC_NCCL_HEADER nccl.h PATHS ${CUDAToolkit_INCLUDE_DIRS} NO_DEFAULT_PATH)
  if(CGC_NCCL_HEADER)
    target_sources(cgc_device PRIVATE runtime/cuda/nccl.c)
    target_compile_definitions(cgc_device PRIVATE CGC_HAVE_NCCL=1)
  else()
    message(STATUS "nccl.h not in the CUDA Toolkit: several ranks train on the CPU only")
  endif()
  # cuda.h for the driver's types and prototypes only: libcuda is never linked.
  target_include_directories(cgc_device PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  target_link_libraries(cgc_device PUBLIC CUDA::nvrtc CUDA::cublas CUDA::cublasLt ZLIB::ZLIB cgc_comm)
else()
  target_sources(cgc_device PRIVATE runtime/cuda/none.c)
endif()
