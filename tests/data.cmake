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
