# tests of the front group: the lexer and parser (grammar/), their diagnostics, fuzzing
cgc_c_test(test_parser cgc_front)
cgc_c_test(fuzz_mutate cgc_front)
# Both read the complete example of docs/language.md ("A first file"), models/mlp.net.
target_compile_definitions(test_parser PRIVATE CGC_MODELS_DIR="${CMAKE_SOURCE_DIR}/models")
target_compile_definitions(fuzz_mutate PRIVATE CGC_MODELS_DIR="${CMAKE_SOURCE_DIR}/models")
add_test(NAME diag_syntax
         COMMAND bash ${TESTS_DIR}/run_golden.sh ${TESTS_DIR}/diag/syntax ${CGC_BIN})
set_tests_properties(diag_syntax PROPERTIES LABELS cpu TIMEOUT 120)
