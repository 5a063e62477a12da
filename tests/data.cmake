# tests of the data group: the IDX reader and data loading, text files, safetensors.
cgc_c_test(test_idx cgc_data)
cgc_c_test(test_text_data cgc_data)
cgc_c_test(test_safetensors cgc_data)

# An independent reader (plain Python: struct and json) checks what the writer produces.
# Without python3 the test is reported as skipped (77), not passed.
find_program(CGC_PYTHON3 python3)
if(CGC_PYTHON3)
  add_test(NAME safetensors_python
           COMMAND ${CGC_PYTHON3} ${TESTS_DIR}/safetensors_check.py $<TARGET_FILE:test_safetensors>)
else()
  add_test(NAME safetensors_python COMMAND sh -c "echo 'python3 not found: skipped'; exit 77")
endif()
set_tests_properties(safetensors_python PROPERTIES LABELS cpu TIMEOUT 60 SKIP_RETURN_CODE 77)

# The read-ahead thread under ThreadSanitizer: prefetch.c and data.c compiled into the test
# with it, so that the worker's writes and the trainer's reads are both seen.
add_executable(test_prefetch test_prefetch.c ${CMAKE_SOURCE_DIR}/runtime/prefetch.c
               ${CMAKE_SOURCE_DIR}/runtime/data.c)
if(NOT CGC_SANITIZE)   # ThreadSanitizer does not go with AddressSanitizer's build
  target_compile_options(test_prefetch PRIVATE -fsanitize=thread)
  target_link_options(test_prefetch PRIVATE -fsanitize=thread)
endif()
target_link_libraries(test_prefetch PRIVATE cgc_data)
add_test(NAME test_prefetch COMMAND test_prefetch)
set_tests_properties(test_prefetch PROPERTIES LABELS cpu TIMEOUT 300
                     ENVIRONMENT "TSAN_OPTIONS=halt_on_error=1;OMP_NUM_THREADS=1")
