# The CUDA device runtime: kernel cache and NVRTC (label cpu: no GPU needed, but the CUDA
# Toolkit is), and the device itself (label gpu: exits 77, skipped, without a GPU).
if(CUDAToolkit_FOUND)
  cgc_c_test(test_kcache cgc_device cgc_base)
  # Every model's plans, each for one of two archs: about a minute of a core on the 2-core
  # machine; in the sanitizer build, one model's for one arch (test_nvrtc_models.c says why).
  add_executable(test_nvrtc_models test_nvrtc_models.c)
  target_link_libraries(test_nvrtc_models PRIVATE cgc_driver)
  target_compile_definitions(test_nvrtc_models PRIVATE CGC_MODELS_DIR="${CMAKE_SOURCE_DIR}/models")
  set(nvrtc_args)
  if(CGC_SANITIZE)
    set(nvrtc_args mlp.net)
  endif()
  add_test(NAME test_nvrtc_models COMMAND test_nvrtc_models ${nvrtc_args})
  set_tests_properties(test_nvrtc_models PROPERTIES LABELS cpu TIMEOUT 1200
                       ENVIRONMENT "OPENBLAS_NUM_THREADS=2;OMP_NUM_THREADS=2")
endif()
# The autotune choices file (runtime/tune.h): format and its place in the cache.
cgc_c_test(test_tune cgc_device cgc_base)
cgc_c_test(test_cuda_device cgc_device cgc_base)
set_tests_properties(test_cuda_device PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
