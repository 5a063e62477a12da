# tests of the emu group: the CUDA emulation (tests/emu/cuda_emu.*) and generated kernels
# run on it, compared with the CPU reference executor. The kernels are compiled at test
# time with the C++ compiler found here (in the sanitizer build, with AddressSanitizer:
# cgc_emu_run below).
enable_language(CXX)
set(EMU_DIR ${CMAKE_CURRENT_SOURCE_DIR}/emu)

# The emulator, compiled once here (its warnings fail the build): each plan's shared
# object of kernels links this object, so that every loaded plan has a scheduler of its
# own, and the tests compile only the kernels. In the sanitizer build it has ASan and
# UBSan like everything else. The racecheck's is built without ThreadSanitizer
# (cuda_emu.cpp tells TSan what it needs to know).
add_library(cgc_emulator OBJECT emu/cuda_emu.cpp)
add_library(cgc_emulator_tsan OBJECT emu/cuda_emu.cpp)
target_compile_definitions(cgc_emulator_tsan PRIVATE CGC_EMU_TSAN)
set_target_properties(cgc_emulator cgc_emulator_tsan PROPERTIES CXX_STANDARD 17
                      POSITION_INDEPENDENT_CODE ON)

# The drift bounds of test_emu_models (drift.c) and its attention in double
# (attention_oracle.c) are the test's own arithmetic, not code the racecheck checks: a
# library of their own, which the racecheck's flags do not reach (instrumented, they
# would be most of its time).
add_library(cgc_emu_drift STATIC emu/drift.c emu/attention_oracle.c)
target_link_libraries(cgc_emu_drift PUBLIC cgc_ir)

# The emulated device. In the sanitizer build (CGC_SANITIZE) it is built with ASan and UBSan
# like everything else; the racecheck's (ThreadSanitizer) exists only in the plain build, as
# TSan cannot join the whole build's ASan.
function(cgc_emu_device_lib name emulator)   # (NAME EMULATOR [COMPILE/LINK FLAGS...])
  add_library(${name} STATIC emu/emu_device.c)
  add_dependencies(${name} ${emulator})
  target_compile_definitions(${name} PUBLIC CGC_EMU_CXX="${CMAKE_CXX_COMPILER}"
                             CGC_EMU_DIR="${EMU_DIR}"
                             CGC_EMU_OBJECT="$<TARGET_OBJECTS:${emulator}>")
  target_include_directories(${name} PRIVATE ${CBLAS_INCLUDE_DIR})
  target_link_libraries(${name} PUBLIC cgc_emu_drift cgc_codegen cgc_cpu cgc_comm ${OPENBLAS_LIBRARY}
                        ${CMAKE_DL_LIBS})
  if(ARGN)
    target_compile_options(${name} PUBLIC ${ARGN})
    target_link_options(${name} PUBLIC ${ARGN})
  endif()
  # CUDA::nvrtc brings the driver stub (libcuda.so) into the link line; the runtime loads
  # the driver with dlopen, so drop what is unused, as the default link does without a
  # sanitizer.
  target_link_options(${name} PUBLIC -Wl,--as-needed)
endfunction()
cgc_emu_device_lib(cgc_emu_device cgc_emulator)
if(NOT CGC_SANITIZE)
  cgc_emu_device_lib(cgc_emu_device_tsan cgc_emulator_tsan -fsanitize=thread)
endif()

