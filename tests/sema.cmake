# tests of the sema group: golden diagnostics for every semantic error, train-flag errors
# included (diag/sema), models that must check cleanly (diag/ok, empty .err), golden
# forward-IR dumps (ir/forward), the train configuration each train-key form and flag
# produces (test_sema.c), and a model too large for any quadratic cost (large_model.sh).
add_test(NAME diag_sema COMMAND bash ${TESTS_DIR}/run_golden.sh ${TESTS_DIR}/diag/sema ${CGC_BIN})
add_test(NAME diag_ok COMMAND bash ${TESTS_DIR}/run_golden.sh ${TESTS_DIR}/diag/ok ${CGC_BIN})
add_test(NAME ir_forward COMMAND bash ${TESTS_DIR}/run_golden.sh ${TESTS_DIR}/ir/forward ${CGC_BIN})
set_tests_properties(diag_sema diag_ok ir_forward PROPERTIES LABELS cpu TIMEOUT 120)
cgc_c_test(test_sema cgc_front)
# A 20,000-statement model: no per-line or per-name cost may grow with the file.
add_test(NAME sema_large_model COMMAND bash ${TESTS_DIR}/diag/large_model.sh ${CGC_BIN} 20000)
set_tests_properties(sema_large_model PROPERTIES LABELS cpu TIMEOUT 60)
# docs/language.md names every built-in and train key of the compiler's tables; its examples compile.
add_test(NAME docs_language COMMAND bash ${TESTS_DIR}/docs/language.sh ${CGC_BIN} ${CMAKE_SOURCE_DIR})
set_tests_properties(docs_language PROPERTIES LABELS cpu TIMEOUT 120)
