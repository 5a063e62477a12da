# tests of the cpu group: the reference executor's numerics
cgc_c_test(test_exec cgc_cpu)
# attention as the front end composes it, against the formula written out in double
cgc_c_test(test_attention cgc_driver)
cgc_c_test(test_decode cgc_driver)
# the parameters' half copies against the casts they replace, through training
cgc_c_test(test_copies cgc_driver)
