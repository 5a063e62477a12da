# tests of activation checkpointing (compiler/recompute.c): recomputing activations keeps every gradient bit for bit
# (CPU executor, every model and precision), lowers the planned activation memory, and
# `auto` fits a budget; candidates come cheapest first.
cgc_c_test(test_recompute cgc_driver)
target_compile_definitions(test_recompute PRIVATE CGC_MODELS_DIR="${CMAKE_SOURCE_DIR}/models")
