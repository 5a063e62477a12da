# Training on a device (runtime/devexec.c, runtime/train_device.c), run on the CUDA
# emulation (tests/emu) and compared with the CPU reference executor; label emu. Needs
# cgc_emu_device from emu/emu.cmake, so it is included after it.
foreach(variant test_devexec test_devexec_asan)
  add_executable(${variant} test_devexec.c)
  target_compile_definitions(${variant} PRIVATE CGC_MODELS_DIR="${CMAKE_SOURCE_DIR}/models")
  target_link_libraries(${variant} PRIVATE cgc_driver)
endforeach()
target_link_libraries(test_devexec PRIVATE cgc_emu_device)
target_link_libraries(test_devexec_asan PRIVATE cgc_emu_device_asan)
add_test(NAME test_devexec COMMAND test_devexec)
add_test(NAME test_devexec_asan COMMAND test_devexec_asan --asan)
set_tests_properties(test_devexec PROPERTIES LABELS emu TIMEOUT 1500
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=2")
set_tests_properties(test_devexec_asan PROPERTIES LABELS "emu;asan" TIMEOUT 1500
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=2")

# Several ranks on devices: ranks on the emulation (emu/emu_rank, under mpirun) against
# cgc's ranks on the CPU.
add_test(NAME e2e_ranks_device COMMAND bash ${TESTS_DIR}/e2e/ranks_device.sh ${CGC_BIN}
         ${CMAKE_SOURCE_DIR} $<TARGET_FILE:emu_rank>)
set_tests_properties(e2e_ranks_device PROPERTIES LABELS "emu;e2e" TIMEOUT 600 SKIP_RETURN_CODE 77
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=2")
# The same with the emulation and the kernels under AddressSanitizer (emu_rank_asan).
add_test(NAME e2e_ranks_device_asan COMMAND bash ${TESTS_DIR}/e2e/ranks_device.sh ${CGC_BIN}
         ${CMAKE_SOURCE_DIR} $<TARGET_FILE:emu_rank_asan>)
set_tests_properties(e2e_ranks_device_asan PROPERTIES LABELS "emu;e2e;asan" TIMEOUT 900
                     SKIP_RETURN_CODE 77 ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=2")
