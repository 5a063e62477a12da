# tests of the emu group: the CUDA emulation (tests/emu/cuda_emu.*) and generated kernels
# run on it, compared with the CPU reference executor. The kernels are compiled at test
# time with the C++ compiler found here; the *_asan variants build the test and the
# kernels with AddressSanitizer.
enable_language(CXX)
set(EMU_DIR ${CMAKE_CURRENT_SOURCE_DIR}/emu)

# The emulator compiled once at build time too, so that warnings fail the build.
add_library(cgc_emu_warnings OBJECT emu/cuda_emu.cpp)
add_library(cgc_emu_warnings_tsan OBJECT emu/cuda_emu.cpp)   # as the racecheck builds it
target_compile_definitions(cgc_emu_warnings_tsan PRIVATE CGC_EMU_TSAN)
set_target_properties(cgc_emu_warnings cgc_emu_warnings_tsan PROPERTIES CXX_STANDARD 17
                      POSITION_INDEPENDENT_CODE ON)

function(cgc_emu_device_lib name)   # cgc_emu_device_lib(NAME [COMPILE/LINK FLAGS...])
  add_library(${name} STATIC emu/emu_device.c emu/drift.c)
  target_compile_definitions(${name} PUBLIC CGC_EMU_CXX="${CMAKE_CXX_COMPILER}"
                             CGC_EMU_DIR="${EMU_DIR}")
  target_include_directories(${name} PRIVATE ${CBLAS_INCLUDE_DIR})
  target_link_libraries(${name} PUBLIC cgc_codegen cgc_cpu cgc_comm ${OPENBLAS_LIBRARY} ${CMAKE_DL_LIBS})
  if(ARGN)
    target_compile_options(${name} PUBLIC ${ARGN})
    target_link_options(${name} PUBLIC ${ARGN})
  endif()
endfunction()
cgc_emu_device_lib(cgc_emu_device)
cgc_emu_device_lib(cgc_emu_device_asan -fsanitize=address -fno-omit-frame-pointer)
# The racecheck: the kernels under ThreadSanitizer, a block's threads its fibers, ordered
# only by what orders them on a GPU (cuda_emu.cpp).
if(NOT CGC_SANITIZE)   # TSan cannot join the whole build's ASan
  cgc_emu_device_lib(cgc_emu_device_tsan -fsanitize=thread)
  target_link_options(cgc_emu_device_tsan PUBLIC -Wl,--as-needed)
endif()
# CUDA::cublas brings the driver stub (libcuda.so) into the link line; the runtime loads
# the driver with dlopen, so drop what is unused, as the default link does without ASan.
target_link_options(cgc_emu_device_asan PUBLIC -Wl,--as-needed)

