# tests of the cpu group: the reference executor's numerics
cgc_c_test(test_exec cgc_cpu)