# cgc_emu_run(NAME BINARY [TIMEOUT S] [LABELS L...] [ENV E...] [ARGS A...] [ASAN A...])
#
# One emulation test in each build. The plain build (`make test`) runs BINARY with ARGS,
# every case. The sanitizer build (`make test-sanitize`) runs it with ASAN instead (which
# names --asan: the kernels are built with AddressSanitizer too, so that the emulation, the
# kernels, the runtime and the test are all checked) or leaves it out without ASAN: under
# ASan the emulated kernels run several times slower, so that build runs a selection that
# reaches every kind of kernel and runtime path once, and the plain build runs the rest.
function(cgc_emu_run name binary)
  cmake_parse_arguments(E "" "TIMEOUT" "LABELS;ENV;ARGS;ASAN" ${ARGN})
  if(NOT E_TIMEOUT)
    set(E_TIMEOUT 900)
  endif()
  set(labels emu ${E_LABELS})
  if(CGC_SANITIZE)
    if(NOT E_ASAN)
      return()
    endif()
    set(E_ARGS ${E_ASAN})
    list(APPEND labels asan)
  endif()
  add_test(NAME ${name} COMMAND ${binary} ${E_ARGS})
  set_tests_properties(${name} PROPERTIES LABELS "${labels}" TIMEOUT ${E_TIMEOUT}
                       ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=2;${E_ENV}")
endfunction()

function(cgc_emu_binary name src device)   # a test binary of tests/emu
  add_executable(${name} ${src})
  target_link_libraries(${name} PRIVATE ${device} cgc_driver)
  target_compile_definitions(${name} PRIVATE CGC_MODELS_DIR="${CMAKE_SOURCE_DIR}/models")
  if(CUDAToolkit_FOUND)
    target_compile_definitions(${name} PRIVATE CGC_HAVE_NVRTC)
  endif()
endfunction()
cgc_emu_binary(test_emu_runtime emu/test_emu_runtime.c cgc_emu_device)
cgc_emu_binary(test_emu_models emu/test_emu_models.c cgc_emu_device)
cgc_emu_binary(test_emu_ops emu/test_emu_ops.c cgc_emu_device)
cgc_emu_binary(test_emu_gemm emu/test_emu_gemm.c cgc_emu_device)

cgc_emu_run(test_emu_runtime test_emu_runtime ASAN --asan)
cgc_emu_run(test_emu_models test_emu_models TIMEOUT 1500 ARGS --skip cnn --skip gpt
            ASAN --asan mlp:fp32 mlp:fp16 mlp:fp16:2 regression:fp32 resmlp:bf16)

# The GPT (models/gpt.net) in the default mode, f32 and bf16: its blocks are
# tests/emu/models/attention.net's, which runs in every precision and mode; here at
# full width, four layers deep.
cgc_emu_run(test_emu_gpt test_emu_models ARGS gpt:fp32:0:default gpt:bf16:0:default)

# Every elementwise op of compiler/ops.def on its own, eager and fused, against the CPU.
cgc_emu_run(test_emu_ops test_emu_ops ASAN --asan)

# max-autotune's generated tensor-core GEMMs, each against the reference GEMM.
cgc_emu_run(test_emu_gemm test_emu_gemm TIMEOUT 1500 ASAN --asan mlp:fp16:37 cnn:bf16:2)
# The same under the emulation's other schedules (cuda_emu.cpp): cp.async copies landing
# when issued, and warps in a shuffled order, so that a missing barrier or wait fails
# whichever moment it would show at.
foreach(schedule early shuffled)
  cgc_emu_run(test_emu_gemm_${schedule} test_emu_gemm TIMEOUT 1500 ENV CGC_EMU_SCHEDULE=${schedule})
endforeach()
# Batches of 64k-1 and 64k+1 rows through the GEMM tiles and fused MLPs (odd_mlp's widths
# are no multiple of 8), the blocks and warps in the shuffled order; and cnn.net's
# implicit GEMMs in fp16 with accumulation (the train_micro graph's too).
cgc_emu_run(test_emu_gemm_boundary test_emu_gemm ENV CGC_EMU_SCHEDULE=shuffled
            ARGS ../tests/models/odd_mlp:fp16:63 narrow_mlp:bf16:65 ../tests/models/odd_mlp:bf16:129
                 resmlp:fp16:127 cnn:fp16:3:accumulate=2
            ASAN --asan ../tests/models/odd_mlp:fp16:63)
# The same on a real GPU, against cuBLAS: label gpu, skipped (77) where none is usable.
add_test(NAME test_gpu_gemm COMMAND test_emu_gemm --cuda)
set_tests_properties(test_gpu_gemm PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 900)

# models/cnn.net, whose images make the run over every model too slow at its batch: two
# images a step (one in the last and the evaluation), in each mode, and the halves.
cgc_emu_run(test_emu_cnn test_emu_models
            ARGS --batches 2,1 cnn:fp32 cnn:bf16:0:default cnn:fp16:2:default cnn:tf32:0:eager)

# The convolutions by a library (cuDNN on a GPU; here the emulation's reference
# convolution, three algorithms): the forward, filter and data gradient calls in place of
# the patches, the GEMMs, the transposes and the col2im, against the CPU executor, in
# each mode and with accumulation.
cgc_emu_run(test_emu_cnn_library test_emu_models
            ARGS --convs 3 --batches 2,1 cnn:fp32:0:default cnn:bf16:0:eager cnn:fp16:2:default
            ASAN --asan --convs 3 --batches 2,1 ../tests/emu/models/conv_chain:fp16:2:default)

# Models that exist for a shape the shipped ones lack (tests/emu/models/*.net, each saying
# why), in every mode, each in an f32 and a half precision by turns (--in-turn).
cgc_emu_run(test_emu_shapes test_emu_models ENV CGC_MODELS_DIR=${EMU_DIR}/models ARGS --in-turn
            ASAN --asan conv_chain:bf16:0:default image_windows:fp16:0:default
                 reduce_reads_reduce:fp32:0:default square_rows:fp32:0:default
                 attention_edges:bf16:0:default attention_edges:fp32:0:default)

# tf32 GEMMs multiplied unrounded, as cuBLAS does for a shape it gives no tensor-core
# kernel (seen on an H200), while the CPU executor rounds their operands: every tf32
# difference the comparison's drift rules must explain, on the image models' grouped,
# strided and dilated convolutions and the common case.
cgc_emu_run(test_emu_tf32_in_f32 test_emu_models
            ARGS --tf32-in-f32 ../tests/emu/models/image_windows:tf32 ../tests/emu/models/conv_chain:tf32
                 cnn:tf32:0:default)

# Boundary shapes: batches of 64k+1 and 64k-1 rows and widths that are no multiple of 8,
# 16 or 128 (tests/emu/models/odd_widths.net), so that every kind of kernel ends inside a
# block, a tile and a warp; the second also under the shuffled schedule (warps and blocks
# in another order, cuda_emu.cpp).
set(EMU_ODD ../tests/emu/models/odd_widths)
cgc_emu_run(test_emu_boundary test_emu_models
            ARGS --batches 65,63 mlp:fp16:2 narrow_mlp:bf16 regression:fp32 resmlp:fp16
                 ${EMU_ODD}:tf32 ${EMU_ODD}:fp16:2 ../tests/emu/models/softmax_axes:bf16
            ASAN --asan --batches 65,63 ${EMU_ODD}:fp16:2 ../tests/emu/models/softmax_axes:bf16)
cgc_emu_run(test_emu_boundary_shuffled test_emu_models ENV CGC_EMU_SCHEDULE=shuffled
            ARGS --batches 129,127 mlp:bf16 narrow_mlp:fp16:2 regression:fp16 resmlp:bf16
                 ${EMU_ODD}:fp32 ${EMU_ODD}:bf16:2 ../tests/emu/models/softmax_axes:fp16)

# Sums split across blocks and summed in a second launch, at batches large enough to
# split: over the batch (tests/emu/models/split_sums.net) and a loss's mean over every
# element (split_rows.net), in each mode and the halves, the blocks in the shuffled order
# (any order of the parts' writes).
set(EMU_SPLIT ../tests/emu/models/split_sums)
set(EMU_SPLIT_ROWS ../tests/emu/models/split_rows)
cgc_emu_run(test_emu_split test_emu_models ENV CGC_EMU_SCHEDULE=shuffled
            ARGS --splits --batches 4099,1001 ${EMU_SPLIT}:fp32 ${EMU_SPLIT}:bf16:0:default
                 ${EMU_SPLIT}:fp16:2:default ${EMU_SPLIT_ROWS}:fp32 ${EMU_SPLIT_ROWS}:bf16:0:default
            ASAN --asan --splits --batches 4099,1001 ${EMU_SPLIT}:bf16:0:default
                 ${EMU_SPLIT_ROWS}:fp16:0:default)

# Models too wide for one kernel's parameters (tests/emu/wide/*.net): the kernels fusion
# splits them into, at the limit, in the default mode.
cgc_emu_run(test_emu_wide test_emu_models ENV CGC_MODELS_DIR=${EMU_DIR}/wide
            ARGS wide_sum:fp32:0:default deep_clip:bf16:2:default
            ASAN --asan deep_clip:fp16:0:default)

# Image layers drawn at random by tests/torch_image_oracle.py (tests/emu/image_oracle/*.net,
# each saying which case it is), which checks the CPU executor against PyTorch on the same
# models: here their kernels against the CPU executor, so that the kernels are checked
# against PyTorch through it. The convolutions' windows: per-axis asymmetric padding,
# strides and dilations that differ per axis, "same" with dilation 2 and an even kernel,
# groups; max and average pooling with rectangular windows, per-axis strides and padding.
# In fp32 (every mode); then the implicit GEMMs max-autotune generates in f16 and bf16 for
# the ones without groups, each against the library's GEMM over the patches (their
# cross_entropy has 4 classes, or an mse, as test_emu_gemm's labels take).
set(EMU_IMG ${EMU_DIR}/image_oracle)
cgc_emu_run(test_emu_image_oracle test_emu_models TIMEOUT 600 ENV CGC_MODELS_DIR=${EMU_IMG}
            ARGS img_1_1:fp32 img_1_7:fp32 img_1_42:fp32 img_1_52:fp32 img_1_54:fp32 img_1_55:fp32
                 img_1_63:fp32 img_1_82:fp32
            ASAN --asan img_1_63:fp32:0:default img_1_82:fp32:0:default)
cgc_emu_run(test_emu_image_oracle_gemm test_emu_gemm TIMEOUT 600
            ARGS ../tests/emu/image_oracle/img_1_7:bf16:5 ../tests/emu/image_oracle/img_1_55:bf16:7
                 ../tests/emu/image_oracle/img_1_67:fp16:5)

# The same comparisons on a real GPU: label gpu, skipped (77) where none is usable.
add_test(NAME test_gpu_models COMMAND test_emu_models --cuda)
set_tests_properties(test_gpu_models PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 900)

# The racecheck over generated kernels: resmlp in every mode (row groups, reductions,
# softmax and the loss, eager and fused), mlp's fused step (multi-tensor launches, loss
# scaling) and the tensor-core GEMMs, under ThreadSanitizer, two steps each (a race shows
# at a kernel's first launch; the second step's batch is the ragged one), and the
# emulation's own test with kernels that race. One thread for OpenMP and OpenBLAS: their
# own threads are not what is checked, and TSan cannot see through libgomp's barriers. A
# race stops the test (halt_on_error) with TSan's report.
if(NOT CGC_SANITIZE)
  cgc_emu_binary(test_emu_runtime_tsan emu/test_emu_runtime.c cgc_emu_device_tsan)
  cgc_emu_binary(test_emu_models_tsan emu/test_emu_models.c cgc_emu_device_tsan)
  cgc_emu_binary(test_emu_gemm_tsan emu/test_emu_gemm.c cgc_emu_device_tsan)
  set(tsan_env "TSAN_OPTIONS=halt_on_error=1:history_size=4;OMP_NUM_THREADS=1")
  cgc_emu_run(test_emu_runtime_tsan test_emu_runtime_tsan LABELS tsan ENV ${tsan_env} ARGS --tsan)
  cgc_emu_run(test_emu_models_tsan test_emu_models_tsan TIMEOUT 1500 LABELS tsan ENV ${tsan_env}
              ARGS --steps 2 resmlp:bf16 mlp:fp16:0:default
                   ../tests/emu/models/attention_edges:bf16:0:default
                   ../tests/emu/models/attention_edges:fp32:0:default)
  cgc_emu_run(test_emu_gemm_tsan test_emu_gemm_tsan LABELS tsan ENV ${tsan_env} ARGS mlp:fp16:37)
endif()

# One rank of a job on the emulated device (tests/e2e/ranks_device.sh runs it under
# mpirun against cgc's ranks on the CPU); in the sanitizer build, with its kernels under
# AddressSanitizer too.
add_executable(emu_rank emu/emu_rank.c)
target_link_libraries(emu_rank PRIVATE cgc_emu_device cgc_driver)
if(CGC_SANITIZE)
  target_compile_definitions(emu_rank PRIVATE EMU_RANK_ASAN=1)
endif()
