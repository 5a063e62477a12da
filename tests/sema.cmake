# tests of the sema group: golden diagnostics for every semantic error (diag/sema), models
# that must check cleanly (diag/ok, empty .err), golden forward-IR dumps (ir/forward), and
# the train configuration each train-key form produces (test_sema.c).
add_test(NAME diag_sema COMMAND bash ${TESTS_DIR}/run_golden.sh ${TESTS_DIR}/diag/sema ${CGC_BIN})
add_test(NAME diag_ok COMMAND bash ${TESTS_DIR}/run_golden.sh ${TESTS_DIR}/diag/ok ${CGC_BIN})
add_test(NAME ir_forward COMMAND bash ${TESTS_DIR}/run_golden.sh ${TESTS_DIR}/ir/forward ${CGC_BIN})
set_tests_properties(diag_sema diag_ok ir_forward PROPERTIES LABELS cpu TIMEOUT 120)
cgc_c_test(test_sema cgc_front)
