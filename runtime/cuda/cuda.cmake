# The CUDA device: driver API (dlopen'ed), NVRTC with the kernel cache, cuBLAS.
