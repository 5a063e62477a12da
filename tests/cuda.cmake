# The CUDA device runtime: kernel cache and NVRTC (label cpu: no GPU needed, but the CUDA
# Toolkit is), and the device itself (label gpu: exits 77, skipped, without a GPU).
if(CUDAToolkit_FOUND)
  cgc_c_test(test_kcache cgc_device cgc_base)
  cgc_c_test(test_nvrtc_models cgc_driver)
  target_compile_definitions(test_nvrtc_models PRIVATE CGC_MODELS_DIR="${CMAKE_SOURCE_DIR}/models")
  # 24 whole-module NVRTC compiles: about 2.5 minutes on the 2-core machine.
  set_tests_properties(test_nvrtc_models PROPERTIES TIMEOUT 1200)
endif()
# The autotune choices file (runtime/tune.h): format and its place in the cache.
cgc_c_test(test_tune cgc_device cgc_base)
cgc_c_test(test_cuda_device cgc_device cgc_base)
set_tests_properties(test_cuda_device PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
