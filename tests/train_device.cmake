# Training on a device (runtime/devexec.c, runtime/train_device.c), run on the CUDA
# emulation (tests/emu) and compared with the CPU reference executor; label emu. Needs
# cgc_emu_device and cgc_emu_run from emu/emu.cmake, so it is included after it. In the
# sanitizer build the kernels are built with AddressSanitizer too (--asan), which also
# checks that nothing touches the arena's padding.
add_executable(test_devexec test_devexec.c)
target_compile_definitions(test_devexec PRIVATE CGC_MODELS_DIR="${CMAKE_SOURCE_DIR}/models")
target_link_libraries(test_devexec PRIVATE cgc_driver cgc_emu_device)
cgc_emu_run(test_devexec test_devexec TIMEOUT 1500 ASAN --asan)

# Several ranks on devices: ranks on the emulation (emu/emu_rank, under mpirun) against
# cgc's ranks on the CPU.
add_test(NAME e2e_ranks_device COMMAND bash ${TESTS_DIR}/e2e/ranks_device.sh ${CGC_BIN}
         ${CMAKE_SOURCE_DIR} $<TARGET_FILE:emu_rank>)
set_tests_properties(e2e_ranks_device PROPERTIES LABELS "emu;e2e" TIMEOUT 900 SKIP_RETURN_CODE 77
                     ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMP_NUM_THREADS=2")
