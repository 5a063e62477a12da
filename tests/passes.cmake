# tests of the passes group: autodiff against finite differences, optimizer steps against
# torch.optim's formulas (both in f64 through the CPU executor), lowered-graph goldens.
cgc_c_test(test_gradcheck cgc_passes cgc_cpu)
cgc_c_test(test_optim cgc_passes cgc_cpu)
# The precision pass against torch.autocast's lists, written out in the test.
cgc_c_test(test_precision cgc_passes)
# The lowered graphs (train, train_micro, eval) of small models, compared as text.
add_test(NAME ir_train COMMAND bash ${TESTS_DIR}/run_golden.sh ${TESTS_DIR}/ir/train ${CGC_BIN})
set_tests_properties(ir_train PROPERTIES LABELS cpu TIMEOUT 120)
# The IR after each pass (sema, precision, training, checkpoint, fusion) of every model in
# models/, compared as text.
add_test(NAME ir_passes COMMAND bash ${TESTS_DIR}/ir/passes.sh ${CGC_BIN} ${CMAKE_SOURCE_DIR})
set_tests_properties(ir_passes PROPERTIES LABELS cpu TIMEOUT 120)