function(cgc_emu_test name src device labels)   # one test binary and its ctest entry
  add_executable(${name} ${src})
  target_link_libraries(${name} PRIVATE ${device} cgc_driver)
  add_test(NAME ${name} COMMAND ${name} ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS "${labels}" TIMEOUT 1500
                       ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=2")
endfunction()

cgc_emu_test(test_emu_runtime emu/test_emu_runtime.c cgc_emu_device emu)
cgc_emu_test(test_emu_runtime_asan emu/test_emu_runtime.c cgc_emu_device_asan "emu;asan" --asan)

cgc_emu_test(test_emu_models emu/test_emu_models.c cgc_emu_device emu --skip cnn)
cgc_emu_test(test_emu_models_asan emu/test_emu_models.c cgc_emu_device_asan "emu;asan"
             --asan mlp:fp32 mlp:fp16 mlp:fp16:2 regression:fp32 resmlp:bf16)
foreach(t test_emu_models test_emu_models_asan)
  target_compile_definitions(${t} PRIVATE CGC_MODELS_DIR="${CMAKE_SOURCE_DIR}/models")
endforeach()

# Every elementwise op of compiler/ops.def on its own, eager and fused, against the CPU.
cgc_emu_test(test_emu_ops emu/test_emu_ops.c cgc_emu_device emu)
cgc_emu_test(test_emu_ops_asan emu/test_emu_ops.c cgc_emu_device_asan "emu;asan" --asan)
if(CUDAToolkit_FOUND)
  target_compile_definitions(test_emu_ops PRIVATE CGC_HAVE_NVRTC)
  target_compile_definitions(test_emu_ops_asan PRIVATE CGC_HAVE_NVRTC)
endif()

# max-autotune's generated tensor-core GEMMs, each against the reference GEMM.
cgc_emu_test(test_emu_gemm emu/test_emu_gemm.c cgc_emu_device emu)
cgc_emu_test(test_emu_gemm_asan emu/test_emu_gemm.c cgc_emu_device_asan "emu;asan" --asan mlp:fp16:37
             cnn:bf16:2)
foreach(t test_emu_gemm test_emu_gemm_asan)
  target_compile_definitions(${t} PRIVATE CGC_MODELS_DIR="${CMAKE_SOURCE_DIR}/models")
endforeach()
# The same under the emulation's other schedules (cuda_emu.cpp): cp.async copies landing
# when issued, and warps in a shuffled order, so that a missing barrier or wait fails
# whichever moment it would show at.
foreach(schedule early shuffled)
  add_test(NAME test_emu_gemm_${schedule} COMMAND test_emu_gemm)
  set_tests_properties(test_emu_gemm_${schedule} PROPERTIES LABELS emu TIMEOUT 1500
                       ENVIRONMENT "CGC_EMU_SCHEDULE=${schedule};OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=2")
endforeach()
# Batches of 64k-1 and 64k+1 rows through the GEMM tiles and fused MLPs (odd_mlp's widths
# are no multiple of 8), the blocks and warps in the shuffled order; and cnn.net's
# implicit GEMMs in fp16 with accumulation (the train_micro graph's too).
add_test(NAME test_emu_gemm_boundary COMMAND test_emu_gemm ../tests/models/odd_mlp:fp16:63
         narrow_mlp:bf16:65 ../tests/models/odd_mlp:bf16:129 resmlp:fp16:127
         cnn:fp16:3:accumulate=2)
set_tests_properties(test_emu_gemm_boundary PROPERTIES LABELS emu TIMEOUT 900
                     ENVIRONMENT "CGC_EMU_SCHEDULE=shuffled;OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=2")
# The same on a real GPU, against cuBLAS: label gpu, skipped (77) where none is usable.
add_test(NAME test_gpu_gemm COMMAND test_emu_gemm --cuda)
set_tests_properties(test_gpu_gemm PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 900)

# models/cnn.net, whose images make the run over every model too slow at its batch: two
# images a step (one in the last and the evaluation), in each mode, and the halves.
add_test(NAME test_emu_cnn COMMAND test_emu_models --batches 2,1 cnn:fp32 cnn:bf16:0:default
         cnn:fp16:2:default cnn:tf32:0:eager)
set_tests_properties(test_emu_cnn PROPERTIES LABELS emu TIMEOUT 900
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=2")

# The convolutions by a library (cuDNN on a GPU; here the emulation's reference
# convolution, three algorithms): the forward, filter and data gradient calls in place of
# the patches, the GEMMs, the transposes and the col2im, against the CPU executor, in
# each mode and with accumulation.
add_test(NAME test_emu_cnn_library COMMAND test_emu_models --convs 3 --batches 2,1 cnn:fp32:0:default
         cnn:bf16:0:eager cnn:fp16:2:default)
set_tests_properties(test_emu_cnn_library PROPERTIES LABELS emu TIMEOUT 900
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=2")

# Models that exist for a shape the shipped ones lack (tests/emu/models/*.net, each saying
# why), in every precision and mode.
add_test(NAME test_emu_shapes COMMAND test_emu_models)
set_tests_properties(test_emu_shapes PROPERTIES LABELS emu TIMEOUT 900
                     ENVIRONMENT "CGC_MODELS_DIR=${EMU_DIR}/models;OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=2")

# Boundary shapes: batches of 64k+1 and 64k-1 rows and widths that are no multiple of 8,
# 16 or 128 (tests/emu/models/odd_widths.net), so that every kind of kernel ends inside a
# block, a tile and a warp; the second also under the shuffled schedule (warps and blocks
# in another order, cuda_emu.cpp).
set(EMU_ODD ../tests/emu/models/odd_widths)
add_test(NAME test_emu_boundary COMMAND test_emu_models --batches 65,63 mlp:fp16:2
         narrow_mlp:bf16 regression:fp32 resmlp:fp16 ${EMU_ODD}:tf32 ${EMU_ODD}:fp16:2
         ../tests/emu/models/softmax_axes:bf16)
add_test(NAME test_emu_boundary_shuffled COMMAND test_emu_models --batches 129,127 mlp:bf16
         narrow_mlp:fp16:2 regression:fp16 resmlp:bf16 ${EMU_ODD}:fp32 ${EMU_ODD}:bf16:2
         ../tests/emu/models/softmax_axes:fp16)
set_tests_properties(test_emu_boundary test_emu_boundary_shuffled PROPERTIES LABELS emu TIMEOUT 900
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=2")
set_property(TEST test_emu_boundary_shuffled APPEND PROPERTY ENVIRONMENT CGC_EMU_SCHEDULE=shuffled)

# Models too wide for one kernel's parameters (tests/emu/wide/*.net): the kernels fusion
# splits them into, at the limit, in the default mode.
add_test(NAME test_emu_wide COMMAND test_emu_models wide_sum:fp32:0:default
         deep_clip:fp16:0:default deep_clip:bf16:2:default)
set_tests_properties(test_emu_wide PROPERTIES LABELS emu TIMEOUT 900
                     ENVIRONMENT "CGC_MODELS_DIR=${EMU_DIR}/wide;OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=2")

# The same comparisons on a real GPU: label gpu, skipped (77) where none is usable.
add_test(NAME test_gpu_models COMMAND test_emu_models --cuda)
set_tests_properties(test_gpu_models PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 900)

# The racecheck over generated kernels: a model of each kind (fused MLP runs, residual
# blocks, a regression) and the tensor-core GEMMs, under ThreadSanitizer, and the
# emulation's own test with kernels that race. One thread for OpenMP and OpenBLAS: their
# own threads are not what is checked, and TSan cannot see through libgomp's barriers. A
# race stops the test (halt_on_error) with TSan's report.
if(NOT CGC_SANITIZE)
  cgc_emu_test(test_emu_runtime_tsan emu/test_emu_runtime.c cgc_emu_device_tsan "emu;tsan" --tsan)
  cgc_emu_test(test_emu_models_tsan emu/test_emu_models.c cgc_emu_device_tsan "emu;tsan"
               mlp:fp16 regression:fp32 resmlp:bf16)
  cgc_emu_test(test_emu_gemm_tsan emu/test_emu_gemm.c cgc_emu_device_tsan "emu;tsan" mlp:fp16:37)
  foreach(t test_emu_models_tsan test_emu_gemm_tsan)
    target_compile_definitions(${t} PRIVATE CGC_MODELS_DIR="${CMAKE_SOURCE_DIR}/models")
  endforeach()
  set_tests_properties(test_emu_runtime_tsan test_emu_models_tsan test_emu_gemm_tsan PROPERTIES
                       ENVIRONMENT "TSAN_OPTIONS=halt_on_error=1:history_size=4;OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=1")
endif()

# One rank of a job on the emulated device (tests/e2e/ranks_device.sh runs it under
# mpirun against cgc's ranks on the CPU); emu_rank_asan, with the emulation and the
# kernels under AddressSanitizer.
add_executable(emu_rank emu/emu_rank.c)
target_link_libraries(emu_rank PRIVATE cgc_emu_device cgc_driver)
add_executable(emu_rank_asan emu/emu_rank.c)
target_link_libraries(emu_rank_asan PRIVATE cgc_emu_device_asan cgc_driver)
target_compile_definitions(emu_rank_asan PRIVATE EMU_RANK_ASAN=1)
