# tests of the checkpoint group: recomputing activations keeps every gradient bit for bit
# (CPU executor, every model and precision), lowers the planned activation memory, and
# `auto` fits a budget; candidates come cheapest first.
cgc_c_test(test_checkpoint cgc_codegen cgc_passes cgc_cpu)
target_compile_definitions(test_checkpoint PRIVATE CGC_MODELS_DIR="${CMAKE_SOURCE_DIR}/models")
