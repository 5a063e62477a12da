# tests of the source tree itself: the stages include downward only.
add_test(NAME layout_layers COMMAND python3 ${TESTS_DIR}/layout/layers.py ${CMAKE_SOURCE_DIR})
set_tests_properties(layout_layers PROPERTIES LABELS cpu TIMEOUT 60)
