# The memory plan (codegen/memplan.c): liveness, offsets and peaks of every model checked
# by brute force, a hand-built plan with a known peak, and the plan runner's use of it
# (the free-memory check, the padding it marks) on a fake device.
cgc_c_test(test_memplan cgc_driver)
target_compile_definitions(test_memplan PRIVATE CGC_MODELS_DIR="${CMAKE_SOURCE_DIR}/models")
